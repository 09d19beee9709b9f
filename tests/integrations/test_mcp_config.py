"""The MCP server's configuration: the ``[mcp]`` table under the flags, over envlayer's
configuration; mistakes named with their file and key; private sandboxes by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlayer.config import load_settings
from envlayer.discovery.backend_registry import load_backend
from envlayer.errors import ConfigError
from envlayer.integrations.mcp.config import Flags, load, read_token


def config_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "envlayer.toml"
    path.write_text(text)
    return str(path)


def test_the_table_sets_the_server_and_flags_win(tmp_path: Path) -> None:
    path = config_file(
        tmp_path,
        'backend = "local"\nprofile = "cli"\n[mcp]\nprofile = "agents"\ntask_prefix = "srv-"\n'
        'allowed_backends = ["docker"]\nallowed_options = { image = ["a", "b"], cpus = "*" }\n'
        'tools = ["terminal", "read_file"]\n',
    )
    config = load(Flags(config=path))
    assert (config.settings.backend, config.settings.profile, config.task_prefix) == ("local", "agents", "srv-")
    assert config.policy.backends == ("docker",) and config.policy.options == {"image": ("a", "b"), "cpus": "*"}
    assert config.tools == ("terminal", "read_file") and config.keep_sandboxes is False
    flagged = load(Flags(config=path, profile="mine", task_prefix="x-", allow_options=["memory=1g,2g", "gpus"]))
    assert (flagged.settings.profile, flagged.task_prefix) == ("mine", "x-")
    assert flagged.policy.options["memory"] == ("1g", "2g") and flagged.policy.options["gpus"] == "*"


def test_sandboxes_are_private_to_the_server_unless_kept_or_set(tmp_path: Path) -> None:
    docker = load_backend("docker").Options
    path = config_file(tmp_path, 'backend = "docker"\n')
    assert load(Flags(config=path)).settings.options_for("docker", docker).persist_across_processes is False
    kept = load(Flags(config=path, keep_sandboxes=True)).settings
    assert kept.options_for("docker", docker).persist_across_processes is True
    explicit = config_file(tmp_path, 'backend = "docker"\n[backends.docker]\npersist_across_processes = true\n')
    assert load(Flags(config=explicit)).settings.options_for("docker", docker).persist_across_processes is True


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ("alowed_backends = []", "mcp.alowed_backends"),
        ('tools = ["terminal", "shell"]', "mcp.tools"),
        ('allowed_options = { image = "python" }', "mcp.allowed_options.image"),
        ("keep_sandboxes = 1", "mcp.keep_sandboxes"),
        ('task_prefix = "a/b"', "mcp.task_prefix"),
    ],
)
def test_a_mistake_in_the_table_names_its_file_and_key(tmp_path: Path, table: str, named: str) -> None:
    path = config_file(tmp_path, f"[mcp]\n{table}\n")
    with pytest.raises(ConfigError) as info:
        load(Flags(config=path))
    assert named in info.value.message and path in info.value.message and info.value.hint


def test_the_table_is_not_an_unknown_key_for_everybody_else_but_a_typo_is(tmp_path: Path) -> None:
    settings = load_settings(config_path=config_file(tmp_path, '[mcp]\nbackend = "docker"\n'))
    assert settings.backend == "local" and settings.front_ends == {"mcp": {"backend": "docker"}}
    with pytest.raises(ConfigError, match="did you mean 'mcp'"):
        load_settings(config_path=config_file(tmp_path, "[mpc]\n"))
    with pytest.raises(ConfigError, match="must be a table"):
        load_settings(config_path=config_file(tmp_path, 'mcp = "yes"\n'))


def test_the_token_comes_from_the_variable_or_the_files_first_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = config_file(tmp_path, "")
    monkeypatch.delenv("ENVLAYER_MCP_TOKEN", raising=False)
    assert read_token(load(Flags(config=path))) is None
    (tmp_path / "token").write_text("from-file\nignored\n")
    assert read_token(load(Flags(config=path, token_file=str(tmp_path / "token")))) == "from-file"
    monkeypatch.setenv("MY_TOKEN", " from-var ")
    assert read_token(load(Flags(config=path, token_env="MY_TOKEN", token_file=str(tmp_path / "t")))) == "from-var"
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(load(Flags(config=path, token_file=str(tmp_path / "missing"))))
