"""Helpers the benchmarks share: a free loopback port, waiting for an HTTP server's /health, and the
tasks in bench/tasks/ as source text. Benchmarks import nothing from tests/."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import anyio
import httpx2

TASKS = Path(__file__).resolve().parent / "tasks"


def task_source(name: str) -> str:
    """The source of bench/tasks/NAME.py, as a client would send it."""
    return (TASKS / f"{name}.py").read_text()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(
    base: str, deadline_s: float = 120, server: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until the HTTP server at `base` answers /health; fail at once if `server` exits."""
    async with httpx2.AsyncClient(base_url=base) as http:
        with anyio.fail_after(deadline_s):
            while True:
                if server is not None and server.poll() is not None:
                    raise RuntimeError(
                        f"the server exited with status {server.returncode} before it was healthy"
                    )
                try:
                    if (await http.get("/health")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.2)
