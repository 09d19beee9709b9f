"""The broker process: accepts ``envlayer exec`` calls on a Unix socket and runs them on
the environments it holds (:mod:`envlayer.cli.broker.sessions`).

Guarantees:

* **Same user only.** The socket is created 0600 in the 0700 runtime directory, and
  every connection's peer credentials (``SO_PEERCRED``) are checked: a process of
  another uid is refused (told to run in-process) and the refusal is logged.
* **Every directory and environment of the user.** A call carries its working
  directory and environment; the configuration is loaded and an environment created in
  them (:mod:`envlayer.cli.broker.caller`), and a task's environment is shared by every call
  with the same configuration and the same values of the variables its backend reads
  (:mod:`envlayer.cli.broker.sessions`).
* **Same behaviour as in-process.** The argv is parsed by the CLI's own parser and run by
  :mod:`envlayer.cli.exec_plan`; what the CLI would print is sent back as it happens. Anything
  the broker does not serve (another command, ``--help``, ``--debug``, ``--no-broker``,
  a usage error, ``broker = false``) is handed back before anything runs.
* **One command per connection, on its own thread.** A ``CANCEL`` frame, or the client
  going away, cancels the command: its process tree in the sandbox is killed (on
  backends whose ``exec`` takes a cancel token: every built-in backend), never the broker.
* **Lifetime.** One broker per runtime directory and installation (a ``flock`` on its
  pid file). It exits after ``broker_idle_timeout`` seconds without a call, on ``envlayer
  broker stop``, SIGTERM or SIGINT: it stops listening, cancels running commands, then
  closes its environments by the manager's rules (plain cleanup: persist-mode sandboxes
  stay), and removes its files (:mod:`envlayer.cli.broker.leftovers`). Killed with SIGKILL,
  it leaves what any killed process leaves (see ``docs/lifecycle.md``); the next call
  starts a new broker, and the next broker to start removes the dead one's files.
* **A changed installation restarts it.** Before each command the broker checks that
  the installation it runs is still the one installed
  (:mod:`envlayer.cli.broker.installation`: a plugin installed or removed, envlayer
  upgraded). When it changed, it hands over: it stops listening, renames its pid file and
  log so that the next call starts a new broker at once, tells this call (``envlayer:
  note: the broker ... restarts: <what changed>``, the command then runs in-process with
  what is installed), lets its running commands finish, and exits as on ``broker stop``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from envlayer.cli.broker import leftovers, protocol, runtime_dir
from envlayer.cli.broker.caller import caller_context
from envlayer.cli.broker.installation import Installation
from envlayer.cli.broker.sessions import Sessions
from envlayer.cli.console import ENVLAYER_FAILURE, Console, settings_of
from envlayer.cli.exec_plan import exec_failed, plan_exec, release_after_exec, run_exec
from envlayer.cli.task_sandbox import open_task
from envlayer.config import load_settings
from envlayer.errors import EnvlayerError
from envlayer.execution.cancel import CancelToken
from envlayer.factory import open_environment

log = logging.getLogger("envlayer.broker")

CLOSE_TIMEOUT = 15.0
"""Seconds a stopping broker gives its environments' cleanup, in total."""
CLAIM_WAIT = 10.0
"""Seconds a new broker waits for the pid lock of one that is exiting."""
DRAIN_TIMEOUT = 2.0
"""Seconds a refused peer is given to read the refusal."""
JOIN_TIMEOUT = 10.0
"""Seconds a stopping broker waits for cancelled commands to report."""


class _NotForBroker(Exception):
    """The argv is not something the broker serves (help, version, usage error)."""


class _QuietParser(argparse.ArgumentParser):
    """The CLI's parser, printing nothing and raising instead of exiting."""

    def _print_message(self, message: str, file: Any = None) -> None:
        pass

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _NotForBroker(message or "")


_parser: argparse.ArgumentParser | None = None
_parser_lock = threading.Lock()


def parse_exec(argv: list[str]) -> argparse.Namespace | None:
    """``exec``'s arguments as the CLI parses them, or None when the broker does not serve
    this argv (see the module docstring)."""
    global _parser
    with _parser_lock:
        if _parser is None:
            from envlayer.cli.parser import build_parser

            _parser = build_parser(_QuietParser)
        try:
            args = _parser.parse_args(argv)
        except _NotForBroker:
            return None
    if args.cmd != "exec" or args.no_broker or args.debug:
        return None
    return args


