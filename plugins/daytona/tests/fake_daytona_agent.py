"""The fake Daytona's toolbox agent: one long-lived ``sh`` per sandbox container that runs the
toolbox's commands, as the real service's toolbox daemon runs inside each sandbox.

Why: starting a ``docker exec`` per toolbox call costs a ``runc exec`` (a new process tree in
the container's namespaces) each time, and the test suite makes thousands of calls on a
2-core machine. The agent is started once per container start with one attached exec; each
call then costs two short lines on that exec's stdin and stdout.

Protocol (the agent's script is :data:`AGENT`): the fake writes the call's script to
``<host spool>/<call id>/cmd`` (a host directory bind-mounted at :data:`AGENT_DIR` in the
container) and sends ``run <call id>``; the agent runs it in the background with stdout and
stderr in ``<call id>/out`` and answers ``<call id> <exit status>`` once it ended (lines
under PIPE_BUF, so concurrent answers never interleave). ``kill <call id>`` SIGKILLs the
call's process group (see :data:`AGENT`). The fake reads ``out`` from the host directory
and removes the call's directory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import threading
import uuid
from typing import Any

from docker.utils.socket import frames_iter

AGENT_DIR = "/.fake-daytona-agent"
"""Where the fake's host spool directory of a sandbox is mounted in its container."""

AGENT = rf"""D={AGENT_DIR}
S=$(command -v setsid)
while read -r verb id; do
  case $verb in
    run) i=/dev/null; [ -e "$D/$id/in" ] && i="$D/$id/in"
         ( ($S sh -c 'echo $$ >"$1/pid"; exec sh "$1/cmd"' run "$D/$id" >"$D/$id/out" 2>&1 <"$i"
            echo "$id $?") & ) ;;
    kill) p=$(cat "$D/$id/pid" 2>/dev/null) || continue
          kill -9 -"$p" 2>/dev/null && continue
          for c in $(cat /proc/$p/task/$p/children 2>/dev/null); do kill -9 "$c" 2>/dev/null; done
          kill -9 "$p" 2>/dev/null ;;
  esac
done
"""
"""The agent. A call's runner is started as an orphan (double fork: the container's init
reaps it), its ``pid`` file names the process that ``exec``s the call's script; its stdin
is the call's ``in`` file when the fake wrote one (file uploads), else /dev/null.

The script leads a process group of its own (``setsid``: it is not a group leader when it
runs, so it does not fork), and a timeout's ``kill`` SIGKILLs that group, as the daemon's
``ExecuteCommand`` does (daytonaio/daytona v0.190.0,
``apps/daemon/pkg/toolbox/process/execute.go``: ``SysProcAttr{Setpgid: true}``, and at the
timeout ``syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)``): a grandchild of the call,
such as the ``cat`` of a stream write blocked on a full FIFO, dies with it. In an image
without ``setsid`` it kills the top process and its direct children instead."""

KILLED = 137
"""The exit status reported for a call whose agent ended first (the container stopped)."""


class _Call:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.code: int | None = None


class Agent:
    """The agent of one running container; :meth:`run` is safe from many threads."""

    def __init__(self, api: Any, container: str, spool: str, user: str | None, workdir: str | None) -> None:
        self.spool = spool
        self.lock = threading.Lock()
        self.calls: dict[str, _Call] = {}
        self.alive = True
        exec_id = api.exec_create(
            container, ["sh", "-c", AGENT], stdin=True, stdout=True, stderr=True, user=user or "", workdir=workdir
        )["Id"]
        self.sock = api.exec_start(exec_id, socket=True)
        self.raw = getattr(self.sock, "_sock", self.sock)
        self.raw.settimeout(None)  # idle agents wait for their next call however long it takes
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        """Resolve calls from the agent's answers; when the agent ends, every open call."""
        buffer = b""
        try:
            for _stream, data in frames_iter(self.sock, tty=False):
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    call_id, _, code = line.decode(errors="replace").partition(" ")
                    self._resolve(call_id, int(code) if code.strip().isdigit() else KILLED)
        except OSError:
            pass
        with self.lock:
            self.alive = False
            open_calls = list(self.calls)
        for call_id in open_calls:
            self._resolve(call_id, KILLED)

    def _resolve(self, call_id: str, code: int) -> None:
        with self.lock:
            call = self.calls.get(call_id)
        if call is not None and not call.done.is_set():
            call.code = code
            call.done.set()

    def _send(self, line: str) -> None:
        self.raw.sendall(line.encode() + b"\n")

    def run(self, argv: list[str], timeout: float | None, stdin: bytes | None = None) -> tuple[int | None, bytes]:
        """Run argv (reading ``stdin``, else /dev/null); (exit status, merged stdout and
        stderr). ``None`` status: killed at ``timeout`` (its output so far is returned)."""
        call_id = uuid.uuid4().hex
        directory = os.path.join(self.spool, call_id)
        os.mkdir(directory)
        os.chmod(directory, 0o777)  # the container's user, whoever it is, writes out and pid
        with open(os.path.join(directory, "cmd"), "w") as fh:
            fh.write(f"exec {shlex.join(argv)}\n")
        if stdin is not None:
            with open(os.path.join(directory, "in"), "wb") as fh:
                fh.write(stdin)
        call = _Call()
        with self.lock:
            if not self.alive:
                raise OSError("the sandbox's toolbox agent has ended")
            self.calls[call_id] = call
        try:
            self._send(f"run {call_id}")
            timed_out = not call.done.wait(timeout)
            if timed_out:
                with contextlib.suppress(OSError):
                    self._send(f"kill {call_id}")
                call.done.wait(5)
            with open(os.path.join(directory, "out"), "rb") as fh:
                out = fh.read()
            return (None if timed_out else call.code), out
        finally:
            with self.lock:
                self.calls.pop(call_id, None)
            shutil.rmtree(directory, ignore_errors=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.raw.close()


class Agents:
    """One :class:`Agent` per container, started on a container's first call after it
    (re)started; the host spool directories live under one temporary root."""

    def __init__(self, api: Any, root: str) -> None:
        self.api = api
        self.root = root
        self.lock = threading.Lock()
        self.agents: dict[str, Agent] = {}

    def spool(self, sandbox_id: str) -> str:
        """The sandbox's host spool directory (made here), to bind-mount at :data:`AGENT_DIR`."""
        path = os.path.join(self.root, sandbox_id)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, 0o1777)
        return path

    def run(
        self,
        container: str,
        spool: str,
        argv: list[str],
        timeout: float | None = None,
        user: str | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
    ) -> tuple[int | None, bytes]:
        """Run argv in the container as ``user`` (the container's user when None), starting in
        ``workdir`` (the container's) (see :meth:`Agent.run`)."""
        with self.lock:
            agent = self.agents.get(container)
            if agent is None or not agent.alive:
                agent = self.agents[container] = Agent(self.api, container, spool, user, workdir)
        return agent.run(argv, timeout, stdin)

    def forget(self, container: str, spool: str | None) -> None:
        """The container is gone: drop its agent and spool directory."""
        with self.lock:
            agent = self.agents.pop(container, None)
        if agent is not None:
            agent.close()
        if spool:
            shutil.rmtree(spool, ignore_errors=True)
