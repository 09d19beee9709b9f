"""File calls of a sandbox backend, once: ``read_file``/``write_file`` of
:class:`~envlayer.sandbox.base.SandboxEnvironment` over a small files interface.

The base owns, for every backend built on it:

* the path: relative to the backend's :meth:`file_directory`, confined to
  ``options.file_root`` lexically (:meth:`~envlayer.environment.Environment.resolve_path`)
  and against symlinks in the sandbox (:mod:`envlayer.sandbox.paths`);
* the caps: ``max_file_bytes`` on both directions (:class:`FileTooLarge`; a write moves
  no byte first, a read through the session at most one byte over the cap);
* the session path: where the backend has a persistent session shell
  (:attr:`session_file_max` > 0) and it is free, a file of up to that many bytes (a read
  also within ``max_output_bytes``) travels as one envlayer script in a subshell of the
  session (:class:`~envlayer.request.ScriptRequest`: parsed once, no
  ``eval``; nothing of the session's state used or changed, ``set -e`` included). A
  write of up to :data:`~envlayer.execution.shell_script.PRINTF_SMALL` bytes carries them in the script as a ``printf``
  format; a larger one sends them raw behind it, taken by ``head -c`` (any byte, NUL
  too; no encoding, no parsing). A read runs one program, ``head -c`` of at most one
  byte more than may come this way, and prints the count it read on stderr behind the
  call's mark: its bytes are taken only when they match it. The scripts check with the
  sandbox user's rights (``test -r``/``-w``, as that user), resolve symlinks for
  ``file_root`` themselves (the same round trip), and replace a file atomically
  (:func:`write_script`), keeping its mode;
* the fallback: a larger file, a session that is busy (a command is running in it) or
  absent, a sandbox without ``head`` for a raw write, a read whose count did not match
  (a background job wrote to the session's stdout meanwhile; its bytes are dropped): the
  backend's transport moves the file (:meth:`fetch_file` / :meth:`store_file`: one exec
  with the same scripts, :func:`read_by_helper` / :func:`write_by_helper`, or an SDK
  upload or download). Each fallback is logged at debug level on ``envlayer.files`` with
  its reason; a shell that could not take a write's bytes (it ended itself unread, and
  the next command's result says it was restarted) at warning level.

The rule for a directory: ``write_file`` names the file to write, never a directory (the
call has no source name to put inside it): a path that is an existing directory raises
:class:`SandboxIsADirectory` and nothing is written (``envlayer cp FILE TASK:DIR/`` copies
into a directory under the file's own name).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import posixpath
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlayer.errors import (
    FileTooLarge,
    SandboxFileError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
    SandboxPermissionDenied,
)
from envlayer.execution.shell_script import INPUT_LOST, PRINTF_SMALL, printf_format, quote
from envlayer.request import ExecRequest, ScriptRequest, file_payload
from envlayer.result import ExecResult
from envlayer.sandbox.archive import safe_extract
from envlayer.sandbox.paths import CONFINE as _CONFINE
from envlayer.sandbox.paths import OUTSIDE, Helper, check_real_path
from envlayer.transfer import TransferSummary

if TYPE_CHECKING:
    from envlayer.sandbox.base import SandboxEnvironment

log = logging.getLogger("envlayer.files")

SESSION_FILE_MAX = 1_048_576
"""The session path's default size limit (bytes) for a backend that has one."""

SESSION_FILE_TIMEOUT = 300.0
"""Seconds one file command may take in the session (a FIFO named as a file would block)."""

NOT_FOUND, IS_DIR, FAILED, TOO_LARGE, DENIED, USE_TRANSPORT, USE_SUBSHELL = 20, 21, 22, 23, 24, 26, 27
"""Exit codes of the session scripts (and :data:`~envlayer.sandbox.paths.OUTSIDE`)."""


def _unsearchable_parent(leave: str) -> str:
    """Shell: ``leave`` (``exit`` or ``return``) :data:`DENIED` when the directory of ``$1``
    exists but cannot be searched (so ``$1`` only looks missing)."""
    return f'p=${{1%/*}}; [ -n "$p" ] && [ -d "$p" ] && [ ! -x "$p" ] && {leave} {DENIED};'


