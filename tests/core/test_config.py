"""Configuration: file layering, environment variables, flags, and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlayer.config import load_settings
from envlayer.errors import ConfigError
from envlayer.factory import open_environment
from envlayer.local.backend import LocalOptions


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(user config file, project dir); no ENVLAYER_* variables leak in from outside."""
    for var in list(__import__("os").environ):
        if var.startswith("ENVLAYER_"):
            monkeypatch.delenv(var)
    xdg = tmp_path / "xdg"
    (xdg / "envlayer").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    project = tmp_path / "project"
    project.mkdir()
    return xdg / "envlayer" / "config.toml", project


def test_defaults_without_any_source(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    s = load_settings(cwd=project, env={})
    assert (s.backend, s.profile, s.lifetime_seconds, s.orphan_reaper) == ("local", "default", 300.0, True)
    assert s.files == []
    assert s.source_of("backend") == "default"


def test_precedence_user_then_project_then_env_then_flags(dirs: tuple[Path, Path]) -> None:
    user, project = dirs
    user.write_text(
        'backend = "toy"\nprofile = "from-user"\nlifetime_seconds = 10\n'
        '[backends.local]\ntimeout = 5\nshell = "/bin/sh"\n'
    )
    (project / "envlayer.toml").write_text('profile = "from-project"\n[backends.local]\ntimeout = 7\n')
    s = load_settings(cwd=project, env={})
    assert (s.backend, s.profile, s.lifetime_seconds) == ("toy", "from-project", 10.0)
    assert s.source_of("profile") == str(project / "envlayer.toml")
    assert s.source_of("backend") == str(user)
    opts = s.options_for("local", LocalOptions, env={})
    assert opts.timeout == 7.0 and opts.shell == "/bin/sh"

    env = {"ENVLAYER_PROFILE": "from-env", "ENVLAYER_LOCAL_TIMEOUT": "9", "ENVLAYER_ORPHAN_REAPER": "false"}
    s = load_settings(cwd=project, env=env)
    assert s.profile == "from-env" and s.orphan_reaper is False
    assert s.options_for("local", LocalOptions, env=env).timeout == 9.0

    # Flags (keyword arguments) beat everything; option flags apply to the selected backend.
    s = load_settings(cwd=project, env=env, backend="local", profile="from-flag", backend_options={"timeout": 11})
    assert (s.backend, s.profile) == ("local", "from-flag")
    assert s.options_for("local", LocalOptions, env=env).timeout == 11.0


def test_explicit_config_replaces_discovery(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    user, project = dirs
    user.write_text('profile = "from-user"\n')
    explicit = tmp_path / "explicit.toml"
    explicit.write_text('backend = "toy"\n')
    for s in (
        load_settings(config_path=explicit, cwd=project, env={}),
        load_settings(cwd=project, env={"ENVLAYER_CONFIG": str(explicit)}),
    ):
        assert s.backend == "toy" and s.profile == "default"
        assert s.files == [str(explicit)]


def test_missing_explicit_config_is_an_error(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(config_path=tmp_path / "nope.toml", env={})
    with pytest.raises(ConfigError, match=r"\$ENVLAYER_CONFIG"):
        load_settings(env={"ENVLAYER_CONFIG": str(tmp_path / "nope.toml")})


def test_unknown_top_level_key_names_file_key_and_suggestion(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    path = project / "envlayer.toml"
    path.write_text('backnd = "docker"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=project, env={})
    assert info.value.source == str(path) and info.value.key == "backnd"
    assert "did you mean 'backend'?" in str(info.value)


def test_unknown_backend_option_in_file(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    path = project / "envlayer.toml"
    path.write_text("[backends.local]\ntimeuot = 3\n")
    settings = load_settings(cwd=project, env={})
    with pytest.raises(ConfigError) as info:
        settings.options_for("local", LocalOptions, env={})
    assert info.value.source == str(path) and info.value.key == "timeuot"
    assert "did you mean 'timeout'?" in str(info.value)


@pytest.mark.parametrize(
    ("toml", "key", "expected"),
    [
        ('timeout = "soon"', "timeout", "expected a number"),
        ('inherit_env = "yes"', "inherit_env", "expected true or false"),
        ('env = ["A=1"]', "env", "expected a table of strings"),
        ('output_policy = "middle"', "output_policy", "expected one of"),
        ("max_output_bytes = -1", "max_output_bytes", "must be >= 0"),
    ],
)
def test_wrong_option_types_name_file_and_key(dirs: tuple[Path, Path], toml: str, key: str, expected: str) -> None:
    _, project = dirs
    path = project / "envlayer.toml"
    path.write_text(f"[backends.local]\n{toml}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=project, env={}).options_for("local", LocalOptions, env={})
    assert info.value.source == str(path) and info.value.key == key
    assert expected in str(info.value)


def test_env_var_errors_name_the_variable(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    settings = load_settings(cwd=project, env={})
    with pytest.raises(ConfigError) as info:
        settings.options_for("local", LocalOptions, env={"ENVLAYER_LOCAL_TIMEOUT": "later"})
    assert info.value.source == "$ENVLAYER_LOCAL_TIMEOUT"
    with pytest.raises(ConfigError, match="did you mean 'shell'"):
        settings.options_for("local", LocalOptions, env={"ENVLAYER_LOCAL_SHEL": "/bin/sh"})
    with pytest.raises(ConfigError, match=r"\$ENVLAYER_ORPHAN_REAPER"):
        load_settings(cwd=project, env={"ENVLAYER_ORPHAN_REAPER": "maybe"})


def test_env_var_parsing_of_structured_options(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    settings = load_settings(cwd=project, env={})
    opts = settings.options_for(
        "local",
        LocalOptions,
        env={
            "ENVLAYER_LOCAL_ENV": '{"A": "1"}',
            "ENVLAYER_LOCAL_INHERIT_ENV": "0",
            "ENVLAYER_LOCAL_FILE_ROOT": "",
        },
    )
    assert opts.env == {"A": "1"} and opts.inherit_env is False and opts.file_root is None


def test_invalid_toml_and_profile(dirs: tuple[Path, Path]) -> None:
    _, project = dirs
    (project / "envlayer.toml").write_text("backend = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(cwd=project, env={})
    (project / "envlayer.toml").write_text('profile = "has space"\n')
    with pytest.raises(ConfigError, match="invalid profile name"):
        load_settings(cwd=project, env={})
    (project / "envlayer.toml").write_text("[backends]\nlocal = 1\n")
    with pytest.raises(ConfigError, match="table of tables"):
        load_settings(cwd=project, env={})


def test_config_selects_the_backend_of_open_environment(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, project = dirs
    (project / "envlayer.toml").write_text('backend = "toy"\nprofile = "p1"\n[backends.toy]\ntimeout = 12\n')
    monkeypatch.chdir(project)
    with open_environment(task_id="t1") as env:
        assert type(env).name == "toy" and env.profile == "p1" and env.task_id == "t1"
        assert env.options.timeout == 12.0
    monkeypatch.setenv("ENVLAYER_BACKEND", "local")
    with open_environment() as env:
        assert type(env).name == "local"


def test_list_type_is_described_in_plain_english(dirs: tuple[Path, Path]) -> None:
    from dataclasses import dataclass

    from envlayer.options import BaseOptions, build_options, option

    @dataclass(kw_only=True)
    class WithList(BaseOptions):
        volumes: list[str] = option(doc="volumes", factory=list)

    with pytest.raises(ConfigError, match="expected a list of strings, got an integer 3"):
        build_options(WithList, {"volumes": 3})
