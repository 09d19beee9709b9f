"""What a command's result says was lost before it ran, in words for a person: the note
``envlayer exec`` prints on stderr when the session shell had to be restarted
(:attr:`envlayer.result.ExecResult.recovered`; ``--json`` keeps that field as it is)."""

from __future__ import annotations

from envlayer.execution.shell_session import RESTARTED_AFTER_KILL

_AFTER_KILL = (
    "the session shell was restarted before this command, because the previous one timed out or was killed: "
    "the variables exported and shell options set by earlier commands are gone; the working directory is kept; "
    "background processes they started still run but are no longer the shell's jobs (jobs, wait, %1 do not see them)"
)

_NEW_SANDBOX = (
    "the {what}: this command ran in a new session shell, so the working directory, exported variables, shell "
    "options and background jobs of earlier commands are gone{files}"
)


def state_loss_note(recovered: str) -> str:
    """The note for a result whose ``recovered`` is not empty: what happened and which
    state (working directory, exported variables, background jobs, files) is gone."""
    if recovered == RESTARTED_AFTER_KILL:
        return _AFTER_KILL
    if "recreated" in recovered:
        what = f"sandbox was gone and had to be brought back ({recovered})"
        return _NEW_SANDBOX.format(what=what, files="; files outside durable storage may be gone too")
    return _NEW_SANDBOX.format(what=f"connection to the sandbox was made again ({recovered})", files="")
