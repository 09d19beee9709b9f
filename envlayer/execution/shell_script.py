"""The shell text and the framing of the persistent-shell protocol: pure functions on
strings and bytes, no I/O. :mod:`envlayer.execution.shell_session` drives them over a stream.

Framing. Each command ends with a *trailer*: on the shell's saved stdout (fd 7) ::

    M<rc> <shell pid> <uptime or "exit" or "-"> <pwd>M

and on its saved stderr (fd 8) ``M`` alone, where ``M`` is a marker unique to the call
(``__EL<digits>__``). The marker never appears literally in anything the sandbox can
read: the script holds a random seed and the shell computes ``M`` from it by arithmetic
when it prints the trailer. The trailer goes to fds 7 and 8, copies of the shell's
stdout and stderr made at start, so a command that redirects the shell's own fds
(``exec 2>&1``, ``exec >/dev/null``) cannot hide it. The reader strips the markers from
the streams (also when split across reads) and knows the command is over when both are
seen, without waiting for EOF (background jobs that keep the stream open never block a
call).

The command runs with stdin ``/dev/null`` from fd 6 (opened once, at start: an ``open``
of ``/dev/null`` per call was the dearest part of the redirection) and with fds 6, 7
and 8 closed, so it can neither read nor change them (its own ``exec 7>file`` ends with
it), and nothing it starts in the background holds them: a job whose output goes
elsewhere (``server >log 2>&1 &``) keeps no handle on the session's stream, and the
stream ends as soon as the shell does (a transport that waits for every writer to close,
as Docker's daemon and sshd do, would otherwise hold the end of the shell, and in Docker
every other exec's end behind it, for seconds). A job that writes to the session's
stdout or stderr still holds those, as in a terminal; a forked subshell (``( ... ) &``)
keeps the shell's hidden copy of the fds until it execs or exits. bash runs an EXIT trap
with the redirections of the command that exited still in place, so the trap writes its
trailer to fds 1 and 2 when 7 is closed (a bash session that also sent its own stdout
elsewhere before ``exit`` loses that trailer: the call then reports the status the
transport gives and says the shell was restarted).

Everything user-supplied is quoted with :func:`shlex.quote`; per-call variable names
were checked by :func:`envlayer.request.check_env`.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from envlayer.execution.tree_kill import EXEC_ID_VAR
from envlayer.random_pool import RandomPool, chunks

SESSION_VAR = "ENVLAYER_SESSION"
"""Set in a session shell's initial environment (to a random id), so tools can tell
session shells from command processes."""

_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("\\"), ord("%"), ord("'")} | {ord("\n")}
_PRINTF = [chr(b) if b in _PLAIN else f"\\{b:03o}" for b in range(256)]
"""How ``printf`` formats spell each byte value (a table: formats of files are long)."""


def quote(value: str) -> str:
    """Single-quote ``value`` for POSIX sh."""
    return shlex.quote(value)


def quote_path(path: str) -> str:
    """Quote a path for the shell, keeping a leading ``~`` or ``~/`` as ``$HOME``."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + quote(path[2:])
    return quote(path)


def command_text(command: str | Sequence[str]) -> str:
    """Shell text for ``command``: a string as is, an argv quoted word by word (so
    nothing in it is expanded: it runs exactly as the argv would)."""
    if isinstance(command, str):
        return command
    return " ".join(quote(str(arg)) for arg in command)


def printf_format(data: bytes) -> str:
    """A single-quoted ``printf`` format that prints exactly ``data`` (any bytes, NUL too).
    A leading ``-`` is escaped too: dash's and bash's ``printf`` would take the format for
    an option, print nothing and fail."""
    text = "".join(map(_PRINTF.__getitem__, data))
    return "'" + ("\\055" + text[1:] if text.startswith("-") else text) + "'"


def export_lines(env: Mapping[str, str]) -> str:
    """``export NAME='value'`` for each variable, one per line ('' for none)."""
    return "".join(f"export {name}={quote(value)}\n" for name, value in env.items())


