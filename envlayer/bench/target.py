"""A backend as the bench opens it: its name, its configuration and its ``-o`` options,
under the bench's own profile. Plain data, so a child interpreter can open it too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from envlayer.config import Settings, load_settings
from envlayer.environment import Environment
from envlayer.factory import backend_class, open_environment
from envlayer.options import option_fields


@dataclass(frozen=True)
class BackendTarget:
    """What the bench needs to open sandboxes of one backend."""

    name: str
    profile: str
    config: str | None = None
    option_texts: dict[str, str] = field(default_factory=dict)

    def settings(self) -> Settings:
        """The configuration with this target's ``-o`` options applied."""
        return load_settings(
            config_path=self.config, backend=self.name, profile=self.profile, option_texts=self.option_texts or None
        )

    def has_option(self, key: str) -> bool:
        """True when the backend's options include ``key``."""
        return key in option_fields(backend_class(self.name).Options)

    def mode_option(self) -> str | None:
        """The option choosing session or one-shot exec (``exec_mode``; SSH's ``mode``),
        or None when the backend has no such choice."""
        for key in ("exec_mode", "mode"):
            if self.has_option(key):
                return key
        return None

    def open(self, task_id: str, overrides: Mapping[str, Any] | None = None) -> Environment:
        """Open (create or attach to) the sandbox of ``task_id`` in the bench's profile."""
        return open_environment(
            self.name, task_id=task_id, profile=self.profile, settings=self.settings(), options=overrides
        )

    def to_json(self) -> dict[str, Any]:
        """The target as JSON (for a child interpreter: :meth:`from_json`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BackendTarget:
        """The target :meth:`to_json` wrote."""
        return cls(**data)


def split_options(texts: Mapping[str, str], backends: list[str]) -> dict[str, dict[str, str]]:
    """``-o`` options per backend: ``NAME.KEY=VALUE`` goes to backend NAME only, a plain
    ``KEY=VALUE`` to every selected backend that has option KEY.

    Raises: EnvlayerError naming the option when no selected backend has it."""
    from envlayer.errors import EnvlayerError

    per: dict[str, dict[str, str]] = {name: {} for name in backends}
    for key, value in texts.items():
        backend, dot, option = key.partition(".")
        if dot and backend in per:
            per[backend][option] = value
            continue
        takers = [name for name in backends if key in option_fields(backend_class(name).Options)]
        if not takers:
            raise EnvlayerError(
                f"no selected backend has option {key!r} (-o {key}={value})",
                hint="see `envlayer backends --options`; write -o BACKEND.KEY=VALUE for one backend",
            )
        for name in takers:
            per[name][key] = value
    return per
