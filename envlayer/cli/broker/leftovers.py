"""The files brokers keep in the runtime directory, and who removes them.

An installation's broker (see :mod:`envlayer.cli.broker.runtime_dir`) has
``broker-<digest>.sock`` (its socket), ``.pid`` (locked for the broker's life), ``.log``
(its stdout and stderr, made new by the call that starts it: one left by a killed broker
is renamed ``broker-<digest><hex>.log`` and kept) and, only while a call is starting it,
``.lock`` (that call removes it before letting go).

* **A broker that exits** removes its socket, then its log unless it logged a warning or
  an error (or failed) — such a log is kept for the user, at most :data:`MAX_KEPT_LOGS`
  of them — and last its pid file, while it still holds the file's lock.
* **A broker that starts** removes what killed brokers and killed calls left: for every
  other digest (another installation) whose pid file nobody holds, its socket and pid file
  (taken under that lock, so a broker starting for it meanwhile is never touched); every
  lock file nobody holds; and the logs without a running broker beyond the newest
  :data:`MAX_KEPT_LOGS`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re

from envlayer.cli.broker import runtime_dir

MAX_KEPT_LOGS = 10
"""Logs of brokers that are gone kept in a runtime directory (the newest ones)."""
_NAME = re.compile(r"^broker-([0-9a-f]+)\.(sock|pid|lock|log)$")

log = logging.getLogger("envlayer.broker")


class FailureCount(logging.Handler):
    """Counts the warnings and errors logged: a broker that logged one keeps its log."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _try_lock(path: str) -> int | None:
    """``path`` opened (created if missing) and locked, or None when someone holds it or
    it was replaced meanwhile."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    if not runtime_dir.still_linked(fd, path):
        os.close(fd)
        return None
    return fd


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def is_my_log(path: str) -> bool:
    """True when ``path`` is the file this process's stderr writes to."""
    try:
        mine, there = os.fstat(2), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def remove_own_log(directory: str, digest: str) -> None:
    """Remove ``broker-<digest>.log`` when it is this process's stderr (a broker run in
    the foreground, or one whose log a newer call replaced, leaves it alone)."""
    path = runtime_dir.broker_path(directory, digest, "log")
    if is_my_log(path):
        _unlink(path)


def remove_own(directory: str, digest: str, pid_fd: int, *, keep_log: bool) -> None:
    """At a broker's exit (its socket already removed): its log unless ``keep_log``, then
    its pid file, whose lock ``pid_fd`` holds and which this closes."""
    if keep_log:
        log.info("kept this log: the broker logged a warning or an error")
        prune_logs(directory)
    else:
        remove_own_log(directory, digest)
    runtime_dir.unlink_held(pid_fd, runtime_dir.broker_path(directory, digest, "pid"))
    os.close(pid_fd)


def sweep(directory: str, own: str) -> None:
    """At a broker's start: remove what dead brokers and calls left (module rules). Never
    raises: a file that cannot be removed stays."""
    try:
        names = os.listdir(directory)
        digests = {m.group(1) for name in names if (m := _NAME.match(name)) and m.group(2) in ("sock", "pid")}
        for digest in sorted(digests - {own}):
            _remove_dead_broker(directory, digest)
        for name in names:
            if name.endswith(".lock") and _NAME.match(name):
                _remove_free_lock(os.path.join(directory, name))
        prune_logs(directory)
    except OSError as exc:
        log.warning("could not tidy the runtime directory %s: %s", directory, exc)


def _remove_dead_broker(directory: str, digest: str) -> None:
    pid_path = runtime_dir.broker_path(directory, digest, "pid")
    fd = _try_lock(pid_path)
    if fd is None:
        return  # its broker runs (or one is taking the file right now)
    try:
        _unlink(runtime_dir.broker_path(directory, digest, "sock"))
        runtime_dir.unlink_held(fd, pid_path)
    finally:
        os.close(fd)


def _remove_free_lock(path: str) -> None:
    fd = _try_lock(path)
    if fd is not None:
        runtime_dir.unlink_held(fd, path)
        os.close(fd)


def prune_logs(directory: str) -> None:
    """Remove the logs of digests without a running broker beyond the newest
    :data:`MAX_KEPT_LOGS`."""
    from envlayer.cli.broker.control import running_broker

    logs = []
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if not m or m.group(2) != "log":
            continue
        if running_broker(runtime_dir.broker_path(directory, m.group(1), "pid")) is not None:
            continue
        try:
            logs.append((os.stat(os.path.join(directory, name)).st_mtime, name))
        except FileNotFoundError:
            continue
    for _, name in sorted(logs, reverse=True)[MAX_KEPT_LOGS:]:
        _unlink(os.path.join(directory, name))
