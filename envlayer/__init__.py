"""envlayer: one Environment interface for AI agents, whatever the sandbox behind it.

Import cost matters (agents start often): ``import envlayer`` loads nothing but this
file; each public name is imported on first use (PEP 562), no backend SDK is ever
imported here, and backends are loaded only when asked for by name. Type checkers
read the names from ``__init__.pyi``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from envlayer import _aliases

_aliases.install()  # old module paths (before the subpackages) keep working for one release

_EXPORTS: dict[str, str] = {
    "Capability": "envlayer.capabilities",
    "capabilities_of": "envlayer.capabilities",
    "supports": "envlayer.capabilities",
    "Command": "envlayer.environment",
    "Environment": "envlayer.environment",
    "SandboxInfo": "envlayer.environment",
    "BaseOptions": "envlayer.options",
    "option": "envlayer.options",
    "Truncation": "envlayer.result",
    "ExecResult": "envlayer.result",
    "ExecRequest": "envlayer.request",
    "CancelToken": "envlayer.cancel_token",
    "run": "envlayer.dispatch",
    "TransferSummary": "envlayer.transfer",
    "open_environment": "envlayer.factory",
    "load_settings": "envlayer.config",
    "list_backends": "envlayer.discovery.backend_registry",
    "load_backend": "envlayer.discovery.backend_registry",
    **{
        name: "envlayer.errors"
        for name in (
            "BackendConflict",
            "BackendLoadError",
            "BackendNotFound",
            "BackendUnavailable",
            "CommandFailed",
            "ConfigError",
            "EnvironmentClosed",
            "EnvlayerError",
            "ExecTimeout",
            "FileTooLarge",
            "InvalidArgument",
            "JobError",
            "PluginError",
            "SandboxFileNotFound",
            "SandboxIsADirectory",
            "SandboxPathError",
            "SandboxPermissionDenied",
            "ToolArgumentError",
            "UnsupportedArgument",
        )
    },
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envlayer' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
