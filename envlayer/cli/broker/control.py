"""``envlayer broker status`` and ``envlayer broker stop``: ask every broker of this user
(every socket in the runtime directory) what it holds, or to exit.

A socket nobody listens on (a broker killed with SIGKILL) is skipped: the next broker to
start removes it (see :mod:`envlayer.cli.broker.leftovers`).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import time
from typing import Any

from envlayer.cli.broker import protocol, runtime_dir
from envlayer.cli.broker.client import connect
from envlayer.errors import EnvlayerError

STOP_WAIT = 30.0
"""Seconds ``stop`` waits for a broker to exit (its environments' cleanup included)."""


def directory() -> str:
    """This user's runtime directory. Raises :class:`EnvlayerError` when it is unsafe."""
    try:
        return runtime_dir.checked(runtime_dir.candidate(os.environ))
    except ValueError as exc:
        raise EnvlayerError(str(exc), hint="fix its owner and mode (0700), or set ENVLAYER_RUNTIME_DIR") from None


def _ask(path: str, verb: str) -> dict[str, Any] | None:
    try:
        sock = connect(path)
    except OSError:
        return None
    try:
        protocol.send(sock, protocol.REQUEST, protocol.encode_request(verb, os.getcwd(), [], {}))
        got = protocol.receive(sock)
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    if got is None or got[0] != protocol.STATUS:
        return None
    data: dict[str, Any] = json.loads(got[1])
    return data


def _sockets() -> list[str]:
    return sorted(glob.glob(os.path.join(glob.escape(directory()), "broker-*.sock")))


def status() -> list[dict[str, Any]]:
    """The status of every live broker of this user (see :meth:`Broker.status`)."""
    return [data for path in _sockets() if (data := _ask(path, "status")) is not None]


def running_broker(pid_path: str) -> int | None:
    """The pid of the broker that holds ``pid_path`` (a ``broker-*.pid`` file) now, or
    None when no broker holds it. A pid file outlives its broker and pids are reused:
    only the file's lock (held for the broker's life) says that the pid in it is a
    running broker's, so never signal a pid read from such a file without this check."""
    try:
        fd = os.open(pid_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # held: its broker runs
        text = os.read(fd, 64).decode(errors="replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def running_brokers(directory: str) -> list[int]:
    """The pids of the brokers running with pid files in ``directory``."""
    found = (running_broker(path) for path in glob.glob(os.path.join(glob.escape(directory), "broker-*.pid")))
    return [pid for pid in found if pid is not None]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited but not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def stop() -> list[dict[str, Any]]:
    """Stop every live broker of this user and wait (up to :data:`STOP_WAIT` seconds in
    total) for each to exit; returns their last status, with ``"stopped": bool``."""
    stopped = [data for path in _sockets() if (data := _ask(path, "stop")) is not None]
    deadline = time.monotonic() + STOP_WAIT
    for data in stopped:
        pid_path = data["socket"][: -len("sock")] + "pid"
        while running_broker(pid_path) == data["pid"] and time.monotonic() < deadline:
            time.sleep(0.05)
        data["stopped"] = running_broker(pid_path) != data["pid"]
    return stopped
