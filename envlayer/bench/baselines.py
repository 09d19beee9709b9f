"""The same work without envlayer, measured in the same run: what each figure is
compared to. Docker's and SSH's baselines import docker-py and paramiko lazily, inside the functions (the
core imports no backend SDK at module level).

* local: ``subprocess.run(["/bin/sh", "-c", "true"])`` (one-shot), bare shells over pipes
  (:class:`PipedShell`: the session floors below); a pipe from ``head`` (the flood's floor);
* Docker: the ``docker exec`` CLI and docker-py ``exec_run`` (one-shot), a bare shell
  over one attached exec socket (the session floor), the raw attach stream of one
  ``docker exec`` (the flood's floor, frames not parsed);
* local and Docker, the floor a session call is compared to (:data:`SESSION_FLOOR`): the
  same job done bare (:func:`same_job_call`): a minimal client over one persistent shell
  that keeps stderr apart, returns the exit status, and gives each call its working
  directory and a variable of its own, as a session call does;
* local and Docker, extra information (no ratio is taken to them): the bare shell that
  only echoes a marker (:data:`BARE_FLOOR`) and the one that keeps stderr apart
  (:data:`SPLIT_FLOOR`), so a run shows what each part of the job costs; on local also
  envlayer's own session protocol under a minimal client (:data:`PROTOCOL_FLOOR`), which
  splits a session call's cost into the shell's share and envlayer's Python client's;
* SSH: ``ssh`` with a ControlMaster and paramiko ``exec_command`` with its defaults
  (one-shot), the same job done bare over one paramiko channel (the session floor) and a
  bare shell over another (extra), one channel's raw stream (the flood's floor).
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envlayer.dispatch import run
from envlayer.environment import Environment
from envlayer.execution.shell_script import (
    ANY_SHELL,
    OWNER_BOUND,
    CallStyle,
    handshake_command,
    init_script,
    marker_of,
    new_seed,
    plain_call_script,
)
from envlayer.request import new_exec_id

SESSION_FLOOR = "same job, bare"
"""The method name of the floor a session call is compared to: :func:`same_job_call`."""

BARE_FLOOR = "bare shell (extra)"
"""The method name of the bare shell that only echoes a marker per call (see
:func:`shell_call`). Extra information: it does less than a session call."""

SPLIT_FLOOR = "bare shell, stderr apart (extra)"
"""The method name of the bare shell that writes a marker on stderr and one on stdout per
call and reads until both came (see :func:`split_shell_call`). Extra information only: the
session's ratio is to :data:`SESSION_FLOOR`."""

PROTOCOL_FLOOR = "envlayer's protocol, bare client (extra)"
"""The method name of envlayer's own session protocol driven by a client as minimal as the
floor's (see :func:`protocol_call`). Extra information only."""

CHUNK = 1 << 20


@dataclass
class ExecBaselines:
    """Warm-exec baselines of one backend: ``fast`` ones (a persistent shell, timed with
    the session) and ``spawning`` ones (a new process per call, timed with one-shot);
    ``oneshot_baseline`` is the one one-shot is compared to; ``close`` releases them."""

    fast: dict[str, Callable[[], object]] = field(default_factory=dict)
    spawning: dict[str, Callable[[], object]] = field(default_factory=dict)
    oneshot_baseline: str | None = None
    closers: list[Callable[[], object]] = field(default_factory=list)

    def close(self) -> None:
        """Release every shell and socket the baselines opened."""
        for close in self.closers:
            close()


def shell_call(send: Callable[[bytes], object], recv: Callable[[], bytes]) -> Callable[[], None]:
    """A call of a bare persistent shell: send ``true; echo MARKER-N`` and read up to
    that call's own marker (N counts the calls, so a call never takes an earlier reply)."""
    prefix = b"__floor_" + uuid.uuid4().hex.encode() + b"_"
    count = [0]

    def call() -> None:
        count[0] += 1
        marker = prefix + str(count[0]).encode() + b"\n"
        send(b"true; echo " + marker)
        buf = b""
        while not buf.endswith(marker):
            chunk = recv()
            if not chunk:
                raise EOFError("the bare shell closed its output")
            buf += chunk

    return call


