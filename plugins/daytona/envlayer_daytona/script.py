"""The shell text envlayer sends to a Daytona sandbox, and the parsing of what comes back.

A command runs in a Daytona *session* (a shell the daemon keeps per session id). The text
sent for it (:func:`command_script`) makes the command's stdout, stderr and exit status land
in spool files in the sandbox, ``SPOOL/<exec id>.{out,err,rc,pwd,t}``, instead of the
daemon's own per-command logs, because:

* the logs API returns text, so binary output would be mangled; the spool files are read
  back as hex (:func:`poll_script`, one ``process/execute`` call that waits in the sandbox
  for the command to end or, when streaming, for new output), so every byte survives;
* the daemon's ``process/execute`` timeout answers 408 and loses the output; here the
  client owns the deadline, kills the command's tree with the core's kill script
  (:mod:`envlayer.sandbox_kill`) and still reads what the files hold.

The user's command runs through ``eval`` (as ``sh -c`` would), exported with its
``ENVLAYER_EXEC_ID`` marker so the kill script finds every process it started. In session
mode a plain call runs in the session shell itself, so ``cd`` and ``export`` persist; a
call with ``cwd``/``env`` (and every call in one-shot mode) runs in a subshell. An ``exit``
(or a syntax error) ends the session shell; the shell's EXIT trap, set by
:func:`session_setup`, still records the status.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envlayer.sandbox_kill import KILL_SCRIPT

SPOOL = "/tmp/.envlayer-daytona"
MAX_CHUNK = 4 * 1024 * 1024
TICK = 0.02


def command_text(command: str | Sequence[str]) -> str:
    """A string command as is; an argv list quoted word by word (no shell interpretation)."""
    return command if isinstance(command, str) else " ".join(shlex.quote(word) for word in command)


def session_setup(env: Mapping[str, str], start_dir: str | None, create_dir: bool) -> str:
    """The first command of a session: EXIT trap, spool directory, ``env`` exported, the
    start directory entered. It prints the shell's pid and then its working directory."""
    parts = [
        "trap 'echo $? > \"$ENVLAYER_RC\"' EXIT",
        "ENVLAYER_RC=/dev/null",
        f"mkdir -p {SPOOL} 2>/dev/null",
    ]
    parts += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    if start_dir:
        target = shlex.quote(start_dir)
        parts.append(f"mkdir -p -- {target} 2>/dev/null; cd -- {target}" if create_dir else f"cd -- {target}")
    parts.append('echo "$$"; pwd')
    return "; ".join(parts)


def command_script(
    command: str | Sequence[str],
    *,
    exec_id: str,
    isolated: bool,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stdin_path: str | None,
) -> str:
    """The session command that runs ``command`` with its output spooled (module docstring).

    ``isolated`` (one-shot mode), ``cwd`` or ``env`` run it in a subshell, so nothing it
    changes outlives the call."""
    spool = f"{SPOOL}/{exec_id}"
    body = f"eval {shlex.quote(command_text(command))}"
    if isolated or cwd or env:
        prefix = [f"cd -- {shlex.quote(cwd)} || exit 1"] if cwd else []
        prefix += [f"export {name}={shlex.quote(value)}" for name, value in (env or {}).items()]
        body = "( " + "; ".join([*prefix, body]) + " )"
    source = stdin_path or "/dev/null"
    return (
        f"ENVLAYER_RC={spool}.rc; ENVLAYER_EXEC_ID={exec_id}; export ENVLAYER_EXEC_ID\n"
        f'{{ read -r _el_up _ < /proc/uptime && echo "${{_el_up%.*}}${{_el_up#*.}}" > {spool}.t; }} 2>/dev/null\n'
        f"{{ {body}\n}} < {shlex.quote(source)} > {spool}.out 2> {spool}.err\n"
        f'_el_rc=$?; pwd > {spool}.pwd; echo "$_el_rc" > {spool}.rc; ENVLAYER_RC=/dev/null; unset ENVLAYER_EXEC_ID'
    )


