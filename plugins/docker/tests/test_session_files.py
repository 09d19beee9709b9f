"""File calls through the session shell on a real container: which path a call takes is
told at debug level on ``envlayer.files`` (nothing silent), and what the session path
must not do (run as root, touch the session's state) it does not do."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlayer.errors import (
    SandboxFileError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
    SandboxPermissionDenied,
)
from envlayer.execution.shell_session import RESTARTED_AFTER_KILL
from envlayer.sandbox.archive import pack_dir
from envlayer.sandbox.paths import check_real_path
from envlayer.testing.fixtures import require_docker

pytestmark = pytest.mark.docker


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "envlayer.files"]


def _exists_by_transport(env: Any, path: str) -> bool:
    try:
        env.fetch_file(path, 1024)
    except FileNotFoundError:
        return False
    return True


def test_small_files_take_the_session_and_large_ones_say_why_not(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("true").check()
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    env.write_file("small.bin", b"\x00\xff" * 512)
    assert env.read_file("small.bin") == b"\x00\xff" * 512
    assert _fallbacks(caplog) == [], "a 1 KiB file must travel through a free session"
    big = b"x" * (1_048_576 + 1)
    env.write_file("big.bin", big)
    assert env.read_file("big.bin") == big
    said = _fallbacks(caplog)
    assert any("write_file" in m and "larger than the session's 1048576 bytes" in m for m in said), said
    assert any("read_file" in m and "larger than the session's 1048576 bytes" in m for m in said), said


def test_a_busy_session_is_a_logged_fallback(make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    env = make_env(persist_across_processes=False)
    flag = f"/tmp/busy-{uuid.uuid4().hex[:8]}"
    runner = threading.Thread(target=lambda: env.exec(f"touch {flag}; while [ ! -e {flag}.stop ]; do sleep 0.1; done"))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while not _exists_by_transport(env, flag):  # never through the session: the command must get it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        caplog.set_level(logging.DEBUG, logger="envlayer.files")
        env.write_file("during.txt", b"while busy")
        assert env.read_file("during.txt") == b"while busy"
    finally:
        env.store_file(f"{flag}.stop", b"")
        runner.join(60)
    said = _fallbacks(caplog)
    assert sum("session shell is busy" in m for m in said) == 2, said


def test_the_session_path_keeps_the_users_rights_and_the_sessions_state(make_env: Callable[..., Any]) -> None:
    env = make_env(user="65534:65534", cwd="/tmp", persist_across_processes=False)
    env.exec("cd /; export KEEP=1; set -u").check()
    env.exec("printf secret > /tmp/s && chmod 000 /tmp/s").check()
    with pytest.raises(SandboxPermissionDenied):
        env.read_file("/tmp/s")
    env.write_file("/tmp/fine.txt", b"ok")
    assert env.read_file("/tmp/fine.txt") == b"ok"
    after = env.exec('printf "%s %s" "$PWD" "$KEEP"; case $- in *u*) echo " u";; esac')
    assert after.stdout == b"/ 1 u\n", "a file call changed the session's directory, variables or options"


def test_a_1_mib_write_takes_the_session_byte_for_byte_and_keeps_the_mode(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("printf old > /tmp/tool && chmod 751 /tmp/tool").check()
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    data = (bytes(range(256)) + b"\ntouch /tmp/pwned\n") * (1_048_576 // 274)
    env.write_file("/tmp/tool", data)
    assert _fallbacks(caplog) == [], "a 1 MiB write must travel through a free session"
    assert env.read_file("/tmp/tool") == data
    temps = "ls -a /tmp | grep -c '^.envlayer-.*tmp$'"
    listing = env.exec(f"stat -c %a /tmp/tool; {temps}; test -e /tmp/pwned || echo clean")
    assert listing.stdout == b"751\n0\nclean\n", listing


def test_a_file_error_under_set_e_leaves_the_session_shell_alone(make_env: Callable[..., Any]) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("kept=1; set -e").check()
    with pytest.raises(FileNotFoundError):
        env.read_file("/missing/file")
    with pytest.raises(SandboxFileError):
        env.write_file("/etc/passwd/x", b"x" * 10_000)  # its "directory" is a file
    after = env.exec('echo "kept=${kept-}"')
    assert (after.stdout, after.recovered) == (b"kept=1\n", ""), "a file call ended the session shell"


def test_ctrl_c_mid_write_leaves_the_old_file_no_temp_and_says_the_shell_restarted(
    make_env: Callable[..., Any],
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("printf old > /tmp/f.txt").check()
    stream = env._session.shell.stream
    send = stream.write

    def interrupted(data: bytes, deadline: float | None = None) -> None:
        if len(data) > 100_000:  # the file's bytes: half went out when Ctrl-C came
            send(data[: len(data) // 2], deadline)
            raise KeyboardInterrupt
        send(data, deadline)

    stream.write = interrupted
    with pytest.raises(KeyboardInterrupt):
        env.write_file("/tmp/f.txt", b"n" * 300_000)
    after = env.exec("cat /tmp/f.txt; ls -a /tmp | grep -c '^.envlayer-.*tmp$'")
    assert (after.stdout, after.recovered) == (b"old0\n", RESTARTED_AFTER_KILL), after


def test_bytes_the_shell_cannot_take_are_never_run_and_the_write_takes_the_transport(
    make_env: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("ulimit -f 0").check()  # head is killed by its first write, having taken a part
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    data = b"touch /tmp/pwned\n" * 5000
    env.write_file("/tmp/script.sh", data)
    assert any("could not take the data and was restarted" in m for m in _fallbacks(caplog)), _fallbacks(caplog)
    assert env.fetch_file("/tmp/script.sh", 1 << 20) == data
    after = env.exec("test -e /tmp/pwned && echo pwned; ulimit -f")
    assert (after.stdout, after.recovered) == (b"unlimited\n", RESTARTED_AFTER_KILL), after


@pytest.mark.parametrize("size", [4, 10_000], ids=["printf", "raw"])
def test_file_root_holds_for_new_directories_under_a_link_out_of_it(make_env: Callable[..., Any], size: int) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("mkdir -p /tmp/jail /tmp/outside && ln -s /tmp/outside /tmp/jail/out").check()
    env.options.file_root = "/tmp/jail"
    for path in ("/tmp/jail/out/new/deeper/x", "/tmp/jail/out/x"):
        with pytest.raises(SandboxPathError):
            env.write_file(path, b"n" * size)
        with pytest.raises(SandboxPathError):
            env.read_file(path)
    assert env.exec("ls -A /tmp/outside").stdout == b"", "a write escaped file_root"
    env.write_file("/tmp/jail/in/new/x", b"y" * size)
    assert env.read_file("/tmp/jail/in/new/x") == b"y" * size
    env.store_file("/tmp/jail/via-transport/x", b"t")  # the transport's own check, as when the session is busy
    with pytest.raises(SandboxPathError):
        check_real_path(env.file_helper, "x", "/tmp/jail/out/new/deeper/x", "/tmp/jail")


@pytest.mark.parametrize("image", ["envlayer-test:debian", "envlayer-test:busybox"])
def test_a_replaced_file_keeps_its_mode_owner_and_group_on_either_path(
    make_env: Callable[..., Any], image: str
) -> None:
    """The Debian image takes the cheap pair (``chmod --reference``, ``rename.ul``) for a
    file of the user's own; a file of another owner, or in a directory that gives new files
    its group, takes ``cp -p`` there too; BusyBox always ``cp -p`` and ``mv``."""
    require_docker(image, "a replaced file's mode on this image")
    env = make_env(image=image, persist_across_processes=False)
    env.exec(
        "printf old > /tmp/own && chmod 751 /tmp/own; "
        "printf old > /tmp/theirs && chown 1234:4321 /tmp/theirs && chmod 640 /tmp/theirs; "
        "mkdir /tmp/sg && chgrp 4321 /tmp/sg && chmod 2775 /tmp/sg && printf old > /tmp/sg/f && chgrp 0 /tmp/sg/f "
        "&& chmod 604 /tmp/sg/f"
    ).check()
    for path in ("/tmp/own", "/tmp/theirs", "/tmp/sg/f"):
        env.write_file(path, b"new")
        assert env.read_file(path) == b"new"
    temps = "ls -a /tmp /tmp/sg | grep -c '^.envlayer-.*tmp$'"
    listing = env.exec(f"stat -c '%a %u:%g' /tmp/own /tmp/theirs /tmp/sg/f; {temps}")
    assert listing.stdout == b"751 0:0\n640 1234:4321\n604 0:0\n0\n", listing


def _spy_transport(env: Any) -> list[str]:
    """What reaches the backend's directory transport from now on."""
    used: list[str] = []
    transport = env._files_call

    def spy(fn: Callable[[Any], Any], doing: str) -> Any:
        used.append(doing)
        return transport(fn, doing)

    env._files_call = spy
    return used


