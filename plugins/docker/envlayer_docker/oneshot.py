"""One command in its own ``docker exec`` (isolation mode, and overflow for busy sessions).

The exec runs the command under the marker wrapper of :mod:`envlayer_docker.protocol`
with ``ENVLAYER_EXEC_ID`` in its initial environment, so the killer finds the whole tree.
stdin bytes are written to the exec socket from a helper thread and then half-closed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from envlayer.proctree import EXEC_ID_VAR
from envlayer_docker.protocol import FrameDemux, Outcome, OutputCallback, Reader, Trailer, oneshot_argv, oneshot_marker
from envlayer_docker.session import raw_socket


class OneShot:
    """A started one-shot exec. Create with :meth:`start`, then :meth:`read`."""

    def __init__(self, api: Any, exec_id: str, marker: str, attached: Any, writer: threading.Thread | None) -> None:
        self.api = api
        self.docker_exec_id = exec_id
        self.marker = marker
        self._attached = attached
        self.sock = raw_socket(attached)
        self._writer = writer

    @classmethod
    def start(
        cls,
        api: Any,
        container_id: str,
        command: str | Sequence[str],
        *,
        shell: str,
        exec_id: str,
        env: Mapping[str, str],
        user: str | None,
        cwd: str,
        stdin: bytes | None,
        touch_lease: bool,
    ) -> OneShot:
        """Create and start the exec. Raises docker-py errors (the command did not start)."""
        seed, marker = oneshot_marker()
        environment = dict(env)
        environment[EXEC_ID_VAR] = exec_id
        argv = oneshot_argv(shell, command, seed=seed, cwd=cwd, touch_lease=touch_lease)
        eid = api.exec_create(
            container_id,
            argv,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            environment=environment,
            workdir="/",
            user=user or "",
        )["Id"]
        attached = api.exec_start(eid, socket=True)
        sock = raw_socket(attached)
        sock.setblocking(True)
        writer = None
        if stdin is not None:
            writer = threading.Thread(target=_feed, args=(sock, stdin), name="envlayer-docker-stdin", daemon=True)
            writer.start()
        return cls(api, eid, marker, attached, writer)

    def read(
        self, *, deadline: float | None, limit: int | None, policy: str, on_output: OutputCallback | None
    ) -> tuple[str, Reader, Trailer | None]:
        """Read to the end: (outcome, reader, trailer-or-None). See ``ShellSession.run``."""
        reader = Reader(self.sock, FrameDemux(), self.marker.encode(), limit=limit, policy=policy, on_output=on_output)
        outcome = reader.read(deadline)
        return outcome, reader, reader.trailer() if outcome == Outcome.DONE else None

    def exit_code(self, wait: float = 2.0) -> int | None:
        """The exec's exit status once it ended (after EOF), or ``None`` if unknown."""
        end = time.monotonic() + wait
        while True:
            try:
                info = self.api.exec_inspect(self.docker_exec_id)
            except Exception:
                return None
            if not info.get("Running"):
                return info.get("ExitCode")
            if time.monotonic() >= end:
                return None
            time.sleep(0.01)

    def close(self) -> None:
        """Close the stream (does not kill the process: use the killer for that)."""
        for closer in (self.sock.close, self._attached.close):
            try:
                closer()
            except OSError:
                pass
        if self._writer is not None:
            self._writer.join(timeout=1.0)


def _feed(sock: socket.socket, data: bytes) -> None:
    try:
        if data:
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
