"""Benchmark of the evaluation engine (issue 2, "Performance"). Run on the H200; see bench/README.md.

For three KernelBench-sized tasks (bench/tasks/: 8192x8192 fp32 elementwise, 8192x4000 fp32 softmax,
4096^3 fp32 linear), each with a Triton candidate:

  (a) end-to-end seconds per evaluation (verify, 5 trials, + profile) through `LocalEvaluator`,
      one job at a time; median per task.
  (b) candidates per minute when a batch (default 40 distinct candidates: the three candidates,
      each copy made distinct by a comment) is submitted at once with asyncio.gather.
  (c) the speedup kernelcraft reports (profile: reference eager median / candidate median) against
      an independent `triton.testing.do_bench(..., return_mode="median")` of the same two models in
      this plain process (no kernelcraft timing code), alternating candidate and reference over
      rounds; the % difference (target: within 3%).

`--cpu-smoke` shrinks the tasks (their size constants are rewritten) and the batch so the whole
script runs on a CPU-only machine in the interpreter; (c) needs a GPU and is skipped there.
Prints a table last; with $OUT set, writes $OUT/bench_eval.json.

    python bench/bench_eval.py                 # on the GPU machine
    python bench/bench_eval.py --cpu-smoke     # anywhere, a minute or two
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kernelcraft.base import knobs  # noqa: E402
from kernelcraft.engine.host.local import LocalEvaluator  # noqa: E402
from kernelcraft.schema.evaluation import EvalJob, EvalResult  # noqa: E402

TASKS = ("elementwise", "softmax", "linear")
# Sizes for --cpu-smoke: every `NAME = <int>` constant of a task is rewritten to these.
SMOKE_SIZES = {
    "elementwise": {"M": 64, "N": 96},
    "softmax": {"M": 16, "N": 200},
    "linear": {"BATCH": 48, "IN_FEATURES": 64, "OUT_FEATURES": 80},
}


@dataclass
class TaskReport:
    task: str
    sequential_seconds: list[float] = field(default_factory=list)
    median_seconds: float | None = None
    correct: bool | None = None
    status: str | None = None
    profile_available: bool | None = None
    profile_message: str | None = None
    candidate_us: float | None = None
    reference_us: float | None = None
    reported_speedup: float | None = None
    do_bench_candidate_us: float | None = None
    do_bench_reference_us: float | None = None
    do_bench_speedup: float | None = None
    speedup_diff_pct: float | None = None
    candidate_iqr_pct: float | None = None
    reference_iqr_pct: float | None = None
    stage_seconds: list[dict[str, float]] = field(default_factory=list)
    """Per sequential run: where its time went (EvalResult.stage_seconds)."""


def task_sources(name: str, smoke: bool) -> tuple[str, str]:
    task = (HERE / "tasks" / f"{name}.py").read_text()
    candidate = (HERE / "tasks" / f"{name}_triton.py").read_text()
    if smoke:
        for const, value in SMOKE_SIZES[name].items():
            task, n = re.subn(rf"^{const} = \d+$", f"{const} = {value}", task, flags=re.MULTILINE)
            if n != 1:
                raise SystemExit(f"bench/tasks/{name}.py: expected one line '{const} = <int>'")
    return task, candidate


def job_for(name: str, smoke: bool, tag: int | None = None) -> EvalJob:
    task, candidate = task_sources(name, smoke)
    if tag is not None:  # a distinct candidate (different source hash), same kernel
        candidate += f"\n# bench copy {tag}\n"
    return EvalJob(
        task_source=task,
        candidate_source=candidate,
        task_name=f"{name}.py",
        candidate_name=f"{name}_triton.py",
        stages=["verify", "profile"],
        trials=5,
        timeout_s=300.0,
    )


def summarize_result(report: TaskReport, result: EvalResult) -> None:
    v, p = result.verify, result.profile
    if v is not None:
        report.correct, report.status = v.correct, v.status
    if p is not None:
        report.profile_available, report.profile_message = p.available, p.message or None
        if p.candidate is not None and p.reference_eager is not None:
            report.candidate_us = p.candidate.median_us
            report.reference_us = p.reference_eager.median_us
            report.reported_speedup = p.speedup_vs_eager
            report.candidate_iqr_pct = 100.0 * p.candidate.iqr_us / p.candidate.median_us
            report.reference_iqr_pct = 100.0 * p.reference_eager.iqr_us / p.reference_eager.median_us


async def sequential(
    evaluator: LocalEvaluator, reports: dict[str, TaskReport], smoke: bool, runs: int
) -> None:
    for name in TASKS:
        for i in range(runs):
            start = time.perf_counter()
            result = await evaluator.submit(job_for(name, smoke, tag=10_000 + i))
            reports[name].sequential_seconds.append(time.perf_counter() - start)
            reports[name].stage_seconds.append(result.stage_seconds)
            summarize_result(reports[name], result)
            print(
                f"  {name} run {i + 1}/{runs}: {reports[name].sequential_seconds[-1]:.2f} s, "
                f"status={reports[name].status}, stages {result.stage_seconds}, "
                f"IQR % cand {_fmt(reports[name].candidate_iqr_pct, 4, 2)} ref {_fmt(reports[name].reference_iqr_pct, 4, 2)}",
                flush=True,
            )
        reports[name].median_seconds = statistics.median(reports[name].sequential_seconds)


async def batch(evaluator: LocalEvaluator, smoke: bool, size: int) -> dict[str, Any]:
    jobs = [job_for(TASKS[i % len(TASKS)], smoke, tag=i) for i in range(size)]
    start = time.perf_counter()
    results = await asyncio.gather(*(evaluator.submit(j) for j in jobs))
    wall = time.perf_counter() - start
    statuses: dict[str, int] = {}
    for r in results:
        s = r.verify.status if r.verify else "no verify result"
        statuses[s] = statuses.get(s, 0) + 1
    stages = sorted({k for r in results for k in r.stage_seconds})
    mean_stages = {
        k: round(statistics.fmean(r.stage_seconds.get(k, 0.0) for r in results), 3) for k in stages
    }
    latency = sorted(r.seconds for r in results)
    return {
        "size": size,
        "wall_seconds": wall,
        "per_minute": size / wall * 60.0,
        "statuses": statuses,
        "mean_stage_seconds": mean_stages,
        "job_seconds_p50": statistics.median(latency),
        "job_seconds_max": latency[-1],
    }


def _load(path: Path, module_name: str) -> Any:
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _do_bench_rounds(
    new_model: Any, ref_model: Any, inputs: list[Any], rounds: int
) -> tuple[list[float], list[float]]:
    """Median do_bench times (ms) of candidate and reference, alternating, one pair per round."""
    import triton.testing

    def run_new() -> Any:
        return new_model(*inputs)

    def run_ref() -> Any:
        return ref_model(*inputs)

    new_t, ref_t = [], []
    for _ in range(rounds):
        new_t.append(triton.testing.do_bench(run_new, rep=500, return_mode="median"))
        ref_t.append(triton.testing.do_bench(run_ref, rep=500, return_mode="median"))
    return new_t, ref_t


def independent_speedups(reports: dict[str, TaskReport], rounds: int) -> None:
    """do_bench medians of reference and candidate, alternating over rounds, in this process."""
    import torch

    for name in TASKS:
        task = _load(HERE / "tasks" / f"{name}.py", f"bench_task_{name}")
        cand = _load(HERE / "tasks" / f"{name}_triton.py", f"bench_cand_{name}")
        torch.manual_seed(42)
        ref_model = task.Model(*task.get_init_inputs()).cuda().eval()
        torch.manual_seed(42)
        new_model = cand.ModelNew(*task.get_init_inputs()).cuda().eval()
        torch.manual_seed(0)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
        with torch.no_grad():
            if not torch.allclose(ref_model(*inputs), new_model(*inputs), atol=1e-3, rtol=1e-3):
                print(f"  warning: {name}: candidate and reference disagree in the plain process", flush=True)
            new_t, ref_t = _do_bench_rounds(new_model, ref_model, inputs, rounds)
        r = reports[name]
        r.do_bench_candidate_us = statistics.median(new_t) * 1000.0
        r.do_bench_reference_us = statistics.median(ref_t) * 1000.0
        r.do_bench_speedup = r.do_bench_reference_us / r.do_bench_candidate_us
        if r.reported_speedup is not None:
            r.speedup_diff_pct = (r.reported_speedup / r.do_bench_speedup - 1.0) * 100.0
        print(
            f"  {name}: do_bench cand {r.do_bench_candidate_us:.1f} us, ref {r.do_bench_reference_us:.1f} us",
            flush=True,
        )
        torch.cuda.empty_cache()


def _fmt(x: float | None, width: int, digits: int) -> str:
    return "-".rjust(width) if x is None else f"{x:{width}.{digits}f}"


def table(reports: dict[str, TaskReport], batch_result: dict[str, Any] | None) -> str:
    lines = [
        f"{'task':<12} {'status':<20} {'e2e med s':>9} {'cand us':>10} {'ref us':>10} "
        f"{'kc speedup':>10} {'do_bench':>9} {'diff %':>7} {'IQR% c':>6} {'IQR% r':>6}",
    ]
    lines += [
        f"{r.task:<12} {str(r.status):<20} {_fmt(r.median_seconds, 9, 2)} {_fmt(r.candidate_us, 10, 1)} "
        f"{_fmt(r.reference_us, 10, 1)} {_fmt(r.reported_speedup, 10, 3)} {_fmt(r.do_bench_speedup, 9, 3)} "
        f"{_fmt(r.speedup_diff_pct, 7, 2)} {_fmt(r.candidate_iqr_pct, 6, 2)} {_fmt(r.reference_iqr_pct, 6, 2)}"
        for r in reports.values()
    ]
    if batch_result is not None:
        lines.append(
            f"batch of {batch_result['size']}: {batch_result['wall_seconds']:.1f} s wall, "
            f"{batch_result['per_minute']:.1f} candidates/minute, statuses {batch_result['statuses']}"
        )
        lines.append(f"batch mean seconds per job by stage: {batch_result['mean_stage_seconds']}")
    lines.append(
        "targets: e2e median <= 2.5 s; >= 40 candidates/minute; |diff| <= 3%; IQR <= 2% of the median over 50 us"
    )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    import torch

    gpu = torch.cuda.is_available()
    if not args.cpu_smoke and not gpu:
        print("no CUDA GPU: run with --cpu-smoke for the CPU check", file=sys.stderr)
        return 2
    device: Literal["cpu", "cuda"] = "cpu" if args.cpu_smoke else "cuda"
    reports = {name: TaskReport(task=name) for name in TASKS}
    print(f"kernelcraft engine benchmark on {device}; torch {torch.__version__}", flush=True)
    async with LocalEvaluator(settings=knobs.settings(), device=device, workers=args.workers) as evaluator:
        t0 = time.perf_counter()
        print("warm-up: one evaluation per task (worker start, Triton cache)", flush=True)
        await asyncio.gather(
            *(evaluator.submit(job_for(name, args.cpu_smoke, tag=-1 - i)) for i, name in enumerate(TASKS))
        )
        print(f"  warm-up took {time.perf_counter() - t0:.1f} s", flush=True)
        print("(a) sequential evaluations (verify 5 trials + profile)", flush=True)
        await sequential(evaluator, reports, args.cpu_smoke, args.runs)
        # (c) before (b): it is the cheaper one, and its figures survive a run cut short.
        if gpu and not args.cpu_smoke:
            print("(c) independent triton.testing.do_bench in this process", flush=True)
            independent_speedups(reports, args.rounds)
        else:
            print("(c) skipped: needs a GPU", flush=True)
        print(table(reports, None), flush=True)
        print(f"(b) batch of {args.batch} submitted at once", flush=True)
        batch_result = await batch(evaluator, args.cpu_smoke, args.batch)
        start_modes = evaluator.worker_start_modes()
        print(f"worker start: {start_modes}", flush=True)

    out = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "device": torch.cuda.get_device_name(0) if gpu else "cpu",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "cpu_smoke": args.cpu_smoke,
        "tasks": [asdict(r) for r in reports.values()],
        "batch": batch_result,
        "worker_start": start_modes,
    }
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "bench_eval.json").write_text(json.dumps(out, indent=2))
    print()
    print(table(reports, batch_result))
    failed = [r.task for r in reports.values() if r.correct is not True]
    if failed:
        print(f"NOTE: candidates not verified correct: {failed} (see status column)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, CPU interpreter, small batch")
    parser.add_argument(
        "--runs", type=int, default=None, help="sequential evaluations per task (default 5; smoke 1)"
    )
    parser.add_argument("--batch", type=int, default=None, help="batch size for (b) (default 42; smoke 3)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating do_bench rounds for (c)")
    parser.add_argument("--workers", type=int, default=None, help="LocalEvaluator workers per device")
    args = parser.parse_args()
    if args.runs is None:
        args.runs = 1 if args.cpu_smoke else 5
    if args.batch is None:
        args.batch = 3 if args.cpu_smoke else 42
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
