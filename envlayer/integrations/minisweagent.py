"""A mini-swe-agent environment over any envlayer backend.

Select it in a mini-swe-agent config (``environment_class`` takes a dotted path)::

    environment:
      environment_class: envlayer.integrations.minisweagent.EnvlayerEnvironment
      backend: docker                    # any installed envlayer backend; envlayer's config when unset
      options: {image: "python:3.11"}    # that backend's options
      cwd: /workspace
      timeout: 60

or in Python: ``EnvlayerEnvironment(backend="docker", options={"image": ...})``.

Contract (mini-swe-agent's, as its own ``LocalEnvironment`` and ``DockerEnvironment``
keep it): ``execute({"command": ...}, cwd="", *, timeout=None)`` runs the command with
``interpreter`` (``bash -lc`` by default) in a fresh process, so nothing (``cd``,
``export``) carries over between calls, and returns ``{"output", "returncode",
"exception_info"}`` with stdout and stderr merged in the order they were written. A
timeout returns ``returncode = -1``, the output so far and an ``exception_info`` saying
so; unlike mini-swe-agent's Docker environment, the command is killed with every
process it started. A failure of the sandbox itself (daemon gone, host unreachable)
also returns ``-1`` with ``exception_info`` and ``extra.exception_type``. An output
whose first line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (exit 0) raises
mini-swe-agent's ``Submitted``.

Lifecycle: one envlayer environment per object, task ``minisweagent-<8 hex>`` in the
profile ``minisweagent`` unless configured; on backends with the option it is private to
this process (``persist_across_processes = false``). ``cleanup()`` removes it (forced);
as in mini-swe-agent's own environments, ``__del__`` calls ``cleanup()``; a process that
dies leaves an orphan that envlayer's reaper (``envlayer reap``) removes.

Importing this module imports neither mini-swe-agent nor any backend SDK.
"""

from __future__ import annotations

import os
import platform
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from envlayer import dispatch as lifecycle
from envlayer.integrations.selection import framework_owned, select

DEFAULT_PROFILE = "minisweagent"
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_MERGE_STREAMS = 'exec 2>&1; exec "$@"'
"""``sh -c`` prelude: stderr joins stdout at the file descriptor, so lines keep their order."""


@dataclass
class EnvlayerEnvironmentConfig:
    """Keyword arguments of :class:`EnvlayerEnvironment` (all optional)."""

    backend: str | None = None
    """envlayer backend; the configured one (``ENVLAYER_BACKEND``, ``envlayer.toml``) when unset."""
    options: dict[str, Any] = field(default_factory=dict)
    """That backend's options (as in ``[backends.NAME]``), highest precedence."""
    profile: str | None = None
    """envlayer profile; ``minisweagent`` unless configured."""
    config_file: str | None = None
    """An envlayer config file to read instead of ``./envlayer.toml`` and the user file."""
    cwd: str = ""
    """Working directory of commands; the backend's when empty."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set for every command."""
    forward_env: list[str] = field(default_factory=list)
    """Host variables passed to every command when set (``env`` wins on conflict)."""
    timeout: int = 30
    """Seconds per command when ``execute`` is given none."""
    interpreter: list[str] = field(default_factory=lambda: ["bash", "-lc"])
    """Program that runs the command string, which is appended as its last argument."""


class EnvlayerEnvironment:
    """mini-swe-agent's ``Environment`` protocol over an envlayer environment."""

    def __init__(self, **kwargs: Any) -> None:
        """Create the sandbox now (so a broken backend fails here, not at the first step).

        Raises envlayer's ``ConfigError``, ``BackendNotFound``, ``BackendUnavailable``.
        """
        self.config = EnvlayerEnvironmentConfig(**kwargs)
        selection = select(
            backend=self.config.backend,
            profile=self.config.profile,
            config_file=self.config.config_file,
            options=self.config.options,
            defaults=framework_owned,
            default_profile=DEFAULT_PROFILE,
        )
        self.env = selection.open(f"minisweagent-{uuid.uuid4().hex[:8]}")

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]``; see the module docstring for the result."""
        command = action.get("command", "")
        seconds = timeout or self.config.timeout
        env = {name: os.environ[name] for name in self.config.forward_env if name in os.environ}
        env.update(self.config.env)
        argv = ["sh", "-c", _MERGE_STREAMS, "sh", *self.config.interpreter, command]
        try:
            result = lifecycle.run(self.env, argv, cwd=cwd or self.config.cwd or None, env=env, timeout=seconds)
        except Exception as exc:
            return {
                "output": "",
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {exc}",
                "extra": {"exception_type": type(exc).__name__, "exception": str(exc)},
            }
        output: dict[str, Any] = {"output": result.stdout_text, "returncode": result.exit_code, "exception_info": ""}
        if result.timed_out:
            output["returncode"] = -1
            output["exception_info"] = (
                f"The command timed out after {seconds} seconds and was killed with every process it started."
            )
            output["extra"] = {"exception_type": "TimeoutExpired", "exception": output["exception_info"]}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted

            submission = "".join(lines[1:])
            raise Submitted(
                {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config, the host's ``platform.uname()`` and ``kwargs`` (later wins)."""
        return {**asdict(self.config), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": asdict(self.config),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }

    def cleanup(self) -> None:
        """Remove the sandbox (idempotent, never raises for one already gone)."""
        env = getattr(self, "env", None)
        if env is not None and not env.closed:
            lifecycle.cleanup(env, force_remove=True)

    def __del__(self) -> None:
        try:
            self.cleanup()
        except Exception:
            pass
