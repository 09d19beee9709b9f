"""Running part of a broker call as if in its caller's process: its working directory
and environment.

One broker serves every directory and environment of a user, so what reads the process's
directory or ``os.environ`` (the configuration files found from the directory, a
backend's client made from ``DOCKER_HOST`` or ``KUBECONFIG``, the local backend's start
directory and inherited variables) must see the caller's while it runs. A broker is
multi-threaded and these are process-wide: :func:`caller_context` lets one block at a
time hold them, and puts the broker's own back after it. Only loading the configuration
and creating an environment run inside; commands run outside, in parallel.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from envlayer.errors import EnvlayerError

_lock = threading.Lock()


@contextmanager
def caller_context(cwd: str, environ: Mapping[str, str]) -> Iterator[None]:
    """Within the block, this process's working directory is ``cwd`` and ``os.environ``
    is ``environ`` (one block at a time). Raises :class:`EnvlayerError` when ``cwd``
    cannot be entered (nothing ran)."""
    with _lock:
        saved_cwd, saved_environ = os.getcwd(), dict(os.environ)
        try:
            os.chdir(cwd)
        except OSError as exc:
            raise EnvlayerError(
                f"the broker cannot enter your working directory {cwd}: {exc.strerror}",
                hint="run the command from a directory you can enter, or with --no-broker",
            ) from None
        os.environ.clear()
        os.environ.update(environ)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved_environ)
            os.chdir(saved_cwd)
