"""bench/bench_level.py's record of a level run: the tasks timed (with a GPU) or given their floor
(without), each one not timed with its reason, and issue 41's target (<= 120 s, every task timed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_level  # noqa: E402

TIMING = {"median_us": 10.0, "iqr_us": 0.1, "min_us": 9.9, "reps": 20, "method": "cuda_events"}


def _summary(timed: bool, statuses: list[str]) -> dict[str, Any]:
    tasks = [
        {
            "name": f"{i}_T.py",
            "status": s,
            "message": "timing the reference failed: CUDA out of memory"
            if s == "untimed" and timed
            else "no GPU",
            "seconds": float(i),
            "stage_seconds": {"timing": 0.5},
            "floor_us": 1.0,
            "compiled_ref": TIMING if s == "timed" and i % 2 else None,
        }
        for i, s in enumerate(statuses, start=1)
    ]
    return {"timed": timed, "seconds": 90.0, "jobs": 8, "stage_seconds": {"timing": 1.5}, "tasks": tasks}


def test_a_gpu_run_counts_the_tasks_timed_and_names_why_one_was_not() -> None:
    r = bench_level.record(100.0, _summary(True, ["timed", "timed", "untimed"]), "level")
    assert (r["timed"], r["tasks"], r["with_compiled"]) == (2, 3, 1)
    assert [t["name"] for t in r["not_timed"]] == ["3_T.py"] and "out of memory" in r["not_timed"][0]["why"]
    assert r["target_met"] is False  # one task was not timed
    assert bench_level.record(100.0, _summary(True, ["timed"] * 3), "level")["target_met"] is True
    assert bench_level.record(130.0, _summary(True, ["timed"] * 3), "level")["target_met"] is False
    assert "target (<= 120 s, every task timed): not met" in bench_level.show(r)


def test_without_a_gpu_the_record_counts_roofline_floors_and_claims_no_target() -> None:
    r = bench_level.record(10.0, _summary(False, ["untimed"] * 3), "level")
    assert r["floors"] == 3 and r["not_timed"] == [] and r["target_met"] is False
    assert "target" not in bench_level.show(r) and "no GPU: nothing timed" in bench_level.show(r)
