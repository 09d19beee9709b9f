"""Execute tool calls for a task and return results an LLM can use.

:meth:`ToolRegistry.run_tool` never raises for anything a tool call can cause: it
returns a JSON-serialisable dict, either the tool's result or
``{"error": {"type", "message", "hint"}}`` (sometimes with partial results beside it).
Error types:

============================ ==========================================================
``unknown_tool``             no tool of that name
``bad_arguments``            arguments not JSON, or not matching the schema
``timeout``                  the command was killed at its timeout (``exit_code`` 124 and
                             the output so far are included)
``cancelled``                the call was cancelled (:meth:`ToolRegistry.cancel`, or a
                             ``cancel`` token): killed with its tree, ``exit_code`` 130
                             and the output so far included
``path_outside_sandbox``     the path resolves outside the environment's ``file_root``
``file_not_found``           no such file
``is_a_directory``           a directory where a file was expected
``file_too_large``           over the backend's ``max_file_bytes``
``not_allowed``              ``create_sandbox`` asked for a backend or option value that
                             ``ToolConfig.policy`` does not allow (nothing was created)
``file_error``               the sandbox refused a file operation (``delete_file``,
                             ``move_file``, ``make_dir``...; its message is included)
``binary_file``              ``read_file`` on a file that is not text
``job_error``                a background job could not be started, or a bad job id
``backend_unavailable``      the sandbox could not be reached; the environment was dropped
                             and the next call rebuilds it (the hint says to retry)
``environment_closed``       the environment was released during the call; retry
``configuration``            the configured backend or its options are wrong
``envlayer_error``           any other envlayer error (its hint is passed on)
``internal_error``           an unexpected exception (logged with its traceback)
============================ ==========================================================
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envlayer.agents.manager import EnvironmentManager, EnvKey
from envlayer.agents.tools import definitions, file_tools, jobs, more_definitions, spill
from envlayer.agents.tools.definitions import ToolDefinition
from envlayer.agents.tools.file_ops import FileOpError
from envlayer.agents.tools.merged import MergedOutput
from envlayer.agents.tools.output_schemas import OUTPUTS
from envlayer.agents.tools.sandbox_tools import SandboxPolicy, SandboxTools, ToolNotAllowed
from envlayer.agents.tools.schema import ToolArgumentError, validate
from envlayer.agents.tools.truncate import truncate_middle
from envlayer.cancel_token import CancelToken
from envlayer.capabilities import Capability, supports
from envlayer.dispatch import run
from envlayer.environment import DEFAULT_TASK, Environment
from envlayer.errors import (
    BackendConflict,
    BackendLoadError,
    BackendNotFound,
    BackendUnavailable,
    ConfigError,
    EnvironmentClosed,
    EnvlayerError,
    FileTooLarge,
    InvalidArgument,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPathError,
)
from envlayer.result import ExecResult

if TYPE_CHECKING:
    from envlayer.snapshot import Snapshot

log = logging.getLogger("envlayer.tools")

Result = dict[str, Any]
Handler = Callable[[Environment, dict[str, Any]], Result]
SandboxHandler = Callable[[dict[str, Any]], Result]
"""A tool about the registry's sandboxes, not run in one task's environment."""

DEFAULT_TOOLS = ("terminal", "terminal_job", "read_file", "write_file")
"""The tools a registry offers unless told otherwise."""
FILE_TOOLS = ("list_files", "file_info", "delete_file", "move_file", "make_dir", "upload_files", "download_files")
"""File management, and a directory moved as a list of files."""
SANDBOX_TOOLS = ("create_sandbox", "list_sandboxes", "remove_sandbox", "snapshot", "fork")
"""The registry's sandboxes (see :mod:`envlayer.agents.tools.sandbox_tools`); ``snapshot``
and ``fork`` need a backend with the ``snapshot`` capability."""
ALL_TOOLS = DEFAULT_TOOLS + FILE_TOOLS + SANDBOX_TOOLS
NO_TASK_TOOLS = frozenset({"create_sandbox", "list_sandboxes", "remove_sandbox"})
"""Tools that name their sandbox in their arguments instead of running in the caller's task."""


