"""The pids cgroup that limits a candidate which stays root (RLIMIT_NPROC never counts root); the
memory cgroup is tests/security/box/test_box_memory_and_disk.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelcraft.engine.box import cgroup

pytestmark = pytest.mark.skipif(
    cgroup._root() is None, reason="needs root and a pids cgroup controller (cgroup v2 or v1)"
)

CHILD = r"""
import os, sys
sys.stdin.readline()  # until the test has confined this process
from kernelcraft.engine.box import cgroup
forked, error = 0, None
r, w = os.pipe()
for _ in range(60):
    try:
        pid = os.fork()
    except OSError as e:
        error = e
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    forked += 1
print("pids" in cgroup.in_force(), forked, type(error).__name__, flush=True)
sys.stdin.readline()  # the children stay until the test lets go (or kills them)
os.close(w)
"""


def _leftover_groups() -> set[Path]:
    """This process's groups. A session evaluator's kept reference worker holds one of its own
    (its pids limit) while earlier tests' evaluators live: compare before and after, not with none."""
    root = cgroup._root()
    assert root is not None
    return {p for p in root.iterdir() if p.name.startswith(f"{cgroup.PREFIX}{os.getpid()}-")}


def test_a_confined_process_as_root_cannot_fork_past_its_limit_and_release_kills_what_is_left() -> None:
    before = _leftover_groups()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        groups = cgroup.confine(child.pid, 10)
        assert groups is not None and "pids" in groups.limits
        (group,) = [g for g in groups.paths if (g / "pids.max").exists()]
        child.stdin.write("go\n")
        child.stdin.flush()
        in_force, forked, error = child.stdout.readline().split()
        assert in_force == "True"
        assert 5 <= int(forked) <= 10 and error in ("BlockingIOError", "OSError"), (forked, error)
        members = (group / "cgroup.procs").read_text().split()
        assert len(members) == int(forked) + 1  # the children stayed in it
        cgroup.release(group)  # kills every member, the child included, then removes it
        assert not group.exists()
        assert child.wait(5) < 0
    finally:
        child.kill()
        child.wait()
    time.sleep(0.1)
    assert _leftover_groups() <= before


def test_outside_a_confined_group_no_limit_is_claimed() -> None:
    assert cgroup.in_force() == set()


def test_the_cgroups_a_dead_evaluator_left_are_swept_and_a_live_ones_are_not() -> None:
    root = cgroup._root()
    assert root is not None
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = root / f"{cgroup.PREFIX}{int(gone.stdout)}-0"  # that process has exited
    alive = root / f"{cgroup.PREFIX}{os.getpid()}-999"
    dead.mkdir()
    alive.mkdir()
    try:
        cgroup.sweep(root)
        assert not dead.exists() and alive.exists()
    finally:
        cgroup.release(alive)
        cgroup.release(dead)
