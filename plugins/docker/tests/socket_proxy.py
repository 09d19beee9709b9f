"""A byte-for-byte proxy from a unix socket to the Docker daemon's socket, run as its own
process so a test can kill it (SIGKILL closes every proxied connection at once), the way
a daemon that vanishes mid-command looks to a client.

    python socket_proxy.py LISTEN_PATH TARGET_PATH [SECONDS PATTERN]   # prints "ready" when listening

With SECONDS and PATTERN (a regular expression), each request whose request line matches
PATTERN (say ``POST /v1.47/commit?...``) reaches the daemon SECONDS late, so its answer
comes that much later, the way a daemon busy with a slow request looks to a client; the
request line is printed to stderr (``delayed <line>``) when the wait starts. A request
line is recognised at the start of what a client sends at once (a client sends its next
request on a connection only after the answer to the previous one).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time


def _pump(src: socket.socket, dst: socket.socket, delay: float = 0.0, pattern: re.Pattern[bytes] | None = None) -> None:
    try:
        while data := src.recv(1 << 20):
            if pattern is not None and pattern.match(data):
                print("delayed", data.split(b"\r\n", 1)[0].decode(errors="replace"), file=sys.stderr, flush=True)
                time.sleep(delay)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def main(listen: str, target: str, delay: float = 0.0, pattern: re.Pattern[bytes] | None = None) -> None:
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
        threading.Thread(target=_pump, args=(client, upstream, delay, pattern), daemon=True).start()
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    if len(sys.argv) == 5:
        main(sys.argv[1], sys.argv[2], float(sys.argv[3]), re.compile(sys.argv[4].encode()))
    else:
        main(sys.argv[1], sys.argv[2])
