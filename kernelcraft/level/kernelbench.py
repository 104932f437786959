"""A level run in the files KernelBench's own scripts read (`scripts/benchmark_eval_analysis.py`).

- `eval_results.json`, as KernelBench's `eval_from_generations.py` writes it: per problem id (a
  string), a list with one entry for sample 0: `compiled`, `correctness`, `metadata`, `runtime`
  (ms) and `runtime_stats`. A task without a candidate has no entry (their analysis counts it as
  neither compiled nor correct). Written when there are candidates.
- `baseline_time_torch.json` and `baseline_time_torch_compile_inductor_default.json`, as their
  `generate_baseline_time.py` writes them: `{"level<N>": {task file name: stats}}`. Written when
  the reference was timed (a GPU), from the same interleaved rounds our speedups come from.

Timing stats are in milliseconds, with KernelBench's keys; `mean` holds our **median** (the
statistic our speedups use, so their analysis computes the same speedups as ours), `std` is the
interquartile range / 1.349 (the normal distribution's), `min` our minimum; there is no `max`,
and `statistic: "median"` says so. The analysis is then run as:

    python scripts/benchmark_eval_analysis.py run_name=<out dir name> level=<N> hardware=x baseline=y \\
        eval_results_dir=<out dir's parent> baseline_file=<out dir>/baseline_time_torch.json
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelcraft.schema.evaluation import Timing
from kernelcraft.schema.level import TaskOutcome

EVAL_RESULTS = "eval_results.json"
BASELINE_EAGER = "baseline_time_torch.json"
BASELINE_COMPILED = "baseline_time_torch_compile_inductor_default.json"


def timing_stats(t: Timing, device: str | None) -> dict[str, Any]:
    """One timing in KernelBench's `get_timing_stats` keys (milliseconds, 3 significant digits)."""
    stats: dict[str, Any] = {
        "mean": _ms(t.median_us),
        "std": _ms(t.iqr_us / 1.349),
        "min": _ms(t.min_us),
        "num_trials": t.reps,
        "statistic": "median",
    }
    if device:
        stats["hardware"] = device.split("(", 1)[1].rstrip(")") if "(" in device else device
        stats["device"] = device.split(" ", 1)[0]
    return stats


def _ms(us: float) -> float:
    return float(f"{us / 1000:.3g}")


def eval_results(outcomes: Sequence[TaskOutcome]) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {}
    for o in sorted(outcomes, key=lambda o: o.problem_id):
        if o.status in ("missing", "timed", "untimed"):
            continue
        metadata: dict[str, Any] = {"kernelcraft_status": o.status}
        if o.failure_class is not None:
            metadata["failure_class"] = o.failure_class.value
        if o.message:
            metadata["message"] = o.message[:2000]
        if o.trials:
            metadata["correctness_trials"] = f"({o.trials})"
        if o.device:
            metadata["device"] = o.device
        timed = o.status == "correct" and o.candidate_time is not None
        results[str(o.problem_id)] = [
            {
                "sample_id": 0,
                "compiled": o.compiled,
                "correctness": o.status == "correct",
                "metadata": metadata,
                "runtime": _ms(o.candidate_time.median_us) if timed and o.candidate_time else -1.0,
                "runtime_stats": timing_stats(o.candidate_time, o.device)
                if timed and o.candidate_time
                else {},
            }
        ]
    return results


def baseline_times(outcomes: Sequence[TaskOutcome], level_key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(eager, torch.compile) baseline files' contents; a task without that timing is left out."""
    eager: dict[str, Any] = {}
    compiled: dict[str, Any] = {}
    for o in sorted(outcomes, key=lambda o: o.problem_id):
        if o.eager is not None:
            eager[o.name] = timing_stats(o.eager, o.device)
        if o.compiled_ref is not None:
            compiled[o.name] = timing_stats(o.compiled_ref, o.device)
    return {level_key: eager}, {level_key: compiled}