def split_shell_call(send: Callable[[bytes], object], recv: Callable[[], bytes]) -> Callable[[], None]:
    """A call of a bare persistent shell that keeps stderr apart, as a session call must:
    send ``true; echo MARKER-N-e >&2; echo MARKER-N-o`` and read (``recv`` returns what
    either stream brought, in any order) until both markers came."""
    prefix = b"__floor_" + uuid.uuid4().hex.encode() + b"_"
    count = [0]

    def call() -> None:
        count[0] += 1
        marker = prefix + str(count[0]).encode()
        on_err, on_out = marker + b"-e\n", marker + b"-o\n"
        send(b"true; echo " + on_err[:-1] + b" >&2; echo " + on_out)
        buf = b""
        while on_err not in buf or on_out not in buf:
            chunk = recv()
            if not chunk:
                raise EOFError("the bare shell closed its output")
            buf += chunk

    return call


Tagged = list[tuple[str, bytes]]
"""What a tagged ``recv`` returns: ``("stdout" | "stderr", bytes)`` pairs, as they came."""


def same_job_call(
    send: Callable[[bytes], object], recv: Callable[[], Tagged], cwd: str
) -> Callable[[], tuple[int, bytes, bytes]]:
    """The same job as a session call, done by a minimal client: each call enters ``cwd``,
    sets a variable of its own (the call's number, as a session sets ``ENVLAYER_EXEC_ID``),
    runs ``true``, then writes a marker on stderr and the marker with the exit status on
    stdout; the client reads (``recv`` returns what either stream brought, tagged with
    its stream) until both markers came, keeping each stream's bytes apart, and returns
    the status and what came before the markers on stdout and on stderr. No caps, no
    cancel, no tree kill, no marker hiding: the least a client must do."""
    prefix = b"__job_" + uuid.uuid4().hex.encode() + b"_"
    count = [0]
    enter = b"cd -- " + shlex.quote(cwd).encode() + b" && "

    def call() -> tuple[int, bytes, bytes]:
        count[0] += 1
        number = str(count[0]).encode()
        marker = prefix + number
        on_err, on_out = marker + b"-e\n", marker + b"-o "
        send(
            enter
            + b"FLOOR_CALL="
            + number
            + b"; export FLOOR_CALL; true; rc=$?; echo "
            + on_err[:-1]
            + b" >&2; echo "
            + on_out
            + b"$rc\n"
        )
        out, err = b"", b""
        while on_err not in err or not out.endswith(b"\n") or on_out not in out:
            chunks = recv()
            if not chunks:
                raise EOFError("the bare shell closed its output")
            for stream, data in chunks:
                if stream == "stdout":
                    out += data
                else:
                    err += data
        at = out.index(on_out)
        return int(out[at + len(on_out) :].split(b"\n", 1)[0]), out[:at], err[: err.index(on_err)]

    return call


def protocol_call(send: Callable[[bytes], object], recv: Callable[[], Tagged], cwd: str) -> Callable[[], bytes]:
    """A call of ``true`` through envlayer's own session protocol (its init script, handshake
    and call text, as a local session sends them; the shell removes its private directory
    when its input ends), by a client as minimal as :func:`same_job_call`'s: it sends the
    call and reads stdout until the trailer's two markers, nothing more (no caps, no
    deleted-directory check, no result). The shell must keep the order of its writes
    (local pipes: no stderr marker)."""
    send(OWNER_BOUND.encode() + init_script(session_id=uuid.uuid4().hex, start_dir=cwd, stderr_marker=False))
    hello = _protocol_round(send, recv, handshake_command(), ANY_SHELL).split()
    style = CallStyle(stderr_marker=False, function_eval=hello[2] == b"1", shaken=True)
    return lambda: _protocol_round(send, recv, "true", style)


def _protocol_round(
    send: Callable[[bytes], object], recv: Callable[[], Tagged], command: str, style: CallStyle
) -> bytes:
    """Send ``command`` as a session call; return its stdout up to the trailer."""
    marker = marker_of(seed := new_seed())
    send(plain_call_script(command, seed, new_exec_id(), style))
    out = b""
    while out.count(marker) < 2:
        for stream, data in recv():
            if stream == "stdout":
                out += data
    return out.split(marker, 1)[0]


