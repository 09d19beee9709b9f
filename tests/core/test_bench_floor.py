"""The session exec's floor in ``envlayer bench`` (:func:`envlayer.bench.baselines.same_job_call`)
does the job a session call does, no less: it keeps stdout and stderr apart and returns
them with the exit status, over a real local shell and over the Docker daemon's frames."""

from __future__ import annotations

from pathlib import Path

from envlayer.bench.baselines import PipedShell, frames_of, same_job_call


def test_the_same_job_floor_returns_the_status_and_each_stream_apart(tmp_path: Path) -> None:
    shell = PipedShell(stderr=True)
    try:
        call = same_job_call(shell.send, shell.recv_tagged, str(tmp_path))
        assert call() == (0, b"", b"")
        shell.send(b"printf out; printf err >&2\n")  # output the next call reads before its markers
        assert call() == (0, b"out", b"err")
    finally:
        shell.close()


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_the_docker_floor_parses_frames_split_anywhere() -> None:
    raw = _frame(1, b"out") + _frame(2, b"err") + _frame(1, b"")
    pieces = [raw[:5], raw[5:12], raw[12:20], raw[20:]]
    tagged = frames_of(lambda: pieces.pop(0) if pieces else b"")
    seen = []
    while chunks := tagged():
        seen += chunks
    assert seen == [("stdout", b"out"), ("stderr", b"err"), ("stdout", b"")]


def test_the_local_floor_waits_for_stdout_then_takes_what_stderr_holds() -> None:
    """One wakeup per call: a marker written on stderr before stdout's comes with stdout's,
    not alone (waiting on both pipes woke the client at it in about half the calls, which
    made the floor's median jump between two modes)."""
    shell = PipedShell(stderr=True)
    try:
        shell.send(b"printf err >&2; sleep 0.2; printf out\n")
        assert shell.recv_tagged() == [("stdout", b"out"), ("stderr", b"err")]
        shell.send(b"printf alone\n")
        assert shell.recv_tagged() == [("stdout", b"alone")]
    finally:
        shell.close()