def interactive_shell_script(shell: str, env_file: str, cwd: str) -> str:
    """``sh`` text that exports the variables in ``env_file`` and removes it, changes to
    ``cwd`` (exit 126 with a message when it is missing) and becomes ``shell -i``: how
    ``envlayer shell`` starts on a remote sandbox, where the variables must stay out of
    command lines and off the echoing terminal. Pure."""
    q, d = quote_path(env_file), quote_path(cwd)
    return (
        f". {q}; rm -f -- {q}\n"
        f"cd -- {d} 2>/dev/null || {{ printf 'working directory does not exist: %s\\n' {d} >&2; exit 126; }}\n"
        f"exec {quote(shell)} -i"
    )


_SEEDS: RandomPool[int] = RandomPool(
    lambda raw: (int.from_bytes(piece, "big") + 2**39 for piece in chunks(raw, 5)), batch_bytes=5 * 256
)


def new_seed() -> int:
    """A random marker seed in ``[2**39, 2**39 + 2**40)`` from the OS's CSPRNG (the shell
    turns it into the marker, see :func:`marker_of`), taken from a pool filled 256 seeds
    at a time (:class:`~envlayer.random_pool.RandomPool`: each seed is used once)."""
    return _SEEDS.take()


def marker_of(seed: int) -> bytes:
    """The marker the shell prints for ``seed``: ``__EL<seed * 7919 + 13>__``."""
    return f"__EL{seed * 7919 + 13}__".encode()


_MARK = '"__EL$((__el_s*7919+13))__"'
_ACK = '"=EL$((__el_s*7919+17))="'

PRINTF_SMALL = 4096
"""Data up to this size (a file write's, a command's stdin) travels in the command text as
a ``printf`` format (no program runs for it); larger data as raw bytes behind the text,
taken by ``head -c`` (see :func:`script_call`). A program started costs more than the
shell parsing that much text."""

INPUT_LOST = 99
"""Exit status of a call whose raw input was announced but not taken: the shell has
ended itself (see :func:`script_call`)."""


def ack_of(seed: int) -> bytes:
    """What the shell prints on its stdout when a call's raw input may be sent: like the
    marker (never literally in the script), but starting with ``=``, so that no byte of
    a trailer is ever held back as a possible start of it."""
    return f"=EL{seed * 7919 + 17}=".encode()


_STDERR_MARK = f"  printf '%s' {_MARK} >&8\n"
"""The trailer's stderr half: the marker alone, on the saved stderr (see
:func:`init_script` for a stream that needs none)."""


_XTRACE_TAKEN = (
    "case $- in *x*) { __el_rc=$?; set +x; } 2>/dev/null; __el_xp=$__el_xv ;; *) __el_rc=$? __el_xp= ;; esac"
)
"""Shell run right after a user's command in ``__el_ev``: its status into ``$__el_rc``,
and ``set -x`` switched off (untraced: a compound command is not traced, and the trace
of what runs inside the group goes nowhere) and recorded in ``$__el_xp`` for the next
command. dash and BusyBox trace no ``case``; bash does, so after bash's evaluation
``__el_uend`` does this with its whole trace sent nowhere (:meth:`CallStyle.end`)."""


