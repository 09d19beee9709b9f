"""Docs are part of the product: every option, key, command and capability is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlayer.capabilities import Capability
from envlayer.cli.app import build_parser
from envlayer.config import CORE_KEYS
from envlayer.discovery.backend_registry import load_backend
from envlayer.errors import EnvlayerError
from envlayer.options import option_fields

DOCS = Path(__file__).resolve().parents[2] / "docs"
BACKEND_DOCS = {
    "local": "configuration.md",
    "docker": "backends/docker.md",
    "ssh": "backends/ssh.md",
    "modal": "backends/modal.md",
    "kubernetes": "backends/kubernetes.md",
    "daytona": "backends/daytona.md",
}


def read(name: str) -> str:
    return (DOCS / name).read_text()


@pytest.mark.parametrize("backend", sorted(BACKEND_DOCS))
def test_every_backend_option_is_documented(backend: str) -> None:
    try:
        cls = load_backend(backend)
    except EnvlayerError as exc:
        pytest.skip(f"{backend} backend not loadable here: {exc.message}")
    text = read(BACKEND_DOCS[backend]) + read("configuration.md")
    missing = [name for name in option_fields(cls.Options) if f"`{name}`" not in text]
    assert missing == [], f"options of {backend} missing from docs/{BACKEND_DOCS[backend]}: {missing}"


def test_every_core_key_and_variable_is_documented() -> None:
    text = read("configuration.md")
    for key in CORE_KEYS:
        assert f"`{key}`" in text and f"`ENVLAYER_{key.upper()}`" in text
    assert "`ENVLAYER_CONFIG`" in text


def test_every_cli_command_is_documented() -> None:
    text = read("cli.md")
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    for command in sub.choices:  # type: ignore[union-attr]
        assert f"## `envlayer {command}" in text, f"docs/cli.md lacks a section for `envlayer {command}`"


def test_every_capability_is_documented() -> None:
    text = read("architecture.md")
    for cap in Capability:
        assert f"`{cap.value}`" in text
