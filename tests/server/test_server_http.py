"""The streamable HTTP transport through its ASGI app: bearer tokens, a plain 401 (no OAuth),
DNS-rebinding protection, /health, client names on writes, progress of long tools,
refusals to start, and what the serving process does for latency under load."""

from __future__ import annotations

import argparse
import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.client import ConnectMode
from mcp.client.streamable_http import streamable_http_client
from search_scripted import ScriptedEvaluator, candidate
from server_support import TASK, NoEvaluations, failure_clients, settings_for

from kernelcraft.base import knobs
from kernelcraft.base.config import Settings
from kernelcraft.base.errors import UsageError
from kernelcraft.cli import server as commands
from kernelcraft.cli.common import run
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.server.app import EvaluatorFactory, create_server
from kernelcraft.server.auth import HttpPlan, load_tokens_file, parse_tokens, plan_http

BASE = "http://127.0.0.1:8765"
ALICE, BOB = "alice-secret-token", "bob-secret-token-2"


@asynccontextmanager
async def http_app(
    tmp_path: Path, plan: HttpPlan, evaluator_factory: EvaluatorFactory = NoEvaluations
) -> AsyncIterator[httpx2.AsyncClient]:
    """The app `kernelcraft serve --transport http` runs, reached without a socket."""
    server = create_server(settings_for(tmp_path), evaluator_factory, auth=plan.auth)
    app = commands.asgi_app(server, plan)
    async with app.router.lifespan_context(app):
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE) as http:
            yield http


def with_tokens() -> HttpPlan:
    return plan_http("127.0.0.1", 8765, tokens={ALICE: "alice", BOB: "bob"}, no_auth=False)


async def record_one_failure(http: httpx2.AsyncClient, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(
        transport=http._transport, base_url=BASE, headers=headers, timeout=30
    ) as authed:
        async with Client(streamable_http_client(f"{BASE}/mcp", http_client=authed)) as client:
            result = await client.call_tool(
                "record_failure", {"candidate_code": "class ModelNew: ...", "error": "illegal memory access"}
            )
            assert not result.is_error, result.content


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.anyio
async def test_a_request_without_a_token_gets_a_plain_401_and_no_oauth_is_advertised(tmp_path: Path) -> None:
    async with http_app(tmp_path, with_tokens()) as http:
        response = await http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer") and 'error="invalid_token"' in challenge
        assert "resource_metadata" not in challenge
        assert response.json()["error"] == "invalid_token"
        assert "no bearer token" in response.json()["error_description"]

        # Tokens are issued out of band: no authorization server or resource metadata to discover.
        for path in (
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-authorization-server",
        ):
            assert (await http.get(path)).status_code == 404, path


@pytest.mark.anyio
async def test_a_wrong_token_gets_401_saying_the_token_is_invalid(tmp_path: Path) -> None:
    async with http_app(tmp_path, with_tokens()) as http:
        response = await http.post(
            "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer not-a-known-token"}
        )
        assert response.status_code == 401
        assert "resource_metadata" not in response.headers["www-authenticate"]
        assert response.json()["error_description"].startswith("invalid token")


@pytest.mark.anyio
async def test_each_client_is_recorded_by_its_token_name(tmp_path: Path) -> None:
    async with http_app(tmp_path, with_tokens()) as http:
        await record_one_failure(http, ALICE)
        await record_one_failure(http, BOB)
    assert failure_clients(tmp_path / "kernelcraft.db") == ["alice", "bob"]


@pytest.mark.anyio
async def test_health_answers_without_a_token(tmp_path: Path) -> None:
    async with http_app(tmp_path, with_tokens()) as http:
        response = await http.get("/health")
        assert response.status_code == 200
        assert response.json()["status"] == "ok"


@pytest.mark.anyio
async def test_a_foreign_host_header_is_refused_against_dns_rebinding(tmp_path: Path) -> None:
    async with http_app(tmp_path, with_tokens()) as http:
        response = await http.post(
            "/mcp",
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {ALICE}", "Host": "attacker.example:8765"},
        )
        assert response.status_code == 421


@pytest.mark.anyio
async def test_no_auth_on_loopback_serves_without_a_token_and_records_local(tmp_path: Path) -> None:
    plan = plan_http("127.0.0.1", 8765, tokens={}, no_auth=True)
    assert plan.auth is None and plan.security.enable_dns_rebinding_protection
    async with http_app(tmp_path, plan) as http:
        await record_one_failure(http, None)
    assert failure_clients(tmp_path / "kernelcraft.db") == ["local"]