_POLL = r"""
exec 2>/dev/null
f=$1/$2; o=$3; e=$4; max=$5; w=$6; sp=$7; live=$8; final=$9; n=0
gone() {  # the session shell is gone (or a zombie)
  [ "$sp" != 0 ] || return 1
  kill -0 "$sp" || return 0
  st=$(sed 's/.*) //' "/proc/$sp/stat" | cut -c1)
  [ "$st" = Z ]
}
while :; do
  [ -s "$f.rc" ] && break
  if [ "$live" = 1 ]; then
    so=$(wc -c < "$f.out" 2>/dev/null); se=$(wc -c < "$f.err" 2>/dev/null)
    if [ "${so:-0}" -gt "$o" ] || [ "${se:-0}" -gt "$e" ]; then break; fi
  fi
  if gone; then break; fi
  [ "$n" -ge "$w" ] && break
  sleep 0.02; n=$((n + 1))
done
alive=1
if gone; then alive=0; fi
rc=$(cat "$f.rc" 2>/dev/null)
echo "@state $alive ${rc:--}"
so=$(wc -c < "$f.out" 2>/dev/null); se=$(wc -c < "$f.err" 2>/dev/null)
echo "@out"; tail -c +$((o + 1)) "$f.out" 2>/dev/null | head -c "$max" | od -An -v -tx1
echo "@err"; tail -c +$((e + 1)) "$f.err" 2>/dev/null | head -c "$max" | od -An -v -tx1
if [ -n "$rc" ]; then echo "@pwd"; od -An -v -tx1 < "$f.pwd" 2>/dev/null; fi
left=$(( ${so:-0} - o > ${se:-0} - e ? ${so:-0} - o : ${se:-0} - e ))
if { [ -n "$rc" ] || [ "$final" = 1 ]; } && [ "$left" -le "$max" ]; then
  rm -f "$f.out" "$f.err" "$f.rc" "$f.pwd" "$f.t" "$f.in"; echo "@gone"
fi
echo "@end"
"""


def poll_script(
    exec_id: str, *, out_offset: int, err_offset: int, wait: float, shell_pid: int, live: bool, final: bool
) -> str:
    """A ``process/execute`` command that waits up to ``wait`` seconds in the sandbox for the
    command to finish (or, ``live``, for new output; or for the session shell ``shell_pid``
    to die), then reports its state and the next chunk of each stream. With the exit status
    known (or ``final``) and everything read, it removes the spool files."""
    ticks = max(0, int(wait / TICK))
    args = [SPOOL, exec_id, out_offset, err_offset, MAX_CHUNK, ticks, shell_pid, int(live), int(final)]
    return "sh -c " + shlex.quote(_POLL) + " poll " + " ".join(shlex.quote(str(a)) for a in args)


def kill_script(exec_id: str, shell_pid: int, grace: int = 1) -> str:
    """A ``process/execute`` command running the core's kill script for ``exec_id`` (and, with
    ``shell_pid``, the session shell and its unmarked subshells started since the command)."""
    launcher = 'since=$(cat "$4" 2>/dev/null); exec sh -c "$0" envlayer-kill "$1" "$2" "${since:-0}" "$3"'
    args = [KILL_SCRIPT, exec_id, str(shell_pid), str(grace), f"{SPOOL}/{exec_id}.t"]
    return "sh -c " + shlex.quote(launcher) + " " + " ".join(shlex.quote(a) for a in args)


@dataclass
class Poll:
    """One poll's answer. ``exit_code`` is None while the command runs; ``shell_alive`` is
    False once the session shell is gone; ``done`` when the spool files were removed."""

    shell_alive: bool
    exit_code: int | None
    out: bytes
    err: bytes
    pwd: str | None
    done: bool


def parse_poll(text: str) -> Poll:
    """Parse :func:`poll_script` output. Raises ``ValueError`` for anything malformed (the
    sandbox has no ``od``/``tail``, or the answer was cut)."""
    lines = text.splitlines()
    if "@end" not in lines:
        raise ValueError(f"incomplete poll answer: {text[-300:]!r}")
    sections: dict[str, list[str]] = {}
    current = ""
    alive, code = True, None
    for line in lines:
        if line.startswith("@state "):
            _, alive_text, rc_text = line.split()
            alive = alive_text == "1"
            code = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        elif line.startswith("@"):
            current = line[1:]
            sections.setdefault(current, [])
        elif current:
            sections[current].append(line)

    def hexbytes(name: str) -> bytes:
        return bytes.fromhex("".join(sections.get(name, [])).replace(" ", ""))

    pwd = hexbytes("pwd").decode(errors="replace").rstrip("\n") if "pwd" in sections else None
    return Poll(alive, code, hexbytes("out"), hexbytes("err"), pwd or None, "gone" in sections)