class PipedShell:
    """A local ``/bin/sh`` over pipes (``stderr``: on a pipe of its own, else inherited).
    ``send`` writes straight to its input pipe; ``recv`` waits for stdout and returns what
    it holds, then what stderr holds (joined); ``recv_tagged`` the same kept apart per
    stream (:data:`Tagged`).

    The client waits on stdout alone and then looks at stderr once, as envlayer's local
    session does (:attr:`~envlayer.execution.streams.ProcessStream.keeps_write_order`): a
    pipe holds what was written to it when the write returns, so a marker the shell wrote on
    stderr before the one on stdout is there to read once the stdout marker came. Each call
    then wakes the client once. Waiting on both pipes (``poll``) woke it at the stderr marker
    too in about half the calls, at random (whether the shell was preempted between its two
    writes), and those calls took 5 us more: the floor's median jumped between its two modes
    from run to run (14 and 20 us on the 2-core reference machine)."""

    def __init__(self, stderr: bool) -> None:
        self.shell = subprocess.Popen(
            ["/bin/sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE if stderr else None
        )
        assert self.shell.stdin is not None and self.shell.stdout is not None
        self._stdin = self.shell.stdin.fileno()
        self._stdout = self.shell.stdout.fileno()
        self._stderr: int | None = None
        if self.shell.stderr is not None:
            self._stderr = self.shell.stderr.fileno()
            os.set_blocking(self._stderr, False)

    def send(self, data: bytes) -> None:
        """Write ``data`` to the shell's input (one ``write`` for a short command)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self._stdin, view) :]

    def recv(self) -> bytes:
        """What stdout holds once it has any, then what stderr holds, joined (``b""``
        once stdout ended)."""
        return b"".join(data for _, data in self.recv_tagged())

    def recv_tagged(self) -> Tagged:
        """What stdout holds once it has any (a blocking read), then what stderr holds
        (one look), per stream; ``[]`` once stdout ended."""
        out = os.read(self._stdout, 65536)
        if not out:
            return []
        if self._stderr is None:
            return [("stdout", out)]
        try:
            return [("stdout", out), ("stderr", os.read(self._stderr, 65536))]
        except BlockingIOError:
            return [("stdout", out)]

    def close(self) -> None:
        """End the shell and close its pipes."""
        assert self.shell.stdin is not None
        self.shell.stdin.close()
        self.shell.wait()
        for pipe in (self.shell.stdout, self.shell.stderr):
            if pipe is not None:
                pipe.close()


def local_baselines(env: Environment) -> ExecBaselines:
    """``subprocess.run`` of ``sh -c true``; over pipes, the same job done bare (in the
    environment's working directory), a bare shell, and one with stderr apart."""
    bare, split, job = PipedShell(stderr=False), PipedShell(stderr=True), PipedShell(stderr=True)
    own = PipedShell(stderr=True)
    cwd = run(env, "pwd").stdout_text.strip()
    spawn = "subprocess.run"
    return ExecBaselines(
        fast={
            SESSION_FLOOR: same_job_call(job.send, job.recv_tagged, cwd),
            BARE_FLOOR: shell_call(bare.send, bare.recv),
            SPLIT_FLOOR: split_shell_call(split.send, split.recv),
            PROTOCOL_FLOOR: protocol_call(own.send, own.recv_tagged, cwd),
        },
        spawning={spawn: lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True)},
        oneshot_baseline=spawn,
        closers=[bare.close, split.close, job.close, own.close],
    )


def docker_api() -> Any:
    """A low-level docker-py client configured from the environment, as the plugin's."""
    import docker

    return docker.APIClient(version="auto", **docker.utils.kwargs_from_env())


def docker_bare_shell(
    api: Any, container_id: str, *, split: bool = False, cwd: str | None = None
) -> tuple[Callable[[], object], Any]:
    """A shell over one attached exec socket, sent ``true; echo <marker>`` and read until
    the marker (frames not parsed). With ``split`` the :func:`split_shell_call` instead (a
    marker on each stream; the daemon forwards them in frames of their own, in either
    order); with ``cwd`` the :func:`same_job_call` in that directory (its frames parsed:
    :func:`frames_of`). Returns the call and the socket (close it when done)."""
    eid = api.exec_create(container_id, ["sh"], stdin=True, stdout=True, stderr=True, tty=False)["Id"]
    sock = api.exec_start(eid, socket=True)._sock
    recv: Callable[[], bytes] = lambda: sock.recv(65536)  # noqa: E731
    if cwd is not None:
        return same_job_call(sock.sendall, frames_of(recv), cwd), sock
    make = split_shell_call if split else shell_call
    return make(sock.sendall, recv), sock


def frames_of(recv: Callable[[], bytes]) -> Callable[[], Tagged]:
    """The tagged recv of an attached exec socket without a tty, from its raw ``recv``:
    the daemon's frames (an 8-byte header: the stream, 1 or 2, three zero bytes and the
    payload's length, big-endian) parsed, at least one whole frame per call (``[]`` once
    the socket ended)."""
    held = b""

    def tagged() -> Tagged:
        nonlocal held
        chunks: Tagged = []
        while not chunks:
            data = recv()
            if not data:
                return []
            held += data
            while len(held) >= 8 and len(held) >= 8 + (size := int.from_bytes(held[4:8], "big")):
                chunks.append(("stderr" if held[0] == 2 else "stdout", held[8 : 8 + size]))
                held = held[8 + size :]
        return chunks

    return tagged


def docker_baselines(env: Environment) -> ExecBaselines:
    """``docker exec`` CLI (when installed), docker-py ``exec_run``, the bare shell."""
    import docker

    cid = env.container_id  # type: ignore[attr-defined]
    api = docker_api()
    call, sock = docker_bare_shell(api, cid)
    split_call, split_sock = docker_bare_shell(api, cid, split=True)
    job_call, job_sock = docker_bare_shell(api, cid, cwd=run(env, "pwd").stdout_text.strip())
    container = docker.DockerClient(version="auto", **docker.utils.kwargs_from_env()).containers.get(cid)
    spawning: dict[str, Callable[[], object]] = {"docker-py exec_run": lambda: container.exec_run(["true"])}
    if shutil.which("docker"):
        spawning["docker exec CLI"] = lambda: subprocess.run(["docker", "exec", cid, "true"], check=True)
    return ExecBaselines(
        fast={SESSION_FLOOR: job_call, BARE_FLOOR: call, SPLIT_FLOOR: split_call},
        spawning=spawning,
        oneshot_baseline="docker exec CLI" if "docker exec CLI" in spawning else "docker-py exec_run",
        closers=[sock.close, split_sock.close, job_sock.close, api.close],
    )


def ssh_client(env: Environment) -> Any:
    """A paramiko client with its defaults (no TCP_NODELAY), connected to the host of
    ``env``'s options with its host, port, user, key files and password only (not its
    ssh config, jump host or agent). Host keys are not checked: a timing baseline."""
    import paramiko

    opts: Any = env.options
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(
        opts.host,
        port=opts.port or 22,
        username=opts.user,
        password=opts.password,
        key_filename=opts.key_files or None,
        allow_agent=False,
        look_for_keys=False,
    )
    return client


def ssh_cli(env: Environment, control_dir: str) -> list[str]:
    """``ssh`` to ``env``'s host with a ControlMaster in ``control_dir`` (the first call
    starts it, the others reuse its connection)."""
    opts: Any = env.options
    words = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    words += ["-o", "LogLevel=ERROR", "-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/cm"]
    words += ["-o", "ControlPersist=300", "-p", str(opts.port or 22)]
    words += [w for key in opts.key_files for w in ("-i", key)]
    return [*words, f"{opts.user}@{opts.host}" if opts.user else opts.host]


def ssh_baselines(env: Environment) -> ExecBaselines:
    """``ssh`` with a ControlMaster (when installed) and paramiko ``exec_command`` on one
    connection (one-shot); over paramiko channels, the same job done bare (the session
    floor) and a bare shell."""
    import tempfile

    client = ssh_client(env)
    channel = client.get_transport().open_session()
    channel.exec_command("sh")
    job = client.get_transport().open_session()
    job.exec_command("sh")

    def job_recv() -> Tagged:
        """What either stream of ``job`` holds, tagged, waiting for one (the channel's
        fileno turns readable on stdout and stderr data alike); ``[]`` at its end."""
        while True:
            if job.recv_stderr_ready():
                return [("stderr", job.recv_stderr(65536))]
            if job.recv_ready() or job.exit_status_ready():
                data = job.recv(65536)
                return [("stdout", data)] if data else []
            select.select([job], [], [])

    def paramiko_exec() -> None:
        _, out, _ = client.exec_command("true")
        out.channel.recv_exit_status()

    spawning: dict[str, Callable[[], object]] = {"paramiko exec_command": paramiko_exec}
    closers: list[Callable[[], object]] = [channel.close, job.close, client.close]
    if shutil.which("ssh"):
        control = tempfile.mkdtemp(prefix="envlayer-bench-ssh.")
        ssh = ssh_cli(env, control)
        spawning["ssh ControlMaster"] = lambda: subprocess.run([*ssh, "true"], check=True, capture_output=True)
        closers = [
            lambda: subprocess.run([*ssh, "-O", "exit"], capture_output=True, check=False),
            lambda: shutil.rmtree(control, ignore_errors=True),
            *closers,
        ]
    return ExecBaselines(
        fast={
            SESSION_FLOOR: same_job_call(job.sendall, job_recv, run(env, "pwd").stdout_text.strip()),
            BARE_FLOOR: shell_call(channel.sendall, lambda: channel.recv(65536)),
        },
        spawning=spawning,
        oneshot_baseline="ssh ControlMaster" if "ssh ControlMaster" in spawning else "paramiko exec_command",
        closers=closers,
    )


EXEC_BASELINES: dict[str, Callable[[Environment], ExecBaselines]] = {
    "local": local_baselines,
    "docker": docker_baselines,
    "ssh": ssh_baselines,
}
"""Warm-exec baselines per backend name; a backend not listed has none."""


def exec_baselines(backend: str, env: Environment) -> ExecBaselines:
    """The warm-exec baselines of ``backend`` against ``env``'s sandbox (none when the
    bench knows no baseline for it)."""
    make = EXEC_BASELINES.get(backend)
    return make(env) if make is not None else ExecBaselines()


def drain(read: Callable[[int], bytes]) -> int:
    """Read to the end with ``read(CHUNK)``, discarding; the byte count."""
    total = 0
    while chunk := read(CHUNK):
        total += len(chunk)
    return total


def local_flood_floor(env: Environment, size: int) -> int:
    """``head -c SIZE /dev/zero`` read from a pipe with ``os.read``; the bytes read."""
    proc = subprocess.Popen(["head", "-c", str(size), "/dev/zero"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with proc.stdout as out:
        total = drain(lambda n: os.read(out.fileno(), n))
    proc.wait()
    return total


def docker_flood_floor(env: Environment, size: int) -> int:
    """The same command over one attached ``docker exec`` socket (``recv``, frames not
    parsed); the bytes read (the payload plus the frame headers)."""
    api = docker_api()
    try:
        cid = env.container_id  # type: ignore[attr-defined]
        eid = api.exec_create(cid, ["head", "-c", str(size), "/dev/zero"])["Id"]
        sock = api.exec_start(eid, socket=True)._sock
        try:
            return drain(sock.recv)
        finally:
            sock.close()
    finally:
        api.close()


def ssh_flood_floor(env: Environment, size: int) -> int:
    """The same command on one paramiko channel (``recv``); the bytes read."""
    client = ssh_client(env)
    try:
        channel = client.get_transport().open_session()
        channel.exec_command(f"head -c {size} /dev/zero")
        return drain(channel.recv)
    finally:
        client.close()


FLOOD_FLOORS: dict[str, tuple[str, Callable[[Environment, int], int]]] = {
    "local": ("pipe", local_flood_floor),
    "docker": ("raw attach stream", docker_flood_floor),
    "ssh": ("paramiko channel", ssh_flood_floor),
}
"""The flood's floor per backend name: its method name and the function that reads it."""