def _listing(env: Any, path: str) -> bytes:
    return env.exec(f"cd {path} && find . -printf '%p %m %u:%g %y %l\\n' | sort").check().stdout


def test_directories_take_the_session_both_ways_as_the_transport_would(
    make_env: Callable[..., Any], tmp_path: Path
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("true").check()
    src = tmp_path / "src"
    (src / "sub dir" / "deeper").mkdir(parents=True)
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "sub dir" / "data.bin").write_bytes(bytes(range(256)) * 300)
    (src / "sub dir" / "deeper" / "empty").write_bytes(b"")
    os.symlink("run.sh", src / "link")
    used = _spy_transport(env)
    up = env.upload_dir(src, "/tmp/by-session")
    assert used == [], "a small directory must go up through the free session"
    assert (up.files, up.bytes) == (3, 18 + 256 * 300)
    env._files_call(lambda f: f.unpack(pack_dir(str(src), 1 << 30, owner=(0, 0)), "/tmp/by-transport"), "reference")
    env._files_call(lambda f: f.unpack(pack_dir(str(src), 1 << 30, owner=(0, 0)), "/srv/by-api"), "reference")
    assert _listing(env, "/tmp/by-session") == _listing(env, "/tmp/by-transport") == _listing(env, "/srv/by-api")
    back = tmp_path / "back"
    down = env.download_dir("/tmp/by-session", back)
    assert used == ["reference"] * 2, "a small directory must come down through the free session"
    assert (down.files, down.bytes) == (up.files, up.bytes)
    assert (back / "sub dir" / "data.bin").read_bytes() == (src / "sub dir" / "data.bin").read_bytes()
    assert os.readlink(back / "link") == "run.sh" and os.access(back / "run.sh", os.X_OK)


