"""A command's stdin through the session shell over a slow link to the fake API server: the
call must end as a timeout at its deadline, not once the stdin frame under way at the
deadline got through, and the next call must work in a new shell.

The case: the client's bytes leave at :data:`LINK_RATE` (a slow uplink, a proxy), steadily,
from a send buffer smaller than a stdin frame (256 KiB), so the websocket takes one frame in
many socket sends, each waiting for a little room. websocket-client's ``WebSocket.send``
gave each of them the whole socket timeout (``send_frame`` loops over ``_socket.send``), so
the frame under way at the deadline went on to its end (a 2 s call took 13.9 s here).

Why not a pod that reads slowly (``test_session_stdin.py`` has one that stops reading): the
API server takes stdin one whole websocket message at a time (FAKE_APISERVER.md, "Stdin
backpressure"), so a slow reader in the pod frees the client's socket in frame-sized steps,
one socket send per frame, which the old code bounded too (within 0.1 s in trials). And the send buffer: on loopback
the kernel sizes it at 4 MiB (``net.ipv4.tcp_wmem``; its 64 KiB segments make the initial
size 2.5 MiB), far above a network path's (about 100 KiB at the start with 1.4 KiB
segments); the test sets it through websocket-client's own list of socket options
(``websocket._http.DEFAULT_SOCKET_OPTION``, applied to each socket it opens), small enough
that each send waits well under the 2 s timeout at this rate, as on a real path with the
longer timeouts agents use.

Over HTTPS the old send was bounded already: CPython's TLS ``send`` writes all of its data
or times out, counting its timeout over all of its waits, so a frame took one socket send.
That case checks the new send loop over TLS (a timed-out TLS send may have written part of
the frame).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.testing.fixtures import require_docker, returned_within

TIMEOUT = 2.0
LINK_PIECE = 4096
LINK_PAUSE = 0.2
LINK_RATE = LINK_PIECE / LINK_PAUSE
"""Bytes per second the link carries from the client, at most: a 256 KiB frame takes 13 s."""
CLIENT_SNDBUF = 16 << 10
"""The client's send buffer (the kernel doubles it): a frame needs many sends."""
STDIN_BYTES = 4 << 20
"""Far more than the link carries by the deadline, buffers included."""
HANG_BOUND = TIMEOUT + 8.0
"""The call's timeout, then the kill of the shell and its command through a second exec
(about 1.3 s here: the call took 3.3 s; the old code's 13.9 s)."""


class SlowLink:
    """A TCP relay on a free loopback port to ``port``: the client's bytes go on in pieces
    of :data:`LINK_PIECE` bytes, one per :data:`LINK_PAUSE` seconds (its receive buffer is
    small: the link holds little), the server's at once."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LINK_PIECE * 4)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port: int = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, name="slow-link", daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.sockets.append(client)
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                _shut(client)
                continue
            self.sockets.append(server)
            for args in ((client, server, LINK_PAUSE), (server, client, 0.0)):
                pump = threading.Thread(target=self._pump, args=args, name="slow-link", daemon=True)
                self.threads.append(pump)
                pump.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, pause: float) -> None:
        try:
            while data := source.recv(LINK_PIECE if pause else 1 << 16):
                sink.sendall(data)
                time.sleep(pause)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            _shut(source, sink)

    def drop_connections(self) -> None:
        """End every connection made so far (new ones still go through)."""
        _shut(*self.sockets)

    def close(self) -> None:
        """Stop listening, end every connection, wait for the relay's threads."""
        _shut(self.listener)  # wakes the accept (closing alone does not)
        self.listener.close()
        self.drop_connections()
        for thread in self.threads:
            thread.join(5)
        for sock in self.sockets:
            sock.close()


def _shut(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


@pytest.fixture(scope="module")
def https_fake(control: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    """A fake serving HTTPS: its port and the CA file that signed its certificate."""
    require_docker(control.IMAGE, "the Kubernetes fake tests")
    directory = tmp_path_factory.mktemp("tls")
    ca_path, ca_cert, ca_key = control.write_ca(directory, "cluster")
    cert, key = control.write_server_cert(directory, ca_cert, ca_key)
    fake = control.start_fake(str(directory), tls=(str(cert), str(key), str(ca_path)))
    try:
        yield fake.port, str(ca_path)
    finally:
        fake.stop()


@pytest.fixture(params=["http", "https"])
def slow_link(
    request: pytest.FixtureRequest, control: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[SlowLink, str]]:
    """A :class:`SlowLink` to a fake (HTTP: the session's; HTTPS: :func:`https_fake`) and a
    kubeconfig through it; websocket-client's sockets opened meanwhile get a
    :data:`CLIENT_SNDBUF` send buffer."""
    import websocket._http as ws_http

    if request.param == "https":
        port, ca_file = request.getfixturevalue("https_fake")
    else:
        port, ca_file = request.getfixturevalue("fake_apiserver").port, None
    sndbuf = (socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SNDBUF)
    monkeypatch.setattr(ws_http, "DEFAULT_SOCKET_OPTION", [*ws_http.DEFAULT_SOCKET_OPTION, sndbuf])
    link = SlowLink(port)
    kubeconfig = str(tmp_path / "kubeconfig")
    control.write_kubeconfig(kubeconfig, link.port, control.NAMESPACE, ca_file=ca_file)
    try:
        yield link, kubeconfig
    finally:
        link.close()


def test_a_stdin_write_over_a_slow_link_times_out_at_its_deadline(
    slow_link: tuple[SlowLink, str], make_env: Callable[..., Any]
) -> None:
    link, kubeconfig = slow_link
    env = make_env(kubeconfig=kubeconfig)
    env.exec("true").check()  # the pod and the session shell are up
    result = returned_within(
        HANG_BOUND,
        lambda: env.exec("cat >/dev/null; echo ran", stdin=os.urandom(STDIN_BYTES), timeout=TIMEOUT),
        link.drop_connections,  # the send then fails at once
    )
    assert (result.exit_code, result.timed_out, result.stdout) == (124, True, b""), result
    after = env.exec("echo back")
    assert (after.exit_code, after.stdout, after.recovered) == (0, b"back\n", RESTARTED_AFTER_KILL), after
