"""Errors specific to the ssh backend (all are :class:`envlayer.BackendUnavailable`)."""

from __future__ import annotations

from envlayer.errors import BackendUnavailable


class HostKeyError(BackendUnavailable):
    """The server's host key is unknown (under ``strict``) or differs from the one in
    known_hosts (under any policy but ``insecure``). Nothing was sent to the server.

    ``hint`` gives the exact command that trusts the key, or the option to set.
    """


class ConnectionLost(BackendUnavailable):
    """The connection dropped while a command was running. The command may or may not
    have run (and may still be running); it is never re-run automatically."""
