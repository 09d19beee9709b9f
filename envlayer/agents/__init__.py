"""Environments for agents: the per-task manager, task bindings, orphan sweeps, the at-exit hook and the
tool definitions for agent tool registries (``agents.tools``)."""
