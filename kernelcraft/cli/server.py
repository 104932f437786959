"""`kernelcraft serve`: run the MCP server over stdio (the default) or streamable HTTP.

stdio is what desktop clients launch: one user, one process, every write recorded as "local".
HTTP is for a team: bearer tokens name the clients (see `auth.py` for the token formats), and the
server refuses to start where it would be reachable without them. Everything is checked before
the transport opens, so a bad flag is an error message, never a half-started server. Logs go to
stderr; stdout belongs to the stdio protocol.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from kernelcraft.base.config import Settings
from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import TOKENS_ENV as TOKENS
from kernelcraft.cli.common import (
    EXIT_OK,
    Subcommands,
    add_db,
    add_evaluator,
    add_memory_limit,
    check_evaluator_args,
    knobs_of,
    run,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.applications import Starlette

    from kernelcraft.agent.llm.judge import ModelJudge
    from kernelcraft.server.auth import HttpPlan
    from kernelcraft.server.state import AppState

# `kernelcraft.server.auth` imports mcp (~0.8 s): it is imported only when `serve` runs, so that
# `kernelcraft --help` and `kernelcraft verify` stay fast. The format matches auth.TOKENS_FORMAT.
TOKENS_ENV = TOKENS
TOKENS_FORMAT = "token=name pairs, e.g. KERNELCRAFT_TOKENS='s3cr3t-a=alice,s3cr3t-b=bob'"

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8765


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "serve",
        help="run the MCP server (stdio by default; --transport http for a team)",
        description="Run the kernelcraft MCP server. stdio (default) is what Claude Desktop and Claude Code "
        "launch; --transport http serves a team over streamable HTTP at http://HOST:PORT/mcp with bearer "
        f"tokens from {TOKENS_ENV} ({TOKENS_FORMAT}) or --tokens-file (one token=name a line).",
    )
    p.add_argument(
        "--transport", choices=("stdio", "http"), default="stdio", help="how clients talk to the server"
    )
    add_db(p)
    add_memory_limit(p)
    p.add_argument("--host", default="127.0.0.1", help="HTTP: address to listen on")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP: port")
    p.add_argument("--tokens-file", type=Path, default=None, help="HTTP: file of token=name lines")
    p.add_argument(
        "--no-auth", action="store_true", help="HTTP: serve without authentication (loopback addresses only)"
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="HTTP: another Host header clients use to reach this server (repeatable; DNS-rebinding protection)",
    )
    p.add_argument(
        "--public-url", default=None, help="HTTP: the base URL clients use, if not http://HOST:PORT"
    )
    add_evaluator(p)
    p.add_argument(
        "--allow-partial-box",
        action="store_true",
        help="HTTP: serve even where the candidates' box is partial (the start-up check names what is "
        "missing); without it, such a team server refuses to start",
    )
    j = p.add_argument_group(
        "duplicate-rule judge",
        "a model that decides whether a proposed rule duplicates an existing one (AdaExplore's prompt); "
        "without one, rules merge by text alone",
    )
    j.add_argument(
        "--llm",
        choices=("anthropic", "openai", "none"),
        default="none",
        help="anthropic (key in $ANTHROPIC_API_KEY), openai (any OpenAI-compatible server, with "
        "--base-url and --model) or none (default)",
    )
    j.add_argument("--model", help="model id (default for anthropic: claude-sonnet-5-5; required for openai)")
    j.add_argument("--base-url", help="API base URL (openai: e.g. http://localhost:11434/v1 for Ollama)")
    j.add_argument(
        "--api-key-env",
        help="variable holding the API key (default ANTHROPIC_API_KEY or OPENAI_API_KEY; 'none' for a "
        "local server that checks none); read before the server drops secrets from its environment",
    )
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from kernelcraft.server.hardening import drop_secrets, make_undumpable

    settings = settings_from_args(args)
    plan = http_plan_from_args(args) if args.transport == "http" else None
    judge = judge_from_args(args)  # its key is read here, before the secrets leave the environment
    # The tokens are read (the verifier keeps their digests): no secret stays in the environment,
    # and no same-user process reads this one's environment or memory.
    dropped = drop_secrets()
    make_undumpable()
    if dropped:
        logger.info("removed %s from the server's environment", ", ".join(dropped))
    check_database(settings.db_path)
    check_box(settings, http=plan is not None, allow_partial=args.allow_partial_box)
    if plan is None:
        serve_stdio(settings, judge)
    else:
        serve_http(settings, plan, judge)
    return EXIT_OK


def judge_from_args(args: argparse.Namespace) -> ModelJudge | None:
    """The duplicate-rule judge `--llm` asks for (./.env read first, never overriding the
    environment); None for `--llm none`. A missing key or model is a usage error, before serving."""
    from kernelcraft.agent.llm.config import LLMConfig, load_dotenv, make_llm
    from kernelcraft.agent.llm.judge import ModelJudge, judge_config

    if args.llm == "none":
        return None
    load_dotenv()
    config = LLMConfig(kind=args.llm, model=args.model, base_url=args.base_url, api_key_env=args.api_key_env)
    llm = make_llm(judge_config(config))
    return ModelJudge(llm) if llm is not None else None


def settings_from_args(args: argparse.Namespace) -> Settings:
    check_evaluator_args(args.evaluator, args.ray_address)
    return dataclasses.replace(
        Settings.from_knobs(knobs_of(args).without_secrets(), args.db),
        evaluator=args.evaluator,
        ray_address=args.ray_address,
        memory_limit_gb=args.memory_limit_gb,
    )


def check_database(path: Path) -> None:
    """Open (and migrate) the database once before serving, so that an unusable one is one line on
    stderr and exit 2 — not a traceback from inside the transport, with an stdio client left
    waiting for its `initialize` answer."""
    from kernelcraft.base.errors import StoreError
    from kernelcraft.store import Store

    async def probe() -> None:
        store = await Store.open(path)
        try:
            await store.check()
        finally:
            await store.aclose()

    try:
        run(probe)
    except StoreError as e:
        raise UsageError(str(e)) from e


PARTIAL_BOX_BANNER = "!" * 72


def check_box(settings: Settings, *, http: bool, allow_partial: bool) -> None:
    """Say at start-up, loudly, when a worker here would not get the whole box (`box/preflight.py`);
    a team server (HTTP) then refuses to start unless told `--allow-partial-box`."""
    if settings.evaluator == "ray":
        logger.info(
            "the candidates' box is the Ray nodes': each verdict's notes say what of it a node lacked"
        )
        return
    from kernelcraft.engine import box_preflight

    report = box_preflight(settings.knobs)
    if report.complete:
        logger.info(report.sentence())
        return
    logger.warning("\n%s\n%s\n%s", PARTIAL_BOX_BANNER, report.sentence(), PARTIAL_BOX_BANNER)
    if http and not allow_partial:
        raise UsageError(
            f"{report.sentence()}. A team server runs every client's code in this box: make what it names "
            "reachable (the server's Python and package readable by other users), or pass --allow-partial-box "
            "to serve anyway"
        )


def http_plan_from_args(args: argparse.Namespace) -> HttpPlan:
    """Read the tokens and check the host/auth combination; raises UsageError before listening."""
    from kernelcraft.server.auth import load_tokens_file, parse_tokens, plan_http

    tokens: dict[str, str] = {}
    if args.tokens_file is not None:
        if args.no_auth:
            raise UsageError("--no-auth and --tokens-file contradict each other; give one of them")
        tokens.update(load_tokens_file(args.tokens_file))
    env_tokens = knobs_of(args).secrets.tokens or ""
    if env_tokens.strip():
        if args.no_auth:
            logger.warning("%s is set but --no-auth was given: serving without authentication", TOKENS_ENV)
        else:
            tokens.update(parse_tokens(env_tokens))
    return plan_http(
        args.host,
        args.port,
        tokens=tokens,
        no_auth=args.no_auth,
        allowed_hosts=args.allowed_host,
        public_url=args.public_url,
    )


def serve_stdio(settings: Settings, judge: ModelJudge | None = None) -> None:
    from kernelcraft.server.app import create_server

    server = create_server(settings, freeze_after_start=True, judge=judge)
    run(server.run_stdio_async)


def serve_http(settings: Settings, plan: HttpPlan, judge: ModelJudge | None = None) -> None:
    import uvicorn

    from kernelcraft.server.app import create_server

    # The port is taken here, before anything says "serving": a port another process holds is one
    # line and exit 2, not a "ready" log followed by uvicorn's exit 3.
    sock = listen(plan.host, plan.port)
    server = create_server(settings, auth=plan.auth, freeze_after_start=True, judge=judge)
    app = asgi_app(server, plan)
    who = f"clients {', '.join(plan.auth.clients)}" if plan.auth else "no authentication (loopback only)"
    logger.info("serving MCP at %s/mcp for %s", plan.public_url, who)
    # log_config=None: uvicorn's own config sends access logs to stdout; ours sends everything to stderr.
    # httptools parses HTTP/1.1 in C: ~45 µs a call under 32 clients where h11 took ~90 µs (bench_server.py).
    config = uvicorn.Config(
        app, host=plan.host, port=plan.port, log_config=None, lifespan="on", http="httptools"
    )
    run(functools.partial(uvicorn.Server(config).serve, sockets=[sock]))


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for the HTTP server, or UsageError saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        held = " (another process is listening there)" if e.errno == errno.EADDRINUSE else ""
        raise UsageError(
            f"cannot listen on {host}:{port}: {e.strerror}{held}; stop it or choose another --port"
        ) from e
    return sock


def asgi_app(server: MCPServer[AppState], plan: HttpPlan) -> Starlette:
    """The app `serve --transport http` runs, which the HTTP tests drive too.

    json_response stays False: a long tool's progress notifications go out as SSE events on its
    call's response; in JSON mode the SDK drops them, in both protocol eras (the HTTP tests check
    that they arrive). A call that sends no notification is answered as plain JSON either way.
    """
    app = server.streamable_http_app(host=plan.host, transport_security=plan.security, json_response=False)
    if plan.auth is not None:
        from kernelcraft.server.auth import BearerGate

        app.add_middleware(BearerGate, verifier=plan.auth.verifier)
    return app
