"""``envlayer mcp`` (and the ``envlayer-mcp`` script): serve envlayer's tools over the Model
Context Protocol. The ``mcp`` SDK is imported only when the command runs
(:mod:`envlayer.integrations.mcp`); see docs/mcp.md."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

from envlayer.errors import ConfigError, EnvlayerError

DEFAULT_HOST = "127.0.0.1"
EXAMPLES = (
    "  envlayer mcp                                  # stdio, for Claude Desktop/Code, Cursor, Agents SDK\n"
    "  envlayer mcp --backend docker -o image=python:3.12-slim --allow-option cpus\n"
    "  ENVLAYER_MCP_TOKEN=$(cat ~/.mcp-token) envlayer mcp --http 127.0.0.1:8765"
)
EXITS = (
    "exit codes: 0 the client disconnected or the server was stopped (SIGTERM/SIGINT), "
    "1 it could not start (configuration, no token for --http, the mcp extra missing), 2 usage error"
)


def add_parsers(sub: Any, shared: dict[str, argparse.ArgumentParser], make: Callable[..., Any]) -> None:
    """Register ``mcp`` on ``sub`` (``make`` is the CLI's subcommand builder)."""
    p = make(
        sub,
        "mcp",
        shared,
        "serve envlayer's tools to MCP clients (stdio, or HTTP with --http)",
        EXAMPLES,
        EXITS,
        flags=("settings",),
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(needs a token: --token-env / --token-file); PORT alone binds 127.0.0.1",
    )
    p.add_argument(
        "--token-env", metavar="VAR", help="variable holding the HTTP bearer token (default ENVLAYER_MCP_TOKEN)"
    )
    p.add_argument("--token-file", metavar="PATH", help="file whose first line is the HTTP bearer token")
    p.add_argument(
        "--allow-backend",
        action="append",
        default=[],
        metavar="NAME",
        help="a backend clients may choose in create_sandbox (repeatable)",
    )
    p.add_argument(
        "--allow-option",
        action="append",
        default=[],
        metavar="KEY[=V1,V2]",
        help="an option clients may set in create_sandbox: any value, or only these (repeatable)",
    )
    p.add_argument("--task-prefix", metavar="PREFIX", help="task id prefix of the server's sandboxes (default mcp-)")
    p.add_argument(
        "--keep-sandboxes",
        action="store_true",
        default=None,
        help="keep the sandboxes when the server exits (default: private to it, removed at exit)",
    )
    p.set_defaults(func=cmd_mcp)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[::1]:PORT`` for IPv6, or ``PORT`` / ``:PORT`` for 127.0.0.1 (port 0
    picks a free one). Raises ConfigError."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{text!r} is not HOST:PORT", source="--http", hint="e.g. --http 127.0.0.1:8765")
    return host, int(port)


def cmd_mcp(args: argparse.Namespace) -> int:
    """Run the server until the client goes away or a signal arrives."""
    try:
        import anyio

        from envlayer.integrations.mcp import server
        from envlayer.integrations.mcp.config import Flags, load, read_token
    except ImportError as exc:
        raise EnvlayerError(
            f"the MCP server needs the mcp package ({exc})", hint="pip install 'envlayer[mcp]'"
        ) from None
    from envlayer.cli.console import parse_assignments

    config = load(
        Flags(
            config=args.config,
            backend=args.backend,
            profile=args.profile,
            option_texts=parse_assignments(args.option or [], "-o"),
            allow_backends=args.allow_backend,
            allow_options=args.allow_option,
            task_prefix=args.task_prefix,
            keep_sandboxes=args.keep_sandboxes,
            token_env=args.token_env,
            token_file=args.token_file,
        )
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    logging.getLogger("envlayer").addHandler(handler)
    if args.http is None:
        anyio.run(server.serve_stdio, config)
        return 0
    host, port = parse_listen(args.http)
    token = read_token(config)
    if token is None:
        raise ConfigError(
            f"no bearer token: ${config.token_env} is empty and no token file is set",
            source="--http",
            hint=f"export {config.token_env}=<a long random string>, or pass --token-file PATH; clients send it "
            "as `Authorization: Bearer <token>`",
        )
    anyio.run(server.serve_http, config, host, port, token)
    return 0


def main() -> None:
    """The ``envlayer-mcp`` console script: ``envlayer mcp`` with the same arguments."""
    from envlayer.cli.app import main as cli_main

    sys.exit(cli_main(["mcp", *sys.argv[1:]]))
