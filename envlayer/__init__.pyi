"""Static view of the lazily exported names of envlayer/__init__.py."""

from envlayer.capabilities import Capability, capabilities_of, supports
from envlayer.config import load_settings
from envlayer.environment import Command, Environment, SandboxInfo
from envlayer.errors import (
    BackendConflict, BackendLoadError, BackendNotFound, BackendUnavailable, CapabilityNotSupported,
    CommandFailed, ConfigError, EnvironmentClosed, EnvlayerError, ExecTimeout, FileTooLarge,
    SandboxFileNotFound, SandboxIsADirectory, SandboxPathError,
)
from envlayer.factory import open_environment
from envlayer.options import BaseOptions, option
from envlayer.output import Truncation
from envlayer.registry import list_backends, load_backend
from envlayer.result import ExecResult

__version__: str
