"""A TCP forwarder that can drop its connections the way a network does: silently.

When a NAT or firewall forgets a connection, or the server's host goes away without
closing it, the client is not told: its socket looks open until it next sends, and only
then does a reset come back. A server restart on loopback is seen by the client at once
(the kernel sends a FIN), so it cannot show a client acting on a connection that is
already dead; this forwarder can. :meth:`SilentDropProxy.drop_silently` closes every
upstream connection, stops forwarding to the client, and answers the client's next bytes
with a reset (``SO_LINGER`` 0). New connections are forwarded as before.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from types import TracebackType


class _Pair:
    """One forwarded connection: the client's socket and the upstream one."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.dropped = threading.Event()
        self.closing = threading.Event()
        self.last_traffic = time.monotonic()

    def pump(self) -> None:
        """Copy bytes both ways until either side closes or the pair is dropped."""
        try:
            while True:
                ready, _, _ = select.select([self.client, self.upstream], [], [], 0.05)
                if self.dropped.is_set():
                    self._reset_on_next_send()
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    self.last_traffic = time.monotonic()
                    (self.upstream if sock is self.client else self.client).sendall(data)
        except OSError:
            return
        finally:
            self.upstream.close()
            self.client.close()

    def _reset_on_next_send(self) -> None:
        """Say nothing to the client until it sends (or the proxy closes), then reset its connection."""
        self.upstream.close()
        while not self.closing.is_set():
            ready, _, _ = select.select([self.client], [], [], 0.05)
            if ready:
                break
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class SilentDropProxy:
    """Forward ``127.0.0.1:port`` to ``127.0.0.1:upstream_port``; use as a context manager."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: list[_Pair] = []
        self._threads: list[tuple[_Pair, threading.Thread]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, upstream)
            thread = threading.Thread(target=pair.pump, daemon=True)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._pairs.append(pair)
                self._threads.append((pair, thread))
            thread.start()

    def wait_quiet(self, seconds: float, timeout: float = 30.0) -> None:
        """Wait until no byte has passed either way for ``seconds`` (a client's exchange
        still settling, such as a channel close, would otherwise learn of the drop)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                last = max((pair.last_traffic for pair in self._pairs), default=0.0)
            if time.monotonic() - last >= seconds:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the forwarded connections were not quiet for {seconds} s")
            time.sleep(0.02)

    def drop_silently(self) -> None:
        """Drop every connection open now without telling the clients (see the module doc)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.dropped.set()

    def close(self) -> None:
        """Stop accepting, drop every connection and wait for the forwarding threads."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone does not)
        self._listener.close()
        self.drop_silently()
        for pair, thread in threads:
            pair.closing.set()
            thread.join(timeout=5)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> SilentDropProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
