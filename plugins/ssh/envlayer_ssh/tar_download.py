"""Directory download's file contents as tar streams over SSH channels, when the remote
has ``tar``.

:meth:`envlayer_ssh.files.RemoteFiles.download_dir` lists the tree over SFTP first (its
directories and regular files, every size checked against the cap before anything is
written); fetching each file over SFTP then costs round trips per file. :func:`fetch`
asks the remote ``tar`` for exactly the listed regular files instead, in as few archives
as fit a command line, and writes each member the list names as it arrives (bounded
memory). A member the list does not name, or that is not a regular file, is skipped; a
file the remote could not pack (removed or made unreadable meanwhile; ``tar``'s messages
are dropped, so they can never fill the channel) is not written, and the caller fetches it
over SFTP, which raises what is wrong.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import tarfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envlayer_ssh.channel_io import send_eof

if TYPE_CHECKING:
    from envlayer_ssh.pool import TargetPool

log = logging.getLogger("envlayer.ssh")

LINE_MAX = 100_000
"""Bytes of one remote command line at most: the server's shell gets it as one argument
of ``sh -c``, and Linux takes at most 128 KiB in one argument (``MAX_ARG_STRLEN``)."""


def batches(names: list[str], prefix: str) -> Iterator[list[str]]:
    """``names`` in runs whose quoted command line (after ``prefix``) stays within
    :data:`LINE_MAX` bytes (UTF-8, as it is sent); a name too long for any line is left
    out (the caller uses SFTP)."""
    batch: list[str] = []
    start = size = len(prefix.encode("utf-8", "surrogateescape"))
    for name in names:
        quoted = len(shlex.quote(name).encode("utf-8", "surrogateescape")) + 1
        if start + quoted > LINE_MAX:
            continue
        if size + quoted > LINE_MAX:
            yield batch
            batch, size = [], start
        batch.append(name)
        size += quoted
    if batch:
        yield batch


def fetch(pool: TargetPool, remote: str, files: dict[str, str]) -> set[str]:
    """Write each of ``files`` (path relative to ``remote`` -> local path) from tar
    streams of the remote directory ``remote``; the relative paths written. Raises what
    the connection raises (the caller's retry on a new connection covers a lost one)."""
    prefix = f"cd -- {shlex.quote(remote)} && exec tar -c -f - 2>/dev/null --"
    written: set[str] = set()
    for batch in batches(sorted(files), prefix):
        written |= _fetch_batch(pool, prefix + " " + " ".join(shlex.quote(n) for n in batch), files)
    return written


def _fetch_batch(pool: TargetPool, line: str, files: dict[str, str]) -> set[str]:
    """One archive's members written (see :func:`fetch`); a stream that ends early or is
    no archive ends the batch (what it brought whole is kept)."""
    written: set[str] = set()
    lease = pool.open()
    try:
        channel = lease.channel
        channel.exec_command(line)
        send_eof(channel)
        try:
            with channel.makefile("rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    target = files.get(member.name)
                    source = tar.extractfile(member) if target is not None and member.isreg() else None
                    if source is None:
                        continue
                    with open(target, "wb") as out:
                        shutil.copyfileobj(source, out)
                    written.add(member.name)
        except tarfile.TarError as exc:
            log.debug("ssh: the tar stream of %r ended early (%s); SFTP takes the rest", line[:200], exc)
    finally:
        lease.release()
    return written