def _call_functions(stderr_marker: bool) -> str:
    """Defined once per shell by :func:`init_script`, so each call sends one short script
    (see :func:`call_script`): bash reads a script from a pipe one byte at a time, and
    every shell parses less. ``__el_pre SEED EXEC_ID`` sets the call's marker seed,
    exports its exec id and (re)sets the EXIT trap; ``__el_end [STDIN_FILE]``, run right
    after the command, takes its status, removes the staged stdin and prints the trailer
    (see the module docstring; the stderr marker, with ``stderr_marker``, first: a
    transport that forwards each stream on its own, as Docker's daemon does, has then
    usually sent it when the stdout trailer comes, so the reader wakes once per call
    instead of twice); ``__el_uend`` does the same after a user's command evaluated in
    the shell itself (bash), and records whether it left ``set -x`` on. ``__el_ev`` runs
    the command text in ``$__el_c`` as the body of a function (see :class:`CallStyle`; a
    new definition replaces the last, and one that fails to parse runs nothing), then
    takes its status and ``set -x`` (:data:`_XTRACE_TAKEN`).

    ``set -x`` is off between commands: a session whose user switched it on has it on
    while each of the user's commands runs (the command text is prefixed with
    ``$__el_xp``, then ``$__el_xv``: ``set -x;`` in a function body, a line of its own in
    bash's evaluation, whose syntax errors quote the line), so the protocol's own commands
    never show in the trace.
    ``__el_take FILE``, ``__el_took STATUS`` and ``__el_lost STATUS`` carry a call's raw
    input (see :func:`script_call`)."""
    stderr_mark = _STDERR_MARK if stderr_marker else ""
    trailer = (
        f"  unset {EXEC_ID_VAR}\n"
        '  case $# in 0) ;; *) rm -f -- "$1" ;; esac\n'
        f"{stderr_mark}"
        f'  printf \'%s%s %s %s %s%s\' {_MARK} "$__el_rc" "$$" "$__el_up" "$PWD" {_MARK} >&7\n'
        "  __el_up=-\n"
        "}\n"
    )
    return (
        f'__el_pre() {{ __el_s=$1; export {EXEC_ID_VAR}=$2; trap "$__el_ta" EXIT; }}\n'
        f"__el_end() {{\n  __el_rc=$?\n{trailer}"
        "__el_uend() {\n"
        "  __el_rc=$?\n"
        "  case $- in *x*) set +x; __el_xp=$__el_xv ;; *) __el_xp= ;; esac\n"
        f"{trailer}"
        '__el_ev() {\n  command eval "__el_cmd() { $__el_xp$__el_c\n}" && __el_cmd\n'
        f"  {_XTRACE_TAKEN}\n"
        "  return $__el_rc\n"
        "}\n"
        "__el_take() {\n"
        '  exec 4>| "$1" || return\n'
        f"  printf '%s' {_ACK} >&7\n"
        f'  command head -c "$__el_n" <&5 >&4 || return {INPUT_LOST}\n'
        '  __el_k=; { while read -r __el_f __el_v; do [ "$__el_f" = pos: ] && __el_k=$__el_v && break; done; } '
        "2>/dev/null </proc/self/fdinfo/4\n"
        '  [ -n "$__el_k" ] || __el_k=$(command wc -c < "$1")\n'
        '  [ "$((__el_k))" -eq "$__el_n" ]\n'
        "}\n"
        f'__el_took() {{ [ "$1" -ne {INPUT_LOST} ] || __el_lost "$1"; return "$1"; }}\n'
        "__el_lost() {\n"
        "  trap - EXIT\n"
        f"{stderr_mark}"
        f'  printf \'%s%s %s lost %s%s\' {_MARK} "$1" "$$" "$PWD" {_MARK} >&7\n'
        '  exit "$1"\n'
        "}\n"
    )


OWNER_BOUND = "__el_bound=1\n"
"""Shell text a backend sends before :func:`init_script` when the shell's input ends only
because its owner is gone (the local backend: its Python process died without closing it).
Then an EXIT between calls (no exec id set: ``__el_end`` unsets it) removes the private
directory instead of saving state nobody will restore. Without it (SSH, Docker), a closed
input may be a lost connection, and the state is kept for the session's next shell."""

_OWNER_GONE = f'  if [ "${{__el_bound-}}" ] && [ -z "${{{EXEC_ID_VAR}-}}" ]; then rm -rf -- "$__el_dir"; return; fi\n'