@dataclass(frozen=True)
class ToolConfig:
    """Limits of the tools. ``output_chars`` is the budget of text returned per call."""

    output_chars: int = 20_000
    default_timeout: float = 180.0
    max_timeout: float = 600.0
    read_lines: int = 2000
    jobs_dir: str | None = None
    """Where background jobs keep their files in the sandbox; None: the per-user default
    of :mod:`envlayer.agents.tools.jobs` (``~/.cache/envlayer/jobs``, private)."""
    output_dir: str | None = None
    """Where the full output of a cut ``terminal`` result is kept in the sandbox; None:
    the per-user default of :mod:`envlayer.agents.tools.spill` (``~/.cache/envlayer/output``)."""
    spill_bytes: int = 10_485_760
    """Most bytes of a command's output kept in the spill file (0: no spill file)."""
    list_entries: int = 1000
    """Most entries ``list_files`` and ``download_files`` return, and files ``upload_files`` takes."""
    transfer_bytes: int = 10_485_760
    """Most bytes of file content ``upload_files`` takes and ``download_files`` returns per call."""
    task_prefix: str = ""
    """The registry's sandboxes are the tasks whose id starts with this; the sandbox tools
    (``list_sandboxes``, ``remove_sandbox``, ``fork``) see only those, and name them
    without it."""
    policy: SandboxPolicy = dataclasses.field(default_factory=SandboxPolicy)
    """What ``create_sandbox`` callers may choose (default: nothing beyond the configuration)."""

    def __post_init__(self) -> None:
        if self.output_chars < 200:
            raise ValueError("output_chars must be >= 200")
        if not 0 < self.default_timeout <= self.max_timeout:
            raise ValueError("need 0 < default_timeout <= max_timeout")
        if self.read_lines < 1:
            raise ValueError("read_lines must be >= 1")
        if self.spill_bytes < 0:
            raise ValueError("spill_bytes must be >= 0")
        if self.list_entries < 1 or self.transfer_bytes < 1:
            raise ValueError("list_entries and transfer_bytes must be >= 1")
        if self.output_dir is not None and not self.output_dir.startswith("/"):
            raise ValueError("output_dir must be an absolute path (or None for the per-user default)")
        if self.jobs_dir is not None and not self.jobs_dir.startswith("/"):
            raise ValueError("jobs_dir must be an absolute path (or None for the per-user default)")


def error(kind: str, message: str, hint: str = "", **extra: Any) -> Result:
    """A structured error result."""
    return {"error": {"type": kind, "message": message, "hint": hint}, **extra}


