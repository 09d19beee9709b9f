"""Unit tests of the Kubernetes plugin's own logic (no cluster needed), plus the import
rule (listing backends imports no part of the client) and ``envlayer doctor``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from envlayer_kubernetes import naming, wrapper
from envlayer_kubernetes.options import LABEL_VALUE, KubernetesOptions

from envlayer.errors import ConfigError
from envlayer.options import build_options

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "unknown",
        "plain",
        "Team/Alpha: task",
        "-lead",
        "trail_",
        "x" * 80,
        "naïve ☃",
        "h0123456789ab",
        "a.h0123456789ab",
    ],
)
def test_label_values_are_valid_kubernetes_label_values(value: str) -> None:
    out = naming.label_value(value)
    assert len(out) <= 63 and LABEL_VALUE.match(out), out


def test_label_values_are_kept_when_clean_and_never_collide() -> None:
    assert naming.label_value("build-42") == "build-42"
    values = ["a/b", "a_b", "a b", "", "unknown", "h0123456789ab", "x" * 70, "x" * 71, "-a", "a-"]
    outs = [naming.label_value(v) for v in values]
    assert len(set(outs)) == len(values), outs


@pytest.mark.parametrize(
    ("profile", "task"),
    [("default", "default"), ("P" * 100, "T" * 100), ("---", "..."), ("ünïcode", "ta/sk:1"), ("a", "")],
)
def test_pod_names_are_dns_labels_and_deterministic(profile: str, task: str) -> None:
    name = naming.pod_name(profile, task)
    assert len(name) <= 63 and DNS_LABEL.match(name), name
    assert naming.pod_name(profile, task) == name
    private = naming.pod_name(profile, task, private=True)
    assert len(private) <= 63 and DNS_LABEL.match(private) and private != name


def test_pod_names_differ_per_profile_and_task() -> None:
    names = {naming.pod_name(p, t) for p in ("a", "b", "a/b") for t in ("1", "2", "1 ")}
    assert len(names) == 9


def test_selector_is_scoped_to_managed_profile_and_task() -> None:
    assert naming.selector(profile="p", task="t") == "envlayer/managed=1,envlayer/profile=p,envlayer/task=t"
    assert naming.selector(profile=None) == "envlayer/managed=1"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("requests", {"cpu": "lots"}),
        ("limits", {"Memory!": "1Gi"}),
        ("node_selector", {"zone": "eu west"}),
        ("pod_labels", {"envlayer/task": "x"}),
        ("pod_annotations", {"bad key!": "x"}),
        ("tolerations", [{"key": "k", "colour": "red"}]),
        ("tolerations", [{"key": "k", "operator": "Maybe"}]),
        ("namespace", "Not_A_Namespace"),
        ("service_account", "UPPER"),
        ("active_deadline", -1),
        ("startup_timeout", 0),
        ("cwd", "relative"),
        ("forward_env", ["1BAD"]),
        ("image_pull_policy", "Sometimes"),
        ("config_source", "magic"),
        ("run_as_user", -1),
        ("fs_group", 2**31),
        ("security_preset", "baseline-ish"),
        ("workspace_volume", "hostPath"),
    ],
)
def test_bad_options_are_config_errors_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        build_options(KubernetesOptions, {key: value}, sources={key: "envlayer.toml"})
    assert info.value.key == key and "envlayer.toml" in str(info.value)


def test_options_from_environment_variables() -> None:
    opts = build_options(
        KubernetesOptions,
        {
            "requests": '{"cpu": "250m"}',
            "tolerations": '[{"key": "gpu", "operator": "Exists"}]',
            "active_deadline": "60",
        },
        sources={k: f"$ENVLAYER_KUBERNETES_{k.upper()}" for k in ("requests", "tolerations", "active_deadline")},
    )
    assert isinstance(opts, KubernetesOptions)
    assert opts.requests == {"cpu": "250m"} and opts.tolerations == [{"key": "gpu", "operator": "Exists"}]
    assert opts.active_deadline == 60


def test_fingerprint_covers_pod_shape_but_not_per_process_settings() -> None:
    from envlayer_kubernetes.pods import build_spec

    def fp(**kw: Any) -> str:
        return build_spec(KubernetesOptions(**kw), profile="p", task="t", persist=True).fingerprint

    base = fp()
    assert fp(image="other:1") != base
    assert fp(limits={"memory": "1Gi"}) != base
    assert fp(pod_annotations={"a": "b"}) != base
    assert fp(run_as_user=1000) != base and fp(security_preset="restricted") != base
    assert fp(timeout=5, env={"SECRET": "v"}, exec_mode="oneshot", namespace="x", startup_timeout=9) == base


def test_restricted_preset_and_users_shape_the_pod_as_pod_security_expects() -> None:
    from envlayer_kubernetes.pods import build_spec

    spec = build_spec(
        KubernetesOptions(security_preset="restricted", run_as_user=1000, run_as_group=3000, fs_group=2000),
        profile="p",
        task="t",
        persist=True,
    ).manifest["spec"]
    assert spec["securityContext"] == {
        "runAsUser": 1000,
        "runAsGroup": 3000,
        "fsGroup": 2000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = spec["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert spec["volumes"] == [{"name": "envlayer-workspace", "emptyDir": {}}]
    assert container["volumeMounts"] == [{"name": "envlayer-workspace", "mountPath": "/workspace"}]
    plain = build_spec(KubernetesOptions(), profile="p", task="t", persist=True).manifest["spec"]
    assert "securityContext" not in plain and "volumes" not in plain


def test_restricted_preset_refuses_root() -> None:
    with pytest.raises(ConfigError) as info:
        build_options(KubernetesOptions, {"security_preset": "restricted", "run_as_user": 0}, sources={})
    assert info.value.key == "run_as_user"


def _run_wrapper(
    command: Any, env: dict[str, str], data: bytes | None, mode_closable: bool
) -> subprocess.CompletedProcess[bytes]:
    argv = wrapper.oneshot_argv(
        "/bin/sh", command, exec_id="e1", cwd="/", stdin=None if data is None else len(data), closable=mode_closable
    )
    return subprocess.run(argv, input=wrapper.env_line(env) + (data or b""), capture_output=True, timeout=30)


@pytest.mark.parametrize("closable", [True, False])
def test_wrapper_reads_env_from_stdin_and_passes_the_rest(closable: bool) -> None:
    env = {"A": "x y'z\"$HOME", "B": "line1\nline2\n", "C": "back\\slash\\n%s"}
    done = _run_wrapper(
        'printf "%s|%s|%s|%s" "$A" "$B" "$C" "$ENVLAYER_EXEC_ID"; cat', env, b"payload\x00\xff", closable
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"x y'z\"$HOME|line1\nline2\n|back\\slash\\n%s|e1payload\x00\xff"


@pytest.mark.skipif(not os.path.exists("/proc/self/cmdline"), reason="needs /proc")
def test_wrapper_shell_itself_carries_the_kill_marker() -> None:
    """The kill script finds the shell running the command's script by its command line
    (its environment predates the export), so a timeout kills it too."""
    done = _run_wrapper("tr '\\0' '\\n' < /proc/$$/cmdline", {}, None, True)
    assert b"\nENVLAYER_EXEC_ID=e1\n" in done.stdout, done


def test_wrapper_argv_and_exit_codes() -> None:
    assert _run_wrapper(["printf", "%s", "$A; echo no"], {}, None, True).stdout == b"$A; echo no"
    assert _run_wrapper("exit 42", {}, None, True).returncode == 42
    assert _run_wrapper("cat", {}, None, True).stdout == b""
    missing = subprocess.run(
        wrapper.oneshot_argv("/bin/sh", "true", exec_id="e", cwd="/nonexistent-dir", stdin=None, closable=True),
        input=b"\n",
        capture_output=True,
    )
    assert missing.returncode == 126 and b"working directory does not exist" in missing.stderr


@pytest.mark.parametrize("form", ["string", "argv"])
def test_a_command_too_long_for_a_url_runs_from_the_environment_line(form: str) -> None:
    """Over the URL limit the argv holds only ``eval "$__el_cmd"`` and the command comes
    on stdin (with the environment), unchanged: quotes, newlines, backslashes; stdin after it."""
    text = "x'y\"z\\n$HOME " * 2000
    command: Any = (
        f"printf %s {shlex.quote(text)}; printf '|%s|' \"$A\"; cat"
        if form == "string"
        else ["sh", "-c", 'printf %s "$1"; cat', "sh", text]
    )
    script = wrapper.command_over_stdin(command)
    assert script is not None and wrapper.command_over_stdin("echo short") is None
    argv = wrapper.oneshot_argv("/bin/sh", wrapper.RUN_COMMAND_VAR, exec_id="e1", cwd="/", stdin=4, closable=True)
    assert len(" ".join(argv)) < 2000
    line = wrapper.env_line({"A": "a\nb"}, command=script)
    done = subprocess.run(argv, input=line + b"tail", capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expected = text + ("|a\nb|" if form == "string" else "") + "tail"
    assert done.stdout.decode() == expected


def test_env_line_refuses_nul() -> None:
    with pytest.raises(ValueError, match="NUL"):
        wrapper.env_line({"A": "a\0b"})


@pytest.mark.parametrize(
    "step",
    [
        "names = [b.name for b in list_backends()]\nassert 'kubernetes' in names, names\n"
        "assert 'envlayer_kubernetes' not in sys.modules\n",
        "assert load_backend('kubernetes').__name__ == 'KubernetesEnvironment'\n",
    ],
    ids=["list_backends", "load_backend"],
)
def test_listing_and_loading_import_no_part_of_the_client(step: str) -> None:
    code = (
        "import sys\n"
        "from envlayer.discovery.backend_registry import list_backends, load_backend\n"
        + step
        + "client = ('kubernetes', 'websocket', 'urllib3', 'yaml', 'pydantic', 'requests_oauthlib')\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in client)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


DOCTOR = "import sys; from envlayer.cli.app import main; sys.exit(main(['doctor', '--backend', 'kubernetes']))"


def test_doctor_reports_a_missing_configuration_with_a_fix(tmp_path: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "ENVLAYER_KUBERNETES"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(tmp_path / "missing"))
    out = subprocess.run(
        [sys.executable, "-c", DOCTOR],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert "FAIL kubernetes" in out.stdout and "no Kubernetes configuration" in out.stdout, out.stdout + out.stderr
    assert "fix: " in out.stdout and "KUBECONFIG" in out.stdout


def _kubeconfig_file(path: Any, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_kubeconfig_files_are_merged_as_kubectl_merges_them(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """KUBECONFIG=a:b:missing: entries from every file; for a name or current-context set
    in two files, the first file wins (the client's own merger lets the last
    current-context win); missing files are skipped."""
    from envlayer_kubernetes.client import connect

    first = _kubeconfig_file(
        tmp_path / "a",
        """\
        apiVersion: v1
        kind: Config
        current-context: work
        users:
        - name: me
          user: {token: from-a}
        """,
    )
    second = _kubeconfig_file(
        tmp_path / "b",
        """\
        apiVersion: v1
        kind: Config
        current-context: other
        clusters:
        - name: c1
          cluster: {server: "https://work.example:6443"}
        - name: c2
          cluster: {server: "https://other.example:6443"}
        users:
        - name: me
          user: {token: from-b}
        contexts:
        - name: work
          context: {cluster: c1, user: me, namespace: agents}
        - name: other
          context: {cluster: c2, user: me}
        """,
    )
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([first, second, str(tmp_path / "missing")]))
    cluster = connect(KubernetesOptions())
    configuration = cluster.core.api_client.configuration
    assert configuration.host == "https://work.example:6443"
    assert configuration.api_key["BearerToken"] == "Bearer from-a"
    assert cluster.namespace == "agents"
    assert cluster.where == f"kubeconfig {first}{os.pathsep}{second} context work"
    other = connect(KubernetesOptions(context="other"))
    assert other.core.api_client.configuration.host == "https://other.example:6443" and other.namespace == "default"


def test_an_unanswered_ping_is_found_overdue_when_its_answer_time_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read on a silent session websocket gives up ``answer_within`` after the first
    unanswered ping, not at the end of a further full ``answer_within`` wait that began
    before the ping was due. Clock and socket are fakes: the read's waits advance the clock."""
    from envlayer_kubernetes import channel as channel_module
    from envlayer_kubernetes import keepalive as keepalive_module
    from envlayer_kubernetes.channel import ExecChannel
    from envlayer_kubernetes.keepalive import Keepalive

    clock = [100.0]
    monkeypatch.setattr(channel_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(keepalive_module.time, "monotonic", lambda: clock[0])

    class SilentSocket:
        subprotocol = channel_module.V5
        sock = object()

        def close(self, **_: Any) -> None:
            pass

    chan = ExecChannel(SilentSocket(), cluster=None, pod="p", timeout=2.0)  # type: ignore[arg-type]
    chan.keepalive = Keepalive(lambda token: None, every=3600.0, answer_within=2.0)
    assert chan.keepalive.ping()  # unanswered from clock 100
    clock[0] = 101.0  # the read starts a second later

    def nothing_arrives(wait: float | None) -> bool:
        assert wait is not None, "a read with keepalive on never waits without a bound"
        clock[0] += wait
        return False

    monkeypatch.setattr(chan, "_readable", nothing_arrives)
    assert chan.read(deadline=None) is None and chan.lost
    assert clock[0] - 100.0 <= 2.0 + 0.05, f"found overdue {clock[0] - 100.0:.2f} s after the ping"


@pytest.mark.parametrize("key", ["dockerfile", "build_context"])
def test_an_image_from_a_dockerfile_is_refused_with_what_to_do(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_options(KubernetesOptions, {key: "/tmp/Dockerfile"}, sources={key: "envlayer.toml"})
    assert info.value.key == key
    assert "image in a registry" in str(info.value) and "docker push" in str(info.value)
