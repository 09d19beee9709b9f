"""``ModalOptions``: the Modal backend's option schema and its validation.

Importable without the Modal SDK (``envlayer doctor``, ``envlayer backends --options`` and
the configuration loader read it to validate ``[backends.modal]`` and
``ENVLAYER_MODAL_<OPTION>`` values).

Every field that shapes the sandbox at creation is part of its *fingerprint* (see
:func:`envlayer_modal.tags.fingerprint_inputs`); the docs of the others say "Per-process
setting", as do the snapshot retention options (``snapshot_keep``, ``snapshot_max_age``,
from :class:`envlayer.snapshot.SnapshotRetentionOptions`), which shape no sandbox.
Credentials are never options: the SDK reads ``MODAL_TOKEN_ID`` / ``MODAL_TOKEN_SECRET``
or ``~/.modal.toml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envlayer.options import OptionError, option
from envlayer.sandbox.options import ContainerOptions, DockerfileOptions
from envlayer.snapshot import SnapshotRetentionOptions

APP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
TAG_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
RESERVED_TAG_PREFIX = "envlayer."


@dataclass(kw_only=True)
class ModalOptions(ContainerOptions, DockerfileOptions, SnapshotRetentionOptions):
    """Options of the Modal backend. ``cwd`` defaults to the ``WORKDIR`` of an image built from
    ``dockerfile``, else ``/workspace``."""

    app_name: str = option(
        "envlayer",
        doc="Modal App the sandboxes belong to (created if missing). Sandbox names are unique per App. "
        "Per-process setting.",
    )
    environment_name: str | None = option(
        None, doc="Modal Environment to use; the SDK's default (MODAL_ENVIRONMENT or the profile's) when unset."
    )
    image: str = option(
        "python:3.11-slim",
        doc="Registry image tag (`Image.from_registry`), or a Modal image id (`im-...`, `Image.from_id`). "
        "Not used when `dockerfile` is set.",
    )
    cpu: float | None = option(None, doc="CPU cores to reserve (Modal's default when unset).")
    memory: int | None = option(None, doc="Memory to reserve, in MiB (Modal's default when unset).")
    gpu: str | None = option(None, doc="GPU spec passed through to Modal, e.g. `T4` or `A100:2` (none when unset).")
    region: str | None = option(None, doc="Region(s) to run in, passed through (comma-separated for several).")
    cloud: str | None = option(None, doc="Cloud provider, passed through (e.g. `aws`, `gcp`).")
    block_network: bool = option(False, doc="True runs the sandbox with no network access.")
    secrets: list[str] = option(
        doc="Names of Modal Secrets whose variables every command sees (`Secret.from_name`; the values stay "
        "in Modal and never reach tags, argv or logs).",
        factory=list,
    )
    sandbox_timeout: int = option(
        86_400,
        doc="The sandbox's hard lifetime in seconds (Modal terminates it then, whatever happens): the "
        "backstop against leaks. Modal's maximum is 24 h.",
    )
    idle_timeout: int | None = option(
        900,
        doc="Seconds without any command, stdin or output after which Modal terminates the sandbox: the "
        "cost-safety default for persist mode. Unset disables it (then only `sandbox_timeout` ends a "
        "sandbox nobody cleans up).",
    )
    session_idle_exit: int = option(
        600,
        doc="A session shell that read no command and ran no child process for this many seconds exits by "
        "itself, so a process that died without cleanup() cannot keep the sandbox busy past idle_timeout. "
        "Per-process setting.",
    )
    tags: dict[str, str] = option(
        doc="Extra sandbox tags (keys must not start with `envlayer.`; values are not secret).", factory=dict
    )
    connect_timeout: float = option(
        10.0,
        doc="Seconds to wait for a TCP connection to the Modal API before reporting it unreachable. "
        "Per-process setting.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not APP_NAME.match(self.app_name):
            raise OptionError("app_name", "must be 1-63 letters, digits, '.', '_' or '-', starting alphanumeric")
        if not self.image.strip():
            raise OptionError("image", "must not be empty")
        if self.cpu is not None and self.cpu <= 0:
            raise OptionError("cpu", "must be > 0 (or unset for Modal's default)")
        if self.memory is not None and self.memory <= 0:
            raise OptionError("memory", "must be > 0 MiB (or unset for Modal's default)")
        if not 1 <= self.sandbox_timeout <= 86_400:
            raise OptionError("sandbox_timeout", "must be between 1 and 86400 seconds")
        if self.idle_timeout is not None and self.idle_timeout <= 0:
            raise OptionError("idle_timeout", "must be > 0 seconds (or unset to disable it)")
        if self.session_idle_exit <= 0:
            raise OptionError("session_idle_exit", "must be > 0 seconds")
        if self.connect_timeout <= 0:
            raise OptionError("connect_timeout", "must be > 0")
        for name in self.secrets:
            if not name.strip():
                raise OptionError("secrets", "secret names must not be empty")
        for key in self.tags:
            if key.startswith(RESERVED_TAG_PREFIX) or not TAG_KEY.match(key):
                raise OptionError("tags", f"{key!r}: use 1-63 of [A-Za-z0-9_.-], not starting with `envlayer.`")
