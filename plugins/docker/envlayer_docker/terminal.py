"""An interactive shell in the task's container over the daemon's attach socket, with a
tty (what ``docker exec -it`` does): the Docker backend's ``open_terminal``, used by
``envlayer shell``. The contract is that of
:class:`envlayer.local.terminal.PtyTerminal`.

docker-py: ``APIClient.exec_create(tty=True, stdin=True)``, ``exec_start(socket=True,
tty=True)`` (with a tty the stream is raw, not multiplexed), ``exec_resize`` and
``exec_inspect``'s ``ExitCode`` (docker/api/exec_api.py)."""

from __future__ import annotations

import socket
from typing import Any

from envlayer_docker.errors import translated
from envlayer_docker.runners import ExecTarget


class DockerTerminal:
    """``shell -i`` attached with a tty in ``target``'s container."""

    def __init__(self, target: ExecTarget, shell: str, environ: dict[str, str], rows: int, cols: int) -> None:
        self._api = target.api
        with translated("starting an interactive shell", target.options):
            self._id = self._api.exec_create(
                target.container.id,
                [shell, "-i"],
                stdin=True,
                tty=True,
                environment=environ,
                workdir=target.options.workdir,
                user=target.user or "",
            )["Id"]
            attached = self._api.exec_start(self._id, socket=True, tty=True)
        self._sock: socket.socket = getattr(attached, "_sock", attached)
        self.resize(rows, cols)

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self) -> bytes:
        try:
            return self._sock.recv(65536)
        except OSError:
            return b""

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def resize(self, rows: int, cols: int) -> None:
        self._api.exec_resize(self._id, height=rows, width=cols)

    def close(self) -> int:
        self._sock.close()
        code: Any = self._api.exec_inspect(self._id).get("ExitCode")
        return int(code) if code is not None else 1
