"""Helpers that backends (plugins) use and the core itself does not: the opt-in sandbox base and its
shared options, sandbox paths, tags and ownership, archives for file transfer, retrying control-plane
calls, idle checks, teardown threads and the environment variables commands get."""
