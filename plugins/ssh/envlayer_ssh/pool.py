"""Shared connections: one pool of SSH connections per :class:`Target`, reference-counted.

Guaranteed:

* Environments with equal targets share one :class:`TargetPool` (module-level registry
  under a lock). :func:`release` closes the pool's connections only when the last
  environment that acquired it releases it.
* Every connection has TCP_NODELAY on (paramiko never sets it; without it each channel
  open stalls ~40 ms on Nagle + delayed ACK) and keepalive as configured.
* At most ``max_sessions`` channels are open on one connection at a time (OpenSSH's
  MaxSessions). Further short-lived channels wait for a free one; a new connection (up to
  ``max_connections``) is opened only when every channel is held by a long-lived user
  (session shell, SFTP), because those would never free a slot. A refused channel is retried
  with a short backoff (sshd frees a closed channel's slot a moment late, seconds late
  when loaded); repeated refusals lower that connection's capacity to the channels it
  still has open instead of failing. Refusals while it has none open wait for the server
  to free its slots (up to about 36 s), unless it never accepted a channel at all.
* A connection found dead is re-established on the next channel open, logged at WARNING
  and counted in :attr:`TargetPool.reconnects`. A failed channel *open* is retried once on
  a fresh connection, since no command was sent yet; nothing else is ever retried here.

Raised: :class:`~envlayer.errors.BackendUnavailable` (unreachable, authentication
refused, connection lost), :class:`~envlayer_ssh.errors.HostKeyError`.
"""

from __future__ import annotations

import logging
import shlex
import socket
import threading
import time
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable
from envlayer_ssh import hostkeys, sdk
from envlayer_ssh.errors import HostKeyError
from envlayer_ssh.target import Target

if TYPE_CHECKING:
    import paramiko

log = logging.getLogger("envlayer.ssh")

_REFUSALS_BEFORE_LOWERING = 5
_MAX_REFUSALS = 200

_REGISTRY: dict[Target, TargetPool] = {}
_REGISTRY_LOCK = threading.Lock()


def acquire(target: Target) -> TargetPool:
    """The shared pool for ``target``, with its reference count raised by one.

    Connects nothing: connections are opened by the first channel request.
    """
    with _REGISTRY_LOCK:
        pool = _REGISTRY.get(target)
        if pool is None:
            pool = _REGISTRY[target] = TargetPool(target)
        pool.refs += 1
        return pool


def release(pool: TargetPool) -> None:
    """Drop one reference; the last one closes every connection of the pool."""
    with _REGISTRY_LOCK:
        pool.refs -= 1
        if pool.refs > 0:
            return
        if _REGISTRY.get(pool.target) is pool:
            del _REGISTRY[pool.target]
    pool.close()


def open_pools() -> dict[Target, int]:
    """Target -> reference count of every live pool (for tests and diagnostics)."""
    with _REGISTRY_LOCK:
        return {target: pool.refs for target, pool in _REGISTRY.items()}


class Connection:
    """One authenticated transport to a target, (re)connected on demand."""

    def __init__(self, pool: TargetPool) -> None:
        self.pool = pool
        self.capacity = pool.target.max_sessions
        self.in_use = 0
        self.long_lived = 0
        self.accepted = 0
        """Channels the server accepted on this connection so far."""
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        client = self._client
        transport = client.get_transport() if client is not None else None
        return transport is not None and transport.is_active()

    def transport(self) -> paramiko.Transport:
        """The live transport, connecting (or reconnecting) first if needed."""
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if transport is not None and transport.is_active():
                return transport
            if client is not None:
                client.close()
                self._client = None
                self.pool.note_reconnect()
            self._client = _connect(self.pool.target, self.pool.jump_transport())
            transport = self._client.get_transport()
            assert transport is not None
            return transport

    def open_channel(self) -> paramiko.Channel:
        """A new session channel. Retried once on a fresh connection when the open fails
        because the connection died (nothing was sent on the channel yet)."""
        timeout = self.pool.target.connect_timeout
        transport = self.transport()
        try:
            return transport.open_session(timeout=timeout)
        except sdk.paramiko.ChannelException:
            raise
        except (sdk.paramiko.SSHException, EOFError, OSError):
            if transport.is_active():
                raise
        return self.transport().open_session(timeout=timeout)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class Lease:
    """A channel and the connection slot it occupies. :meth:`release` closes the channel
    and frees the slot; it is idempotent."""

    def __init__(self, pool: TargetPool, connection: Connection, channel: paramiko.Channel, long_lived: bool) -> None:
        self.pool = pool
        self.connection = connection
        self.channel = channel
        self.long_lived = long_lived
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        try:
            self.channel.close()
        except Exception:  # a channel on a dead transport may fail to close; the slot is freed anyway
            log.debug("ssh: closing a channel failed", exc_info=True)
        self.pool.free_slot(self.connection, self.long_lived)


