"""``envlayer broker status`` and ``envlayer broker stop``: ask every broker of this user
(every socket in the runtime directory) what it holds, or ask this installation's broker
(``--all``: every one) to exit; and :func:`drop`, which ``envlayer rm`` uses to make them
let go of a task.

A socket nobody listens on (a broker killed with SIGKILL) is skipped: the next broker to
start removes it (see :mod:`envlayer.cli.broker.leftovers`).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import signal
import time
from typing import Any

from envlayer.cli.broker import protocol, runtime_dir
from envlayer.cli.broker.connection import connect
from envlayer.errors import EnvlayerError

STOP_WAIT = 30.0
"""Seconds ``stop`` waits for a broker to exit (its environments' cleanup included)."""


def directory() -> str:
    """This user's runtime directory. Raises :class:`EnvlayerError` when it is unsafe."""
    try:
        return runtime_dir.checked(runtime_dir.candidate(os.environ))
    except ValueError as exc:
        raise EnvlayerError(str(exc), hint="fix its owner and mode (0700), or set ENVLAYER_RUNTIME_DIR") from None


def _ask(path: str, verb: str, argv: list[str] | None = None) -> dict[str, Any] | None:
    try:
        sock = connect(path)
    except OSError:
        return None
    try:
        protocol.send(sock, protocol.REQUEST, protocol.encode_request(verb, "/", argv or [], {}))
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


def drop(task: str, profile: str, backend: str | None) -> list[dict[str, Any]]:
    """Make every live broker of this user release ``task``'s environments in ``profile``
    (on ``backend``, or on any): ``envlayer rm`` and an in-process ``exec --rm`` call this
    before they remove the sandbox. Returns what was released, each with the broker's
    ``pid``. No runtime directory that can be used means no broker: nothing to release."""
    try:
        sockets = _sockets()
    except EnvlayerError:
        return []
    dropped = []
    for path in sockets:
        answer = _ask(path, "drop", [task, profile, backend or ""])
        if answer is not None:
            dropped += [{**held, "pid": answer["pid"]} for held in answer.get("dropped", [])]
    return dropped


STATUS_HEADERS = ["BACKEND", "PROFILE", "TASK", "SERVER", "IDENTITY", "DIFFERS IN", "IDLE", "RUNNING"]


def differences(environment: dict[str, Any], environments: list[dict[str, Any]]) -> list[str]:
    """The option and variable names (and ``identity``) whose values tell ``environment``
    apart from the others of its task (same backend, profile and task) in ``environments``."""
    mine = environment.get("selectors") or {}
    names: set[str] = set()
    for other in environments:
        same_task = all(other[k] == environment[k] for k in ("backend", "profile", "task"))
        if other is environment or not same_task:
            continue
        theirs = other.get("selectors") or {}
        names.update(name for name in {*mine, *theirs} if mine.get(name) != theirs.get(name))
    return sorted(names)


def status_rows(environments: list[dict[str, Any]], task_cell: Any) -> list[list[str]]:
    """Rows of the ``broker status`` table (:data:`STATUS_HEADERS`), ``task_cell`` showing
    the task: environments of one task say what tells them apart (each name with 8 hex
    digits of a digest of its value: never a value, which may be a secret)."""
    return [
        [
            *(e["backend"], e["profile"], task_cell(e["task"]), e.get("server") or "-", e.get("identity") or "-"),
            " ".join(f"{name}={(e.get('selectors') or {}).get(name, '-')}" for name in differences(e, environments))
            or "-",
            *(f"{e['idle_seconds']:.0f}s", str(e["in_flight"])),
        ]
        for e in environments
    ]


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


def stop(every: bool = False) -> list[dict[str, Any]]:
    """Stop this installation's broker (``every``: every broker of this user, those that
    hand over to a new one included) and wait (up to :data:`STOP_WAIT` seconds in total)
    for each to exit; returns their last status, with ``"stopped": bool``."""
    paths = _sockets() if every else [runtime_dir.broker_path(directory(), runtime_dir.INSTALLATION_DIGEST, "sock")]
    stopped = [data for path in paths if (data := _ask(path, "stop")) is not None]
    if every:
        stopped += _signal_handing_over(directory(), {data["pid"] for data in stopped})
    deadline = time.monotonic() + STOP_WAIT
    for data in stopped:
        pid_path = data.get("pid_file") or data["socket"][: -len("sock")] + "pid"
        while running_broker(pid_path) == data["pid"] and time.monotonic() < deadline:
            time.sleep(0.05)
        data["stopped"] = running_broker(pid_path) != data["pid"]
    return stopped


def nothing_running(action: str, every: bool) -> str:
    """What ``broker status`` / ``broker stop [--all]`` print when they found no broker."""
    if action == "stop" and not every:
        return (
            f"no broker running for this installation ({runtime_dir.INSTALLATION_LABEL}); "
            "`envlayer broker stop --all` stops every broker of this user"
        )
    return "no broker running"


def describe(broker: dict[str, Any]) -> str:
    """One line naming a broker and its state, for ``broker status`` and ``broker stop``."""
    if "stopped" in broker:
        state = "stopped" if broker["stopped"] else "still running"
        held = f"; it held {len(broker.get('environments') or [])} environment(s)"
    else:
        state, held = f"up {broker['uptime']:.0f}s", ""
    where = f", {broker['installation']}" if broker.get("installation") else ""
    return f"broker pid {broker['pid']} {state}, socket {broker['socket']}{where}{held}"


def _signal_handing_over(directory: str, asked: set[int]) -> list[dict[str, Any]]:
    """SIGTERM to every running broker of ``directory`` not in ``asked`` (one handing over
    to a new broker no longer listens); their status as far as known."""
    found = []
    for pid_path in glob.glob(os.path.join(glob.escape(directory), "broker-*.pid")):
        pid = running_broker(pid_path)
        if pid is None or pid in asked:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        found.append({"pid": pid, "socket": "(none: handing over to a new broker)", "pid_file": pid_path})
        found[-1]["environments"] = []
    return found
