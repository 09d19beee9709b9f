"""Keepalive pings of a long-lived exec websocket (the session shell's), and the bookkeeping
that tells a live connection from one a load balancer or NAT dropped without a word.

An idle TCP connection through a cloud load balancer or NAT is forgotten after minutes
(AWS NLB: 350 s, GCP: 600 s; often less behind proxies), usually silently: no FIN, no
RST, so a read on it waits forever. A websocket ping every :data:`PING_EVERY` seconds
keeps such idle timers from firing; the API server answers each ping with a pong
(RFC 6455 section 5.5.2; the API server's websocket code, golang.org/x/net/websocket,
answers pings itself). A ping that stays unanswered for ``answer_within`` seconds while
the connection is being read means the connection is gone.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

PING_EVERY = 30.0
"""Seconds between keepalive pings of an idle session websocket."""
ANSWER_WITHIN = 10.0
"""Seconds a pong may take (capped by ``api_timeout``)."""
_AFTER = 0.01
"""How long after a ping's answer time a read wakes to find it overdue."""


class Keepalive:
    """Pings sent through ``send_ping`` (thread-safe: websocket-client locks its sends)
    from a daemon thread every ``every`` seconds, and the answer to the latest one."""

    def __init__(self, send_ping: Callable[[bytes], None], *, every: float, answer_within: float) -> None:
        self._send_ping = send_ping
        self.every = every
        self.answer_within = answer_within
        self._unanswered: tuple[bytes, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the ping thread (it ends with :meth:`stop` or when a send fails)."""
        self._thread = threading.Thread(target=self._loop, name="envlayer-k8s-keepalive", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            if not self.ping():
                return

    def ping(self) -> bool:
        """Send a ping now; False when the connection refused it (closed or broken)."""
        token = uuid.uuid4().hex.encode()
        earlier = self._unanswered
        # a ping that follows an unanswered one keeps the earlier's time: the wait is counted
        # from the first ping the connection left unanswered
        self._unanswered = (token, earlier[1] if earlier is not None else time.monotonic())
        try:
            self._send_ping(token)
        except Exception:
            return False
        return True

    def heard_pong(self, payload: bytes) -> None:
        """A pong came: when it answers the latest ping, every ping is answered."""
        unanswered = self._unanswered
        if unanswered is not None and payload == unanswered[0]:
            self._unanswered = None

    @property
    def waiting(self) -> bool:
        """A ping is still unanswered."""
        return self._unanswered is not None

    def overdue(self) -> bool:
        """The latest ping has waited more than ``answer_within`` seconds for its pong.
        Only meaningful after every frame already received was read."""
        unanswered = self._unanswered
        return unanswered is not None and time.monotonic() - unanswered[1] > self.answer_within

    def until_overdue(self) -> float:
        """Seconds a read may wait before :meth:`overdue` can turn true: until the latest
        unanswered ping's answer time ends (a hair after, as overdue is strictly later), or
        ``answer_within`` when no ping waits (one sent later cannot be overdue sooner)."""
        unanswered = self._unanswered
        if unanswered is None:
            return self.answer_within
        return max(unanswered[1] + self.answer_within - time.monotonic(), 0.0) + _AFTER

    def stop(self) -> None:
        """Stop pinging (never raises)."""
        self._stop.set()