READ_SCRIPT = (
    _CONFINE + f'[ -d "$1" ] && exit {IS_DIR}; [ -e "$1" ] || {{ {_unsearchable_parent("exit")} exit {NOT_FOUND}; }}; '
    f'[ -r "$1" ] || exit {DENIED}; exec 3< "$1" || exit {DENIED}; f=/dev/fd/3; [ -r "$f" ] || f=$1; '
    f's=$(command wc -c < "$f") || exit {FAILED}; s=$((s)); '
    f'[ "$s" -le "$3" ] || {{ echo "$s" >&2; exit {TOO_LARGE}; }}; [ "$s" -le "$4" ] || exit {USE_TRANSPORT}; '
    'command cat -- "$f" && printf "%s %s\\n" "$5" "$s" >&2'
)
"""Shell: ``$1`` path, ``$2`` file root ('' for none), ``$3`` the cap, ``$4`` the most that
may come this way, ``$5`` the call's random mark. The file is opened once (fd 3) and both
its size and its bytes are taken from that open file (``/dev/fd/3``, where there is one),
so a file replaced meanwhile is never read half old, half new. Prints the bytes on stdout,
then ``mark size`` on stderr (so stdout holds nothing but the file, and fits the session's
output cap exactly).
Every outside program is named through ``command`` (a function or alias of the session
never stands in for it)."""


@functools.cache
def session_read_script(*, in_shell: bool = False) -> str:
    """Shell that reads a file through the session: ``$1`` path, ``$2`` file root ('' for
    none), ``$3`` the most bytes to send (one more than may come this way), ``$4`` the
    call's random mark. One program runs (``head``, on the file opened once as fd 3 of a
    group, which the shell restores after it): the bytes it read are the offset fd 3 has
    after it (``/proc/self/fdinfo/3``, read by the shell itself; without ``/proc``,
    ``wc -c``), which is the file's size when the file fit. Prints the bytes on stdout,
    then ``mark count`` on stderr.

    ``in_shell``: the body of a function run in the session shell itself
    (:func:`in_shell_call`, with ``local s k v p``): it returns instead of exiting and has
    no file root. Made once per form (every session read sends it)."""
    leave = "return" if in_shell else "exit"
    return (
        ("" if in_shell else _CONFINE)
        + f'[ -d "$1" ] && {leave} {IS_DIR}; [ -e "$1" ] || {{ {_unsearchable_parent(leave)} {leave} {NOT_FOUND}; }}; '
        f'[ -r "$1" ] || {leave} {DENIED}; {{ command head -c "$3" <&3 || {leave} {FAILED}; '
        's=; { while read -r k v; do [ "$k" = pos: ] && s=$v && break; done; } 2>/dev/null </proc/self/fdinfo/3; '
        f':; }} 3< "$1" || {leave} {DENIED}; '
        f'[ -n "$s" ] || s=$(command wc -c < "$1") || {leave} {FAILED}; printf "%s %s\\n" "$4" "$s" >&2'
    )


_LOST = f"[ $e -ne {INPUT_LOST} ] || exit {INPUT_LOST}; "
"""Shell, after ``e=$?`` of a fill: pass on that the session's raw input was not taken."""


