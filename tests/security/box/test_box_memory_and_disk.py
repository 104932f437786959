"""Threat: memory and disk limits per process. A candidate's children, its memfds and shared
memory, and the files it writes went past RLIMIT_AS and the job's watchdog, which see one process.
Each candidate worker is put in a memory cgroup of its own (`engine/box/cgroup.py`) that counts
them all, and its directory is a sized tmpfs (`engine/box/mounts.py`) (docs/security.md, "The box")."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelcraft.base import knobs
from kernelcraft.engine.box import cgroup, mounts

ROOT = Path(__file__).resolve().parents[3]
PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"
CANDIDATE = Path(__file__).parents[2] / "cheats" / "good.py"
LIMIT = 200 * 1024**2

needs_memory_cgroup = pytest.mark.skipif(
    "memory" not in cgroup.available(), reason="needs root and a memory cgroup controller (cgroup v2 or v1)"
)

# Each hog waits for the test to confine it, then allocates past LIMIT in its own way.
HOGS = {
    "forked children": r"""
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        b = bytearray(100 * 1024 * 1024)
        for i in range(0, len(b), 4096): b[i] = 1
        time.sleep(30); os._exit(0)
    kids.append(pid)
for pid in kids: os.waitpid(pid, 0)
""",
    "a memfd": r"""
import os
fd = os.memfd_create("hoard")
block = b"\1" * (16 * 1024 * 1024)
for _ in range(40): os.write(fd, block)
""",
    "shared memory": r"""
import os
block = b"\1" * (16 * 1024 * 1024)
with open(f"/dev/shm/kc-hog-{os.getpid()}", "wb") as f:
    for _ in range(40): f.write(block); f.flush()
""",
}


@needs_memory_cgroup
@pytest.mark.parametrize("how", sorted(HOGS))
def test_a_process_in_its_memory_cgroup_cannot_go_past_it_by_children_memfd_or_shared_memory(
    how: str,
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline()\n" + HOGS[how]],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert child.stdin is not None
    groups = cgroup.confine(child.pid, 64, LIMIT)
    try:
        assert groups is not None and "memory" in groups.limits
        child.stdin.write(b"go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 60
        while not cgroup.oom_killed(groups) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cgroup.oom_killed(groups), f"{how}: 400 MB went past a {LIMIT >> 20} MB cgroup"
    finally:
        cgroup.release(groups)
        child.kill()
        child.wait()
        for leftover in Path("/dev/shm").glob(f"kc-hog-{child.pid}"):
            leftover.unlink()


class _Runner:
    """A CPU evaluator with a small memory limit, on an event loop of its own."""

    def __init__(self, memory_limit_gb: float) -> None:
        from kernelcraft.engine.host.local import LocalEvaluator

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.evaluator = LocalEvaluator(
            settings=knobs.settings(),
            workers=1,
            device="cpu",
            memory_limit_gb=memory_limit_gb,
            protect_environ=False,
        )
        self.call(self.evaluator.start())

    def call(self, coro, timeout: float = 300):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.call(self.evaluator.aclose(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def small() -> Iterator[_Runner]:
    runner = _Runner(memory_limit_gb=0.5)  # a memory cgroup of 1 GiB: over its folder's tmpfs
    try:
        yield runner
    finally:
        runner.close()


def _submit(runner: _Runner, probe: str, task: Path = TASK):  # type: ignore[no-untyped-def]
    from kernelcraft.schema.evaluation import EvalJob

    job = EvalJob(
        task_source=task.read_text(),
        candidate_source=(CANDIDATE if task != TASK else PROBES / probe).read_text(),
        trials=1,
        timeout_s=90,
    )
    return runner.call(runner.evaluator.submit(job))


@pytest.mark.slow
@needs_memory_cgroup
def test_a_candidate_whose_forked_children_hoard_memory_gets_an_out_of_memory_verdict(
    small: _Runner, static_checks_off: None
) -> None:
    started = time.monotonic()
    v = _submit(small, "forked_hoard.py").verify
    assert v is not None and v.status == "runtime_out_of_memory", v
    assert time.monotonic() - started < 60  # killed by the kernel, not by the deadline


@pytest.mark.slow
def test_a_candidate_filling_its_folder_stops_at_its_tmpfs_and_the_disk_is_not_written(
    small: _Runner, static_checks_off: None
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the worker's own mount namespace is made by root (box/__init__.py)")
    result = _submit(small, "fills_its_folder.py")
    v = result.verify
    assert v is not None
    said = re.search(
        r"folder_bytes=(\d+) written=(\d+) error=(\w+)", v.evidence.message if v.evidence else ""
    )
    assert said is not None, v.evidence
    folder, written, error = int(said[1]), int(said[2]), said[3]
    assert folder == mounts.WORKDIR_BYTES and written <= mounts.WORKDIR_BYTES and error == "OSError", said[0]


def test_a_worker_cannot_grow_its_log_on_the_servers_disk_past_the_file_limit(tmp_path: Path) -> None:
    from kernelcraft.engine import box

    log = tmp_path / "output.log"
    workdir = tmp_path / "w"
    workdir.mkdir()
    script = (
        "import os, sys\n"
        f"os.environ.update(KERNELCRAFT_WORKER_BOX='on,nopidns', KERNELCRAFT_WORKER_DIR={str(workdir)!r},"
        " KERNELCRAFT_WORKER_DEVICE='cpu')\n"
        "from kernelcraft.engine import box\n"
        "box.start()\n"
        "block = b'x' * (16 * 1024 * 1024)\n"
        "try:\n"
        f"    for _ in range({box.FILE_BYTES // (16 * 1024 * 1024) + 4}):\n"
        "        os.write(1, block)\n"
        "except OSError as e:\n"
        "    os.write(2, type(e).__name__.encode())\n"
    )
    with open(log, "wb") as out:
        done = subprocess.run(
            [sys.executable, "-c", script], stdout=out, stderr=subprocess.PIPE, timeout=120, cwd=ROOT
        )
    assert done.returncode == 0 and done.stderr.endswith(b"OSError"), done.stderr[-300:]
    assert log.stat().st_size <= box.FILE_BYTES


@pytest.mark.slow
@needs_memory_cgroup
def test_a_tasks_forked_children_are_held_to_the_reference_workers_memory_cgroup(
    small: _Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcraft.base.errors import TaskError

    monkeypatch.setattr(cgroup, "reference_memory", lambda: 1024**3)  # 1 GiB, not half the host
    with pytest.raises(TaskError, match=r"children alive: \d of 6") as raised:
        _submit(small, "task_forks_hoarders.py", task=PROBES / "task_forks_hoarders.py")
    alive = re.search(r"children alive: (\d) of 6", str(raised.value))
    assert alive is not None and int(alive[1]) <= 3, alive[0] if alive else raised.value  # 1.8 GB in 1 GiB
