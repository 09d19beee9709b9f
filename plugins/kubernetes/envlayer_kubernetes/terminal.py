"""An interactive shell in the pod with a tty (what ``kubectl exec -it`` does): the
Kubernetes backend's ``open_terminal``, used by ``envlayer shell``. The contract is that
of :class:`envlayer.local.terminal.PtyTerminal`.

The exec subresource with ``tty=true, stdin=true`` (see
:meth:`envlayer_kubernetes.channel.ExecChannel.open`): output comes on channel 1, a
window size goes on channel 4 (``resize``) as client-go's ``remotecommand.TerminalSize``
JSON, ``{"Width": cols, "Height": rows}``, which kubelet decodes one object after another
(kubelet's cri/streaming/remotecommand/httpstream.go ``handleResizeEvents``; the channel
numbers are its websocket.go's), and the exit status is the channel-3 ``Status``.

The websocket's output is copied into a pipe (:class:`~envlayer.sandbox.piped_output.PipedOutput`),
so ``fileno`` is a plain pipe that ``select`` sees even when TLS holds decrypted bytes the
socket does not show.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from envlayer.sandbox.piped_output import PipedOutput
from envlayer_kubernetes import sdk
from envlayer_kubernetes.channel import ExecChannel

RESIZE = 4
NO_EXIT_STATUS = 255
"""The exit status when the stream ended without one (the pod or the connection was lost)."""


class KubernetesTerminal(PipedOutput):
    """The process on ``channel`` (opened with ``tty=True, stdin=True``), sized
    ``rows`` x ``cols``."""

    def __init__(self, channel: ExecChannel, rows: int, cols: int) -> None:
        self._channel = channel
        super().__init__(self._output(), name="envlayer-k8s-terminal")
        self.resize(rows, cols)

    def _output(self) -> Iterator[bytes]:
        while (chunks := self._channel.read(None)) is not None:
            for _, data in chunks:
                yield data

    def write(self, data: bytes) -> None:
        self._channel.write(data)

    def resize(self, rows: int, cols: int) -> None:
        message = bytes([RESIZE]) + json.dumps({"Width": cols, "Height": rows}).encode()
        try:
            self._channel.sock.send(message, opcode=sdk.websocket.ABNF.OPCODE_BINARY)
        except sdk.websocket.WebSocketException:
            pass  # the stream ended: the next read reports it

    def close(self) -> int:
        """The shell's exit status (from the status channel once the stream ended), after
        which the websocket and the pipe are closed."""
        self._channel.close()
        super().close()
        code = self._channel.exit_code()
        return NO_EXIT_STATUS if code is None else code
