"""A private OpenSSH server on a loopback port, for the ssh backend's tests.

Each :class:`SSHServer` lives in its own temp dir: generated ed25519 host key, client key,
authorized_keys, config, pid file and log. It runs detached (own session), is stopped
by PID together with every process it spawned (connection handlers, the test user's
commands), and its directory is removed on :meth:`close`. No system sshd is touched.

The test user has ``/bin/sh`` as login shell so no rc file slows every exec. With
``rootless=True`` sshd itself runs as the test user (no privilege separation, the only
user who can log in), as an unprivileged deployment would.

Several test runs may share this machine (and so the one test user) at the same time.
Nothing here may touch another run's processes, files or credentials: every session a
server starts carries that server's own tag (``SetEnv``) and ``TMPDIR``, and a server
kills only processes that descend from it or carry its tag; the test user's password is
made once per machine and kept in a root-only file, never changed by a later run.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SSHD = "/usr/sbin/sshd"
TEST_USER = "envlayer-ssh-test"


class Unavailable(Exception):
    """sshd, ssh-keygen or root is missing; the message says what."""


def requirements_missing() -> str | None:
    """What prevents running a test sshd here, or None."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing (apt-get install openssh-client)"
    if os.geteuid() != 0:
        return "the test sshd needs root (to create the test user and switch to it)"
    return None


PASSWORD_FILE = os.path.join(os.path.expanduser("~"), ".cache", "envlayer", "ssh-test-password")
"""The test user's password (root-only file). One per machine: a run that changed the
password while another run's test logged in with the old one made that test fail."""


def _machine_password() -> str:
    """The test user's password, made once per machine (atomically: concurrent runs all
    end up with the one password that won the ``link``)."""
    try:
        with open(PASSWORD_FILE) as fh:
            return fh.read().strip()
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(PASSWORD_FILE), mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(PASSWORD_FILE))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(16))
        try:
            os.link(tmp, PASSWORD_FILE)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    with open(PASSWORD_FILE) as fh:
        return fh.read().strip()