class ToolRegistry:
    """The envlayer tools bound to an :class:`EnvironmentManager`.

    ``manager`` defaults to a new manager from the configuration (file, environment
    variables), so the backend is a configuration choice. The registry adds an idle
    guard to the manager: an environment with a background job it started that is
    still running is not reaped as idle.

    ``tools`` names the tools offered, in order (default :data:`DEFAULT_TOOLS`; every
    one: :data:`ALL_TOOLS`); an unknown name is a ``ValueError``. Each definition carries
    the JSON schema of its successful result (``ToolDefinition.output``).
    """

    def __init__(
        self,
        manager: EnvironmentManager | None = None,
        config: ToolConfig | None = None,
        *,
        tools: Sequence[str] = DEFAULT_TOOLS,
    ) -> None:
        self.manager = manager if manager is not None else EnvironmentManager()
        self.config = config if config is not None else ToolConfig()
        unknown = [name for name in tools if name not in ALL_TOOLS]
        if unknown:
            raise ValueError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(ALL_TOOLS)}")
        available = self._available()
        self._tools: dict[str, tuple[ToolDefinition, Handler | SandboxHandler]] = {
            name: (dataclasses.replace(available[name][0], output=OUTPUTS[name]), available[name][1]) for name in tools
        }
        self._jobs: dict[EnvKey, set[str]] = {}
        self._started: dict[EnvKey, set[str]] = {}
        """Every job started, running or not (for :meth:`stop_jobs`)."""
        self._jobs_lock = threading.Lock()
        self._cancel_tokens: dict[str, set[CancelToken]] = {}
        self.manager.add_idle_guard(self._jobs_running)

    def _available(self) -> dict[str, tuple[ToolDefinition, Handler | SandboxHandler]]:
        """Every tool this registry can offer, with its handler."""
        c = self.config
        sandboxes = SandboxTools(self.manager, c.task_prefix, c.policy)
        more = more_definitions
        return {
            "terminal": (definitions.terminal(c.default_timeout, c.max_timeout, c.jobs_dir), self._terminal),
            "terminal_job": (definitions.terminal_job(), self._terminal_job),
            "read_file": (definitions.read_file(c.read_lines), self._read_file),
            "write_file": (definitions.write_file(), self._write_file),
            "list_files": (
                more.list_files(c.list_entries),
                functools.partial(file_tools.list_files, max_entries=c.list_entries),
            ),
            "file_info": (more.file_info(), file_tools.file_info),
            "delete_file": (more.delete_file(), file_tools.delete_file),
            "move_file": (more.move_file(), file_tools.move_file),
            "make_dir": (more.make_dir(), file_tools.make_dir),
            "upload_files": (
                more.upload_files(c.transfer_bytes),
                functools.partial(file_tools.upload_files, max_bytes=c.transfer_bytes, max_files=c.list_entries),
            ),
            "download_files": (
                more.download_files(c.transfer_bytes),
                functools.partial(file_tools.download_files, max_bytes=c.transfer_bytes, max_entries=c.list_entries),
            ),
            "create_sandbox": (more.create_sandbox(), sandboxes.create_sandbox),
            "list_sandboxes": (more.list_sandboxes(), sandboxes.list_sandboxes),
            "remove_sandbox": (more.remove_sandbox(), sandboxes.remove_sandbox),
            "snapshot": (more.snapshot(), sandboxes.snapshot),
            "fork": (more.fork(), sandboxes.fork),
        }

    # --- background jobs keep their environment -----------------------------------------

    def _track_job(self, key: EnvKey | None, job_id: str, *, running: bool) -> None:
        if key is None:  # not a managed environment: nothing to keep alive
            return
        with self._jobs_lock:
            ids = self._jobs.setdefault(key, set())
            if running:
                ids.add(job_id)
            else:
                ids.discard(job_id)
            if not ids:
                del self._jobs[key]

    def _jobs_running(self, key: EnvKey, env: Environment) -> bool:
        """Idle guard: True while a job this registry started in ``env`` still runs."""
        with self._jobs_lock:
            ids = sorted(self._jobs.get(key, ()))
        if not ids:
            return False
        alive = jobs.running(env, jobs_dir=self.config.jobs_dir, job_ids=ids)
        for job_id in set(ids) - alive:
            self._track_job(key, job_id, running=False)
        return bool(alive)

    def stop_jobs(self) -> int:
        """Kill every background job this registry started that still runs, and delete
        the files of every job it started (command, log), in the environments still open.
        A server ending calls this before it closes the manager: a job runs detached, and
        on a backend whose sandbox is the host it and its files would outlive the server.
        Returns how many jobs were cleaned up; a failure is logged and the others go on."""
        with self._jobs_lock:
            started, self._started = self._started, {}
        open_keys = set(self.manager.active_keys())
        done = 0
        for key, ids in started.items():
            if key not in open_keys:
                continue
            env = self.manager.get(key.task)
            for job_id in sorted(ids):
                try:
                    jobs.kill(env, jobs_dir=self.config.jobs_dir, job_id=job_id)
                    jobs.remove(env, jobs_dir=self.config.jobs_dir, job_id=job_id)
                    self._track_job(key, job_id, running=False)
                    done += 1
                except EnvlayerError as exc:
                    log.warning("could not stop background job %s of task %r: %s", job_id, key.task, exc.message)
        return done

    # --- definitions ------------------------------------------------------------------

    @property
    def definitions(self) -> list[ToolDefinition]:
        """Every tool's definition."""
        return [definition for definition, _ in self._tools.values()]

    def openai_tools(self) -> list[dict[str, Any]]:
        """The definitions in the OpenAI ``tools`` format."""
        return definitions.to_openai(self.definitions)

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """The definitions in the Anthropic ``tools`` format."""
        return definitions.to_anthropic(self.definitions)

    # --- dispatch ---------------------------------------------------------------------

    def run_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        task_id: str = DEFAULT_TASK,
        *,
        cancel: CancelToken | None = None,
    ) -> Result:
        """Run tool ``name`` with ``arguments`` (a mapping, or the JSON text a model
        produced) in ``task_id``'s environment. Never raises for a tool-call problem;
        see the module docstring for the error types. ``cancel.cancel()`` (from any
        thread) stops a running ``terminal`` call: it returns the ``cancelled`` error."""
        tool = self._tools.get(name)
        if tool is None:
            return error("unknown_tool", f"there is no tool named {name!r}", "use one of: " + ", ".join(self._tools))
        definition, handler = tool

        def call() -> Result:
            args = validate(_parse(arguments), definition.parameters)
            if name in NO_TASK_TOOLS:
                return handler(args)  # type: ignore[call-arg,arg-type]
            if handler == self._terminal and cancel is not None:
                return self._call(functools.partial(self._terminal, cancel=cancel), args, task_id)
            return self._call(handler, args, task_id)  # type: ignore[arg-type]

        hint = f"call {name} with arguments matching its JSON schema"
        return _as_result(call, f"tool {name}", task_id, bad_arguments=hint)

    def fork(self, task_id: str, new_task_ids: Sequence[str], *, snapshot: Snapshot | None = None) -> Result:
        """Fork ``task_id``'s environment into ``new_task_ids`` through
        :meth:`EnvironmentManager.fork`: each new task then has its own sandbox, started
        from the source's files (no running processes, so no background jobs), for
        :meth:`run_tool` calls with that task id. Returns ``{"tasks": [...]}``, or an
        error result like :meth:`run_tool` (never raises for a bad call): a backend
        without ``snapshot`` or a bad task id is ``bad_arguments``, a new task id that
        already has an environment ``envlayer_error``."""

        def call() -> Result:
            handles = self.manager.fork(task_id, new_task_ids, snapshot=snapshot)
            return {"tasks": [h.task_id for h in handles]}

        return _as_result(call, "fork", task_id, bad_arguments="pass new, distinct task ids")

    def _call(self, handler: Handler, args: dict[str, Any], task_id: str) -> Result:
        env = self.manager.get(task_id)
        try:
            return handler(env, args)
        except EnvironmentClosed:
            if not env.closed:
                raise
        # released (idle or by another caller) between get() and the call, before it started
        return handler(self.manager.get(task_id), args)

    # --- handlers ---------------------------------------------------------------------

    @contextmanager
    def _running_call(self, task_id: str, token: CancelToken) -> Iterator[None]:
        with self._jobs_lock:
            self._cancel_tokens.setdefault(task_id, set()).add(token)
        try:
            yield
        finally:
            with self._jobs_lock:
                tokens = self._cancel_tokens.get(task_id, set())
                tokens.discard(token)
                if not tokens:
                    self._cancel_tokens.pop(task_id, None)

    def cancel(self, task_id: str = DEFAULT_TASK) -> int:
        """Cancel every ``terminal`` call running for ``task_id`` (from any thread): each is
        killed with its process tree and its ``run_tool`` returns a ``cancelled`` error
        with the output so far. Returns how many calls were cancelled. Background jobs are
        not touched (``terminal_job`` ``action=kill`` stops those)."""
        with self._jobs_lock:
            tokens = list(self._cancel_tokens.get(task_id, ()))
        for token in tokens:
            token.cancel()
        return len(tokens)

    def _terminal(self, env: Environment, args: dict[str, Any], cancel: CancelToken | None = None) -> Result:
        c = self.config
        if args.get("background"):
            job_id, log_file = jobs.start(env, args["command"], jobs_dir=c.jobs_dir, workdir=args.get("workdir"))
            self._track_job(getattr(env, "key", None), job_id, running=True)
            if getattr(env, "key", None) is not None:
                with self._jobs_lock:
                    self._started.setdefault(env.key, set()).add(job_id)  # type: ignore[attr-defined]
            return {
                "job_id": job_id,
                "status": "running",
                "log_file": log_file,
                "hint": "check it with terminal_job(job_id=...)",
            }
        timeout = float(args.get("timeout", c.default_timeout))
        if timeout > c.max_timeout:
            raise ToolArgumentError(
                f"argument 'timeout' must be <= {c.max_timeout:g} seconds; "
                "for longer commands use background=true and check them with terminal_job"
            )
        merged = MergedOutput(c.output_chars, c.spill_bytes)
        token = cancel or CancelToken()
        with self._running_call(env.task_id, token):
            result = run(env, args["command"], cwd=args.get("workdir"), timeout=timeout, on_output=merged, cancel=token)
        out = self._output(result, merged, separate=bool(args.get("separate_streams")))
        if out.get("truncated"):
            out.update(self._spill(env, merged))
        if result.cancelled:
            return error(
                "cancelled",
                "the command was cancelled and killed, with every process it started; output until then is included",
                "run it again if it is still needed",
                exit_code=result.exit_code,
                **out,
                shell_state=shell_state(env),
            )
        if result.timed_out:
            return error(
                "timeout",
                f"the command did not finish within {timeout:g} s and was killed, with every process it started",
                f"raise timeout (max {c.max_timeout:g}), or run it with background=true and check it with terminal_job",
                exit_code=result.exit_code,
                **out,
                shell_state=shell_state(env),
            )
        return {"exit_code": result.exit_code, **out, "shell_state": shell_state(env)}

    def _spill(self, env: Environment, merged: MergedOutput) -> Result:
        """Keep the whole output in a file in the sandbox; the fields naming it (or a
        note when that failed: the result itself is never lost over it)."""
        data = merged.full()
        if not data:
            return {}
        try:
            path = spill.save(env, data, output_dir=self.config.output_dir)
        except EnvlayerError as exc:
            log.warning("could not keep the full output in the sandbox: %s", exc)
            return {"output_file_error": f"the full output could not be kept: {exc}"}
        kept = "all of it" if len(data) >= merged.total else f"its first and last {len(data)} bytes"
        return {
            "output_file": path,
            "output_bytes": merged.total,
            "output_hint": f"the full output ({merged.total} bytes; the file has {kept}) is in {path}: "
            "read the part you need with read_file(path, offset, limit), or grep it with terminal",
        }

    def _output(self, result: ExecResult, merged: MergedOutput, *, separate: bool) -> Result:
        """The command's output for the model: both streams merged in arrival order, or
        with ``separate`` each stream on its own (half the budget each)."""
        budget = self.config.output_chars
        out: Result = {}
        cut = False
        if separate:
            for name, text in (("stdout", result.stdout_text), ("stderr", result.stderr_text)):
                out[name], omitted = truncate_middle(text, budget // 2)
                cut = cut or bool(omitted)
        else:
            # a backend that cannot stream delivered stdout, then stderr, at the end
            out["output"], omitted = truncate_middle(merged.text, budget)
            cut = bool(omitted) or merged.truncation is not None
        out["duration"] = round(result.duration, 3)
        if cut or result.truncated:
            out["truncated"] = True
        notices = [result.notice] if result.notice else []
        if result.recovered:
            notices.append(
                f"the sandbox had to be re-established before this command ({result.recovered}): "
                "the working directory, exported variables and background processes of earlier commands may be gone"
            )
        if notices:
            out["notice"] = "; ".join(notices)
        return out

    def _terminal_job(self, env: Environment, args: dict[str, Any]) -> Result:
        c = self.config
        job_id = args["job_id"]
        if args.get("action") == "kill":
            jobs.kill(env, jobs_dir=c.jobs_dir, job_id=job_id)
        st = jobs.status(env, jobs_dir=c.jobs_dir, job_id=job_id, budget=c.output_chars)
        self._track_job(getattr(env, "key", None), job_id, running=st.state == "running")
        if st.state == "unknown":
            raise jobs.JobError(f"no job {job_id!r} in this sandbox")
        res: Result = {
            "job_id": job_id,
            "status": st.state,
            "log_file": st.log_file,
            "output": st.output,
        }
        if st.exit_code is not None:
            res["exit_code"] = st.exit_code
        if st.truncated:
            res["truncated"] = True
        return res

    def _read_file(self, env: Environment, args: dict[str, Any]) -> Result:
        path = args["path"]
        data = env.read_file(path)
        if b"\0" in data[:8192]:
            return error(
                "binary_file",
                f"{path!r} is not a text file ({len(data)} bytes)",
                "inspect it with terminal, e.g. `od -c FILE | head` or `file FILE`",
            )
        lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
        offset = args.get("offset", 1)
        limit = args.get("limit", self.config.read_lines)
        if lines and offset > len(lines):
            raise ToolArgumentError(f"offset {offset} is past the end of the file ({len(lines)} lines)")
        chosen = lines[offset - 1 : offset - 1 + limit]
        content, omitted = truncate_middle("".join(chosen), self.config.output_chars)
        end = offset - 1 + len(chosen)
        res: Result = {
            "path": path,
            "content": content,
            "start_line": offset,
            "end_line": end,
            "total_lines": len(lines),
        }
        if end < len(lines):
            res["more"] = f"lines {end + 1}-{len(lines)} not shown; call read_file with offset={end + 1}"
        if omitted:
            res["truncated"] = True
            res["hint"] = "the middle of this page was cut to fit; read fewer lines (limit) to see every line"
        return res

    def _write_file(self, env: Environment, args: dict[str, Any]) -> Result:
        data = args["content"].encode("utf-8")
        env.write_file(args["path"], data)
        return {"path": args["path"], "bytes_written": len(data)}


def shell_state(env: Environment) -> str:
    """``"kept"`` when the environment's commands share one shell (``cd``, ``export`` and
    variables carry over to the next call), else ``"reset"`` (each call starts afresh)."""
    return "kept" if supports(env, Capability.PERSISTENT_SESSION) else "reset"


def _parse(arguments: Mapping[str, Any] | str | None) -> Any:
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"arguments are not valid JSON: {exc}") from None
    return arguments


