"""Threat: the box depends on who started the server. Under `umask 077` (the docs' tokens-file
step leaves one) every worker ran as root ("…pyenv is closed to other users") and the server said
nothing. A worker sets its own umask before it builds its view of the files, its own directory
never keeps it root, and `serve` checks the box at start-up (`box/preflight.py`): loudly when it is
partial, and over HTTP it refuses unless `--allow-partial-box` (docs/security.md, "The box")."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from kernelcraft.base.knobs import Knobs
from kernelcraft.engine.box import preflight
from kernelcraft.engine.machine.pool import base_env, reachable

ROOT = Path(__file__).resolve().parents[3]


def _box_available() -> bool:
    """Whether a fresh process here can get the whole box (user namespaces, Landlock, ...)."""
    with tempfile.TemporaryDirectory() as d:
        reachable(Path(d))
        return preflight.check(base_env("cpu", None, True, settings=Knobs()), Path(d), "cpu").complete


def _check_under(umask: int, **env: str) -> str:
    code = textwrap.dedent(
        f"""
        import os, tempfile
        from pathlib import Path
        os.umask({umask:#o})
        from kernelcraft.base import knobs
        from kernelcraft.engine.box import preflight
        from kernelcraft.engine.machine.pool import base_env, reachable
        with tempfile.TemporaryDirectory() as d:
            reachable(Path(d))
            print(preflight.check(base_env("cpu", None, True, settings=knobs.settings()), Path(d), "cpu").sentence())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o027])
def test_the_box_is_the_same_whatever_the_umask_of_whoever_started_kernelcraft(umask: int) -> None:
    if not _box_available():
        pytest.skip("this machine does not give a worker the whole box (user namespaces, Landlock)")
    assert _check_under(umask) == "the candidates' box is whole (cpu workers)"


def test_a_spawned_worker_is_not_kept_root_by_its_own_directory_on_sys_path() -> None:
    # `python -m` puts the worker's directory (0700 until the worker owns it) on sys.path: it
    # must not count as a directory closed to the worker (KERNELCRAFT_ZYGOTE=off spawns so).
    if not _box_available():
        pytest.skip("this machine does not give a worker the whole box")
    with tempfile.TemporaryDirectory() as d:
        reachable(Path(d))
        report = preflight.check(base_env("cpu", None, True, settings=Knobs()), Path(d), "cpu")
    assert report.complete, report.sentence()


def test_a_box_switched_off_is_reported_partial_with_what_is_missing() -> None:
    sentence = _check_under(0o022, KERNELCRAFT_SANDBOX="off")
    assert sentence.startswith("the candidates' box is PARTIAL (cpu workers): no namespaces")


def _serve(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`serve --transport http` on a port another socket holds: it gets past the box check only
    to fail to listen (exit 2 either way, before serving)."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = dict(os.environ, KERNELCRAFT_HOME=str(tmp_path / "home"), KERNELCRAFT_SANDBOX="off")
        return subprocess.run(
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
            ]
            + ["--db", str(tmp_path / "k.db"), *extra],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )


def test_a_team_server_with_a_partial_box_refuses_to_start_unless_allowed(tmp_path: Path) -> None:
    refused = _serve(tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "box is PARTIAL" in refused.stderr and "--allow-partial-box" in refused.stderr
    assert "cannot listen" not in refused.stderr  # refused before it tried to listen
    allowed = _serve(tmp_path, "--allow-partial-box")
    assert allowed.returncode == 2 and "cannot listen" in allowed.stderr, allowed.stderr
    assert "!" * 72 in allowed.stderr and "box is PARTIAL" in allowed.stderr  # said loudly all the same