def write_script(fill: str, *, in_shell: bool = False) -> str:
    """Shell that writes a file: ``$1`` path, ``$2`` file root ('' for none), ``$3`` a random
    word for the temp file's name; ``fill`` is the text before a file name that writes the
    data into it (``command cat >|``, ``printf '...' >|``, ``__el_take`` for a session
    call's raw input: its :data:`INPUT_LOST` is passed on). A symlink is followed to the file
    it names; the file is replaced by a rename from a temp file in its directory, removed
    again when the write fails or is killed. When the directory is not writable but the
    file is, the file is rewritten in place.

    The temp file takes the old file's mode and owner (:data:`_KEEP_MODE`) and is renamed
    over it (:data:`_RENAME`), each step by the cheaper of two programs where the sandbox
    has it: a program started costs more than all the rest of a small write (on the test
    machine 0.6 ms for one that loads only the C library, 1 ms for GNU ``cp`` or ``mv``).

    ``in_shell``: the body of a function run in the session shell itself
    (:func:`in_shell_call`, with ``local t d u f e``): it returns instead of exiting, has no file root, sets no
    trap (the client removes the temp file after an interruption) and returns
    :data:`USE_SUBSHELL` for a symlink (whose temp file the client could not name)."""
    leave = "return" if in_shell else "exit"
    lost = f"[ $e -ne {INPUT_LOST} ] || {leave} {INPUT_LOST}; "
    follow = (
        f'[ -L "$1" ] && {leave} {USE_SUBSHELL}; '
        if in_shell
        else f'[ -L "$1" ] && {{ f=$(command readlink -f -- "$1") || exit {FAILED}; set -- "$f" "$2" "$3"; }}; '
    )
    trap = "" if in_shell else "trap 'command rm -f -- \"$t\"; exit 143' HUP INT TERM; "
    return (
        ("" if in_shell else _CONFINE) + f'[ -d "$1" ] && {leave} {IS_DIR}; {follow}'
        f'd=${{1%/*}}; d=${{d:-/}}; [ -d "$d" ] || command mkdir -p -- "$d" || {leave} {FAILED}; '
        f'if [ -e "$1" ]; then [ -w "$1" ] || {leave} {DENIED}; else [ -w "$d" ] || {leave} {DENIED}; fi; '
        f'if [ -w "$d" ]; then t="$d/.envlayer-$3.tmp"; {trap}'
        "if command -v rename.ul >/dev/null; then u=rename.ul; else u=; fi; "
        f'[ -e "$1" ] && {{ {_KEEP_MODE}; }}; '
        f'[ -e "$t" ] || {{ command : >| "$t"; }} 2>/dev/null || {leave} {FAILED}; '
        f'{{ {fill} "$t" && {_RENAME}; }} || '
        f'{{ e=$?; command rm -f -- "$t"; {lost}{leave} {FAILED}; }}; '
        f'else {fill} "$1" || {{ e=$?; {lost}{leave} {FAILED}; }}; fi'
    )


def in_shell_call(local: str, body: str, args: list[str]) -> str:
    """Shell for a :class:`ScriptRequest` with ``in_shell``: ``body`` (the ``in_shell``
    form of :func:`write_script` or :func:`session_read_script`) as a function whose
    variables ``local`` names are local (:data:`USE_SUBSHELL` where a shell has no
    ``local``), called with ``args`` under ``set +eu``, then removed, the options ``e`` and
    ``u`` restored (``set -x`` is off between calls), and its status returned
    (``__el_took``, which passes on :data:`INPUT_LOST`). The function's name and two
    ``__el_fc*`` variables are the session's own."""
    return (
        f"__el_fc() {{ local {local} 2>/dev/null || return {USE_SUBSHELL}; {body}\n}}; "
        f"__el_fco=$-; set +eu; __el_fc {' '.join(quote(a) for a in args)}; __el_fcr=$?; unset -f __el_fc; "
        "case $__el_fco in *e*) set -e;; esac; case $__el_fco in *u*) set -u;; esac; "
        '__el_took "$__el_fcr"'
    )


_KEEP_MODE = (
    '[ "$u" ] && [ -O "$1" ] && [ -G "$1" ] && [ ! -g "$d" ] && { command : >| "$t"; } 2>/dev/null && '
    'command chmod --reference="$1" -- "$t" 2>/dev/null || command cp -p -- "$1" "$t" 2>/dev/null'
)
"""Shell: the temp file ``$t`` made with the mode and owner of the existing file ``$1``.
Where util-linux's ``rename.ul`` is (``$u`` set: Debian and Ubuntu, whose ``chmod`` is
GNU's) and a new file would get the owner and group ``$1`` has (it is the user's and of the
user's group, and its directory ``$d`` does not give new files its own group), the shell
creates ``$t`` and ``chmod --reference`` copies the mode (one program that loads only the
C library); otherwise ``cp -p``, which also keeps another user's ownership (as root) and
an access control list (which the chmod path does not copy)."""

_RENAME = 'if [ "$u" ]; then command rename.ul -- "$t" "$1" "$t"; else command mv -f -- "$t" "$1"; fi'
"""Shell: ``$t`` renamed over ``$1`` (one ``rename``, atomic): by ``rename.ul`` where it is
(``$u`` set; it loads only the C library), else by ``mv -f`` (GNU's also loads the SELinux
and ACL libraries: 0.3 ms more per write on the test machine). ``rename.ul FROM TO FILE``
renames FILE to FILE with its first FROM replaced by TO: here the whole path."""


