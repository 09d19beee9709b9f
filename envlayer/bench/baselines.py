"""The same work without envlayer, measured in the same run: what each figure is
compared to. Docker's and SSH's baselines import docker-py and paramiko lazily, inside the functions (the
core imports no backend SDK at module level).

* local: ``subprocess.run(["/bin/sh", "-c", "true"])`` (one-shot) and a bare shell over
  two pipes (the floor of a session call); a pipe from ``head`` (the flood's floor);
* Docker: the ``docker exec`` CLI and docker-py ``exec_run`` (one-shot), a bare shell
  over one attached exec socket (the session floor), the raw attach stream of one
  ``docker exec`` (the flood's floor, frames not parsed);
* local and Docker, the floor a session call is compared to (:data:`SESSION_FLOOR`): the
  same job done bare (:func:`same_job_call`): a minimal client over one persistent shell
  that keeps stderr apart, returns the exit status, and gives each call its working
  directory and a variable of its own, as a session call does;
* local and Docker, extra information (no ratio is taken to them): the bare shell that
  only echoes a marker (:data:`BARE_FLOOR`) and the one that keeps stderr apart
  (:data:`SPLIT_FLOOR`), so a run shows what each part of the job costs;
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

SESSION_FLOOR = "same job, bare"
"""The method name of the floor a session call is compared to: :func:`same_job_call`."""

BARE_FLOOR = "bare shell (extra)"
"""The method name of the bare shell that only echoes a marker per call (see
:func:`shell_call`). Extra information: it does less than a session call."""

SPLIT_FLOOR = "bare shell, stderr apart (extra)"
"""The method name of the bare shell that writes a marker on stderr and one on stdout per
call and reads until both came (see :func:`split_shell_call`). Extra information only: the
session's ratio is to :data:`SESSION_FLOOR`."""

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


def same_job_call(send: Callable[[bytes], object], recv: Callable[[], bytes], cwd: str) -> Callable[[], int]:
    """The same job as a session call, done by a minimal client: each call enters ``cwd``,
    sets a variable of its own (the call's number, as a session sets ``ENVLAYER_EXEC_ID``),
    runs ``true``, then writes a marker on stderr and the marker with the exit status on
    stdout; the client reads (``recv`` returns what either stream brought) until both
    markers came, keeps what came before them apart per stream, and returns the status.
    No caps, no cancel, no tree kill, no marker hiding: the least a client must do."""
    prefix = b"__job_" + uuid.uuid4().hex.encode() + b"_"
    count = [0]
    enter = b"cd -- " + shlex.quote(cwd).encode() + b" && "

    def call() -> int:
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
        buf = b""
        while on_err not in buf or not buf.endswith(b"\n") or on_out not in buf:
            chunk = recv()
            if not chunk:
                raise EOFError("the bare shell closed its output")
            buf += chunk
        return int(buf[buf.index(on_out) + len(on_out) :].split(b"\n", 1)[0])

    return call


def _piped_shell(stderr: bool) -> tuple[Callable[[bytes], None], Callable[[], bytes], Callable[[], None]]:
    """A local ``/bin/sh`` over pipes: its send, its recv and its close. The recv is a
    blocking read of stdout, or with ``stderr`` (stderr on a pipe of its own) what the
    ready pipes hold, both polled."""
    shell = subprocess.Popen(
        ["/bin/sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE if stderr else None
    )
    assert shell.stdin is not None and shell.stdout is not None
    stdin = shell.stdin
    pipes = [pipe for pipe in (shell.stdout, shell.stderr) if pipe is not None]
    poller = select.poll()
    for pipe in pipes:
        poller.register(pipe.fileno(), select.POLLIN)

    def send(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    def recv() -> bytes:
        if not stderr:
            return os.read(pipes[0].fileno(), 65536)
        return b"".join(os.read(fd, 65536) for fd, _ in poller.poll())

    def close() -> None:
        stdin.close()
        shell.wait()
        for pipe in pipes:
            pipe.close()

    return send, recv, close


def local_baselines(env: Environment) -> ExecBaselines:
    """``subprocess.run`` of ``sh -c true``; over pipes, the same job done bare (in the
    environment's working directory), a bare shell, and one with stderr apart."""
    send, recv, close = _piped_shell(stderr=False)
    split_send, split_recv, split_close = _piped_shell(stderr=True)
    job_send, job_recv, job_close = _piped_shell(stderr=True)
    cwd = run(env, "pwd").stdout_text.strip()
    spawn = "subprocess.run"
    return ExecBaselines(
        fast={
            SESSION_FLOOR: same_job_call(job_send, job_recv, cwd),
            BARE_FLOOR: shell_call(send, recv),
            SPLIT_FLOOR: split_shell_call(split_send, split_recv),
        },
        spawning={spawn: lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True)},
        oneshot_baseline=spawn,
        closers=[close, split_close, job_close],
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
    order); with ``cwd`` the :func:`same_job_call` in that directory. Returns the call
    and the socket (close it when done)."""
    eid = api.exec_create(container_id, ["sh"], stdin=True, stdout=True, stderr=True, tty=False)["Id"]
    sock = api.exec_start(eid, socket=True)._sock
    recv: Callable[[], bytes] = lambda: sock.recv(65536)  # noqa: E731
    if cwd is not None:
        return same_job_call(sock.sendall, recv, cwd), sock
    make = split_shell_call if split else shell_call
    return make(sock.sendall, recv), sock


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

    def job_recv() -> bytes:
        """What either stream of ``job`` holds, waiting for one (the channel's fileno
        turns readable on stdout and stderr data alike)."""
        while True:
            if job.recv_stderr_ready():
                return job.recv_stderr(65536)
            if job.recv_ready() or job.exit_status_ready():
                return job.recv(65536)
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
