"""Pure-logic tests: no daemon needed (label sanitizing, naming, fingerprints, time
parsing, the marker protocol, option validation, safe tar extraction, import cost)."""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
import sys
import tarfile
from types import SimpleNamespace

import pytest
from envlayer_docker import labels
from envlayer_docker.files import safe_extract
from envlayer_docker.naming import container_name, private_name
from envlayer_docker.options import DockerOptions, parse_volume
from envlayer_docker.reaper import parse_docker_time, parse_idle_check
from envlayer_docker.transport import AttachStream, FrameDemux

from envlayer.errors import BackendUnavailable, SandboxPathError
from envlayer.options import OptionError
from envlayer.sandbox import archive as tar_extract

LABEL_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


# --- labels -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["plain-name_1.0", "kanban-42", "x" * 63])
def test_clean_values_are_kept(value: str) -> None:
    assert labels.sanitize(value) == value


@pytest.mark.parametrize("value", ["with/slash", "with:colon", "emoji-😀", "x" * 64, "a b", "ü", "unknown", ""])
def test_sanitized_values_are_valid(value: str) -> None:
    out = labels.sanitize(value)
    assert out and len(out) <= 63 and set(out) <= LABEL_OK


def test_empty_and_none_become_unknown() -> None:
    assert labels.sanitize("") == "unknown"
    assert labels.sanitize(None) == "unknown"


def test_sanitizing_is_injective_on_tricky_inputs() -> None:
    inputs = ["a/b", "a_b", "a:b", "unknown", "", "x" * 64, "x" * 65, "x" * 63]
    # a clean value that looks like a rewritten one must not collide with it
    rewritten = labels.sanitize("a/b")
    inputs.append(rewritten)
    outs = [labels.sanitize(v) for v in inputs]
    assert len(set(outs)) == len(outs), dict(zip(inputs, outs, strict=True))


def test_readable_prefix_survives() -> None:
    assert labels.sanitize("team/alpha:task 7").startswith("team_alpha_task_7.h")


def test_fingerprint_is_order_independent_and_label_safe() -> None:
    a = labels.fingerprint({"image": "x", "mem": 1, "caps": ["A"]})
    b = labels.fingerprint({"caps": ["A"], "mem": 1, "image": "x"})
    assert a == b and set(a) <= LABEL_OK and len(a) <= 63
    assert a != labels.fingerprint({"image": "y", "mem": 1, "caps": ["A"]})


def test_filters_use_sanitized_values() -> None:
    assert labels.filters(profile="p/1", task="t") == [
        "envlayer.managed=1",
        f"envlayer.profile={labels.sanitize('p/1')}",
        "envlayer.task=t",
    ]


def test_owner_label_and_liveness() -> None:
    from envlayer.sandbox.owner import owner_is_dead, owner_label

    mine = owner_label()
    assert mine is not None and len(mine) <= 63 and set(mine) <= LABEL_OK
    assert owner_is_dead(mine) is False
    pid, start, host = mine.split("-", 2)
    assert owner_is_dead(f"{pid}-{int(start) + 1}-{host}") is True  # same pid, other process
    assert owner_is_dead(f"{pid}-{start}-otherhost.12345678") is False  # another host: never judged
    assert owner_is_dead("garbage") is False


def test_every_label_the_backend_sets_is_documented_by_its_full_name() -> None:
    """docs/backends/docker.md once named the owner label ``envlayer.sandbox.owner``: users
    filter ``docker ps`` by these names, so each must be written as the code sets it."""
    import re
    from pathlib import Path

    from envlayer_docker import cow, snapshots

    doc = (Path(__file__).parents[3] / "docs" / "backends" / "docker.md").read_text()
    keys = {value for value in vars(labels).values() if isinstance(value, str) and value.startswith("envlayer.")}
    keys = (keys - {labels.RESERVED_PREFIX}) | {snapshots.FROM_SNAPSHOT}
    keys |= {cow.SNAPSHOT_VOLUME, cow.LAYER, cow.LOWER, cow.DATA_VOLUMES}
    assert {labels.OWNER, labels.MANAGED, labels.TASK_ID} <= keys
    assert [key for key in sorted(keys) if not re.search(rf"`{re.escape(key)}[`=]", doc)] == []