def init_script(*, session_id: str, start_dir: str | None, stderr_marker: bool = True) -> bytes:
    """Sent once to a freshly started shell: opens fd 6 on ``/dev/null`` and saves fds 7/8,
    defines the EXIT trap that
    keeps state across ``exit N``, creates the session's private directory
    ``${TMPDIR:-/tmp}/.envlayer-session-<session_id>`` (mode 0700: saved state, staged
    stdin), restores the state a previous shell of this session left (exported
    variables and shell options), and goes to ``start_dir`` (a leading ``~`` is the
    home directory).

    The EXIT trap runs when a command ends the shell (``exit N``, ``set -e`` and a
    failure, ``set -u`` and an unset variable): it writes ``export -p`` and ``set +o``
    to ``<state_dir>/state`` and prints the trailer with ``exit`` in the uptime field
    (on fds 1 and 2 when 7 is closed: bash runs it with the command's redirections).

    Without ``stderr_marker`` no trailer has a stderr half: for a stream that keeps the
    order of writes across its two outputs (local pipes: what the command wrote on
    stderr before the trailer is readable once the trailer has been read), where the
    reader takes what stderr holds after the stdout trailer instead (:func:`read_framed
    <envlayer.execution.shell_session.read_framed>`), and the shell has no fd 8; twelve
    system calls less per call.
    """
    d = '"${TMPDIR:-/tmp}"/' + quote(f".envlayer-session-{session_id}")
    cd = f"cd -- {quote_path(start_dir)} 2>/dev/null || __el_nocwd=1\n" if start_dir else ""
    saved = "7>&1 8>&2" if stderr_marker else "7>&1"
    return (
        f"exec 6</dev/null {saved}\n"
        f"__el_s=0; __el_rc=0; __el_nocwd=0; __el_up=-; __el_xp=; __el_dir={d}\n"
        "__el_ta='{ __el_rc=$? __el_o=$-; set +x; } 2>/dev/null; __el_exit'\n"
        "case ${BASH_VERSION-} in '') __el_fn=1 __el_xv='set -x;' ;; *) __el_fn= __el_xv='set -x\n' ;; esac\n"
        "__el_exit() {\n"
        "  trap - EXIT\n"
        f"{_OWNER_GONE}"
        f"  case ${{{EXEC_ID_VAR}+@}}$__el_o in @*x*) __el_xp=$__el_xv ;; @*) __el_xp= ;; esac\n"
        '  { export -p; set +o; echo "__el_xp=\'$__el_xp\'"; } 2>/dev/null >| "$__el_dir/state"\n'
        f"  {{ printf '' >&7; }} 2>/dev/null || exec {saved}\n"
        f'  printf \'%s%s %s exit %s%s\' {_MARK} "$__el_rc" "$$" "$PWD" {_MARK} >&7\n'
        f"{_STDERR_MARK if stderr_marker else ''}"
        "}\n"
        f"{_call_functions(stderr_marker)}"
        '[ -d "$__el_dir" ] || mkdir -m 700 -p -- "$__el_dir" 2>/dev/null\n'
        'for __el_f in "$__el_dir"/in-*; do [ -e "$__el_f" ] && rm -f -- "$__el_dir"/in-*; break; done\n'
        'if [ -f "$__el_dir/state" ]; then . "$__el_dir/state"; rm -f -- "$__el_dir/state"; fi\n'
        f"unset {EXEC_ID_VAR}\n"
        f"{cd}"
    ).encode("utf-8", "surrogateescape")


def handshake_command() -> str:
    """The first command of a shell: prints ``<pid> <1 if start_dir was missing> <1 if
    commands run as function bodies, else 0> <private dir>`` (see :class:`CallStyle`) and
    reads the sandbox clock (``/proc/uptime``) into its trailer: the one reading the owner
    syncs its clock from (later trailers say ``-``)."""
    return (
        "read __el_up __el_x </proc/uptime 2>/dev/null || __el_up=-; "
        'printf "%s %s %s %s" "$$" "$__el_nocwd" "${__el_fn:-0}" "$__el_dir"'
    )