def write_from_staged(helper: Helper, full: str, staged: str) -> None:
    """Create or atomically replace the file at ``full`` with the content of the file
    ``staged`` (which a backend's upload left in the sandbox, then removed here whatever
    happens), by one helper command with the session script's checks and errors: for a
    backend whose upload writes in place and whose helper takes no stdin."""
    fill = 'command cat -- "$4" >|'
    script = f'( {write_script(fill)} ); rc=$?; command rm -f -- "$4"; exit $rc'
    code, out, err = helper(["sh", "-c", script, "envlayer-write", full, "", uuid.uuid4().hex, staged], None)
    _raise_for(code, err or out, full, full, None, 0, "write")


def _script(body: str, args: list[str]) -> str:
    """``body`` with ``args`` as ``$1``..., and ``set -e``/``-u`` of the session off (it runs
    in a subshell of the session: see :class:`ScriptRequest`; ``set -x`` is off between a
    session's calls)."""
    return f"set +eu -- {' '.join(quote(a) for a in args)}; {body}"


def read_by_helper(helper: Helper, full: str, limit: int) -> bytes:
    """The file at ``full`` read by one helper command (a backend's exec-based transport),
    with the session script's checks and errors."""
    mark = f"ENVLAYER-FILE-{uuid.uuid4().hex}"
    code, out, err = helper(["sh", "-c", READ_SCRIPT, "envlayer-read", full, "", str(limit), str(limit), mark], None)
    _raise_for(code, err, full, full, None, limit, "read")
    data = _unframe(out, err, mark.encode())
    if data is None:
        raise SandboxFileError(full, "read", "the file changed while it was read")
    return data


def write_by_helper(helper: Helper, full: str, data: bytes) -> None:
    """Create or atomically replace the file at ``full`` by one helper command (a
    backend's exec-based transport) with ``data`` on its stdin, with the session
    script's checks and errors."""
    script = write_script("command cat >|")
    code, _, err = helper(["sh", "-c", script, "envlayer-write", full, "", uuid.uuid4().hex], data)
    _raise_for(code, err, full, full, None, len(data), "write")


def file_root_of(env: SandboxEnvironment, workdir: str) -> str | None:
    """The absolute ``file_root`` (None when unset)."""
    root = env.options.file_root
    return None if root is None else posixpath.normpath(posixpath.join(workdir, root))


def read_file(env: SandboxEnvironment, path: str) -> bytes:
    """``env.read_file(path)``: see the module docstring."""
    env._ensure_open()
    workdir = env.file_directory()
    full = env.resolve_path(path, workdir)
    root = file_root_of(env, workdir)
    limit = env.options.max_file_bytes
    data = _read_in_session(env, path, full, root, limit)
    if data is not None:
        return data
    if root is not None:
        check_real_path(env.file_helper, path, full, root)
    return env.fetch_file(full, limit)


def write_file(env: SandboxEnvironment, path: str, data: bytes | str) -> None:
    """``env.write_file(path, data)``: see the module docstring."""
    env._ensure_open()
    payload = file_payload(path, data, env.options.max_file_bytes)
    workdir = env.file_directory()
    full = env.resolve_path(path, workdir)
    root = file_root_of(env, workdir)
    if _write_in_session(env, path, full, root, payload):
        return
    if root is not None:
        check_real_path(env.file_helper, path, full, root)
    env.store_file(full, payload)


def _session_limit(env: SandboxEnvironment) -> int:
    """Bytes a file may have to travel through the session (0: never): the backend's
    :attr:`session_file_max`, within the output cap a session command's result has."""
    return min(env.session_file_max, env.options.max_output_bytes)


def _in_session(env: SandboxEnvironment, request: ExecRequest, what: str) -> ExecResult | None:
    """Run ``request`` in the session when the backend has one and it is free; None
    (logged at debug level) when the caller must use the transport instead."""
    lock = env.session_lock()
    if lock is None:
        log.debug("%s: no session shell; using the %s backend's file transport", what, env.name)
        return None
    if not lock.acquire(blocking=False):
        log.debug("%s: the session shell is busy; using the %s backend's file transport", what, env.name)
        return None
    try:
        return env.run_in_session(request)
    except Exception as exc:
        if not env.is_gone(exc):
            raise
        log.debug("%s: the sandbox was gone (%s); using the file transport, which recovers it", what, exc)
        return None
    finally:
        lock.release()