class ProgressingEvaluator(ScriptedEvaluator):
    """Reports progress before each scripted verdict, as a real evaluation does while it compiles
    and runs trials."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        if progress is not None:
            await progress(0.25, "compiling")
            await progress(0.5, "trial 1 of 2")
        return await super().submit(job, progress)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["2026-07-28 request", "2025-11-25 session"])
async def test_progress_of_a_long_tool_reaches_an_http_client(tmp_path: Path, mode: ConnectMode) -> None:
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with http_app(tmp_path, with_tokens(), ProgressingEvaluator) as http:
        async with httpx2.AsyncClient(
            transport=http._transport, base_url=BASE, headers={"Authorization": f"Bearer {ALICE}"}
        ) as authed:
            async with Client(streamable_http_client(f"{BASE}/mcp", http_client=authed), mode=mode) as client:
                with anyio.fail_after(30):
                    result = await client.call_tool(
                        "verify_against_reference",
                        {"reference_code": TASK, "candidate_code": candidate("correct"), "trials": 2},
                        progress_callback=on_progress,
                    )
    assert not result.is_error, result.content
    assert result.structured_content is not None and result.structured_content["correct"] is True
    assert messages == ["compiling", "trial 1 of 2"]


@pytest.mark.anyio
async def test_only_a_serving_process_takes_its_startup_objects_out_of_the_collectors_walk(
    tmp_path: Path,
) -> None:
    before = gc.get_freeze_count()
    async with Client(create_server(settings_for(tmp_path / "embedded"), NoEvaluations)):
        assert gc.get_freeze_count() == before
    try:
        served = create_server(settings_for(tmp_path / "served"), NoEvaluations, freeze_after_start=True)
        async with Client(served):
            assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_the_server_runs_on_uvloop_where_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    loops: list[str] = []

    async def main() -> None:
        loops.append(type(asyncio.get_running_loop()).__module__)

    run(main)
    assert loops[0].startswith("uvloop")


def test_it_refuses_to_serve_on_all_interfaces_without_tokens() -> None:
    with pytest.raises(UsageError, match="refusing to serve on 0.0.0.0 without tokens.*KERNELCRAFT_TOKENS"):
        plan_http("0.0.0.0", 8765, tokens={}, no_auth=False)


def test_no_auth_is_refused_off_loopback() -> None:
    with pytest.raises(UsageError, match="only allowed on a loopback address"):
        plan_http("0.0.0.0", 8765, tokens={}, no_auth=True)


def test_loopback_without_tokens_needs_an_explicit_no_auth() -> None:
    with pytest.raises(UsageError, match="--no-auth"):
        plan_http("127.0.0.1", 8765, tokens={}, no_auth=False)


def test_a_public_server_with_tokens_keeps_dns_rebinding_protection_for_its_names() -> None:
    plan = plan_http("0.0.0.0", 9000, tokens={ALICE: "alice"}, no_auth=False, allowed_hosts=["gpu-box.lan"])
    assert plan.auth is not None and plan.auth.clients == ("alice",)
    assert plan.security.enable_dns_rebinding_protection
    assert "gpu-box.lan:*" in plan.security.allowed_hosts
    assert "attacker.example:*" not in plan.security.allowed_hosts


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", *argv])
    args.knobs = knobs.settings()  # as `kernelcraft.cli.main` hands them to the command
    return args


def test_serve_reads_tokens_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELCRAFT_TOKENS", f"{ALICE}=alice, {BOB}=bob")
    plan = commands.http_plan_from_args(serve_args("--transport", "http", "--host", "0.0.0.0"))
    assert plan.auth is not None and plan.auth.clients == ("alice", "bob")


def test_serve_refuses_all_interfaces_without_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELCRAFT_TOKENS", raising=False)
    with pytest.raises(UsageError, match="refusing to serve on 0.0.0.0"):
        commands.http_plan_from_args(serve_args("--transport", "http", "--host", "0.0.0.0"))


def test_a_tokens_file_holds_one_token_name_pair_a_line(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# team tokens\n{ALICE}=alice\n\n{BOB} = bob\n")
    path.chmod(0o600)
    assert load_tokens_file(path) == {ALICE: "alice", BOB: "bob"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("justatoken", "not a token=name pair"),
        ("short=alice", "shorter than 8 characters"),
        (f"{ALICE}=alice,{ALICE}=bob", "same token"),
    ],
)
def test_malformed_tokens_are_refused_with_the_format(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_tokens(text)


def test_kernelcraft_serve_exits_2_before_listening_on_all_interfaces_without_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kernelcraft import cli

    monkeypatch.delenv("KERNELCRAFT_TOKENS", raising=False)
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--transport", "http", "--host", "0.0.0.0", "--db", str(tmp_path / "k.db")])
    assert exited.value.code == 2
    assert "refusing to serve on 0.0.0.0 without tokens" in capsys.readouterr().err
    assert not (tmp_path / "k.db").exists()


def test_serve_on_a_port_another_process_holds_fails_before_saying_it_serves(tmp_path: Path) -> None:
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = dict(os.environ, KERNELCRAFT_HOME=str(tmp_path))
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kernelcraft",
                "serve",
                "--transport",
                "http",
                "--port",
                str(port),
                "--no-auth",
                "--allow-partial-box",  # (this test is about the port, not the box)
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "serving MCP" not in proc.stderr, (
        proc.stderr
    )
