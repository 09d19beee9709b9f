"""Tar streams in and out of a container (the ``archive_stream`` capability): ``tar`` run
in an exec as the container's user, its stdin or stdout carried chunk by chunk over the
attached stream, so a transfer of any size holds about one chunk in memory.

An exec (not the daemon's archive API) because it sees what the container's processes
see: tmpfs mounts such as ``/tmp``, the user's own rights, and pseudo-filesystems
(``/proc``, ``/sys``) that refuse writes, where the archive API writes into the image's
directory under the mount and reports success. Needs ``tar`` (GNU or busybox) in the image.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from envlayer.errors import SandboxFileNotFound
from envlayer_docker.files import _DENIED, _exec_failure
from envlayer_docker.transport import AttachStream

_WAIT_EXIT = 30.0
"""Seconds to wait for the daemon to report the exit code of a ``tar`` whose output ended."""
_KEEP_STDERR = 4096
_MISSING = 20

PUT_SCRIPT = (
    f'[ -d "$1" ] || exit {_MISSING}; cd -- "$1" || exit {_DENIED}; '
    "exec tar -x -o -f -"  # -o: extracted files belong to the container's user (GNU and busybox)
)
GET_SCRIPT = (
    f'[ -e "$1" ] || exit {_MISSING}; [ -r "$1" ] || exit {_DENIED}; '
    'p=$(readlink -f -- "$1") || exit 22; cd -- "${p%/*}/" || exit 24; exec tar -c -f - -- "${p##*/}"'
)
"""Follows a final symlink (the file it names is copied, as ``read_file`` reads it)."""

Starter = Callable[[list[str]], AttachStream]
"""Starts ``argv`` in an attached exec with stdin open (recovering a vanished container)."""


def put_stream(start: Starter, remote_dir: str, chunks: Iterable[bytes]) -> None:
    """Unpack the tar in ``chunks`` under ``remote_dir`` (see
    :class:`envlayer.transfer.SupportsArchiveStream`). An exception raised by ``chunks``
    ends the exec (``tar`` sees a cut archive) and is raised here."""
    stream = start(["sh", "-c", PUT_SCRIPT, "envlayer-put", remote_dir])
    failure: list[BaseException] = []

    def feed() -> None:
        try:
            for chunk in chunks:
                stream.write(chunk)
        except OSError:
            pass  # tar exited (its exit code and stderr say why)
        except BaseException as exc:
            failure.append(exc)
            stream.close()
            return
        stream.end_input()

    writer = threading.Thread(target=feed, name="envlayer-docker-put-archive", daemon=True)
    writer.start()
    try:
        err = _drain(stream)
        writer.join()
        if failure:
            raise failure[0]
        code = stream.exit_status(_WAIT_EXIT)
    finally:
        stream.close()
        writer.join(1.0)
    _check(code, err, remote_dir, "unpack into")


def get_stream(start: Starter, remote: str) -> Iterator[bytes]:
    """A tar of ``remote`` as it is read (see :class:`envlayer.transfer.SupportsArchiveStream`)."""
    stream = start(["sh", "-c", GET_SCRIPT, "envlayer-get", remote])
    try:
        err = bytearray()
        while (chunks := stream.read(None)) is not None:
            for name, data in chunks:
                if name == "stdout":
                    yield data
                elif len(err) < _KEEP_STDERR:
                    err += data
        code = stream.exit_status(_WAIT_EXIT)
    finally:
        stream.close()
    _check(code, bytes(err), remote, "pack")


def _drain(stream: AttachStream) -> bytes:
    """Read ``stream`` to its end; the start of its stderr (its stdout is dropped)."""
    err = bytearray()
    while (chunks := stream.read(None)) is not None:
        for name, data in chunks:
            if name == "stderr" and len(err) < _KEEP_STDERR:
                err += data
    return bytes(err)


def _check(code: int | None, err: bytes, path: str, operation: str) -> None:
    """Raise the error for the script's exit ``code`` (none for 0)."""
    if code == 0:
        return
    if code == _MISSING:
        raise SandboxFileNotFound(path)
    raise _exec_failure(255 if code is None else code, err, path, operation)
