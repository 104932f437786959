"""What a run says about itself: why it stopped, its last lines, how long its steps took.

Pure functions over the run's records and summary (`runloop.Explorer` calls them)."""

from __future__ import annotations

import statistics
from typing import Any

from kernelcraft.schema.tree import is_budget_held

GPU_NOTE = (
    "No GPU here: every candidate was verified in Triton's CPU interpreter{compiled}, so correctness "
    "is real but speed is not measured (the tree scores a correct kernel as parity). On a GPU (or "
    "with --server pointing at a GPU server) each candidate is also timed against PyTorch eager and "
    "torch.compile, and the search then optimises speedup."
)


NO_FIX_BY_TUNING = (
    "The seed kernel fails on this task, and none of the launch configurations tried fixed it ({failures}): "
    "the offline tuner (--llm none) changes launch parameters, never the kernel's code. Fix the seed "
    "(`kernelcraft verify TASK SEED` says why it fails), or let an LLM repair it (--llm anthropic|openai)."
)


def failure_counts(by_class: dict[str, int]) -> str:
    """'numerical_mismatch 3, compile_error 1'."""
    return ", ".join(f"{k} {v}" for k, v in by_class.items()) or "no verdict"


def final_words(s: dict[str, Any]) -> str:
    best = s["best"]
    if best is None:
        head = "No correct kernel found."
    elif best["speedup"] is not None:
        head = f"Best: node {best['node_id']}, {best['speedup']:.2f}x vs PyTorch -> {best['path']}"
    else:
        head = f"Best: node {best['node_id']} (correct; speed not measured) -> {best['path']}"
    lines = [
        f"{head}",
        f"{steps_words(s['steps_done'])}, {s['correct']} correct; stopped: {s['stopped_because']}. Run directory: {s['run_dir']}",
        *([f"Report: {s['report']} (open it in a browser)"] if s.get("report") else []),
        *(
            [
                "Step times: "
                + "; ".join(
                    f"{who} {steps_words(v['steps'])}, median {v['median']:.1f} s (writing {v['median_writing']:.1f} s), "
                    f"longest {v['max']:.1f} s"
                    for who, v in s["step_seconds"].items()
                )
            ]
            if s.get("step_seconds")
            else []
        ),
    ]
    if best is None and s.get("llm") == "none" and s.get("seed_outcome") not in (None, "correct"):
        # said beside why the run stopped: the budget was spent where no tuning could help
        lines.insert(2, NO_FIX_BY_TUNING.format(failures=failure_counts(s.get("failures_by_class") or {})))
    if s.get("tuner_axis_seconds"):
        lines.append("Tuner axes: " + "; ".join(axis_words(a, v) for a, v in s["tuner_axis_seconds"].items()))
    if s.get("gpu_note"):
        lines.append(s["gpu_note"])
    return "\n".join(lines)


def axis_words(axis: str, v: dict[str, Any]) -> str:
    """One axis of the tuner's summary: 'block 3 steps, 6.2 s, best 1.08x'."""
    gain = f", best {v['best_gain']:.2f}x" if v.get("best_gain") is not None else ""
    return f"{axis} {steps_words(v['steps'])}, {v['total']:.1f} s{gain}"


def steps_words(n: float) -> str:
    """'1 step', '3 steps'."""
    return f"{n:g} step" if n == 1 else f"{n:g} steps"


def run_stop(ends: list[str]) -> str:
    """Why the lanes stopped: the run's own limit (a budget spent), else what a lane that did not
    end early said; a lane that found the rest of the budget held by its siblings' steps is not why."""
    return next(
        (e for e in ends if "budget spent (" in e),
        next((e for e in ends if not is_budget_held(e)), ends[-1]),
    )


def step_seconds(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per proposer ('tuner', 'llm'): steps, and the median and longest seconds a step took in
    all and in writing its candidate (the rest is the evaluation and the rule)."""
    out: dict[str, dict[str, float]] = {}
    for who in dict.fromkeys(str(r.get("proposer", r.get("mode"))) for r in records):
        mine = [r for r in records if str(r.get("proposer", r.get("mode"))) == who and "seconds" in r]
        if not mine:
            continue
        total = [float(r["seconds"]) for r in mine]
        write = [float(r.get("write_seconds", 0.0)) for r in mine]
        out[who] = {
            "steps": len(mine),
            "median": round(statistics.median(total), 3),
            "max": round(max(total), 3),
            "median_writing": round(statistics.median(write), 3),
        }
    return out


def step_gain(record: dict[str, Any]) -> float | None:
    """How much faster a correct step's kernel ran than the kernel it started from (its `base_us`
    over its `candidate_us`: above 1 is faster); None when either was not timed (no GPU)."""
    info = record.get("tuner") or record
    base, us = info.get("base_us"), record.get("candidate_us")
    if record.get("outcome") != "correct" or not base or not us:
        return None
    return float(base) / float(us)


def tuner_axis_seconds(records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per axis the offline tuner moved along ('tile M', 'block', 'warps', 'stages', 'split-K',
    'precision', 'rows per program', 'programs per SM', ...; 'cookbook' for its start from the
    cookbook's kernel), in the order the run first moved them: steps, the median and total seconds
    a step took, how many found a new best, and the best gain (`step_gain`, None untimed). A step
    moving two axes counts for both."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if "seconds" not in r or r.get("proposer", r.get("mode")) != "tuner":
            continue
        axes = ["cookbook"] if r.get("cookbook") else list((r.get("tuner") or {}).get("axes") or [])
        for axis in axes:
            by.setdefault(axis, []).append(r)
    out: dict[str, dict[str, float | None]] = {}
    for axis, rs in by.items():
        gains = [g for g in map(step_gain, rs) if g is not None]
        out[axis] = {
            "steps": len(rs),
            "median": round(statistics.median(float(r["seconds"]) for r in rs), 3),
            "total": round(sum(float(r["seconds"]) for r in rs), 3),
            "new_best": sum(1 for r in rs if r.get("new_best")),
            "best_gain": round(max(gains), 4) if gains else None,
        }
    return out
