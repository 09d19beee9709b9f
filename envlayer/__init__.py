"""envlayer: one Environment interface for AI agents, whatever the sandbox behind it.

Import cost matters (agents start often): this package imports no backend SDK, and
backends are loaded only when asked for by name.
"""

from envlayer.capabilities import Capability, capabilities_of, supports
from envlayer.environment import Command, Environment, SandboxInfo
from envlayer.errors import (
    BackendConflict,
    BackendLoadError,
    BackendNotFound,
    BackendUnavailable,
    CapabilityNotSupported,
    CommandFailed,
    ConfigError,
    EnvironmentClosed,
    EnvlayerError,
    ExecTimeout,
    FileTooLarge,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
)
from envlayer.options import BaseOptions, option
from envlayer.output import Truncation
from envlayer.result import ExecResult

__version__ = "0.1.0"

__all__ = [
    "BackendConflict",
    "BackendLoadError",
    "BackendNotFound",
    "BackendUnavailable",
    "BaseOptions",
    "Capability",
    "CapabilityNotSupported",
    "Command",
    "CommandFailed",
    "ConfigError",
    "Environment",
    "EnvironmentClosed",
    "EnvlayerError",
    "ExecResult",
    "ExecTimeout",
    "FileTooLarge",
    "SandboxFileNotFound",
    "SandboxInfo",
    "SandboxIsADirectory",
    "SandboxPathError",
    "Truncation",
    "capabilities_of",
    "option",
    "supports",
]