class TargetPool:
    """The connections to one target and the accounting of their channel slots."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.refs = 0
        self.reconnects = 0
        self.connections: list[Connection] = []
        self.stale_files: set[str] = set()
        """Temp files of writes cut by a drop, not removable then
        (see :func:`envlayer_ssh.files.remove_stale`)."""
        self._cond = threading.Condition()
        self._closed = False
        self._jump: TargetPool | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_lease: Lease | None = None
        self.sftp_lock = threading.RLock()
        self.login_shell_is: dict[str, bool] = {}
        """Shell path -> whether the remote login shell is that same program (probed once)."""

    # --- slots and channels ---------------------------------------------------------

    def _reserve(self, long_lived: bool) -> Connection:
        """A connection with a free channel slot, now taken. Waits while a slot held by
        a short-lived channel may come free; raises when only long-lived holders remain
        and no connection can be added (waiting would never end)."""
        with self._cond:
            while True:
                if self._closed:
                    raise BackendUnavailable(f"the connection pool for {self.target.describe()} was closed")
                for conn in self.connections:
                    if conn.in_use < conn.capacity:
                        return self._take(conn, long_lived)
                stuck = all(c.long_lived >= c.capacity for c in self.connections)
                if len(self.connections) < self.target.max_connections and (long_lived or stuck):
                    conn = Connection(self)
                    self.connections.append(conn)
                    return self._take(conn, long_lived)
                if stuck:
                    raise BackendUnavailable(
                        f"all {sum(c.capacity for c in self.connections)} channels on "
                        f"{len(self.connections)} connection(s) to {self.target.describe()} are held "
                        "by session shells and file transfers",
                        hint='clean up idle environments, raise max_connections, or use mode = "oneshot"',
                    )
                self._cond.wait(1.0)

    def _take(self, conn: Connection, long_lived: bool) -> Connection:
        conn.in_use += 1
        if long_lived:
            conn.long_lived += 1
        return conn

    def free_slot(self, conn: Connection, long_lived: bool) -> None:
        with self._cond:
            conn.in_use -= 1
            if long_lived:
                conn.long_lived -= 1
            self._cond.notify_all()

    def open(self, *, long_lived: bool = False) -> Lease:
        """Open a session channel in a free slot (waiting for one if needed).

        ``long_lived`` marks channels that stay open across commands (session shells,
        SFTP). Raises :class:`BackendUnavailable` when the target cannot be reached.
        """
        refusals = 0
        while True:
            conn = self._reserve(long_lived)
            try:
                channel = conn.open_channel()
            except (sdk.paramiko.SSHException, EOFError, OSError) as exc:
                self.free_slot(conn, long_lived)
                refused = isinstance(exc, sdk.paramiko.ChannelException) or (
                    isinstance(exc, sdk.paramiko.SSHException) and conn.alive
                )
                if not refused:
                    raise BackendUnavailable(
                        f"cannot open a channel to {self.target.describe()}: {type(exc).__name__}: {exc}",
                        hint="check that the server is up; the next call reconnects",
                    ) from exc
                # sshd frees a closed channel's session a moment after the close arrives, so
                # a refusal at the limit is often transient: back off, and only after repeated
                # refusals believe the server's limit is lower than ours.
                refusals += 1
                if refusals >= _REFUSALS_BEFORE_LOWERING:
                    self._lower_capacity(conn, exc)
                if refusals >= _MAX_REFUSALS:
                    raise BackendUnavailable(
                        f"{self.target.describe()} keeps refusing session channels: {exc}",
                        hint="check the server's MaxSessions and its logs",
                    ) from exc
                time.sleep(min(0.2, 0.005 * refusals))
                continue
            except BaseException:
                self.free_slot(conn, long_lived)
                raise
            with self._cond:
                conn.accepted += 1
            return Lease(self, conn, channel, long_lived)

    def _lower_capacity(self, conn: Connection, exc: Exception) -> None:
        """Called after repeated refusals, the refused channel's slot already freed. The
        server's limit is then at most the channels still open on ``conn``: its capacity
        becomes that. With none open, the refusal counts channels the server has not freed
        yet (a loaded sshd frees a closed channel's session late), so the caller keeps
        backing off; unless the server never accepted a channel on ``conn``: then it
        refuses session channels altogether, and :class:`BackendUnavailable` says so."""
        with self._cond:
            open_now = conn.in_use
            if open_now == 0:
                if conn.accepted == 0:
                    raise BackendUnavailable(
                        f"{self.target.describe()} refused to open a session channel: {exc}",
                        hint="check the server's MaxSessions and its logs",
                    ) from exc
                return
            if open_now < conn.capacity:
                log.warning(
                    "ssh: %s refused channel %d; treating its MaxSessions as %d (set max_sessions = %d)",
                    self.target.describe(),
                    open_now + 1,
                    open_now,
                    open_now,
                )
                conn.capacity = open_now

    def note_reconnect(self) -> None:
        with self._cond:
            self.reconnects += 1
        log.warning(
            "ssh: the connection to %s was lost and is being re-established; a command that was "
            "running when it dropped may or may not have completed and was not re-run",
            self.target.describe(),
        )

    @property
    def any_alive(self) -> bool:
        """True when at least one connection of the pool is up."""
        return not self._closed and any(c.alive for c in self.connections)

    def ensure_connected(self, *, prove: bool = True) -> None:
        """Establish the first connection now (raises what connecting raises). With
        ``prove``, a connection that was already open is proven alive by opening (and
        closing) a channel: one that died unseen (a server restart the client has not read
        yet, a forgotten NAT entry) is then re-established, and the server's host key
        checked, before the caller relies on it."""
        with self._cond:
            if not self.connections:
                self.connections.append(Connection(self))
            conn = self.connections[0]
        was_open = conn.alive
        conn.transport()
        if prove and was_open:
            self.open().release()

    # --- jump hosts and sftp -----------------------------------------------------

    def jump_transport(self) -> paramiko.Transport | None:
        """A live transport to the previous hop, or None for a direct connection."""
        if self.target.jump is None:
            return None
        with self._cond:
            if self._jump is None:
                self._jump = acquire(self.target.jump)
            jump = self._jump
        with jump._cond:
            if not jump.connections:
                jump.connections.append(Connection(jump))
            conn = jump.connections[0]
        return conn.transport()

    @property
    def sftp_alive(self) -> bool:
        """True while the SFTP channel and its connection are open."""
        lease = self._sftp_lease
        return lease is not None and not lease.channel.closed and lease.connection.alive

    def sftp(self) -> paramiko.SFTPClient:
        """The pool's one SFTP client, opened (or reopened after a drop) on demand.
        Callers hold :attr:`sftp_lock` while using it."""
        with self.sftp_lock:
            lease = self._sftp_lease
            if self._sftp is not None and lease is not None:
                if self.sftp_alive:
                    return self._sftp
                lease.release()
                self._sftp = self._sftp_lease = None
            lease = self.open(long_lived=True)
            try:
                lease.channel.invoke_subsystem("sftp")
                self._sftp = sdk.paramiko.SFTPClient(lease.channel)
            except BaseException as exc:
                lease.release()
                if isinstance(exc, (sdk.paramiko.SSHException, EOFError, OSError)):
                    raise BackendUnavailable(
                        f"cannot start SFTP on {self.target.describe()}: {exc}",
                        hint="enable the sftp subsystem on the server (Subsystem sftp internal-sftp)",
                    ) from exc
                raise
            self._sftp_lease = lease
            return self._sftp

    def close(self) -> None:
        """Close the SFTP client, every connection, and the jump pool's reference."""
        with self._cond:
            self._closed = True
            conns = list(self.connections)
            self._cond.notify_all()
        with self.sftp_lock:
            if self._sftp_lease is not None:
                self._sftp_lease.release()
            self._sftp = self._sftp_lease = None
        for conn in conns:
            conn.close()
        if self._jump is not None:
            release(self._jump)
            self._jump = None


def _connect(target: Target, via: paramiko.Transport | None) -> paramiko.SSHClient:
    """Open, verify and authenticate one connection to ``target``."""
    sock = _open_socket(target, via)
    timeout = target.connect_timeout
    client = sdk.paramiko.SSHClient()
    client.set_missing_host_key_policy(_Verifier(target))
    if target.use_agent:
        client._agent = _agent(target.agent_socket)  # what _auth would make from os.environ now
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            password=target.password,
            key_filename=list(target.key_files) or None,
            allow_agent=target.use_agent,
            look_for_keys=target.look_for_keys,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            disabled_algorithms={"keys": hostkeys.disabled_host_key_types(target)},
        )
    except (HostKeyError, sdk.paramiko.SSHException, EOFError, OSError) as exc:
        client.close()
        sock.close()
        if isinstance(exc, HostKeyError):
            raise
        raise _handshake_error(target, exc) from exc
    transport = client.get_transport()
    assert transport is not None
    if target.keepalive:
        transport.set_keepalive(max(1, int(target.keepalive)))
    log.debug("ssh: connected to %s", target.describe())
    return client


