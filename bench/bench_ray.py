"""Benchmark of the Ray evaluator against the local one (issue 14). Run on the GPU machine.

The same batch as `bench_eval.py` (b) — `--batch` distinct candidates of the three bench tasks,
verify with 5 trials + profile, submitted at once — goes through `LocalEvaluator`, then through
`RayEvaluator` (a one-machine Ray cluster started here, or `--ray-address`; one actor per GPU,
each owning a `LocalEvaluator`). Before each batch, one warm-up evaluation per task and `--runs`
sequential evaluations of the elementwise task, whose medians give Ray's cost per job (shipping
the job and its result, the progress polls). Prints candidates per minute for each backend and
their ratio (target: Ray within 10% of local); with $OUT set, writes $OUT/bench_ray.json.

    python bench/bench_ray.py                  # on the GPU machine, ~3 minutes
    python bench/bench_ray.py --cpu-smoke      # anywhere: tiny sizes, the interpreter, batch 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_eval import TASKS, batch, job_for  # noqa: E402

from kernelcraft.base import knobs  # noqa: E402
from kernelcraft.engine.host.local import LocalEvaluator  # noqa: E402


async def measure(evaluator: Any, smoke: bool, size: int, runs: int) -> dict[str, Any]:
    """Warm up (one job per task), time `runs` sequential jobs, then the batch."""
    for name in TASKS:
        await evaluator.submit(job_for(name, smoke, tag=20_000))
    seconds = []
    for i in range(runs):
        start = time.perf_counter()
        result = await evaluator.submit(job_for("elementwise", smoke, tag=30_000 + i))
        seconds.append(time.perf_counter() - start)
        print(f"  sequential {i + 1}/{runs}: {seconds[-1]:.3f} s, {result.verify and result.verify.status}")
    out = await batch(evaluator, smoke, size)
    out["sequential_seconds"] = seconds
    out["sequential_median"] = statistics.median(seconds)
    print(f"  batch of {size}: {out['wall_seconds']:.1f} s, {out['per_minute']:.1f}/min, {out['statuses']}")
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from kernelcraft.engine.cluster.ray_evaluator import RayEvaluator

    device = "cpu" if args.cpu_smoke else "auto"
    size = args.batch or (4 if args.cpu_smoke else 42)
    print("local evaluator:", flush=True)
    async with LocalEvaluator(settings=knobs.settings(), device=device, workers=args.workers) as local:
        gpus = "GPU" if local.has_gpu else "CPU"
        local_out = await measure(local, args.cpu_smoke, size, args.runs)
    print("Ray evaluator:", flush=True)
    ray_ev = RayEvaluator(settings=knobs.settings(), address=args.ray_address, workers=args.workers)
    try:
        await ray_ev.start()
        actors = {name: slot.where for name, slot in ray_ev.router.slots.items()}
        ray_out = await measure(ray_ev, args.cpu_smoke, size, args.runs)
    finally:
        await ray_ev.aclose()
    ratio = ray_out["per_minute"] / local_out["per_minute"]
    overhead = ray_out["sequential_median"] - local_out["sequential_median"]
    print(
        f"\ncandidates per minute: local {local_out['per_minute']:.1f}, Ray {ray_out['per_minute']:.1f} "
        f"({100 * (ratio - 1):+.1f}%); sequential median local {local_out['sequential_median']:.3f} s, "
        f"Ray {ray_out['sequential_median']:.3f} s (Ray's cost per job {overhead:+.3f} s); "
        f"{len(actors)} Ray actor(s) on {gpus}"
    )
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "python": platform.python_version(),
        "device": gpus,
        "batch": size,
        "local": local_out,
        "ray": ray_out,
        "ray_actors": actors,
        "ray_vs_local": ratio,
        "ray_cost_per_job_s": overhead,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, CPU interpreter, small batch")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default 42; smoke 4)")
    parser.add_argument("--runs", type=int, default=3, help="sequential evaluations per backend")
    parser.add_argument("--workers", type=int, default=None, help="workers per device (each backend)")
    parser.add_argument(
        "--ray-address", default=None, help="'auto', ray://HOST:PORT; default: start one here"
    )
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "bench_ray.json"
        path.write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