def _request(script: str) -> ScriptRequest:
    return ScriptRequest.build(script, timeout=SESSION_FILE_TIMEOUT)  # type: ignore[return-value]


def _read_in_session(env: SandboxEnvironment, path: str, full: str, root: str | None, limit: int) -> bytes | None:
    """The file's bytes read through the session, or None to use the transport (for a
    file larger than the cap or than the session may carry: at most one byte more than
    that moved; the transport then refuses it before moving any, or reads it)."""
    most = min(_session_limit(env), limit)
    if most <= 0:
        return None
    mark = f"ENVLAYER-FILE-{uuid.uuid4().hex}"
    what = f"read_file {full}"
    args = [full, root or "", str(most + 1), mark]
    result = None
    if root is None:  # in the session shell itself: one fork less
        body = session_read_script(in_shell=True)
        result = _in_session(
            env, dataclasses.replace(_request(in_shell_call("s k v p", body, args)), in_shell=True), what
        )
        if result is None:
            return None
    if result is None or result.exit_code == USE_SUBSHELL:
        result = _in_session(env, _request(_script(session_read_script(), args)), what)
    if result is None:
        return None
    _raise_for(result.exit_code, result.stderr, path, full, root, limit, "read")
    data = _unframe(result.stdout, result.stderr, mark.encode())
    if len(result.stdout) > most or result.stdout_truncation is not None:
        log.debug("%s: larger than the session's %d bytes; using the file transport", what, most)
        return None
    if data is None:
        log.debug("%s: the size did not match (other output mixed in, dropped); using the file transport", what)
    return data


def _unframe(out: bytes, err: bytes, mark: bytes) -> bytes | None:
    """``out`` when it is exactly as long as the size the script reported after ``mark`` on
    ``err``; None otherwise (other output was mixed in, or the file changed meanwhile)."""
    start = err.rfind(mark + b" ")
    if start < 0:
        return None
    try:
        size = int(err[start + len(mark) + 1 :].split(b"\n", 1)[0])
    except ValueError:
        return None
    return out if len(out) == size else None


def _write_in_session(env: SandboxEnvironment, path: str, full: str, root: str | None, payload: bytes) -> bool:
    """True when ``payload`` was written through the session; False to use the transport.
    A small file without a file root is written by the session shell itself
    (:func:`in_shell_call`: one fork less), anything else by a subshell."""
    what = f"write_file {full}"
    if root is None and len(payload) <= PRINTF_SMALL and env.session_file_max > 0:
        result = _write_in_shell(env, what, full, payload)
        if result is None:
            return False
        if result.exit_code != USE_SUBSHELL:
            _raise_for(result.exit_code, result.stderr, path, full, root, len(payload), "write")
            return True
    result = _carry_in_session(env, what, write_script, [full, root or "", uuid.uuid4().hex], payload)
    if result is None:
        return False
    _raise_for(result.exit_code, result.stderr, path, full, root, len(payload), "write")
    return True


def _write_in_shell(env: SandboxEnvironment, what: str, full: str, payload: bytes) -> ExecResult | None:
    """The result of :func:`in_shell_call` writing ``payload`` to ``full``, or None when the
    session is not free. Whatever interrupts the call (Ctrl-C: the session then kills
    the shell), the temp file it may have made is removed through the transport first."""
    word = uuid.uuid4().hex
    body = write_script(f"printf {printf_format(payload)} >|", in_shell=True)
    script = in_shell_call("t d u f e", body, [full, "", word])
    request = dataclasses.replace(_request(script), in_shell=True)
    try:
        return _in_session(env, request, what)
    except BaseException:
        temp = posixpath.join(posixpath.dirname(full) or "/", f".envlayer-{word}.tmp")
        try:
            env.file_helper(["sh", "-c", 'rm -f -- "$1"', "envlayer-rm", temp], None)
        except Exception as exc:
            log.warning("%s: could not remove the temp file %s after the interruption: %s", what, temp, exc)
        raise