class CallStyle(NamedTuple):
    """How a call's text is written for one session's shell and stream.

    ``stderr_marker``: the shell prints the trailer's stderr half and has fd 8 (see
    :func:`init_script`). ``function_eval``: the command text runs as the body of a
    function defined by ``eval`` and called after it (``__el_ev``): dash and BusyBox name
    the builtin running a command in their errors (``sh: 1: eval: foo: not found``), and
    inside ``__el_ev`` they say ``sh: 1: foo: not found``, as a plain shell does; bash,
    which names a function's origin in its errors instead, evaluates the text directly.
    The handshake says which (:func:`handshake_command`); until then (the handshake itself:
    ``shaken`` false) the text is evaluated directly, which every shell runs alike, and
    without the session's ``set -x``."""

    stderr_marker: bool = True
    function_eval: bool = False
    shaken: bool = False

    @property
    def run(self) -> str:
        """Runs the command text in ``$__el_c`` in the shell, traced when the session's
        ``set -x`` is on (after the handshake)."""
        if self.function_eval:
            return "__el_ev"
        return 'command eval "$__el_xp$__el_c"' if self.shaken else 'command eval "$__el_c"'

    def end(self, staged: str = "") -> str:
        """Ends a call whose command ran in the shell itself (:attr:`run` not in a
        subshell), removing the ``staged`` stdin file (quoted) if any: the trailer, after
        ``set -x`` was taken where the command left it. ``__el_ev`` takes it itself; after
        bash's evaluation ``__el_uend`` does, its trace (bash traces every command, ``case``
        too) sent nowhere (fd 6 is read-only: the shell's writes of it fail unseen)."""
        args = f" {staged}" if staged else ""
        return f"{{ __el_uend{args}; }} 2>&6" if self.shaken and not self.function_eval else f"__el_end{args}"


ANY_SHELL = CallStyle()
"""The style every shell and stream runs correctly: the one before the handshake."""


def _isolated(stderr_marker: bool, stdin: str = "<&6") -> str:
    """The redirection that gives a command (or envlayer's script) ``stdin`` (default:
    ``/dev/null`` from fd 6) and closes the protocol's fds for it: 6, 7, and 8 where the
    shell has one (see the module docstring)."""
    return f"{stdin} 6<&- 7>&- 8>&-" if stderr_marker else f"{stdin} 6<&- 7>&-"


def call_script(
    command: str | Sequence[str],
    *,
    seed: int,
    exec_id: str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin_path: str | None = None,
    stdin_inline: bytes | None = None,
    stdin_raw: int | None = None,
    prelude: str = "",
    unset: Sequence[str] = (),
    style: CallStyle = ANY_SHELL,
) -> bytes:
    """The text that runs one command in the session shell.

    Without ``cwd``/``env``/``unset`` (checked variable names to remove) the command runs
    in the shell itself (through ``command eval``, written as ``style`` says: a syntax
    error stays inside it), so ``cd``, ``export`` and ``set`` persist. With any of them, it runs in a
    subshell that applies them: nothing the command changes
    persists, and the session's directory and variables are untouched. stdin is
    ``/dev/null``, or the file ``stdin_path`` (mode 0600, removed afterwards), which the
    script itself first fills: with ``stdin_inline`` (a ``printf`` format in the text), or
    with ``stdin_raw`` bytes the caller sends raw once the shell acknowledges them, taken
    by ``__el_take`` as a file call's are (see :func:`script_call`: bytes the shell cannot
    take end it unread, :data:`INPUT_LOST`; the text then ends with the one command that
    takes them and runs the command). The command runs with the protocol's fds closed
    (see the module docstring). ``prelude`` is shell text a backend runs before the
    command (e.g. refreshing a lease file).
    """
    if cwd is None and not env and not unset and stdin_path is None and not prelude:
        return plain_call_script(command, seed, exec_id, style)
    lines = [f"__el_pre {seed} {exec_id}"]
    if prelude:
        lines.append(prelude)
    redirect = _isolated(style.stderr_marker)
    path = ""
    if stdin_path is not None:
        path = quote(stdin_path)
        if stdin_inline is not None:
            # a subshell, so the private umask never leaks into the user's session
            lines.append(f"(umask 077; printf {printf_format(stdin_inline)} >| {path})")
        redirect = _isolated(style.stderr_marker, f"<{path}")
    run = f"__el_c={quote(command_text(command))}; {style.run}"
    end = style.end(path)
    if cwd is not None or env or unset:
        end = f"__el_end {path}" if path else "__el_end"  # a subshell's set -x ends with it
        setup = ""
        if cwd is not None:
            q = quote(cwd)
            setup += (
                f"cd -- {q} 2>/dev/null || {{ printf 'envlayer: working directory does not exist: %s\\n' {q} >&2; "
                "exit 126; }\n"
            )
        removed = f"unset -v {' '.join(unset)}\n" if unset else ""
        run = f"( {setup}{export_lines(env or {})}{removed}{run}\n)"
    if stdin_path is not None and stdin_raw is not None:
        lines.append(
            _taking(
                stdin_raw, f"set +x; umask 077; __el_take {path}", f"{run} {redirect}\n{end}", end, style.stderr_marker
            )
        )
    else:
        lines.append(f"{run} {redirect}")
        lines.append(end)
    text = "\n".join(lines) + "\n"
    return text.encode("utf-8", "surrogateescape")


