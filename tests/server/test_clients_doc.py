"""What docs/clients.md (and the README's copy) tells a user to paste: every JSON config parses and
names a command or URL that exists, every `kernelcraft …` command line parses with the real
parser, no `claude mcp add` reuses the name of this repository's own `.mcp.json` server, and the
remote path works end to end — a real `kernelcraft serve --transport http --tokens-file` process,
reached by the MCP SDK's streamable HTTP client with exactly the URL path and header each snippet
shows, and (with `-m inspector`, which needs npx and the npm registry) through the `mcp-remote`
bridge the Claude Desktop snippet starts."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from server_support import REPO, failure_clients, free_port, subprocess_env, wait_healthy

from kernelcraft.cli import build_parser

PAGES = [REPO / "docs" / "clients.md", REPO / "README.md"]
CLIENTS = REPO / "docs" / "clients.md"
ALICE = "alice-0123456789abcdef"

# The flags of mcp-remote 0.15.1 the snippets may use (its README's "Flags" and "Transport Strategies").
MCP_REMOTE_FLAGS = {"--header", "--transport", "--allow-http", "--debug", "--silent"}
# mcp-remote's own parsing of a `--header` value (src/lib/utils.ts, parseCommandLineArgs).
MCP_REMOTE_HEADER = re.compile(r"^([A-Za-z0-9_-]+):\s*(.*)$")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_VARIABLE = re.compile(r"\$\{(\w+)\}")


def blocks(kind: str, pages: list[Path] = PAGES) -> Iterator[tuple[Path, str]]:
    for page in pages:
        for lang, body in _FENCE.findall(page.read_text(encoding="utf-8")):
            if lang == kind:
                yield page, body


def servers() -> list[tuple[str, str, dict[str, Any]]]:
    """(page, server name, entry) of every JSON snippet's mcpServers."""
    found = []
    for page, body in blocks("json"):
        for name, entry in json.loads(body)["mcpServers"].items():
            found.append((page.name, name, entry))
    return found


def shell_lines(kind: str = "bash") -> list[str]:
    """The bash blocks' lines, continuations joined."""
    return [line for _, body in blocks(kind) for line in body.replace("\\\n", " ").splitlines()]


def kernelcraft_commands() -> list[str]:
    """Every `kernelcraft …` command of the bash blocks, those in `# or:` comments included."""
    pattern = re.compile(r"(?:^|;|&&|# or:)\s*(kernelcraft\s[^;#&]*)")
    return [m.group(1).strip() for line in shell_lines() for m in pattern.finditer(line)]


def claude_mcp_adds() -> list[list[str]]:
    return [shlex.split(line) for line in shell_lines() if line.startswith("claude mcp add ")]


def test_every_json_snippet_parses_and_names_a_real_command_or_an_mcp_url() -> None:
    found = servers()
    assert len(found) >= 4, found
    kinds = set()
    for page, name, entry in found:
        where = f"{page}: {name}"
        if "url" in entry:
            kinds.add("url")
            assert entry["type"] == "http" and urlsplit(entry["url"]).path == "/mcp", where
            assert re.fullmatch(r"Bearer \$\{\w+\}", entry["headers"]["Authorization"]), where
        elif Path(entry["command"]).name == "kernelcraft":
            kinds.add("stdio")
            build_parser(entry["args"]).parse_args(entry["args"])  # SystemExit(2) on a wrong flag
            assert entry["args"][0] == "serve" and "KERNELCRAFT_HOME" in entry["env"], where
        elif entry["command"] == "npx":
            kinds.add("mcp-remote")
            args = entry["args"]
            assert args[0] == "-y" and re.fullmatch(r"mcp-remote@\d+\.\d+\.\d+", args[1]), where
            assert urlsplit(args[2]).path == "/mcp", where
            assert {a for a in args[3:] if a.startswith("--")} <= MCP_REMOTE_FLAGS, where
            assert args[args.index("--transport") + 1] == "http-only", where
            header = MCP_REMOTE_HEADER.match(args[args.index("--header") + 1])
            assert header is not None and header[1] == "Authorization", where
            assert set(_VARIABLE.findall(header[2])) <= set(entry["env"]), where
        else:
            pytest.fail(f"{where}: {entry['command']} is none of kernelcraft, npx or a URL")
    assert kinds == {"url", "stdio", "mcp-remote"}


def test_every_kernelcraft_command_on_the_page_parses_with_the_real_parser() -> None:
    commands = kernelcraft_commands()
    assert any(c.startswith("kernelcraft serve --transport http") and "--tokens-file" in c for c in commands)
    for command in commands:
        argv = shlex.split(command)[1:]
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit as e:
            pytest.fail(f"`{command}` does not parse (exit {e.code})")


