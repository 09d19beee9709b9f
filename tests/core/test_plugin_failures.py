"""Broken, old and conflicting plugins as real installed distributions.

Each plugin is a ``*.dist-info`` directory (METADATA, entry_points.txt, RECORD) plus its
module, written to a temporary site directory exactly as ``pip install --target`` lays
them out. Nothing is installed into the shared virtual environment: the CLI and the
Python API run in subprocesses with that directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ENVLAYER = shutil.which("envlayer", path=os.path.dirname(sys.executable)) or "envlayer"

_TOY_BASED = "from envlayer_toy import ToyEnvironment\n"

PLUGINS: dict[str, tuple[dict[str, str], str, str]] = {
    # distribution: ({name: target}, module, source)
    "envlayer-oldsig": (
        {"old": "envlayer_oldsig:OldEnvironment", "oldreap": "envlayer_oldsig:OldReaper"},
        "envlayer_oldsig",
        _TOY_BASED
        + '''
import json, os

class OldEnvironment(ToyEnvironment):
    """Written against an older envlayer: declares nothing; no timeout on
    wait_for_cleanup, no options/dry_run on reap_orphans."""
    name = "old"

    def wait_for_cleanup(self):
        return True

    @classmethod
    def reap_orphans(cls, profile, max_age):
        raise AssertionError("the dispatcher must not call an unusable reaper")


class OldReaper(ToyEnvironment):
    """A reaper without dry_run: it can only reap."""
    name = "oldreap"

    @classmethod
    def reap_orphans(cls, *, profile, max_age, options):
        with open(os.environ["OLDREAP_LOG"], "a") as fh:
            fh.write(json.dumps({"profile": profile, "max_age": max_age}) + "\\n")
        return []
''',
    ),
    "envlayer-ctorboom": (
        {"boom": "envlayer_ctorboom:BoomEnvironment"},
        "envlayer_ctorboom",
        _TOY_BASED
        + """
class BoomEnvironment(ToyEnvironment):
    name = "boom"

    def __init__(self, options=None, *, task_id="default", profile="default"):
        raise RuntimeError("no credentials file at ~/.boom")
""",
    ),
    "envlayer-callboom": (
        {"callboom": "envlayer_callboom:CallBoomEnvironment"},
        "envlayer_callboom",
        _TOY_BASED
        + """
class CallBoomEnvironment(ToyEnvironment):
    name = "callboom"

    def exec(self, command, **kwargs):
        raise ValueError("sdk returned an unexpected payload")
""",
    ),
    "envlayer-notenv": (
        {"notenv": "envlayer_notenv:NotAnEnvironment"},
        "envlayer_notenv",
        "class NotAnEnvironment:\n    def exec(self, command): ...\n",
    ),
    "envlayer-importboom": (
        {"importboom": "envlayer_importboom:Env"},
        "envlayer_importboom",
        "import envlayer_sdk_that_is_not_installed\n",
    ),
    "envlayer-impostor": (
        {"local": "envlayer_impostor:Impostor"},
        "envlayer_impostor",
        _TOY_BASED + "class Impostor(ToyEnvironment):\n    name = 'local'\n",
    ),
    "envlayer-down": (
        {"down": "envlayer_down:DownEnvironment"},
        "envlayer_down",
        _TOY_BASED
        + '''
from envlayer import BackendUnavailable, Capability

class DownEnvironment(ToyEnvironment):
    """Healthy code, unreachable infrastructure."""
    name = "down"
    capabilities = frozenset({Capability.LIST_SANDBOXES})

    @classmethod
    def list_sandboxes(cls, *, profile, options):
        raise BackendUnavailable("the down service is not reachable", hint="start it")
''',
    ),
    "envlayer-dup-a": ({"dup": "envlayer_dup_a:Env"}, "envlayer_dup_a", _TOY_BASED + "Env = ToyEnvironment\n"),
    "envlayer-dup-b": ({"dup": "envlayer_dup_b:Env"}, "envlayer_dup_b", _TOY_BASED + "Env = ToyEnvironment\n"),
}


def install(site: Path, distribution: str, entry_points: dict[str, str], module: str, source: str) -> None:
    """Lay out ``distribution`` in ``site`` as ``pip install --target`` would."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[envlayer.backends]\n{lines}\n")
    (info / "INSTALLER").write_text("envlayer-tests\n")
    records = [f"{module}.py,,", *(f"{info.name}/{f},," for f in ("METADATA", "entry_points.txt", "INSTALLER"))]
    (info / "RECORD").write_text("\n".join([*records, f"{info.name}/RECORD,,"]) + "\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugin-site")
    for distribution, (entry_points, module, source) in PLUGINS.items():
        install(root, distribution, entry_points, module, source)
    return root


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def _env(site: Path, workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVLAYER_")}
    env.update(PYTHONPATH=str(site), XDG_CONFIG_HOME=str(workdir / "xdg"), **(extra or {}))
    return env


def cli(site: Path, workdir: Path, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVLAYER, *args], capture_output=True, text=True, timeout=60, cwd=workdir, env=_env(site, workdir, extra)
    )