def _stat(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()


def test_an_owner_killed_but_not_yet_reaped_is_dead() -> None:
    """A SIGKILLed owner stays a zombie until its parent reaps it: it runs no more."""
    import subprocess
    import time

    from envlayer.sandbox.owner import owner_is_dead, owner_label

    child = subprocess.Popen(["sh", "-c", "read line"], stdin=subprocess.PIPE)
    try:
        start = _stat(child.pid)[19].decode()
        label = f"{child.pid}-{start}-{(owner_label() or '').split('-', 2)[2]}"
        assert owner_is_dead(label) is False
        child.kill()
        deadline = time.monotonic() + 30
        while _stat(child.pid)[0] != b"Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        assert owner_is_dead(label) is True
    finally:
        child.kill()
        child.wait()


# --- naming --------------------------------------------------------------------------------


def test_container_name_is_deterministic_and_distinct() -> None:
    assert container_name("p", "t") == container_name("p", "t")
    assert container_name("p", "a/b") != container_name("p", "a_b")
    assert container_name("p-x", "t") != container_name("p", "x-t")
    assert private_name("p", "t") != private_name("p", "t")


# --- time parsing ----------------------------------------------------------------------------


def test_parse_docker_time_nanoseconds_and_offsets() -> None:
    base = parse_docker_time("2024-05-01T10:00:00Z")
    assert base is not None
    assert parse_docker_time("2024-05-01T10:00:00.123456789Z") == pytest.approx(base + 0.123456)
    assert parse_docker_time("2024-05-01T12:00:00+02:00") == pytest.approx(base)


@pytest.mark.parametrize(
    "value", ["", None, "0001-01-01T00:00:00Z", "yesterday", "2024-13-45T99:00:00Z", 12, "2024-05-01"]
)
def test_parse_docker_time_refuses_garbage(value: object) -> None:
    assert parse_docker_time(value) is None


def test_idle_check_decision() -> None:
    assert parse_idle_check(b"1000 900 0\n", None, 50) is True
    assert parse_idle_check(b"1000 990 0\n", None, 50) is False
    assert parse_idle_check(b"1000 900 1\n", None, 50) is False  # a command is alive
    assert parse_idle_check(b"1000 - 0\n", 900.0, 50) is True  # no lease: container start
    assert parse_idle_check(b"1000 - 0\n", None, 50) is False
    assert parse_idle_check(b"garbage", 0.0, 50) is False


# --- reaper decisions (a fake API stands in for the daemon; the logic is real) ---------


def test_reaper_leaves_containers_with_unparseable_finish_time() -> None:
    from envlayer_docker import reaper

    class FakeApi:  # only the boundary the reaper talks to; the decision logic is real
        removed: list[str] = []

        def containers(self, **kw):
            return [
                {"Id": "a" * 64, "Labels": {}, "State": "exited"},
                {"Id": "b" * 64, "Labels": {}, "State": "exited"},
            ]

        def inspect_container(self, cid):
            finished = "0001-01-01T00:00:00Z" if cid.startswith("a") else "garbage"
            return {"Id": cid, "State": {"Status": "exited", "FinishedAt": finished}}

        def remove_container(self, cid, **kw):
            self.removed.append(cid)

    fake = FakeApi()
    assert reaper.reap(fake, profile="p", max_age=0, dry_run=False) == []
    assert fake.removed == []


def test_reaper_one_failure_does_not_stop_the_sweep() -> None:
    from docker.errors import APIError
    from envlayer_docker import reaper

    class FlakyApi:
        removed: list[str] = []

        def containers(self, **kw):
            return [{"Id": c * 64, "Labels": {}, "State": "exited"} for c in "abc"]

        def inspect_container(self, cid):
            if cid.startswith("b"):
                raise APIError("boom")
            return {"Id": cid, "State": {"Status": "exited", "FinishedAt": "2020-01-01T00:00:00Z"}}

        def remove_container(self, cid, **kw):
            self.removed.append(cid[0])

    fake = FlakyApi()
    assert len(reaper.reap(fake, profile="p", max_age=60, dry_run=False)) == 2
    assert sorted(fake.removed) == ["a", "c"]


# --- protocol ---------------------------------------------------------------------------------


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("step", [1, 2, 3, 7, 9, 17, 1000])
def test_demux_handles_split_frames(step: int) -> None:
    raw = _frame(1, b"hello") + _frame(2, b"err") + _frame(1, b"") + _frame(3, b"ignored") + _frame(1, b"x" * 40)
    demux = FrameDemux()
    got: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    order = []
    for i in range(0, len(raw), step):
        for name, payload in demux.feed(raw[i : i + step]):
            got[name] += payload
            order.append(name)
    assert got == {"stdout": b"hello" + b"x" * 40, "stderr": b"err"}
    assert order.index("stderr") > order.index("stdout")


def _attached_after_late_header_read(stream: bytes) -> object:
    """What docker-py's ``exec_start(socket=True)`` returns when the client read the
    response headers late: the daemon had already sent the whole (short) stream and closed
    it, and the buffered reader that parsed the headers took the stream along with them.
    Shaped like docker-py's result: a ``SocketIO`` whose ``_response.raw._fp.fp`` is that
    reader."""
    daemon, client = socket.socketpair()
    daemon.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n" + stream)
    daemon.close()
    reader = client.makefile("rb")
    while reader.readline() not in (b"\r\n", b""):
        pass
    attached = reader.raw
    attached._response = SimpleNamespace(raw=SimpleNamespace(_fp=SimpleNamespace(fp=reader)))  # type: ignore[attr-defined]
    return attached


def test_stream_bytes_read_with_the_response_headers_are_not_lost() -> None:
    attached = _attached_after_late_header_read(_frame(1, b"back\n") + _frame(2, b"err"))
    stream = AttachStream(None, "exec-id", attached, container=None, options=DockerOptions())
    got: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    try:
        while (chunks := stream.read(None)) is not None:
            for name, payload in chunks:
                got[name] += payload
    finally:
        stream.close()
    assert got == {"stdout": b"back\n", "stderr": b"err"}


class _StreamCutShort:
    """An exec whose output stream ended before the wrapper's trailer arrived although
    the daemon reports that it exited 0 (the wrapper's status once it printed it)."""

    def __init__(self) -> None:
        self.reads: list[list[tuple[str, bytes]] | None] = [[("stdout", b"par")], None]

    def read(self, deadline: float | None) -> list[tuple[str, bytes]] | None:
        return self.reads.pop(0) if self.reads else None

    def exit_status(self, wait: float) -> int | None:
        return 0

    def close(self) -> None:
        pass


def test_oneshot_output_cut_short_is_an_error_not_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from envlayer_docker import runners

    from envlayer.request import ExecRequest

    monkeypatch.setattr(runners, "start_exec", lambda *a, **kw: _StreamCutShort())
    target = runners.ExecTarget(api=None, options=DockerOptions(), container=None, user=None, env={})
    with pytest.raises(BackendUnavailable, match="did not arrive in full"):
        runners.run_oneshot(target, ExecRequest.build("echo partial"), cwd="/", touch_lease=False)


# --- options ------------------------------------------------------------------------------------


def test_volume_parsing() -> None:
    assert parse_volume("/data:/data:ro") == ("/data", "/data", True)
    assert parse_volume("named_vol:/cache") == ("named_vol", "/cache", False)
    for bad in ("relative/path:/x", "/a:relative", "/a:/b:rx", "/a", "/a:/:ro", "/a:/b:ro:extra"):
        with pytest.raises(OptionError):
            parse_volume(bad)


@pytest.mark.parametrize(
    "kw",
    [
        {"volumes": ["nope"]},
        {"tmpfs": {"tmp": "size=1m"}},
        {"tmpfs": {"/tmp": "size=lots"}},
        {"cap_add": ["ALL"]},
        {"forward_env": ["1BAD"]},
        {"extra_create_kwargs": {"privileged": True}},
        {"labels": {"envlayer.task": "x"}},
        {"cpus": -1},
        {"user": "a b"},
        {"cwd": "relative"},
        {"idle_reclaim_after": -1},
        {"shm_size": "lots"},
        {"home_dir": "relative"},
        {"cwd": "/", "workspace": "volume"},
        {"image": " "},
    ],
)
def test_bad_options_are_rejected(kw: dict) -> None:
    with pytest.raises(OptionError):
        DockerOptions(**kw)


def test_defaults_are_hardened() -> None:
    opts = DockerOptions()
    assert opts.no_new_privileges and opts.init and opts.pids_limit > 0
    assert "SYS_ADMIN" not in opts.cap_add and opts.pull is False
    assert opts.workdir == "/workspace"


# --- safe extraction -------------------------------------------------------------------------------


def _tar(*members: tuple[str, str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, extra in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(extra)
                tar.addfile(info, io.BytesIO(extra.encode()))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, extra
                tar.addfile(info)
    return buf.getvalue()


def test_safe_extract_strips_first_component(tmp_path) -> None:
    safe_extract(
        _tar(("dir", "top", ""), ("file", "top/a.txt", "A"), ("sym", "top/l", "a.txt")), str(tmp_path), strip_first=True
    )
    assert (tmp_path / "a.txt").read_text() == "A"
    assert os.readlink(tmp_path / "l") == "a.txt"


@pytest.mark.parametrize(
    "member",
    [
        ("file", "top/../../evil", "x"),
        ("file", "/abs/evil", "x"),
        ("sym", "top/l", "/etc/passwd"),
        ("sym", "top/l", "../../x"),
    ],
)
def test_safe_extract_rejects_escapes(tmp_path, member) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(SandboxPathError):
        safe_extract(_tar(("file", "top/ok", "ok"), member), str(dest), strip_first=True)
    assert not (dest / "ok").exists()  # nothing was written


FILTER_PATHS = [
    pytest.param(True, marks=pytest.mark.skipif(not tar_extract.HAS_DATA_FILTER, reason="no tarfile.data_filter")),
    False,
]


@pytest.mark.parametrize("use_filter", FILTER_PATHS, ids=["data_filter", "fallback"])
def test_safe_extract_refuses_a_symlink_chain_leading_out(tmp_path, monkeypatch, use_filter) -> None:
    monkeypatch.setattr(tar_extract, "HAS_DATA_FILTER", use_filter)
    dest = tmp_path / "dest"
    dest.mkdir()
    payload = _tar(("sym", "top/a", "x/.."), ("sym", "top/b", "a/.."), ("file", "top/b/evil", "x"))
    with pytest.raises(SandboxPathError):
        safe_extract(payload, str(dest), strip_first=True)
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize("use_filter", FILTER_PATHS, ids=["data_filter", "fallback"])
def test_safe_extract_strips_dangerous_modes_and_owners(tmp_path, monkeypatch, use_filter) -> None:
    monkeypatch.setattr(tar_extract, "HAS_DATA_FILTER", use_filter)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in (("top/suid", 0o4777), ("top/plain", 0o444)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = 1, mode, 4321, 4321
            tar.addfile(info, io.BytesIO(b"x"))
    safe_extract(buf.getvalue(), str(tmp_path), strip_first=True)
    suid, plain = (tmp_path / "suid").stat(), (tmp_path / "plain").stat()
    assert stat.S_IMODE(suid.st_mode) == 0o755, "setuid and group/other write are dropped"
    assert stat.S_IMODE(plain.st_mode) == 0o644, "the owner can read and write"
    assert suid.st_uid == os.geteuid() and plain.st_gid == os.getegid(), "archive owners are ignored"


def test_fallback_refuses_special_files_and_absolute_links(tmp_path) -> None:
    fifo = tarfile.TarInfo("pipe")
    fifo.type = tarfile.FIFOTYPE
    link = tarfile.TarInfo("l")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    for member in (fifo, link):
        with pytest.raises(SandboxPathError):
            tar_extract.data_safe(member, str(tmp_path))


@pytest.mark.parametrize("use_filter", FILTER_PATHS, ids=["data_filter", "fallback"])
def test_check_data_judges_without_writing(tmp_path, monkeypatch, use_filter) -> None:
    monkeypatch.setattr(tar_extract, "HAS_DATA_FILTER", use_filter)
    escape, absolute = tarfile.TarInfo("../evil"), tarfile.TarInfo("l")
    absolute.type, absolute.linkname = tarfile.SYMTYPE, "/etc/passwd"
    for member in (escape, absolute):
        with pytest.raises(SandboxPathError):
            tar_extract.check_data(member, str(tmp_path))
    tar_extract.check_data(tarfile.TarInfo("sub/ok"), str(tmp_path))
    assert list(tmp_path.iterdir()) == [], "checking writes nothing"


# --- import cost ----------------------------------------------------------------------------------


def test_loading_the_backend_does_not_import_docker() -> None:
    code = (
        "import sys, envlayer_docker.backend as b, envlayer_docker.options;"
        "b.DockerEnvironment.Options; print('docker' in sys.modules, 'requests' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


@pytest.mark.parametrize(
    "message",
    [
        "OCI runtime create failed: runc create failed: unable to apply cgroup configuration: "
        "mkdir /sys/fs/cgroup/docker: permission denied",
        "failed to write 1024 to pids.max: open /sys/fs/cgroup/pids.max: no such file or directory",
        "Your kernel does not support CPU cfs period/quota or the cgroup is not mounted (cpu.cfs)",
    ],
)
def test_limit_failures_get_a_hint(message: str) -> None:
    from envlayer_docker.container import limit_failure

    hinted = limit_failure(Exception(message), DockerOptions(pids_limit=100))
    assert hinted is not None and "rootless" in hinted.hint and "pids_limit = 0" in hinted.hint
    assert message[:40] in hinted.message
    # no limits asked for, or an unrelated failure: no misleading hint
    assert limit_failure(Exception(message), DockerOptions(pids_limit=0)) is None
    assert limit_failure(Exception("no such device /dev/x"), DockerOptions()) is None
