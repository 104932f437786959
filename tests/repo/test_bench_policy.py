"""bench/bench_policy.py replays the search's ablations on the recorded H200 verdicts: the same
seeds give the same trees, so its table in docs/benchmarks.md can be checked by anyone, no GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def replay(out: Path) -> dict:
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_policy.py"),
            "--examples",
            "matmul_epilogue",
            "layernorm",
        ]
        + ["--seeds", "0", "1", "--budget", "6", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_policy_ablations_replay_the_same_trees_on_the_recorded_verdicts(tmp_path: Path) -> None:
    first = replay(tmp_path / "a.json")
    again = replay(tmp_path / "b.json")
    assert first == again
    rows = {(r["example"], r["variant"]): r for r in first["rows"]}
    assert set(rows) == {
        (e, v) for e in ("matmul_epilogue", "layernorm") for v in ("paper", "switch_on_failure", "c_exp_0.15")
    }
    assert all(0 < r["best_fraction"] <= 1 and r["runs"] == 2 for r in rows.values())
    # every step of every tree was taken: the budget is spent in candidates or abandoned steps
    assert all(len(run["kinds"]) == 6 for run in first["runs"])