def _carry_in_session(
    env: SandboxEnvironment, what: str, script_of: Callable[[str], str], args: list[str], payload: bytes
) -> ExecResult | None:
    """Run ``script_of(fill)`` with ``args`` in the session, ``fill`` being the shell that
    writes ``payload`` into a file named after it (a ``printf`` format up to
    :data:`~envlayer.execution.shell_script.PRINTF_SMALL` bytes, else ``__el_take`` of the bytes sent raw; see
    :func:`write_script`). Its result, or None (logged) when the caller must use the
    transport: a payload over the session's limit, no free session, the script's
    :data:`USE_TRANSPORT`, or a shell that could not take the bytes (at warning level:
    it ended itself unread, and the next command's result says so)."""
    most = env.session_file_max
    if most <= 0 or len(payload) > most:
        if most > 0:
            log.debug("%s: larger than the session's %d bytes; using the file transport", what, most)
        return None
    if len(payload) <= PRINTF_SMALL:
        request = _request(_script(script_of(f"printf {printf_format(payload)} >|"), args))
    else:
        has_head = f"command -v head >/dev/null 2>&1 || exit {USE_TRANSPORT}; "
        request = dataclasses.replace(_request(_script(has_head + script_of("__el_take"), args)), raw_input=payload)
    result = _in_session(env, request, what)
    if result is None:
        return None
    if result.exit_code == USE_TRANSPORT:
        log.debug("%s: the session cannot take it here (no head, or no place for it); using the file transport", what)
        return None
    if result.exit_code == INPUT_LOST:
        log.warning("%s: the session shell could not take the data and was restarted; using the file transport", what)
        return None
    return result


_ARCHIVE = f'[ -d "$__el_dir" ] && [ -w "$__el_dir" ] || exit {USE_TRANSPORT}; a="$__el_dir/transfer.tar"; '
"""Shell: the archive's place in the session's private directory (one per session, emptied
after each call: one call runs at a time), or the transport when there is none."""

UNPACK_SCRIPT = (
    _CONFINE + f'[ -d "$1" ] || {{ [ ! -e "$1" ] && command mkdir -p -- "$1" 2>/dev/null; }} || exit {USE_TRANSPORT}; '
    f'[ -w "$1" ] && [ -x "$1" ] || exit {USE_TRANSPORT}; {_ARCHIVE}'
    "trap ': >| \"$a\"; exit 143' HUP INT TERM; "
    f'{{FILL}} "$a"; e=$?; [ $e -ne {INPUT_LOST} ] || exit {INPUT_LOST}; '
    '[ $e -eq 0 ] && command tar -x -f "$a" -C "$1"; e=$?; : >| "$a"; exit $e'
)
"""Shell: ``$1`` directory (made when missing), ``$2`` file root ('' for none); ``{FILL}``
writes the archive to a file (as in :func:`write_script`), which ``tar -x`` unpacks into
``$1`` as the sandbox user. Exit 0, :data:`USE_TRANSPORT` when the session cannot (``$1``
is not a writable directory, no private directory), :data:`INPUT_LOST`, or ``tar``'s
status (the caller then takes the transport, which says what is wrong)."""

PACK_SCRIPT = (
    _CONFINE + f'[ -d "$1" ] && [ -r "$1" ] && [ -x "$1" ] || exit {USE_TRANSPORT}; {_ARCHIVE}'
    "trap ': >| \"$a\"; exit 143' HUP INT TERM; "
    '{ command tar -c -f - -C "$1" .; echo "$?" >| "$a.rc"; } | command head -c "$3" >| "$a" && '
    f'read -r e < "$a.rc" && [ "$e" -eq 0 ] || {{ : >| "$a"; exit {USE_TRANSPORT}; }}; '
    'exec 3< "$a" && command cat <&3 || { e=$?; : >| "$a"; exit $e; }; '
    's=; { while read -r k v; do [ "$k" = pos: ] && s=$v && break; done; } 2>/dev/null </proc/self/fdinfo/3; '
    '[ -n "$s" ] || s=$(command wc -c < "$a"); : >| "$a"; printf "%s %s\\n" "$4" "$s" >&2'
)
"""Shell: ``$1`` directory, ``$2`` file root ('' for none), ``$3`` the most bytes to keep
(one more than may come this way), ``$4`` the call's random mark. ``tar -c`` of ``$1``'s
contents as the sandbox user, cut at ``$3`` bytes into the private archive file, then
printed from it with ``mark count`` on stderr (the bytes are taken only when they match
it, as a read's). :data:`USE_TRANSPORT` when ``tar`` failed or was cut (the archive is
larger than may come this way), ``$1`` is not a readable directory, or there is no
private directory."""


