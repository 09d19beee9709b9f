"""Registered in Inspect's entry-point group; imports the sandbox so @sandboxenv runs."""

from envlayer_inspect.sandbox import EnvlayerSandboxEnvironment

__all__ = ["EnvlayerSandboxEnvironment"]
