"""Constants and helpers shared by the Modal test modules (importable by name because
conftest.py puts this directory on ``sys.path``)."""

from __future__ import annotations

import os
import subprocess
import uuid
from typing import Any

IMAGE = os.environ.get("ENVLAYER_TEST_IMAGE", "envlayer-test:busybox")
PROFILE = f"envlayer-test-modal-{uuid.uuid4().hex[:8]}"
APP = f"envlayer-tests-{uuid.uuid4().hex[:6]}"
QUOTA_TAG = "fake-quota-exceeded"
LIVE_ENV = {k: v for k, v in os.environ.items() if k != "MODAL_SERVER_URL"}
"""This process's environment as it was before the fake was started (for the live tests)."""
LIVE_CREDENTIALS = bool(os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"))


def child_code(task: str, profile: str, **opts: Any) -> str:
    """Python source that builds ``env`` for (profile, task) in a child process."""
    opts.setdefault("image", IMAGE)
    opts.setdefault("app_name", APP)
    opts.setdefault("timeout", 60)
    return (
        "from envlayer_modal.backend import ModalEnvironment\n"
        "from envlayer_modal.options import ModalOptions\n"
        f"env = ModalEnvironment(ModalOptions(**{opts!r}), task_id={task!r}, profile={profile!r})\n"
    )


def running(task: str, profile: str) -> list[str]:
    """Ids of the running envlayer sandboxes of (profile, task), listed with the SDK."""
    import modal

    from envlayer.sandbox.tags import sanitize

    app = modal.App.lookup(APP, create_if_missing=True)
    want = {"envlayer.managed": "1", "envlayer.profile": sanitize(profile), "envlayer.task": sanitize(task)}
    return [sb.object_id for sb in modal.Sandbox.list(app_id=app.app_id, tags=want)]


def fake_images(snapshot_id: str) -> list[str]:
    """The fake's Docker images of snapshot ``snapshot_id`` still on the daemon (a deleted
    snapshot's go at once, or with the last sandbox made from it)."""
    out = subprocess.run(
        ["docker", "images", "-aq", "--filter", f"label=envlayer-fake-modal.image-id={snapshot_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()
