"""Hints that name commands which work where the user is.

From a checkout of the envlayer repository (the package runs from its source tree, next
to ``plugins/``) the right commands are the workspace's (``uv sync --all-packages``,
``scripts/provision``); for a user who installed envlayer from a package index they are
``pip install ...`` and the system's own service commands.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def source_checkout() -> Path | None:
    """The root of the envlayer checkout this package runs from, or None when it was
    installed from a wheel (then there is no ``plugins/`` next to it)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "plugins").is_dir() and (root / "scripts" / "provision").is_file():
        return root
    return None


def install_hint(package: str) -> str:
    """How to install the distribution ``package`` (``envlayer-docker``) from here: the
    workspace commands in a checkout that holds it under ``plugins/``, else ``pip``."""
    root = source_checkout()
    extra = package.removeprefix("envlayer-")
    if root is None or not (root / "plugins" / extra).is_dir():
        return f"install it with `pip install {package}`"
    return (
        f"this is a checkout of envlayer ({root}): run `uv sync --all-packages` there, "
        f"or `uv run --extra {extra} envlayer ...`"
    )


def docker_start_hint() -> str:
    """How to get a Docker daemon running from here."""
    root = source_checkout()
    if root is None:
        return "start the daemon (`sudo systemctl start docker`)"
    return f"start the daemon (`sudo systemctl start docker`, or `{root}/scripts/provision`)"