def test_directories_the_session_cannot_carry_take_the_transport_with_its_errors(
    make_env: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec(
        "mkdir /tmp/big && head -c 1200000 /dev/urandom > /tmp/big/blob && mkdir -p /srv && printf x > /srv/plain"
    ).check()
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    used = _spy_transport(env)
    down = env.download_dir("/tmp/big", tmp_path / "big")
    assert (down.files, down.bytes) == (1, 1_200_000) and used == ["downloading /tmp/big"]
    with pytest.raises(SandboxFileNotFound):
        env.download_dir("/tmp/missing", tmp_path / "missing")
    with pytest.raises(NotADirectoryError):
        env.download_dir("/srv/plain", tmp_path / "plain")  # the archive API says so
    said = _fallbacks(caplog)
    assert sum("download_dir" in m and "using the transport" in m for m in said) == 3, said
    kept = env.exec("cat /tmp/.envlayer-session-*/transfer.tar | wc -c").check()
    assert kept.stdout.strip() == b"0", "the session's archive file must be emptied after each call"


def test_an_upload_through_the_session_stays_inside_the_file_root(make_env: Callable[..., Any], tmp_path: Path) -> None:
    env = make_env(persist_across_processes=False, file_root="/srv/jail")
    env.exec("mkdir -p /srv/jail /srv/outside && ln -s /srv/outside /srv/jail/escape").check()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    with pytest.raises(SandboxPathError):
        env.upload_dir(src, "/srv/jail/escape/new")
    assert env.exec("ls -A /srv/outside").stdout == b""
    env.upload_dir(src, "/srv/jail/ok")
    assert env.exec("cat /srv/jail/ok/f").stdout == b"x"


def test_a_directory_upload_the_shell_cannot_take_goes_whole_through_the_transport(
    make_env: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("ulimit -f 0").check()  # head is killed by its first write of the archive
    src = tmp_path / "src"
    src.mkdir()
    (src / "script.sh").write_bytes(b"touch /tmp/pwned\n" * 2000)
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    assert env.upload_dir(src, "/tmp/up").files == 1
    said = _fallbacks(caplog)
    assert any("upload_dir" in m and "could not take the data and was restarted" in m for m in said), said
    after = env.exec("test -e /tmp/pwned || echo clean")
    assert (after.stdout, after.recovered) == (b"clean\n", RESTARTED_AFTER_KILL), after
    assert env.fetch_file("/tmp/up/script.sh", 1 << 20) == b"touch /tmp/pwned\n" * 2000


def test_a_directory_download_with_other_output_mixed_in_takes_the_transport(
    make_env: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env(persist_across_processes=False)
    env.exec("mkdir /tmp/tree && printf kept > /tmp/tree/f").check()
    env.exec("(sleep 0.2; echo noise; touch /tmp/said) &").check()
    deadline = time.monotonic() + 60
    while not _exists_by_transport(env, "/tmp/said"):  # written between calls: the next call's output
        assert time.monotonic() < deadline
        time.sleep(0.05)
    caplog.set_level(logging.DEBUG, logger="envlayer.files")
    used = _spy_transport(env)
    down = env.download_dir("/tmp/tree", tmp_path / "back")
    assert (down.files, (tmp_path / "back" / "f").read_bytes()) == (1, b"kept")
    assert used == ["downloading /tmp/tree"], "an archive with other bytes mixed in must not be unpacked"


@pytest.mark.parametrize(
    ("image", "shell"),
    [("envlayer-test:busybox", "/bin/sh"), ("envlayer-test:debian", "/bin/sh"), ("envlayer-test:debian", "/bin/bash")],
)
def test_small_file_calls_by_the_session_shell_itself_leave_the_shell_as_they_found_it(
    make_env: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, image: str, shell: str
) -> None:
    """Small writes and reads without a file root run as a function of the session shell
    (no subshell): the user's variables named like the function's, a trap, the directory,
    ``set -u`` and the user's own fd 3 are as before, and no function is left."""
    from envlayer.sandbox import files

    require_docker(image, "small file calls in the session shell")
    env = make_env(image=image, shell=shell, persist_across_processes=False)
    in_shell: list[bool] = []
    through = files._in_session
    monkeypatch.setattr(files, "_in_session", lambda e, r, w: in_shell.append(r.in_shell) or through(e, r, w))
    env.exec("t=T; d=D; u=U; f=F; e=E; s=S; k=K; v=V; p=P; trap 'echo caught' INT; cd /tmp; set -u").check()
    env.exec("exec 3</etc/hostname").check()
    probe = 'printf "%s|" "$t" "$d" "$u" "$f" "$e" "$s" "$k" "$v" "$p" "$PWD" "$-"; trap; head -c 3 <&3'
    before = env.exec(probe).check().stdout
    env.exec("exec 3</etc/hostname").check()
    env.write_file("/tmp/a.txt", b"first")
    env.write_file("/tmp/a.txt", b"second")  # a replace
    assert env.read_file("/tmp/a.txt") == b"second"
    with pytest.raises(SandboxFileError):  # errors on the way
        env.write_file("/etc/passwd/x", b"x")
    with pytest.raises(SandboxFileNotFound):
        env.read_file("/tmp/none")
    with pytest.raises(SandboxIsADirectory):
        env.read_file("/tmp")
    assert in_shell == [True] * 6, "each call ran in the session shell itself"
    after = env.exec(f"{probe}; command -v __el_fc || echo gone")
    assert after.stdout == before + b"gone\n", (before, after)


def test_ctrl_c_during_a_small_write_by_the_session_shell_leaves_no_temp_file(
    make_env: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell sets no trap for it (that would change the user's): the client removes
    the temp file the script may have made, then lets Ctrl-C go on."""
    from envlayer.sandbox import files

    env = make_env(persist_across_processes=False)
    env.exec("printf old > /tmp/f.txt").check()

    def interrupted(env: Any, request: Any, what: str) -> None:
        word = re.search(r"/tmp/f\.txt '' ([0-9a-f]{32})", request.command)
        assert word is not None, request.command
        env.store_file(f"/tmp/.envlayer-{word.group(1)}.tmp", b"half")  # as the script had made it
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "_in_session", interrupted)
    with pytest.raises(KeyboardInterrupt):
        env.write_file("/tmp/f.txt", b"new")
    monkeypatch.undo()
    assert env.exec("cat /tmp/f.txt; ls -a /tmp | grep -c '^.envlayer-.*tmp$'").stdout == b"old0\n"
