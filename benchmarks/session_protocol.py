"""The session's own shell protocol driven by a minimal client: what the shell side of a
session call costs without envlayer's Python (shared by the session latency benchmarks)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from envlayer.execution.shell_script import call_script, init_script, marker_of, new_seed


def protocol_call(send: Callable[[bytes], object], recv: Callable[[], bytes]) -> Callable[[], None]:
    """Set a fresh shell up with :func:`init_script` (sent through ``send`` now) and return
    one call: a :func:`call_script` of ``true``, then ``recv`` (what either stream brought,
    frames not parsed) until the call's marker came three times (twice around the stdout
    trailer, once on stderr)."""
    send(init_script(session_id=uuid.uuid4().hex[:12], start_dir=None))

    def call() -> None:
        seed = new_seed()
        marker = marker_of(seed)
        send(call_script("true", seed=seed, exec_id=uuid.uuid4().hex))
        buf = b""
        while buf.count(marker) < 3:
            chunk = recv()
            if not chunk:
                raise EOFError("the protocol shell closed its output")
            buf += chunk

    return call