def api(site: Path, workdir: Path, code: str) -> dict[str, object]:
    """Run ``code`` (which sets ``out``, a JSON-able dict) in a fresh interpreter."""
    script = "import json\nout = {}\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=workdir, env=_env(site, workdir)
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def assert_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


# --- an old-signature plugin: falls back, never a TypeError ----------------------------


def test_old_signature_plugin_runs_and_falls_back_through_the_cli(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--backend", "old", "--", "echo hi")
    assert (out.returncode, out.stdout) == (0, "hi\n"), out.stderr
    assert_no_traceback(out)
    assert "TypeError" not in out.stderr

    out = cli(site, workdir, "exec", "--rm", "--backend", "old", "--", "echo hi")
    assert out.returncode == 0 and "has no force_remove; ran plain cleanup()" in out.stderr

    out = cli(site, workdir, "reap", "--backend", "old")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "nothing reaped\n"
    assert "has no usable reap_orphans" in out.stderr and "does not accept" in out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr  # reported once
    assert_no_traceback(out)


def test_old_signature_plugin_json_carries_every_fallback(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--json", "--rm", "--backend", "old", "--", "echo hi")
    data = json.loads(out.stdout)
    assert data["exit_code"] == 0 and data["stdout"] == "hi\n"
    assert any("no force_remove" in note for note in data["notes"])
    backends = {b["name"]: b for b in json.loads(cli(site, workdir, "backends", "--json").stdout)}
    old = backends["old"]
    assert "wait_for_cleanup" not in old["capabilities"] and "reap_orphans" not in old["capabilities"]
    assert set(old["unusable"]) == {"wait_for_cleanup", "reap_orphans"}
    assert "wait_for_cleanup()" in old["unusable"]["wait_for_cleanup"]


def test_reaper_without_dry_run_reaps_without_the_keyword_and_refuses_a_dry_run(site: Path, workdir: Path) -> None:
    log = workdir / "reap.log"
    extra = {"OLDREAP_LOG": str(log)}
    out = cli(site, workdir, "reap", "--backend", "oldreap", "--dry-run", extra=extra)
    assert out.returncode == 0, out.stderr
    assert "cannot do a dry run" in out.stderr and "nothing was listed or removed" in out.stderr
    assert not log.exists(), "a dry run must never reach a reaper that can only reap"
    out = cli(site, workdir, "reap", "--backend", "oldreap", "--max-age", "90", extra=extra)
    assert out.returncode == 0, out.stderr
    assert json.loads(log.read_text()) == {"profile": "default", "max_age": 90.0}


def test_old_signature_plugin_through_the_python_api(site: Path, workdir: Path) -> None:
    out = api(
        site,
        workdir,
        """
        from envlayer import open_environment
        from envlayer import dispatch as lifecycle
        from envlayer.discovery.backend_registry import load_backend
        env = open_environment("old")
        out["stdout"] = env.exec("echo hi").stdout_text
        outcome = lifecycle.cleanup(env, force_remove=True)
        out["forced"], out["note"] = outcome.forced, outcome.note
        out["waited"] = lifecycle.wait_for_cleanup(env, 1.0)
        cls = load_backend("old")
        (reap,) = lifecycle.reap_orphans([(cls, cls.Options())], profile="p", max_age=60, dry_run=True)
        out["reap"] = [reap.supported, reap.error, reap.note]

        from envlayer.config import load_settings
        from envlayer.agents.manager import EnvironmentManager
        manager = EnvironmentManager(load_settings(backend="old", profile="plugin-failures"))
        out["managed"] = manager.get("t").exec("echo managed").stdout_text
        chunks = []
        manager.get("t").exec("echo streamed", on_output=lambda s, c: chunks.append(c))
        out["chunks"] = [c.decode() for c in chunks]
        out["release_note"] = manager.release("t", force_remove=True).note
        manager.get("t2")
        out["closed"] = manager.close(timeout=5)
        sweep = manager.orphan_sweep()
        sweep.wait(5)
        out["sweep"] = [(o.supported, o.error) for o in sweep.outcomes]
        """,
    )
    assert out["stdout"] == "hi\n" and out["forced"] is False and "no force_remove" in str(out["note"])
    assert out["waited"] is True
    supported, error, note = out["reap"]  # type: ignore[misc]
    assert supported is False and error is None and "reap_orphans(profile, max_age)" in note
    # the manager goes through the dispatcher too: no TypeError at release, close or sweep
    assert out["managed"] == "managed\n" and out["chunks"] == ["streamed\n"]
    assert "no force_remove" in str(out["release_note"]) and out["closed"] is True
    assert out["sweep"] == [[False, None]]


# --- a constructor that raises ---------------------------------------------------------


def test_constructor_failure_exits_125_naming_backend_and_distribution(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--backend", "boom", "--", "true")
    assert out.returncode == 125
    assert "backend 'boom' from envlayer-ctorboom failed in constructor" in out.stderr
    assert "RuntimeError: no credentials file at ~/.boom" in out.stderr
    assert "report it to its authors" in out.stderr
    assert_no_traceback(out)
    debug = cli(site, workdir, "--debug", "exec", "--backend", "boom", "--", "true")
    assert debug.returncode == 125
    assert "Traceback" in debug.stderr and "envlayer_ctorboom.py" in debug.stderr
    assert "DEBUG" in debug.stderr  # the envlayer loggers speak at DEBUG under --debug


def test_constructor_failure_through_the_python_api(site: Path, workdir: Path) -> None:
    out = api(
        site,
        workdir,
        """
        from envlayer import PluginError, EnvlayerError, open_environment
        try:
            open_environment("boom")
        except PluginError as exc:
            out.update(backend=exc.backend, dist=exc.distribution, stage=exc.stage,
                       cause=type(exc.__cause__).__name__, core=isinstance(exc, EnvlayerError))
        """,
    )
    expected = {"backend": "boom", "dist": "envlayer-ctorboom", "stage": "constructor", "cause": "RuntimeError"}
    assert out == {**expected, "core": True}


def test_call_time_failure_exits_125_and_still_cleans_up(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--backend", "callboom", "--", "true")
    assert out.returncode == 125
    assert "backend 'callboom' from envlayer-callboom failed in exec: ValueError" in out.stderr
    assert_no_traceback(out)
    out = cli(site, workdir, "exec", "--json", "--backend", "callboom", "--debug", "--", "true")
    assert out.returncode == 125 and "failed in exec" in out.stderr
    assert "Traceback" in out.stderr and "sdk returned an unexpected payload" in out.stderr


# --- an entry point that is not an Environment; a module that fails to import -----------


def test_entry_point_that_is_not_an_environment(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--backend", "notenv", "--", "true")
    assert out.returncode == 125
    assert "envlayer_notenv:NotAnEnvironment is not an Environment subclass" in out.stderr
    assert "must name an envlayer.Environment subclass" in out.stderr and "reinstall" not in out.stderr
    assert_no_traceback(out)
    result = api(
        site,
        workdir,
        """
        from envlayer import BackendLoadError, load_backend
        try:
            load_backend("notenv")
        except BackendLoadError as exc:
            out.update(reason=exc.reason, dist=exc.distribution)
        """,
    )
    assert result == {"reason": "not_environment", "dist": "envlayer-notenv"}


def test_import_failure_hint_says_reinstall(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--backend", "importboom", "--", "true")
    assert out.returncode == 125
    assert "envlayer_sdk_that_is_not_installed" in out.stderr and "pip install --force-reinstall" in out.stderr
    assert_no_traceback(out)
    result = api(
        site,
        workdir,
        """
        from envlayer import BackendLoadError, load_backend
        try:
            load_backend("importboom")
        except BackendLoadError as exc:
            out.update(reason=exc.reason, cause=type(exc.__cause__).__name__)
        """,
    )
    assert result == {"reason": "import", "cause": "ModuleNotFoundError"}


# --- a plugin named local; two plugins with one name -----------------------------------


def test_plugin_named_local_is_ignored(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--", "pwd")
    assert (out.returncode, out.stdout) == (0, f"{workdir}\n"), out.stderr  # the built-in local, in this dir
    backends = json.loads(cli(site, workdir, "backends", "--json").stdout)
    impostor = next(b for b in backends if b["distribution"] == "envlayer-impostor")
    assert "belongs to the built-in backend" in impostor["error"]["message"]
    result = api(
        site,
        workdir,
        """
        from envlayer import load_backend
        from envlayer.local.backend import LocalEnvironment
        out["builtin"] = load_backend("local") is LocalEnvironment
        """,
    )
    assert result == {"builtin": True}


def test_two_plugins_with_one_name(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "exec", "--backend", "dup", "--", "true")
    assert out.returncode == 125
    assert "envlayer-dup-a, envlayer-dup-b" in out.stderr and "uninstall all but one" in out.stderr
    assert cli(site, workdir, "ls", "--backend", "dup").returncode == 125
    result = api(
        site,
        workdir,
        """
        from envlayer import BackendConflict, load_backend
        try:
            load_backend("dup")
        except BackendConflict as exc:
            out["dists"] = exc.distributions
        """,
    )
    assert result == {"dists": ["envlayer-dup-a", "envlayer-dup-b"]}


def test_broken_plugins_affect_only_commands_that_use_them(site: Path, workdir: Path) -> None:
    assert cli(site, workdir, "exec", "--", "echo fine").stdout == "fine\n"
    for command in (["ls"], ["reap", "--dry-run"], ["rm", "--all", "-y"]):
        out = cli(site, workdir, *command)
        assert out.returncode == 0, (command, out.stderr)
        assert "backend 'dup' skipped" in out.stderr and "backend 'notenv' skipped" in out.stderr
        assert_no_traceback(out)
    out = cli(site, workdir, "backends")
    assert out.returncode == 0 and "unavailable:" in out.stdout
    out = cli(site, workdir, "doctor", "--json")
    assert out.returncode == 0, out.stderr
    broken = {e["backend"] for e in json.loads(out.stdout) if not e["ok"]}
    ours = {name for entry_points, _, _ in PLUGINS.values() for name in entry_points}
    assert broken & ours == {"dup", "notenv", "importboom"}  # boom fails only when constructed


def test_an_unreachable_backend_fails_ls_only_when_named(site: Path, workdir: Path) -> None:
    out = cli(site, workdir, "ls")
    assert out.returncode == 0, out.stderr
    summary = [line for line in out.stderr.splitlines() if "skipped backends not set up here" in line]
    assert len(summary) == 1 and "down" in summary[0] and "not reachable" not in out.stderr, out.stderr
    verbose = cli(site, workdir, "ls", "-v")
    note = "envlayer: note: backend 'down' skipped: BackendUnavailable: the down service is not reachable\n"
    assert note in verbose.stderr and verbose.stderr.count("not reachable") == 1, verbose.stderr
    listed = {o["backend"]: o for o in json.loads(cli(site, workdir, "ls", "--json").stdout)}
    assert listed["down"]["unavailable"] is True and "not reachable" in listed["down"]["error"]["message"]
    named = cli(site, workdir, "ls", "--backend", "down")
    assert (
        named.returncode == 1 and "down: error: BackendUnavailable: the down service is not reachable" in named.stderr
    )


def test_sweep_commands_say_why_nothing_happened_when_the_backend_is_named(site: Path, workdir: Path) -> None:
    for command in (["ls"], ["reap"], ["rm", "some-task"]):
        out = cli(site, workdir, *command, "--backend", "toy")
        assert out.returncode == (1 if command[0] == "rm" else 0)  # rm: the task was not removed
        assert "backend 'toy' has no" in out.stderr, (command, out.stderr)
        quiet = cli(site, workdir, *command)
        assert "backend 'toy' has no" not in quiet.stderr