def test_no_claude_mcp_add_reuses_the_name_of_this_repositorys_own_server() -> None:
    ours = set(json.loads((REPO / ".mcp.json").read_text())["mcpServers"])
    added = claude_mcp_adds()
    assert len(added) >= 3
    for argv in added:
        words = [
            w
            for i, w in enumerate(argv[3:], 3)
            if not w.startswith("-") and argv[i - 1] not in ("-s", "-e", "--transport", "--header")
        ]
        name = words[0]
        assert name not in ours, f"`{' '.join(argv)}` clashes with .mcp.json's {name!r}"
        if "-s" in argv:
            assert argv[argv.index("-s") + 1] in ("local", "user"), (
                "-s project here writes the committed .mcp.json"
            )
    assert {name for _, name, _ in servers()}.isdisjoint(ours)


# ------------------------------------------------------------------------------ end to end


def docs_header_forms(token: str) -> dict[str, tuple[str, dict[str, str]]]:
    """(URL path, headers) each remote snippet makes a client send, the token put in."""
    env = {"KERNELCRAFT_TOKEN": token}
    forms: dict[str, tuple[str, dict[str, str]]] = {}
    for argv in claude_mcp_adds():
        if "--transport" in argv and argv[argv.index("--transport") + 1] == "http":
            url = next(a for a in argv if a.startswith(("http://", "https://")))
            raw = argv[argv.index("--header") + 1].replace("$KERNELCRAFT_TOKEN", token)
            name, _, value = raw.partition(":")
            forms["claude mcp add"] = (urlsplit(url).path, {name: value.strip()})
    for _, name, entry in servers():
        if "url" in entry:
            headers = {k: _VARIABLE.sub(lambda m: env[m[1]], v) for k, v in entry["headers"].items()}
            forms[f".mcp.json {name}"] = (urlsplit(entry["url"]).path, headers)
        elif entry.get("command") == "npx":
            bridge_env = {k: v.replace("9f2c...e1", token) for k, v in entry["env"].items()}
            m = MCP_REMOTE_HEADER.match(entry["args"][entry["args"].index("--header") + 1])
            assert m is not None
            value = _VARIABLE.sub(lambda v, env=bridge_env: env[v[1]], m[2])
            forms["mcp-remote"] = (urlsplit(entry["args"][2]).path, {m[1]: value})
    return forms


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[str]:
    """`kernelcraft serve --transport http` on a free loopback port with a tokens file (mode 600)
    naming ALICE's token `alice`; yields its base URL."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# the team\n{ALICE}=alice\n")
    tokens.chmod(0o600)
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernelcraft",
            "serve",
            "--transport",
            "http",
            "--host",
            "127.0.0.1",
            "--allow-partial-box",
        ]
        + ["--port", str(port), "--tokens-file", str(tokens)],
        env=subprocess_env(tmp_path / "kernelcraft.db"),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            await wait_healthy(base, 120, server)
        except Exception as e:
            raise AssertionError(f"{e}; its log: {(tmp_path / 'serve.log').read_text()[-2000:]}") from e
        yield base
    finally:
        server.terminate()
        server.wait(30)
        log.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_each_remote_snippet_reaches_a_real_http_server_with_its_url_path_and_header(
    tmp_path: Path,
) -> None:
    forms = docs_header_forms(ALICE)
    assert set(forms) == {"claude mcp add", ".mcp.json kernelcraft-team", "mcp-remote"}
    async with serving(tmp_path) as base:
        for form, (path, headers) in forms.items():
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                async with Client(streamable_http_client(base + path, http_client=http)) as client:
                    with anyio.fail_after(60):
                        names = {t.name for t in (await client.list_tools()).tools}
                        assert "search_tree_step" in names, form
                        recorded = await client.call_tool(
                            "record_failure", {"candidate_code": "class ModelNew: ...", "error": form}
                        )
                    assert not recorded.is_error, (form, recorded.content)
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(base + "/mcp", json={}, headers={"Authorization": "Bearer 9f2c...e1"})
            assert refused.status_code == 401
    assert failure_clients(tmp_path / "kernelcraft.db") == ["alice"] * 3


@pytest.mark.inspector
@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
async def test_the_mcp_remote_bridge_of_the_claude_desktop_snippet_reaches_the_server(tmp_path: Path) -> None:
    (entry,) = [e for _, _, e in servers() if e.get("command") == "npx"]
    async with serving(tmp_path) as base:
        args = [a.replace("http://gpu-box.example.com:8765", base) for a in entry["args"]]
        env = {k: v.replace("9f2c...e1", ALICE) for k, v in entry["env"].items()}
        params = StdioServerParameters(
            command="npx",
            args=args,
            env={
                "PATH": os.environ["PATH"],
                "HOME": os.environ.get("HOME", str(tmp_path)),
                "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "mcp-auth"),  # its state, kept out of ~/.mcp-auth
                **env,
            },
        )
        with anyio.fail_after(300):
            async with Client(params) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                recorded = await client.call_tool(
                    "record_failure", {"candidate_code": "class ModelNew: ...", "error": "via mcp-remote"}
                )
    assert "verify_against_reference" in names
    assert not recorded.is_error, recorded.content
    assert failure_clients(tmp_path / "kernelcraft.db") == ["alice"]
