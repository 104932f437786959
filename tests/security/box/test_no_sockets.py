"""Threat: the box reaches a socket - a daemon's control socket by path (world-writable, or the
server's own), an abstract Unix socket, the network. The worker's network namespace has only a
loopback that is down, and a seccomp filter refuses socket(), socketpair() and connect() once
its channel is open (docs/security.md)."""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"


def _probe(**values: object) -> str:
    source = (PROBES / "reaches_sockets.py").read_text()
    for key, value in values.items():
        source = source.replace(f"\n{key} = ", f"\n{key} = {value!r}  # was: ", 1)
    return source


@pytest.mark.slow
def test_candidate_cannot_reach_any_socket(evaluator, job_for, tmp_path: Path) -> None:
    name = f"kcsock-{secrets.token_hex(6)}"
    path = Path("/tmp") / f"{name}.sock"
    listeners = []
    try:
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(path))
        os.chmod(path, 0o777)
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind("\0" + name)
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        listeners = [unix, abstract, tcp]
        for s in listeners:
            s.listen()
            s.setblocking(False)
        source = _probe(UNIX_PATH=str(path), ABSTRACT=name, PORT=tcp.getsockname()[1])
        result = evaluator.submit(job_for(TASK, source, trials=1))
        assert result.verify is not None and result.verify.correct, result
        for s in listeners:
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        for s in listeners:
            s.close()
        path.unlink(missing_ok=True)