def _as_result(call: Callable[[], Result], what: str, task_id: str, *, bad_arguments: str) -> Result:
    """``call()``, with every exception a tool call can cause as an error result (see
    the module docstring); ``bad_arguments`` is the hint of a schema mismatch."""
    try:
        return call()
    except ToolArgumentError as exc:
        return error("bad_arguments", exc.message, bad_arguments)
    except jobs.JobError as exc:
        return error("job_error", exc.message, "check the job_id returned by terminal(background=true)")
    except InvalidArgument as exc:
        return error("bad_arguments", exc.message, exc.hint or f"fix the {exc.argument} argument")
    except SandboxPathError as exc:
        return error("path_outside_sandbox", exc.message, exc.hint)
    except SandboxFileNotFound as exc:
        return error("file_not_found", exc.message, "check the path, e.g. with terminal `ls`")
    except SandboxIsADirectory as exc:
        return error("is_a_directory", exc.message, "name a file; list the directory with terminal `ls`")
    except ToolNotAllowed as exc:
        return error("not_allowed", exc.message, exc.hint)
    except FileOpError as exc:
        return error("file_error", exc.message, exc.hint)
    except FileTooLarge as exc:
        return error("file_too_large", exc.message, "read parts of it with terminal, e.g. `head -n 100 FILE`")
    except BackendUnavailable as exc:
        return error(
            "backend_unavailable",
            exc.message,
            "retry: the sandbox was unreachable; the environment was reset and the next call rebuilds it"
            + (f" ({exc.hint})" if exc.hint else ""),
        )
    except EnvironmentClosed as exc:
        return error("environment_closed", exc.message, "retry: the next call uses a fresh environment")
    except (ConfigError, BackendNotFound, BackendLoadError, BackendConflict) as exc:
        return error("configuration", exc.message, exc.hint)
    except EnvlayerError as exc:
        return error("envlayer_error", exc.message, exc.hint)
    except Exception as exc:
        log.exception("%s failed for task %r", what, task_id)
        return error("internal_error", f"{type(exc).__name__}: {exc}", "retry once; if it fails again, report it")
