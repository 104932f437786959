"""Threat: a task is code too. `reference_code` from an MCP or HTTP client runs in the same box as a
candidate, in the reference worker and in the candidate's worker alike, closed before its first line
(docs/security.md, "A task's code")."""

from __future__ import annotations

import secrets
import site
from pathlib import Path

import pytest

from kernelcraft.engine.box.sandbox import landlock_abi

PROBES = Path(__file__).parents[1] / "probes"
GOOD = Path(__file__).parents[2] / "cheats" / "good.py"


def _probe(name: str, **values: object) -> str:
    source = (PROBES / name).read_text()
    for key, value in values.items():
        source = source.replace(f"\n{key} = ", f"\n{key} = {value!r}  # was: ", 1)
    return source


@pytest.mark.slow
def test_task_cannot_read_server_state_or_plant_code(evaluator, tmp_path: Path) -> None:
    from kernelcraft.schema.evaluation import EvalJob

    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    secret = f"kctask-{secrets.token_hex(8)}"
    tokens, db = tmp_path / "tokens.json", tmp_path / "kernelcraft.db"
    tokens.write_text(f'{{"alice": "{secret}"}}')
    db.write_text(f"SQLite format 3 {secret}\n")
    pth = Path(site.getsitepackages()[0]) / f"kc_probe_{secrets.token_hex(4)}.pth"
    planted = tmp_path / "planted.py"
    task = _probe("task_grabs_server_state.py", READ=[str(tokens), str(db)], WRITE=[str(pth), str(planted)])
    try:
        result = evaluator.submit(EvalJob(task_source=task, candidate_source=GOOD.read_text(), trials=1))
        assert result.verify is not None and result.verify.correct, result  # every grab was refused
        assert secret not in result.model_dump_json()
        assert not pth.exists() and not planted.exists()
    finally:
        pth.unlink(missing_ok=True)


@pytest.mark.slow
def test_the_reference_worker_has_a_process_limit_where_pids_cgroups_are_in_force(evaluator) -> None:
    """The task runs in the reference worker: a fork bomb there is as much a denial of service as
    in the candidate's. Where RLIMIT_NPROC cannot hold (root, a GPU worker), the pool's pids cgroup
    is the limit, and the reference gets one as the candidate does. (Read from outside: Landlock
    keeps /proc/self/cgroup from the task. A failing candidate leaves the reference kept.)"""
    from kernelcraft.engine.box import cgroup
    from kernelcraft.schema.evaluation import EvalJob

    if cgroup._root() is None:
        pytest.skip("no pids cgroup can be made on this machine")
    cheats = GOOD.parent
    job = EvalJob(
        task_source=(cheats / "task_scale.py").read_text(),
        candidate_source=(cheats / "nan_output.py").read_text(),
        trials=1,
    )
    result = evaluator.submit(job)
    assert result.verify is not None and not result.verify.correct, result
    kept = evaluator.evaluator.idle_reference_pids()
    assert kept, "a failing candidate's reference is kept for the next job"
    for keeper in kept:  # the pool knows the keeper; the worker is below it (its PID namespace)
        limits = {pid: _pids_max(pid) for pid in _descendants(keeper)}
        assert any(v.isdigit() for v in limits.values()), limits


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            stack += [int(c) for c in (task / "children").read_text().split()]
    return found


def _pids_max(pid: int) -> str:
    from kernelcraft.engine.box import cgroup

    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        v1 = "pids" in controllers.split(",")
        if v1 or (controllers == "" and cgroup._root() == cgroup.V2_ROOT):
            root = cgroup.V1_ROOT if v1 else cgroup.V2_ROOT
            file = root / path.lstrip("/") / "pids.max"
            return file.read_text().strip() if file.exists() else "max"
    return "none"
