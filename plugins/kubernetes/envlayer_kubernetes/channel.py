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
        self.answer_within = min(timeout, ANSWER_WITHIN)
        self.keepalive: Keepalive | None = None
        self.last_heard = time.monotonic()
        self._early: list[tuple[str, bytes]] = []

    def start_keepalive(self) -> None:
        """Ping the server every :data:`PING_EVERY` seconds while the channel is open (for
        long-lived channels: the session shell's). From then on :meth:`read` also detects a
        connection that was dropped silently: see :mod:`envlayer_kubernetes.keepalive`."""
        self.keepalive = Keepalive(self.sock.ping, every=PING_EVERY, answer_within=self.answer_within)
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
        """Write ``data`` to the process's stdin (in frames of at most 256 KiB). Raises
        ``OSError`` when the stream is closed or broken. With ``deadline``, the socket's
        own timeout bounds each frame's send (restored after):
        :class:`~envlayer.execution.streams.WriteTimedOut` once it passes."""
        if self.closed:
            raise BrokenPipeError("the exec stream is closed")
        before = self.sock.gettimeout()
        try:
            for i in range(0, len(data), STDIN_CHUNK):
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WriteTimedOut(f"the pod took {i} of {len(data)} bytes before the deadline")
                    self.sock.settimeout(left)
                self.sock.send(b"\x00" + data[i : i + STDIN_CHUNK], opcode=sdk.websocket.ABNF.OPCODE_BINARY)
        except sdk.websocket.WebSocketTimeoutException as exc:
            raise WriteTimedOut(f"the pod did not take the data before the deadline: {exc}") from exc
        except sdk.websocket.WebSocketException as exc:
            raise BrokenPipeError(str(exc)) from exc
        finally:
            if deadline is not None:
                self.sock.settimeout(before)

    def close_stdin(self) -> bool:
        """Close the process's stdin (v5); False under v4, which cannot."""
        if not self.v5:
            return False
        self.sock.send(bytes([CLOSE, STDIN]), opcode=sdk.websocket.ABNF.OPCODE_BINARY)
        return True

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
        """Close the websocket (the process in the pod is NOT killed by this)."""
        self.closed = True
        if self.keepalive is not None:
            self.keepalive.stop()
        try:
            self.sock.close()
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
