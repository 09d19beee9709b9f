"""``DaytonaOptions``: the Daytona backend's option schema and its validation.

Importable without the Daytona SDK (``envlayer doctor`` and the configuration loader read it
to validate ``[backends.daytona]`` and ``ENVLAYER_DAYTONA_<OPTION>`` values). There is no
API-key option on purpose: the key is read only where the SDK reads it (``DAYTONA_API_KEY``,
or ``DAYTONA_JWT_TOKEN`` + ``DAYTONA_ORGANIZATION_ID``), so it never sits in a config file,
an argv, a label or a log line.

Options marked "Per-process setting" do not shape the sandbox and are not part of its
fingerprint (see :func:`envlayer_daytona.identity.fingerprint`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from envlayer.options import OptionError, option
from envlayer.sandbox.options import DockerfileOptions, ManagedSandboxOptions
from envlayer.snapshot import SnapshotRetentionOptions

RESERVED_LABEL_PREFIX = "envlayer."


@dataclass(kw_only=True)
class DaytonaOptions(ManagedSandboxOptions, DockerfileOptions, SnapshotRetentionOptions):
    """Options of the Daytona backend. ``cwd`` defaults to the sandbox's working directory.
    The snapshot retention options (``snapshot_keep``, ``snapshot_max_age``) are applied by
    :func:`envlayer_daytona.snapshots.expire`."""

    api_url: str | None = option(
        None,
        doc="Daytona API URL; DAYTONA_API_URL, then the SDK's default (https://app.daytona.io/api) when unset. "
        "Per-process setting.",
    )
    target: str | None = option(
        None, doc="Region to create sandboxes in; DAYTONA_TARGET, then the organization's default when unset."
    )
    image: str | None = option(
        None,
        doc="Container image to build the sandbox from (a server-side build, slow the first time). "
        "Exclusive with `snapshot`.",
    )
    snapshot: str | None = option(
        None,
        doc="Snapshot to create the sandbox from (the fast path). Exclusive with `image`; "
        "Daytona's default snapshot when both are unset.",
    )
    user: str | None = option(
        None,
        doc="OS user the sandbox's commands run as (a user name the image defines; sent as the SDK's `os_user`). "
        "The snapshot's or image's user when unset.",
    )
    cpu: int | None = option(None, doc="vCPUs (only with `image`; a snapshot fixes its own resources).")
    memory_gib: int | None = option(None, doc="Memory in GiB (only with `image`).")
    disk_gib: int | None = option(None, doc="Disk in GiB (only with `image`).")
    gpu: int | None = option(None, doc="GPUs (only with `image`).")
    labels: dict[str, str] = option(doc="Extra sandbox labels (keys must not start with `envlayer.`).", factory=dict)
    auto_stop_interval: int = option(
        15,
        doc="Minutes without API activity after which Daytona stops the sandbox (0 disables; not "
        "recommended: a crashed process would leave it running forever). Long commands refresh activity.",
    )
    auto_delete_interval: int | None = option(
        None,
        doc="Minutes after stopping at which Daytona deletes the sandbox (0: as soon as it stops); unset: "
        "never in persist mode, 0 for private sandboxes (persist_across_processes = false).",
    )
    ttl_minutes: int = option(0, doc="Hard wall-clock lifetime of the sandbox in minutes (0: none).")
    activity_interval: float = option(
        60.0,
        doc="How often (seconds) a running command refreshes the sandbox's activity so auto-stop never "
        "fires mid-command. Per-process setting.",
    )
    create_timeout: float = option(
        120.0, doc="Seconds to wait for a sandbox to be created or started. Per-process setting."
    )
    request_timeout: float = option(60.0, doc="Timeout of one API request, in seconds. Per-process setting.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.image is not None and self.snapshot is not None:
            raise OptionError("image", "set either `image` or `snapshot`, not both")
        if self.dockerfile and (self.image is not None or self.snapshot is not None):
            raise OptionError("dockerfile", "set one of `dockerfile`, `image` and `snapshot`")
        if self.build_context and self.dockerfile:
            context = os.path.abspath(os.path.expanduser(self.build_context))
            if context != os.path.dirname(os.path.abspath(os.path.expanduser(self.dockerfile))):
                raise OptionError(
                    "build_context",
                    "Daytona's builder reads COPY sources from the Dockerfile's own directory: move the "
                    "Dockerfile into the build context, or leave build_context unset",
                )
        if self.user is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*\$?", self.user):
            raise OptionError("user", f"{self.user!r} is not a user name (letters, digits, `_`, `.`, `-`)")
        for key in ("image", "snapshot", "api_url", "target"):
            value = getattr(self, key)
            if value is not None and not value.strip():
                raise OptionError(key, "must not be empty (leave it unset instead)")
        if self.api_url is not None and not re.match(r"^https?://", self.api_url):
            raise OptionError("api_url", "must start with http:// or https://")
        for key in ("cpu", "memory_gib", "disk_gib", "gpu"):
            value = getattr(self, key)
            if value is not None:
                if value < 0:
                    raise OptionError(key, "must be >= 0")
                if self.image is None and self.dockerfile is None:
                    raise OptionError(
                        key, "resources apply only to `image` or `dockerfile` sandboxes; a snapshot fixes its own"
                    )
        for key in ("auto_stop_interval", "ttl_minutes"):
            if getattr(self, key) < 0:
                raise OptionError(key, "must be >= 0 minutes")
        if self.auto_delete_interval is not None and self.auto_delete_interval < 0:
            raise OptionError("auto_delete_interval", "must be >= 0 minutes (or unset)")
        for key in ("activity_interval", "create_timeout", "request_timeout"):
            if not getattr(self, key) > 0:
                raise OptionError(key, "must be > 0 seconds")
        for key in self.labels:
            if not key or key.startswith(RESERVED_LABEL_PREFIX):
                raise OptionError("labels", f"{key!r}: keys starting with `envlayer.` are reserved")

    @property
    def effective_auto_delete(self) -> int | None:
        """The auto-delete interval sent at create: the option, or 0 for private sandboxes."""
        if self.auto_delete_interval is not None:
            return self.auto_delete_interval
        return None if self.persist_across_processes else 0
