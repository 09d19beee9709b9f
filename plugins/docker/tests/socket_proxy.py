"""A byte-for-byte proxy from a unix socket to the Docker daemon's socket, run as its own
process so a test can kill it (SIGKILL closes every proxied connection at once), the way
a daemon that vanishes mid-command looks to a client.

    python socket_proxy.py LISTEN_PATH TARGET_PATH      # prints "ready" when listening
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 20):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def main(listen: str, target: str) -> None:
    if os.path.exists(listen):
        os.unlink(listen)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen)
    server.listen(64)
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(target)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
