"""Starting this user's broker, at most one at a time.

:func:`start_and_connect` takes ``broker-<digest>.lock`` (``flock``) so that concurrent
first calls start a single broker: under the lock it tries to connect again (another
caller may have started it meanwhile), checks that the configuration allows a broker
(``broker = false`` / ``ENVLAYER_BROKER=0``, or a configuration that cannot be read:
no broker, no note), then starts
``python -m envlayer.cli.broker serve`` detached (its own session, in ``/``, stdin from
``/dev/null``, stdout and stderr to a new ``broker-<digest>.log``; a log left there by a
broker that was killed or failed is renamed, kept as evidence), with this process's
environment, and waits for its socket up to :data:`START_TIMEOUT` seconds.
It removes the lock file before letting go of it (see :func:`_lock`).
Any failure returns None after one ``envlayer: note:`` line (the caller runs in-process).
"""

from __future__ import annotations

import _socket
import os
import subprocess
import sys
import time
from collections.abc import Sequence

from envlayer.cli.broker import runtime_dir
from envlayer.cli.broker.connection import note, reach, unreachable

START_TIMEOUT = 20.0
"""Seconds a first call waits for a new broker's socket (a loaded machine imports slowly)."""
LOCK_TIMEOUT = START_TIMEOUT + 5.0
"""Seconds a call waits for another call that is starting the broker."""
POLL = 0.005


def _config_allows_broker(argv: Sequence[str]) -> bool:
    """The ``broker`` setting for this call (``--config`` honoured). A configuration that
    cannot be read means no broker (a broker could not start on it either): the call
    runs in-process, which reports the error once, as without a broker."""
    from envlayer.config import load_settings
    from envlayer.errors import EnvlayerError

    path = None
    for i, word in enumerate(argv):
        if word == "--":
            break
        if word == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif word.startswith("--config="):
            path = word.partition("=")[2]
    try:
        return load_settings(config_path=path).broker
    except EnvlayerError:
        return False


def _lock(path: str) -> int | None:
    """The start lock, held (its holder removes the file before letting go: a lock won
    on a removed file is taken again on the current one); None after :data:`LOCK_TIMEOUT`."""
    return runtime_dir.lock_linked(path, LOCK_TIMEOUT, poll=POLL * 4)


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            lines = fh.read()[-4000:].decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def launch(directory: str, digest: str) -> subprocess.Popen[bytes]:
    """Start the broker of ``digest`` detached (see the module docstring)."""
    log_path = runtime_dir.broker_path(directory, digest, "log")
    try:  # a killed or failed broker's log: kept under a name of its own, pruned with the others
        os.rename(log_path, runtime_dir.broker_path(directory, f"{digest}{time.time_ns():x}", "log"))
    except FileNotFoundError:
        pass
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "envlayer.cli.broker", "serve", "--runtime-dir", directory, "--digest", digest),
                *("--started-in", os.getcwd()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
            cwd="/",  # it serves every directory; one of them may be removed while it runs
        )
    finally:
        os.close(log_fd)


def start_and_connect(directory: str, digest: str, argv: Sequence[str]) -> _socket.socket | None:
    """A connection to a broker started for this user (see the module docstring),
    or None when the command must run in-process."""
    sock_path = runtime_dir.broker_path(directory, digest, "sock")
    lock_path = runtime_dir.broker_path(directory, digest, "lock")
    lock_fd = _lock(lock_path)
    if lock_fd is None:
        note(f"another call has been starting the broker for over {LOCK_TIMEOUT:.0f}s; running in-process")
        return None
    try:
        try:
            sock = reach(sock_path)
        except OSError as exc:
            return unreachable(sock_path, exc)
        if sock is not None:  # started by another call while we waited for the lock
            return sock
        if not _config_allows_broker(argv):
            return None
        try:
            proc = launch(directory, digest)
        except OSError as exc:
            note(f"cannot start the broker: {exc.strerror or exc}; running in-process")
            return None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                sock = reach(sock_path)
            except BlockingIOError:  # its backlog is full: it is alive
                sock = None
            except OSError as exc:
                return unreachable(sock_path, exc)
            if sock is not None:
                return sock
            if proc.poll() is not None:
                break
            time.sleep(POLL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            state = f"did not listen within {START_TIMEOUT:.0f}s and was stopped"
        else:
            state = f"exited ({_last_line(runtime_dir.broker_path(directory, digest, 'log'))})"
        note(f"the broker {state}; running in-process")
        return None
    finally:
        runtime_dir.unlink_held(lock_fd, lock_path)
        os.close(lock_fd)