def unpack_in_session(env: SandboxEnvironment, path: str, payload: bytes) -> bool:
    """True when the tar ``payload`` was unpacked into the sandbox directory ``path``
    through the session (see :data:`UNPACK_SCRIPT`); False (logged at debug level, or at
    warning level when the shell could not take the bytes) when the caller must use its
    transport, which then also reports anything wrong with the directory."""
    workdir = env.file_directory()
    full = env.resolve_path(path, workdir)
    root = file_root_of(env, workdir) or ""
    what = f"upload_dir {path}"
    result = _carry_in_session(env, what, lambda fill: UNPACK_SCRIPT.replace("{FILL}", fill), [full, root], payload)
    if result is None:
        return False
    if result.exit_code == OUTSIDE:
        raise SandboxPathError(path, root or "/")
    if result.exit_code != 0:
        said = result.stderr.decode(errors="replace").strip()[:300]
        log.debug("%s: not through the session (exit %d: %s); using the transport", what, result.exit_code, said)
        return False
    return True


def pack_in_session(env: SandboxEnvironment, path: str, limit: int) -> bytes | None:
    """A tar of the contents of the sandbox directory ``path`` (members named ``./...``)
    made through the session (see :data:`PACK_SCRIPT`), or None (logged at debug level)
    when the caller must use its transport: no free session, an archive larger than the
    session may carry or than ``limit``, a directory ``tar`` could not pack (the transport
    then says why), other output mixed in."""
    most = min(_session_limit(env), limit)
    if most <= 0:
        return None
    workdir = env.file_directory()
    full = env.resolve_path(path, workdir)
    root = file_root_of(env, workdir) or ""
    mark = f"ENVLAYER-FILE-{uuid.uuid4().hex}"
    what = f"download_dir {path}"
    result = _in_session(env, _request(_script(PACK_SCRIPT, [full, root, str(most + 1), mark])), what)
    if result is None:
        return None
    if result.exit_code == OUTSIDE:
        raise SandboxPathError(path, root or "/")
    data = _unframe(result.stdout, result.stderr, mark.encode()) if result.exit_code == 0 else None
    if data is None or len(data) > most:
        said = result.stderr.decode(errors="replace").strip()[-300:]
        log.debug("%s: not through the session (exit %d: %s); using the transport", what, result.exit_code, said)
        return None
    return data


def download_in_session(env: SandboxEnvironment, path: str, local: str, limit: int) -> TransferSummary | None:
    """``download_dir`` through the session: the tar :func:`pack_in_session` made,
    extracted into host directory ``local`` (created) with
    :func:`~envlayer.sandbox.archive.safe_extract`; None when the caller must use its
    transport (nothing written then)."""
    packed = pack_in_session(env, path, limit)
    if packed is None:
        return None
    os.makedirs(local, exist_ok=True)
    return safe_extract(packed, local, strip_first=False)


def _raise_for(code: int, stderr: bytes, path: str, full: str, root: str | None, limit: int, operation: str) -> None:
    """Raise the error a file script's exit ``code`` means (nothing for 0)."""
    if code == 0:
        return
    err = stderr.decode(errors="replace").strip()
    if code == NOT_FOUND:
        raise SandboxFileNotFound(full)
    if code == IS_DIR:
        raise SandboxIsADirectory(full)
    if code == OUTSIDE:
        raise SandboxPathError(path, root or "/")
    if code == TOO_LARGE:
        raise FileTooLarge(full, int(err.split()[-1]) if err else -1, limit)
    if code == DENIED or "permission denied" in err.lower():
        raise SandboxPermissionDenied(full, operation, err[:300])
    raise SandboxFileError(full, operation, f"exit {code}: {err[:300]}")
