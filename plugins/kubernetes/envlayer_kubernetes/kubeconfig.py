"""Loading a kubeconfig made of one or several files, merged as kubectl merges them.

``KUBECONFIG`` may list several files (``:``-separated, ``;`` on Windows). kubectl's rule
(k8s.io/client-go ``tools/clientcmd/loader.go``, ``ClientConfigLoadingRules.Load``, and
``kubectl config --help``): files that do not exist are skipped; "the first file to set a
particular value or map key wins", so a cluster, user or context defined in two files is
taken from the first, and so is ``current-context``.

The ``kubernetes`` client's ``KubeConfigMerger`` follows the first part (named entries:
first wins; relative certificate paths resolved against the file that defined them) but
lets the LAST file's ``current-context`` win; this module uses it and then restores
kubectl's choice of ``current-context``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from envlayer_kubernetes import sdk


@dataclass(frozen=True)
class Loaded:
    """An ``ApiClient`` and where it points."""

    api_client: Any
    context: dict[str, Any]
    """The chosen context entry (``{"name", "context": {"cluster", "user", "namespace"}}``)."""
    files: list[str]
    """The files that were read, in order."""


def split_paths(value: str) -> list[str]:
    """The existing files of a ``KUBECONFIG``-style list, in order, ``~`` expanded."""
    paths = [os.path.expanduser(p) for p in value.split(os.pathsep) if p]
    return [p for p in paths if os.path.exists(p)]


def load(paths: list[str], context: str | None) -> Loaded:
    """Merge ``paths`` (kubectl's rules, module docstring) and build an ``ApiClient`` for
    ``context`` (the merged ``current-context`` when None). Raises the client's
    ``ConfigException`` for an invalid file or an unknown context, ``OSError`` when a file
    cannot be read."""
    merger = sdk.kube_config.KubeConfigMerger(os.pathsep.join(paths))
    merged = merger.config
    if merged is None:
        raise sdk.config_exception.ConfigException(f"no configuration found in {os.pathsep.join(paths)}")
    first = next((c for c in (merger.config_files[p].get("current-context") for p in merger.paths) if c), None)
    if first is not None:
        merged.value["current-context"] = first
    loader = sdk.kube_config.KubeConfigLoader(
        config_dict=merged, active_context=context, config_base_path=None, config_persister=merger.save_changes
    )
    configuration = sdk.client.Configuration()
    loader.load_and_set(configuration)
    return Loaded(sdk.client.ApiClient(configuration), _plain(loader.current_context), list(merger.paths))


def _plain(node: Any) -> dict[str, Any]:
    """A context entry as plain dicts (the merger wraps them in ``ConfigNode``)."""
    value = getattr(node, "value", node)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
