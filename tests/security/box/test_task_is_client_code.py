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