def _agent(path: str) -> paramiko.Agent:
    """An agent client on ``path`` (the caller's ``SSH_AUTH_SOCK``, kept in the target):
    ``paramiko.Agent()`` reads ``os.environ`` when a connection is made
    (``paramiko/agent.py`` ``get_agent_connection``), which in a broker is not the
    caller's. Like it, an agent that cannot be reached offers no keys."""
    agent = sdk.paramiko.Agent.__new__(sdk.paramiko.Agent)
    sdk.paramiko.agent.AgentSSH.__init__(agent)
    if not path:
        return agent
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return agent
    agent._connect(conn)
    return agent


def _open_socket(target: Target, via: paramiko.Transport | None) -> socket.socket | paramiko.Channel:
    """A TCP connection to ``target``, direct or tunnelled through the jump host's ``via``."""
    timeout = target.connect_timeout
    try:
        if via is None:
            sock = socket.create_connection((target.hostname, target.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        return via.open_channel("direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=timeout)
    except (OSError, sdk.paramiko.SSHException, EOFError) as exc:
        raise BackendUnavailable(
            f"cannot reach {target.describe()}: {type(exc).__name__}: {exc}",
            hint="check the host name, the port and that sshd is running there",
        ) from exc


def _handshake_error(target: Target, exc: BaseException) -> BackendUnavailable:
    """The envlayer error for a failed handshake or login: authentication, host key type or transport."""
    where = target.describe()
    if isinstance(exc, sdk.paramiko.AuthenticationException):
        return BackendUnavailable(
            f"authentication to {where} was refused: {exc}",
            hint="check user, key_files, the ssh agent or password; the server's log says which method it refused",
        )
    if "no acceptable host key" in str(exc):
        return HostKeyError(
            f"{where} offers no host key of the types {target.known_hosts} holds for "
            f"{target.known_hosts_name}; its key may have been replaced",
            hint=f"check the server's key, then `ssh-keygen -R {shlex.quote(target.known_hosts_name)} "
            f"-f {shlex.quote(target.known_hosts)}` and `{hostkeys.keyscan_command(target, 'ssh-ed25519')}`",
        )
    return BackendUnavailable(
        f"ssh handshake with {where} failed: {type(exc).__name__}: {exc}",
        hint="check that the port speaks ssh and the server accepts connections",
    )


class _Verifier:
    """paramiko policy that hands every host key to :func:`hostkeys.verify`.

    No known_hosts entries are loaded into the client, so paramiko calls this for every
    key and the decision (unknown, changed, recorded) is made in one place.
    """

    def __init__(self, target: Target) -> None:
        self.target = target

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        hostkeys.verify(self.target, key)
