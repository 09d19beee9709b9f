"""The per-user session broker: a background process that holds environments and their
session shells so that successive ``envlayer exec`` calls from a shell are fast and share
their task's session (see ``docs/cli.md``, "The session broker").

Modules, one job each: :mod:`~envlayer.cli.broker.runtime_dir` (where the socket lives, and
whether that place is safe), :mod:`~envlayer.cli.broker.protocol` (frames on the socket),
:mod:`~envlayer.cli.broker.client` (the fast path of the ``envlayer`` command),
:mod:`~envlayer.cli.broker.spawn` (starting a broker), :mod:`~envlayer.cli.broker.sessions` (the
environments a broker holds), :mod:`~envlayer.cli.broker.server` (the broker itself).

Importing this package imports nothing else.
"""