def ensure_test_user() -> tuple[str, str]:
    """Create the test user (login shell /bin/sh) if missing and give it the machine's
    test password (always the same value, so a concurrent run is not disturbed);
    returns (user, password)."""
    password = _machine_password()
    # One process at a time: on a new machine every pytest worker (and any other run beside
    # this one) finds the user missing at once; the losers' useradd failed with exit 9
    # ("already in use") or on /etc/passwd's lock, and their setup errored (seen in a run of
    # six workers beside another suite).
    with open(PASSWORD_FILE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(TEST_USER)
        except KeyError:
            subprocess.run(["useradd", "-m", "-s", "/bin/sh", TEST_USER], check=True, capture_output=True)
        subprocess.run(["chpasswd"], input=f"{TEST_USER}:{password}\n", text=True, check=True, capture_output=True)
    return TEST_USER, password


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keygen(path: str, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
        check=True,
        capture_output=True,
    )


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        ppid = int(raw[raw.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _wait_exited(pids: list[int], seconds: float) -> None:
    """Wait until none of ``pids`` is running (gone, or a zombie: its files are closed)."""
    deadline = time.monotonic() + seconds
    for pid in pids:
        while _running(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"process {pid} survived SIGKILL for {seconds} s")
            time.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] != b"Z"


def _tagged(tag: bytes) -> list[int]:
    """Pids whose environment holds ``tag`` (this server's ``SetEnv``): commands its
    sessions started, also those that left its process tree (``setsid``, daemons)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if tag in fh.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


@dataclass
class ServerFiles:
    dir: str
    host_key: str
    client_key: str
    known_hosts: str
    config: str
    log: str


class SSHServer:
    """One test sshd. Use :meth:`start`, :meth:`stop`, :meth:`restart`, :meth:`close`."""

    def __init__(self, *, max_sessions: int = 10, rootless: bool = False) -> None:
        self.user, self.password = ensure_test_user()
        self.tag = f"ENVLAYER_TEST_SSHD={secrets.token_hex(8)}"
        """Set in every session of this server (``SetEnv``); see :func:`_tagged`."""
        self.port = free_port()
        self.max_sessions = max_sessions
        self.rootless = rootless
        base = tempfile.mkdtemp(prefix="envlayer-sshd-")
        os.chmod(base, 0o755)
        self.files = ServerFiles(
            dir=base,
            host_key=os.path.join(base, "host_ed25519"),
            client_key=os.path.join(base, "client_ed25519"),
            known_hosts=os.path.join(base, "known_hosts"),
            config=os.path.join(base, "sshd_config"),
            log=os.path.join(base, "sshd.log"),
        )
        self.tmpdir = os.path.join(base, "tmp")
        """The sessions' ``TMPDIR`` (session state files go there), removed with the server."""
        os.mkdir(self.tmpdir)
        os.chmod(self.tmpdir, 0o1777)
        self.proc: subprocess.Popen[bytes] | None = None
        keygen(self.files.host_key, "envlayer-test-host")
        keygen(self.files.client_key, "envlayer-test-client")
        auth = os.path.join(base, "authorized_keys")
        shutil.copy(self.files.client_key + ".pub", auth)
        os.chmod(auth, 0o644)
        self._write_config()
        self.trust_host_key()
        if rootless:
            self._hand_to_user()

    def _hand_to_user(self) -> None:
        """A rootless sshd runs as the test user: it must own its key, pid file and log."""
        entry = pwd.getpwnam(self.user)
        for path in (self.files.dir, self.files.host_key, self.files.host_key + ".pub"):
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _write_config(self) -> None:
        d = self.files.dir
        with open(self.files.config, "w") as fh:
            fh.write(
                f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.files.host_key}\n"
                f"PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n"
                "UsePAM no\nStrictModes no\nPasswordAuthentication yes\nKbdInteractiveAuthentication no\n"
                "PubkeyAuthentication yes\nSubsystem sftp internal-sftp\n"
                f"MaxSessions {self.max_sessions}\nMaxStartups 100\nAllowTcpForwarding yes\n"
                f"AllowUsers {self.user}\nLogLevel VERBOSE\n"
                f"SetEnv {self.tag} TMPDIR={self.tmpdir}\n"
            )

    def host_key_line(self) -> str:
        with open(self.files.host_key + ".pub") as fh:
            key_type, blob = fh.read().split()[:2]
        return f"[127.0.0.1]:{self.port} {key_type} {blob}\n"

    def trust_host_key(self) -> None:
        """(Re)write the known_hosts file with exactly this server's current key."""
        with open(self.files.known_hosts, "w") as fh:
            fh.write(self.host_key_line())

    def new_host_key(self) -> None:
        """Replace the host key (takes effect at the next start)."""
        for suffix in ("", ".pub"):
            os.unlink(self.files.host_key + suffix)
        keygen(self.files.host_key, "envlayer-test-host-2")
        if self.rootless:
            self._hand_to_user()

    def start(self) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(self.files.log, "ab") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", self.files.config],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=self.user if self.rootless else None,
            )
        deadline = time.monotonic() + 60  # sshd exiting is seen at once; only a slow start waits
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.read_log()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"sshd did not answer on port {self.port}: {self.read_log()[-2000:]}")

    def stop(self) -> None:
        """Kill sshd and everything it spawned (open connections and their commands, also
        those that left its process tree); nothing another server started."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        victims = _descendants(proc.pid) + _tagged(self.tag.encode())
        for pid in [proc.pid, *victims]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
        # A SIGKILLed process closes its sockets only when it exits, which on a loaded
        # machine can be later: until then a client's connection is up, and a command
        # written to it is lost with the connection ("may or may not have run") instead
        # of finding the server gone. Stopped means every connection is closed.
        _wait_exited(victims, seconds=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def read_log(self) -> str:
        try:
            with open(self.files.log, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.files.dir, ignore_errors=True)

    def options(self, **overrides: object) -> dict[str, object]:
        """Keyword arguments for SSHOptions that reach this server with its key."""
        values: dict[str, object] = dict(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            key_files=[self.files.client_key],
            use_agent=False,
            look_for_keys=False,
            ssh_config="",
            known_hosts=self.files.known_hosts,
            timeout=60.0,
            connect_timeout=5.0,
        )
        values.update(overrides)
        return values


@contextmanager
def running_sshd(unavailable: Callable[[str], None]) -> Iterator[SSHServer]:
    """A started test sshd, closed (with everything it spawned) on exit. When one cannot
    run here, ``unavailable(reason)`` is called first (it skips or fails the test)."""
    missing = requirements_missing()
    if missing:
        unavailable(missing)
    server = SSHServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
