"""Directory upload as one tar stream over one SSH channel, when the remote has ``tar``.

Copying tens of thousands of small files over SFTP costs a round trip or more per file;
one ``tar -x`` fed by a streamed archive costs about one. :func:`upload` sends what
:meth:`envlayer_ssh.files.RemoteFiles.upload_dir` collected (directories and regular
files, with exactly their permission bits; owned by the login user) and raises on any failure
the remote ``tar`` reports. :func:`remote_tar` says whether the remote has a usable
``tar`` (GNU tar gets ``--no-overwrite-dir``, so existing directories keep their modes).
"""

from __future__ import annotations

import shlex
import tarfile
import time
from typing import TYPE_CHECKING

from envlayer.errors import BackendUnavailable, SandboxPermissionDenied
from envlayer_ssh.channel_io import exit_code, run_simple, send_eof

if TYPE_CHECKING:
    import paramiko

    from envlayer_ssh.pool import TargetPool

PROBE = "command -v tar >/dev/null 2>&1 || exit 3; tar --version 2>/dev/null | head -n 1"
_SEND_CHUNK = 262144
_FINISH_TIMEOUT = 600.0


def remote_tar(pool: TargetPool) -> str | None:
    """``"gnu"``, ``"other"`` or ``None`` (no tar) for the remote login shell."""
    code, out, _ = run_simple(pool, PROBE, timeout=30)
    if code != 0:
        return None
    return "gnu" if b"GNU tar" in out else "other"


class _ChannelWriter:
    """A write-only file object that sends to an SSH channel (for ``tarfile`` ``w|``)."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), _SEND_CHUNK):
            self.channel.sendall(view[start : start + _SEND_CHUNK])
        return len(data)


def upload(
    pool: TargetPool, flavour: str, remote: str, dirs: list[tuple[str, str]], files: list[tuple[str, str]]
) -> None:
    """Extract one streamed archive into ``remote`` (created if missing). ``dirs`` and
    ``files`` are ``(local path, path relative to remote)`` pairs. Raises
    :class:`SandboxPermissionDenied` when the remote refuses to write, and
    :class:`BackendUnavailable` for any other failure of the remote ``tar``."""
    keep_dirs = " --no-overwrite-dir" if flavour == "gnu" else ""
    q = shlex.quote(remote)
    # umask 0 for tar only: members get exactly the archived permission bits
    line = f"mkdir -p -- {q} && umask 0 && tar -x -f - -C {q}{keep_dirs}"
    lease = pool.open()
    try:
        channel = lease.channel
        channel.exec_command(line)
        with tarfile.open(fileobj=_ChannelWriter(channel), mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for local, rel in dirs + files:
                info = tar.gettarinfo(local, arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isdir():
                    tar.addfile(info)
                else:
                    with open(local, "rb") as fh:
                        tar.addfile(info, fh)
        send_eof(channel)
        err = bytearray()
        deadline = time.monotonic() + _FINISH_TIMEOUT
        while not channel.exit_status_ready() and time.monotonic() < deadline:
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            channel.status_event.wait(0.05)
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        code = exit_code(channel)
    finally:
        lease.release()
    if code != 0:
        text = err.decode(errors="replace").strip()
        if "Permission denied" in text:
            raise SandboxPermissionDenied(remote, "upload into", "files before the refused one may have been written")
        raise BackendUnavailable(
            f"tar on the remote failed uploading into {remote} (exit {code}): {text[:300]}",
            hint="check free space and permissions there; nothing is rolled back",
        )