def plain_call_script(command: str | Sequence[str], seed: int, exec_id: str, style: CallStyle) -> bytes:
    """:func:`call_script` of a call with nothing but its command (no ``cwd``, ``env``,
    ``unset``, stdin or prelude): the common call, made in one step."""
    return f"__el_pre {seed} {exec_id}\n__el_c={quote(command_text(command))}; {_plain_tail(style)}".encode(
        "utf-8", "surrogateescape"
    )


@functools.lru_cache(maxsize=8)
def _plain_tail(style: CallStyle) -> str:
    """What follows the command text in :func:`plain_call_script` (the same for every call
    of a session)."""
    return f"{style.run} {_isolated(style.stderr_marker)}\n{style.end()}\n"


def _taking(count: int, script: str, then: str, failed: str, stderr_marker: bool) -> str:
    """One command: ``script`` in a subshell that holds the session's stdin as fd 5, so
    that its ``__el_take FILE`` takes ``count`` raw bytes from it (see :func:`script_call`);
    then ``then`` when it succeeded, else ``failed`` (its status in ``$?``), or the shell
    ends at once (``__el_lost``) when the bytes were not taken. It must end the call's
    text: the shell has then read all of it before the bytes come."""
    run = f"( {script}\n) 5<&0 <&6 6<&-{' 8>&-' if stderr_marker else ''}"
    return f"__el_n={int(count)}; if {run}; then {then}; else __el_took $? || {failed}; fi"


def script_call(
    script: str,
    *,
    seed: int,
    exec_id: str,
    raw_input: int | None = None,
    prelude: str = "",
    in_shell: bool = False,
    style: CallStyle = ANY_SHELL,
) -> bytes:
    """The text that runs envlayer's own shell ``script`` (a file call's) in a subshell
    of the session: parsed once, not through ``eval`` (it is known to be valid), with
    stdin ``/dev/null``; its status is the call's, whatever ``set -e`` says.

    With ``raw_input`` (a byte count) the subshell holds the session's own stdin as fd 5
    (its stdin is ``/dev/null``: no other program can read it), and the script may call
    ``__el_take FILE`` once: it opens ``FILE`` (as fd 4 of the script's subshell), prints
    :func:`ack_of` the seed on stdout, and the caller then sends exactly ``raw_input``
    bytes, nothing more until the call ends; ``head -c`` writes them to ``FILE``, and
    ``__el_take`` succeeds when all of them came (the offset of fd 4, from
    ``/proc/self/fdinfo/4``, else ``wc -c``: a stream cut short fails it). The text
    ends with this command, and a shell parses a whole command before it runs it, so
    nothing follows in the shell's input when the bytes come: they reach ``head`` alone
    (the user's commands run with stdin ``/dev/null``), even a ``head`` that reads ahead.
    A script that fails before ``__el_take`` prints no acknowledgement, and nothing is
    sent. When ``head`` could not take the bytes (:data:`INPUT_LOST`), the shell ends
    itself at once (``__el_lost``: no state saved, trailer field ``lost``), unread.

    With ``in_shell`` (no ``raw_input``) the script runs in a brace group of the session
    shell itself, not a subshell; it must leave the shell as it found it. ``style``: the
    session's (:class:`CallStyle`).
    """
    isolated = _isolated(style.stderr_marker)
    lines = [f"__el_pre {seed} {exec_id}"]
    if prelude:
        lines.append(prelude)
    if in_shell:
        lines.append(f"if {{ {script}\n}} {isolated}; then __el_end; else __el_end; fi")
    elif raw_input is None:
        lines.append(f"if ( {script}\n) {isolated}; then __el_end; else __el_end; fi")
    else:
        lines.append(_taking(raw_input, script, "__el_end", "__el_end", style.stderr_marker))
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def close_script() -> bytes:
    """Ends a live shell cleanly: no state kept, its private directory removed."""
    return b'trap - EXIT; rm -rf -- "$__el_dir"; exit 0\n'