class _FrameStream:
    """A binary stream whose writes become frames of one kind; a write to a client that
    went away cancels the command instead of raising."""

    def __init__(self, call: _Call, kind: bytes) -> None:
        self._call = call
        self._kind = kind

    def write(self, data: bytes) -> int:
        if self._kind == protocol.STDOUT and self._call.hung_up:
            raise BrokenPipeError("the client's stdout reader went away")
        if data:
            self._call.send(self._kind, bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


class _Call:
    """One connection: a single request and its answer."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.token = CancelToken()
        self._send_lock = threading.Lock()
        self.gone = False
        self.hung_up = False
        self.running = False
        """True once its command started."""

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        with self._send_lock:
            if self.gone:
                return
            try:
                protocol.send(self.conn, kind, payload)
            except OSError:
                self.gone = True
                self.token.cancel()

    def read_stdin(self) -> bytes:
        """The client's whole stdin (``-i``). Raises :class:`EnvlayerError` when the
        client goes away before its end (the command must not run on part of it)."""
        self.send(protocol.NEED_STDIN)
        parts: list[bytes] = []
        while True:
            try:
                got = protocol.receive(self.conn)
            except (OSError, ValueError):
                got = None
            if got is None:
                self.token.cancel()
                raise EnvlayerError("the client went away while sending stdin", hint="run the command again")
            if got[0] == protocol.STDIN_EOF:
                return b"".join(parts)
            if got[0] == protocol.STDIN:
                parts.append(got[1])
            elif got[0] == protocol.CANCEL:
                self.token.cancel()
            elif got[0] == protocol.HANGUP:
                self.hung_up = True

    def watch(self) -> None:
        """Until the connection ends: ``CANCEL`` or the client going away cancels;
        ``HANGUP`` makes the next write to stdout fail as a broken pipe."""
        try:
            while True:
                got = protocol.receive(self.conn)
                if got is None:
                    break
                if got[0] == protocol.CANCEL:
                    self.token.cancel()
                elif got[0] == protocol.HANGUP:
                    self.hung_up = True
        except (OSError, ValueError):
            pass
        self.token.cancel()


def _drain(conn: socket.socket) -> None:
    """Let the peer read what was sent before the connection closes: a close with its
    unread request still queued would reset the connection and lose our answer."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(DRAIN_TIMEOUT)
        received = 0
        while received < protocol.MAX_PAYLOAD and (chunk := conn.recv(1 << 16)):
            received += len(chunk)
    except OSError:
        pass


class Broker:
    """A broker for one runtime directory and installation digest; see the module docstring."""

    def __init__(self, directory: str, digest: str, started_in: str | None = None) -> None:
        self.directory = directory
        self.digest = digest
        self.socket_path = runtime_dir.broker_path(directory, digest, "sock")
        self.settings = load_settings(cwd=started_in)  # its idle timeout: as the call that started it reads it
        self.idle_timeout = self.settings.broker_idle_timeout
        self.sessions = Sessions()
        self.started = time.time()
        self._stop = threading.Event()
        self._interrupt = threading.Event()
        """Set by :meth:`stop`: running commands are cancelled (not when handing over)."""
        self._lock = threading.Lock()
        self._calls: set[_Call] = set()
        self._threads: set[threading.Thread] = set()
        self._last_activity = time.monotonic()
        self._listener: socket.socket | None = None
        self.failures = leftovers.FailureCount()
        logging.getLogger("envlayer").addHandler(self.failures)
        self.installation = Installation()
        self.retiring: str | None = None
        """What changed in the installation, once this broker hands over (module docstring)."""
        self._pid_path = runtime_dir.broker_path(directory, digest, "pid")
        self._socket_inode = 0

    # --- lifetime ----------------------------------------------------------------

    def _claim(self) -> int | None:
        """The pid file, locked for this broker's life; None when another broker still
        holds it after :data:`CLAIM_WAIT` seconds (one that is exiting lets go)."""
        fd = runtime_dir.lock_linked(self._pid_path, CLAIM_WAIT, poll=0.05)
        if fd is None:
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def _listen(self) -> socket.socket:
        try:
            os.unlink(self.socket_path)  # a dead broker's; the pid lock says none is alive
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(self.socket_path)
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        listener.listen(64)
        listener.settimeout(min(1.0, self.idle_timeout / 4))
        return listener

    def stop(self) -> None:
        """Ask the broker to exit, cancelling running commands, also those of a broker
        handing over (idempotent; returns at once)."""
        self._interrupt.set()
        self._stop.set()

    def serve(self) -> int:
        """Serve until idle, stopped or signalled; returns the process exit code."""
        pid_fd = self._claim()
        if pid_fd is None:
            log.info("another broker serves %s; exiting", self.socket_path)
            leftovers.remove_own_log(self.directory, self.digest)
            return 0
        clean, inode = False, 0
        try:
            self._listener = listener = self._listen()
            inode = self._socket_inode = os.stat(self.socket_path).st_ino
            log.info("broker %d listening on %s (idle timeout %ss)", os.getpid(), self.socket_path, self.idle_timeout)
            leftovers.sweep(self.directory, self.digest)
            self._accept(listener)
            clean = True
        finally:
            if self._listener is not None:
                self._shutdown(self._listener, inode)
            keep = not clean or self.failures.count > 0
            leftovers.remove_own(self.directory, self.digest, pid_fd, keep_log=keep)
        return 0

    def _accept(self, listener: socket.socket) -> None:
        """Start a thread for every connection until stopped or idle."""
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if self._idle():
                    log.info("idle for %ss; exiting", self.idle_timeout)
                    break
                continue
            conn.settimeout(None)
            thread = threading.Thread(target=self._handle, args=(conn,), name="envlayer-broker-call", daemon=True)
            with self._lock:
                self._threads.add(thread)
                self._last_activity = time.monotonic()
            thread.start()

    def _idle(self) -> bool:
        with self._lock:
            return not self._threads and time.monotonic() - self._last_activity > self.idle_timeout

    def _shutdown(self, listener: socket.socket, inode: int) -> None:
        listener.close()
        try:
            if os.stat(self.socket_path).st_ino == inode:
                os.unlink(self.socket_path)
        except OSError:
            pass
        with self._lock:
            calls, threads = list(self._calls), list(self._threads)
        if self.retiring is not None:  # handing over: its commands finish, unless stopped
            log.info("waiting for %d running command(s) to finish", len(threads))
            while any(thread.is_alive() for thread in threads) and not self._interrupt.is_set():
                self._interrupt.wait(0.2)
        for call in calls:
            call.token.cancel()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.sessions.close(CLOSE_TIMEOUT)
        log.info("broker %d stopped", os.getpid())

    # --- one connection -------------------------------------------------------------

    def _handle(self, conn: socket.socket) -> None:
        call = _Call(conn)
        with self._lock:
            self._calls.add(call)
        try:
            self._serve_call(call)
        except Exception:
            log.exception("a call failed")
            call.send(protocol.STDERR, b"envlayer: error: internal error in the broker (see its log)\n")
            call.send(protocol.EXIT, str(ENVLAYER_FAILURE).encode())
        finally:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
            with self._lock:
                self._calls.discard(call)
                self._threads.discard(threading.current_thread())
                self._last_activity = time.monotonic()

    def _serve_call(self, call: _Call) -> None:
        pid, uid, _ = struct.unpack("3i", call.conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            log.warning("refused a connection from uid %d (pid %d): this broker serves uid %d", uid, pid, os.getuid())
            call.send(protocol.IN_PROCESS, f"the broker at {self.socket_path} belongs to another user".encode())
            _drain(call.conn)
            return
        try:
            got = protocol.receive(call.conn)
            if got is None or got[0] != protocol.REQUEST:
                raise ValueError("the first frame is not a request")
            verb, cwd, argv, environ = protocol.decode_request(got[1])
        except ValueError as exc:
            log.warning("dropped a connection of pid %d: %s", pid, exc)
            return
        if verb == "status":
            call.send(protocol.STATUS, json.dumps(self.status()).encode())
        elif verb == "stop":
            call.send(protocol.STATUS, json.dumps(self.status()).encode())
            self.stop()
        elif verb == "drop" and len(argv) == 3:
            dropped = self.sessions.drop(argv[0], argv[1], argv[2] or None)
            call.send(protocol.STATUS, json.dumps({"pid": os.getpid(), "dropped": [vars(h) for h in dropped]}).encode())
        elif verb == "exec" and (changed := self.installation.changed() or self.retiring) is not None:
            self._retire(changed)
            note = f"the broker (pid {os.getpid()}) restarts: since it started, {changed}; this command runs "
            call.send(protocol.IN_PROCESS, (note + "in-process, the next call starts a new one").encode())
        elif verb == "exec":
            self._exec(call, cwd, argv, environ)

    def _retire(self, changed: str) -> None:
        """Hand over to a new broker (module docstring); idempotent."""
        with self._lock:
            if self.retiring is not None:
                return
            self.retiring = changed
        log.info("the installation changed since this broker started (%s): handing over to a new broker", changed)
        try:
            if os.stat(self.socket_path).st_ino == self._socket_inode:
                os.unlink(self.socket_path)
        except OSError:
            pass
        retired = f"{self.digest}{os.getpid():x}"  # still a broker's name, of no installation
        for suffix in ("pid", "log"):
            old, new = (runtime_dir.broker_path(self.directory, d, suffix) for d in (self.digest, retired))
            if suffix == "pid" or leftovers.is_my_log(old):
                try:
                    os.rename(old, new)
                except OSError as exc:
                    log.warning("could not rename %s: %s", old, exc)
        self.digest, self._pid_path = retired, runtime_dir.broker_path(self.directory, retired, "pid")
        self._stop.set()

    def _exec(self, call: _Call, cwd: str, argv: list[str], environ: dict[str, str]) -> None:
        args = parse_exec(argv)
        if args is None:
            call.send(protocol.IN_PROCESS)
            return
        console = Console(_FrameStream(call, protocol.STDOUT), _FrameStream(call, protocol.STDERR))  # type: ignore[arg-type]
        try:
            settings = settings_of(args, environ=environ, cwd=cwd)
            if not settings.broker:
                call.send(protocol.IN_PROCESS)
                return
            plan = plan_exec(args, call.read_stdin, settings, environ=environ, cwd=cwd)
            env, release = self._environment(args, plan.settings, console, (cwd, environ))
        except EnvlayerError as exc:
            call.send(protocol.EXIT, str(exec_failed(args, console, exc)).encode())
            return
        watcher = threading.Thread(target=call.watch, name="envlayer-broker-watch", daemon=True)
        watcher.start()
        call.running = True
        call.send(protocol.STARTED, str(os.getpid()).encode())
        code = run_exec(args, plan, env, console, release, cancel=call.token)
        if self._stop.is_set() and call.token.cancelled:
            console.note(f"the broker (pid {os.getpid()}) was stopped (broker stop or SIGTERM) while the command ran")
        call.send(protocol.EXIT, str(code).encode())

    def _environment(
        self, args: argparse.Namespace, settings: Any, console: Console, caller: tuple[str, dict[str, str]]
    ) -> tuple[Any, Callable[[], tuple[list[str], bool]]]:
        """The environment for this call (``caller``: its directory and environment, in
        which a new environment is created), and what to do with it afterwards."""
        cwd, environ = caller
        cls = self.sessions.backend_class(settings)
        if args.fresh:

            def fresh(chosen: Any) -> Any:
                with caller_context(cwd, environ):
                    return open_environment(task_id=args.task, settings=chosen, backends={chosen.backend: cls})

            env = open_task(settings, cls, fresh, replace=args.replace, environ=environ)[0]
            return env, lambda: release_after_exec(env, args.rm, console)
        held, settings = open_task(
            settings,
            cls,
            lambda chosen: self.sessions.environment(
                chosen, args.task, environ, lambda: caller_context(cwd, environ), cwd
            ),
            replace=args.replace,
            environ=environ,
            remembered=self.sessions.remembered,
            key=lambda: self.sessions.task_key(settings, args.task, environ),
            before_replacing=lambda: self.sessions.forget(args.task, settings.profile, settings.backend),
        )
        if not args.rm:
            return held, lambda: ([], True)

        def remove() -> tuple[list[str], bool]:
            try:
                notes = self.sessions.remove(settings, args.task, environ, cwd)
            except EnvlayerError as exc:
                console.error(exc, "cleanup failed")
                return [], False
            self.sessions.drop(args.task, settings.profile, settings.backend)  # held under other variables
            return notes, True

        return held, remove

    # --- status ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What ``envlayer broker status`` shows for this broker."""
        with self._lock:
            running = sum(1 for call in self._calls if call.running)
        return {
            "pid": os.getpid(),
            "socket": self.socket_path,
            "installation": runtime_dir.INSTALLATION_LABEL,
            "started": self.started,
            "uptime": round(time.time() - self.started, 1),
            "idle_timeout": self.idle_timeout,
            "running": running,
            "environments": [vars(h) for h in self.sessions.held()],
        }


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    root = logging.getLogger("envlayer")
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    log.setLevel(logging.INFO)


def serve(directory: str, digest: str, started_in: str | None = None) -> int:
    """Run a broker in this process until it exits (SIGTERM and SIGINT stop it)."""
    _configure_logging()
    broker = Broker(directory, digest, started_in)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: broker.stop())
    return broker.serve()


def main(argv: list[str] | None = None) -> int:
    """``python -m envlayer.cli.broker serve --runtime-dir DIR --digest HEX [--started-in DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m envlayer.cli.broker")
    parser.add_argument("verb", choices=["serve"])
    parser.add_argument("--runtime-dir", required=True)
    parser.add_argument("--digest", required=True)
    parser.add_argument("--started-in", metavar="DIR", help="the directory of the call that started it")
    args = parser.parse_args(argv)
    return serve(args.runtime_dir, args.digest, args.started_in)
