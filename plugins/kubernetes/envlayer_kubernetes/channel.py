"""One exec in the pod over the exec websocket (``pods/{name}/exec``).

The client offers ``v5.channel.k8s.io`` then ``v4.channel.k8s.io``; the server picks one.
Every message is binary with a channel byte first: 0 stdin, 1 stdout, 2 stderr, 3 status
(a ``Status`` JSON: ``Success``, or ``NonZeroExitCode`` with the code in
``details.causes``), 255 close (v5 only: ``[255, 0]`` closes the process's stdin).
Under v4 stdin cannot be closed; callers then bound stdin themselves (see
:mod:`envlayer_kubernetes.wrapper`).

Closing the websocket does not kill the process in the pod: a timeout must kill it
with a second exec (the core's kill script).
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from typing import Any

from envlayer.errors import BackendUnavailable
from envlayer.execution.streams import WriteTimedOut
from envlayer.sandbox.retry import call_with_retries
from envlayer_kubernetes import naming, sdk
from envlayer_kubernetes.client import Cluster, log, message_of, transient, unavailable
from envlayer_kubernetes.handshake import HandshakeRefused, open_exec_websocket
from envlayer_kubernetes.keepalive import ANSWER_WITHIN, PING_EVERY, Keepalive

STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255
STREAM_NAMES = {STDOUT: "stdout", STDERR: "stderr"}
V5 = "v5.channel.k8s.io"
STDIN_CHUNK = 256 * 1024
PROBE_IDLE = 15.0
"""Seconds without a frame after which a session channel is pinged before it is used."""


class NotStarted(Exception):
    """The API refused the exec because the pod is gone (404) or not running (400): the
    command provably did not run."""


class ExecChannel:
    """An open exec websocket, usable as the core's byte stream (``write``, ``read``,
    ``exit_status``, ``close``). One reader at a time; :meth:`write` may run on a writer
    thread while another thread reads."""

    def __init__(self, ws: Any, cluster: Cluster, pod: str, *, timeout: float = ANSWER_WITHIN) -> None:
        self.cluster = cluster
        self.pod = pod
        self.sock = ws  # websocket.WebSocket
        self.v5 = ws.subprotocol == V5
        self.status: dict[str, Any] | None = None
        self.closed = False
        self.lost = False
        """The connection was found dead (a ping went unanswered), not closed by the server."""
        self.write_timed_out = False
        """A :meth:`write` ran out of time: the websocket may end in a frame cut short, so
        nothing more is sent on it (see :meth:`write`)."""
        self.answer_within = min(timeout, ANSWER_WITHIN)
        self.keepalive: Keepalive | None = None
        self.last_heard = time.monotonic()
        self._early: list[tuple[str, bytes]] = []

    def start_keepalive(self) -> None:
        """Ping the server every :data:`PING_EVERY` seconds while the channel is open (for
        long-lived channels: the session shell's). From then on :meth:`read` also detects a
        connection that was dropped silently: see :mod:`envlayer_kubernetes.keepalive`."""
        self.keepalive = Keepalive(self._ping, every=PING_EVERY, answer_within=self.answer_within)
        self.keepalive.start()

    @classmethod
    def open(
        cls, cluster: Cluster, pod: str, argv: list[str], *, stdin: bool, timeout: float, tty: bool = False
    ) -> ExecChannel:
        """Start ``argv`` in the pod's sandbox container (on a tty with ``tty``: then all
        output comes on stdout, as kubelet drops stderr); the handshake is bounded by
        ``timeout`` and shares nothing mutable with other threads (see
        :mod:`envlayer_kubernetes.handshake`). A handshake the API server answered 429 or
        502/503/504 is retried (the command provably did not start). Raises
        :class:`NotStarted` or :class:`BackendUnavailable`."""
        query = [
            ("command", argv),
            ("container", naming.CONTAINER),
            ("stdin", stdin),
            ("stdout", True),
            ("stderr", not tty),
            ("tty", tty),
        ]
        doing = f"starting a command in pod {pod}"
        try:
            ws = call_with_retries(
                lambda: open_exec_websocket(cluster.core.api_client, cluster.namespace, pod, query, timeout=timeout),
                transient,
                doing=doing,
                logger=log,
            )
        except HandshakeRefused as exc:
            if exc.status in (400, 404):
                raise NotStarted(f"{exc.status}: {message_of(exc)}") from exc
            raise unavailable(exc, cluster, doing) from exc
        except (sdk.websocket.WebSocketTimeoutException, TimeoutError) as exc:
            raise unavailable(exc, cluster, f"{doing} (no answer to the exec handshake in {timeout:.0f} s)") from exc
        except (sdk.websocket.WebSocketException, OSError) as exc:
            raise unavailable(exc, cluster, doing) from exc
        cluster.protocol = ws.subprotocol
        return cls(ws, cluster, pod, timeout=timeout)

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Write ``data`` to the process's stdin, in frames of at most :data:`STDIN_CHUNK`
        bytes. Raises ``OSError`` when the stream is closed or broken. Without
        ``deadline`` each socket send waits up to the socket's own timeout
        (``api_timeout``), then :class:`~envlayer.execution.streams.WriteTimedOut`.

        With ``deadline`` no socket send waits past it (see :meth:`_send`):
        :class:`~envlayer.execution.streams.WriteTimedOut` as soon as it passes, even in
        the middle of a frame (websocket-client's own ``send`` gives each of the socket
        sends of one frame the whole timeout, so a connection that takes the bytes slowly
        but steadily held a frame's send for as long as the whole frame took, far past
        the deadline). A frame cut short leaves the websocket unusable (the API server
        waits for the rest of it), so after ``WriteTimedOut`` nothing more is sent on
        this channel (keepalive pings and :meth:`close_stdin` raise ``BrokenPipeError``)
        and :meth:`close` drops the connection without a close frame; the caller kills
        the process and drops the channel (the session does, as on any timeout)."""
        if self.closed:
            raise BrokenPipeError("the exec stream is closed")
        for i in range(0, len(data), STDIN_CHUNK):
            self._send(b"\x00" + data[i : i + STDIN_CHUNK], deadline)

    def close_stdin(self) -> bool:
        """Close the process's stdin (v5); False under v4, which cannot."""
        if not self.v5:
            return False
        self._send(bytes([CLOSE, STDIN]))
        return True

    def _ping(self, payload: bytes) -> None:
        """A keepalive ping (see :meth:`start_keepalive`)."""
        self._send(payload, opcode=sdk.websocket.ABNF.OPCODE_PING)

    def _send(self, payload: bytes, deadline: float | None = None, *, opcode: int | None = None) -> None:
        """Send one websocket message (binary unless ``opcode``), framed by
        websocket-client's own ``ABNF`` and masked as its ``WebSocket.send_frame`` does,
        under that method's lock (``WebSocket.lock``): a frame sent by another thread (a
        keepalive ping, a terminal's resize) never lands inside this one. Each socket
        send waits at most the time left to ``deadline`` (the socket's timeout, set
        before each send and restored after; a TLS socket's ``send`` counts its timeout
        over all of its waits and writes all or times out, a TCP one writes what fits);
        without one, the socket's own timeout (``api_timeout``), as in websocket-client's
        ``send_frame``. :class:`~envlayer.execution.streams.WriteTimedOut` once it
        passes, and the channel then sends nothing more (:attr:`write_timed_out`).
        Raises ``OSError`` (``BrokenPipeError`` when closed) for a broken transport."""
        frame = sdk.websocket.ABNF.create_frame(payload, sdk.websocket.ABNF.OPCODE_BINARY if opcode is None else opcode)
        if self.sock.get_mask_key:
            frame.get_mask_key = self.sock.get_mask_key
        wire = memoryview(frame.format())
        with self.sock.lock:
            raw = self.sock.sock
            if raw is None:
                raise BrokenPipeError("the exec stream is closed")
            if self.write_timed_out:
                raise BrokenPipeError("a write to the exec stream ran out of time: it may end in a frame cut short")
            if self._sent_by(raw, wire, deadline) < len(wire):
                self.write_timed_out = True
                raise WriteTimedOut(
                    "the pod did not take the data "
                    + ("within the socket's timeout" if deadline is None else "by the deadline")
                )

    @staticmethod
    def _sent_by(raw: socket.socket, wire: memoryview, deadline: float | None) -> int:
        """How much of ``wire`` went out through ``raw`` by ``deadline``, each send
        waiting at most the time left (the socket's timeout, restored after); without a
        deadline, each send waits the socket's own timeout."""
        before = raw.gettimeout()
        sent = 0
        try:
            while sent < len(wire):
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    raw.settimeout(left)
                sent += raw.send(wire[sent:])
        except TimeoutError as exc:
            if exc.errno is not None:
                raise  # the kernel's ETIMEDOUT: the connection is lost, not slow
        finally:
            raw.settimeout(before)
        return sent

    def _readable(self, wait: float | None) -> bool:
        raw = self.sock.sock
        if raw is None:
            return True
        if isinstance(raw, ssl.SSLSocket) and raw.pending():
            return True
        ready, _, _ = select.select([raw], [], [], wait)
        return bool(ready)

    def read(self, deadline: float | None) -> list[tuple[str, bytes]] | None:
        """Wait for output until ``deadline`` (a ``time.monotonic()`` value; None = no
        limit): the ``("stdout" | "stderr", bytes)`` chunks available as soon as there are
        any, ``[]`` when the deadline passed first, None once the server closed the stream
        (every byte received was returned before; :attr:`status` then holds the status
        message, if one came). Never raises for a broken transport.

        With keepalive on (:meth:`start_keepalive`): a poll (``deadline`` already passed,
        as before a session command is sent) after :data:`PROBE_IDLE` seconds without a
        frame first pings and waits for the pong (up to ``answer_within``); a connection
        that does not answer, or whose keepalive ping goes unanswered while reading, is
        taken as closed (:attr:`lost`) and None returned: never a read that waits for the
        deadline on a dead connection."""
        chunks, self._early = self._early, []
        idle = time.monotonic() - self.last_heard
        polling = deadline is not None and deadline <= time.monotonic()
        if self.keepalive is not None and not chunks and polling and idle >= PROBE_IDLE and not self._probe():
            self._lose()
        chunks += self._early
        self._early = []
        while not self.closed:
            if chunks:
                wait: float | None = 0.0
            else:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return chunks
            if self.keepalive is not None:
                bound = self.keepalive.until_overdue()
                wait = bound if wait is None else min(wait, bound)
            if self._readable(wait):
                self._receive(chunks)
            elif chunks:
                return chunks
            elif self.keepalive is not None and self.keepalive.overdue():
                self._lose()
        return chunks or None

    def _receive(self, chunks: list[tuple[str, bytes]]) -> None:
        """Read one frame: output appended to ``chunks``, the status kept, a pong given
        to the keepalive; a close or a broken transport sets :attr:`closed`."""
        try:
            opcode, frame = self.sock.recv_data_frame(True)
        except (sdk.websocket.WebSocketException, OSError):
            self.closed = True
            return
        self.last_heard = time.monotonic()
        if opcode == sdk.websocket.ABNF.OPCODE_CLOSE:
            self.closed = True
            return
        if opcode == sdk.websocket.ABNF.OPCODE_PONG and self.keepalive is not None:
            self.keepalive.heard_pong(bytes(frame.data or b""))
        if opcode not in (sdk.websocket.ABNF.OPCODE_BINARY, sdk.websocket.ABNF.OPCODE_TEXT) or not frame.data:
            return
        data = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
        channel, payload = data[0], data[1:]
        if channel in STREAM_NAMES and payload:
            chunks.append((STREAM_NAMES[channel], payload))
        elif channel == STATUS and payload:
            try:
                self.status = json.loads(payload)
            except ValueError:
                self.status = {"status": "Failure", "message": payload.decode(errors="replace")}

    def _probe(self) -> bool:
        """Ping now and wait up to ``answer_within`` for the pong; output that arrives
        meanwhile is kept for the next read. True when answered (or the server closed the
        stream: the read reports that)."""
        assert self.keepalive is not None
        if not self.keepalive.ping():
            return False
        end = time.monotonic() + self.keepalive.answer_within
        while self.keepalive.waiting and not self.closed:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            if self._readable(remaining):
                self._receive(self._early)
        return True

    def _lose(self) -> None:
        log.warning(
            "the exec websocket to pod %s stopped answering pings (a proxy or load balancer dropped it); closing it",
            self.pod,
        )
        self.lost = True
        self.close()

    def exit_status(self, wait: float = 0.0) -> int | None:
        """After :meth:`read` returned None: the exit code from the status channel; None
        when the server reported a failure without one. Raises :class:`BackendUnavailable`
        when no status came at all (the pod or the connection was lost mid-command)."""
        if self.status is None:
            raise stream_broke(self.cluster, self.pod)
        return self.exit_code()

    def exit_code(self) -> int | None:
        """The process's exit code from the status channel; None when none came (the
        connection was lost) or the server reported a failure without an exit code."""
        status = self.status
        if status is None:
            return None
        if status.get("status") == "Success":
            return 0
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message"))
                except (TypeError, ValueError):
                    return None
        return None

    def failure_message(self) -> str:
        """The status channel's message (for errors that carry no exit code)."""
        return str((self.status or {}).get("message") or "the exec stream ended without a status")

    def close(self) -> None:
        """Close the websocket (the process in the pod is NOT killed by this) and release
        its socket; after a write that ran out of time, drop the connection without a
        close frame."""
        self.closed = True
        if self.keepalive is not None:
            self.keepalive.stop()
        try:
            if not self.write_timed_out:  # else a close frame would land inside the frame cut short
                self.sock.close()
        except Exception:
            pass
        # websocket-client's close() returns at once once the websocket is no longer
        # "connected", which it marks as it answers the server's close frame
        # (recv_data_frame -> send_close): the usual end of an exec. shutdown() closes the
        # socket whatever that state (a no-op when close() already did).
        try:
            self.sock.shutdown()
        except Exception:
            pass


def start_writer(channel: ExecChannel, data: bytes, *, close: bool) -> threading.Thread:
    """Feed ``data`` to stdin on a daemon thread, then close stdin (v5) if ``close``."""

    def work() -> None:
        try:
            if data:
                channel.write(data)
            if close:
                channel.close_stdin()
        except Exception:
            pass  # the stream ended (process exited or timed out): the reader reports it

    thread = threading.Thread(target=work, name="envlayer-k8s-stdin", daemon=True)
    thread.start()
    return thread


def stream_broke(cluster: Cluster, pod: str) -> BackendUnavailable:
    """The error for a stream that broke while a command ran."""
    return BackendUnavailable(
        f"the exec stream to pod {pod} in namespace {cluster.namespace!r} broke while the command ran; "
        "the command may have partly run and was NOT re-run",
        hint="check its effects and retry; the next call re-attaches (or re-creates the pod)",
    )