class MarkerScanner:
    """Passes one stream through until the call's marker; keeps what follows.

    With ``trailer=True`` (stdout) the marker is followed by the trailer fields and a
    second marker; :attr:`trailer` then holds the bytes between the two. Bytes that
    might start a marker split across reads are held back until it is clear. Bytes
    after the end (output of background jobs, which the shell no longer waits for)
    are kept in :attr:`after`, never dropped.
    """

    def __init__(self, marker: bytes, *, trailer: bool) -> None:
        self.marker = marker
        self._want_trailer = trailer
        self._pending = b""
        self._in_trailer = False
        self.trailer = b""
        self.after = b""
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Consume ``data``; return the command-output bytes that are now certain."""
        if self.done:
            self.after += data
            return b""
        buf = self._pending + data if self._pending else data
        if self._in_trailer:
            return self._scan_trailer(buf)
        out, found, rest = buf.partition(self.marker)
        if not found:
            return self._hold_back_marker_start(buf)
        self._pending = b""
        if self._want_trailer:
            self._in_trailer = True
            self._scan_trailer(rest)
        else:
            self.done = True
            self.after = rest
        return out

    def _hold_back_marker_start(self, buf: bytes) -> bytes:
        """Return ``buf`` up to a tail that might start the marker (kept pending). A
        tail without the marker's first byte is the common case of a flood: ``buf`` is
        then returned as is, not copied."""
        first = self.marker[:1]
        start = max(len(buf) - len(self.marker) + 1, 0)
        cut = buf.find(first, start)
        if cut < 0:
            self._pending = b""
            return buf
        while cut >= 0 and not self.marker.startswith(buf[cut:]):
            cut = buf.find(first, cut + 1)
        if cut < 0:
            self._pending = b""
            return buf
        self._pending = buf[cut:]
        return buf[:cut]

    def _scan_trailer(self, buf: bytes) -> bytes:
        trailer, found, after = buf.partition(self.marker)
        if not found:
            self._pending = buf
            return b""
        self.trailer, self.after, self.done, self._pending = trailer, after, True, b""
        return b""

    def flush(self) -> bytes:
        """Bytes held back when the stream ended without a marker."""
        data, self._pending = (b"", b"") if self._in_trailer else (self._pending, b"")
        return data


class Trailer(NamedTuple):
    """What the shell reported after a command.

    ``uptime_cs`` is the sandbox clock (centiseconds since boot) when the command ended,
    ``None`` when unknown; ``shell_exiting`` is True when the EXIT trap printed it (the
    command ended the shell; its state was saved for the next one); ``input_lost`` when
    ``__el_lost`` did (the call's raw input was not taken; the shell ended, saving nothing).
    """

    exit_code: int
    pid: int
    pwd: str
    uptime_cs: int | None
    shell_exiting: bool
    input_lost: bool = False


@functools.lru_cache(maxsize=16)
def parse_trailer(raw: bytes) -> Trailer:
    """Parse ``<rc> <pid> <uptime|exit|lost|-> <pwd>``. Raises ``ValueError`` on anything else.
    Cached: a session's calls mostly end alike (``0 <pid> - <pwd>``)."""
    rc, pid, up, pwd = raw.split(b" ", 3)
    uptime_cs = None
    if up == b"lost":
        return Trailer(int(rc), int(pid), pwd.decode("utf-8", "surrogateescape"), None, False, input_lost=True)
    if up not in (b"exit", b"-"):
        whole, _, frac = up.decode().partition(".")
        uptime_cs = int(whole) * 100 + int((frac + "00")[:2])
    return Trailer(int(rc), int(pid), pwd.decode("utf-8", "surrogateescape"), uptime_cs, up == b"exit")
