"""Warm verify + profile, as a client of a running server meets them, and what a process start costs
(issue 41, item 2).

    python bench/bench_warm.py                              # this machine's device, the examples
    python bench/bench_warm.py --device cpu --rounds 3 --json OUT.json
    python bench/bench_warm.py --no-compile-facts           # each profile compiles again (before)
    python bench/bench_warm.py --no-kernel-cache            # no job gets what an earlier one compiled

One `LocalEvaluator` (2 workers) stays up, as the server keeps it; for each example in
`examples/` it submits, round after round, the jobs the MCP tools submit: `verify_against_reference`
(stages verify; without a GPU the launched kernels are also compiled for sm_90a) then
`profile_kernel` (stages compile + profile for its roofline target). It prints each job's wall
seconds and the profile's compile stage, the first round apart (it starts the workers and pays
Triton's first compile) and the median of the later ones. `--no-compile-facts` empties the
evaluator's compile facts before every job, as before they were kept; `--no-kernel-cache` empties
its store of compiled kernels (`engine/machine/kernelcache.py`), so that on a GPU the profile's
worker compiles again what the verify's compiled.

Then the costs a fresh process pays before its first verdict: `import kernelcraft.cli` (the
command line's import, `python -X importtime`'s total and its slowest top-level imports) and
`import torch`, `import triton`, each in a fresh interpreter, median of --imports runs.

Targets (on the H200, not measurable without a GPU): warm verify + profile <= 0.8 s median, the
first call after start <= 4 s, a cold `kernelcraft verify` <= 3 s (`bench/bench_cold_start.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernelcraft.base import knobs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

EXAMPLES = ("elementwise", "softmax", "layernorm", "row_mean", "embedding_bag", "matmul_epilogue")


async def warm(examples: list[str], rounds: int, device: str, facts: bool, kernels: bool) -> dict[str, Any]:
    from kernelcraft.base.targets import DEFAULT_TARGET
    from kernelcraft.engine.host.local import LocalEvaluator
    from kernelcraft.engine.machine.kernelcache import KernelCache
    from kernelcraft.schema.evaluation import EvalJob

    ev = LocalEvaluator(settings=knobs.settings(), workers=2, device=device)
    await ev.start()
    out: dict[str, Any] = {}
    try:
        for name in examples:
            task = (REPO / "examples" / name / "task.py").read_text(encoding="utf-8")
            cand = (REPO / "examples" / name / "seed.py").read_text(encoding="utf-8")
            rows = []
            for r in range(rounds):
                if not facts:
                    ev._references.compile_facts = type(ev._references.compile_facts)()
                if not kernels:
                    ev._references.kernels.close()
                    ev._references.kernels = KernelCache()
                t0 = time.perf_counter()
                v = await ev.submit(EvalJob(task_source=task, candidate_source=cand, stages=["verify"]))
                t1 = time.perf_counter()
                if not facts:
                    ev._references.compile_facts = type(ev._references.compile_facts)()
                if not kernels:
                    ev._references.kernels.close()
                    ev._references.kernels = KernelCache()
                p = await ev.submit(
                    EvalJob(
                        task_source=task,
                        candidate_source=cand,
                        stages=["compile", "profile"],
                        targets=[DEFAULT_TARGET],
                        roofline_target=DEFAULT_TARGET,
                    )
                )
                t2 = time.perf_counter()
                ok = v.verify is not None and v.verify.correct
                rows.append(
                    {
                        "round": r,
                        "verify_s": round(t1 - t0, 3),
                        "profile_s": round(t2 - t1, 3),
                        "both_s": round(t2 - t0, 3),
                        "profile_compile_s": p.compile.seconds if p.compile else None,
                        "verify_stages": v.stage_seconds,
                        "profile_stages": p.stage_seconds,
                        "correct": ok,
                    }
                )
                print(f"{name} round {r}: {rows[-1]}", file=sys.stderr, flush=True)
            later = rows[1:] or rows
            out[name] = {
                "rounds": rows,
                "first_both_s": rows[0]["both_s"],
                "median_both_s": statistics.median(x["both_s"] for x in later),
                "median_profile_compile_s": statistics.median(x["profile_compile_s"] or 0.0 for x in later),
            }
    finally:
        await ev.aclose()
    return out


def import_costs(runs: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "0"}
    out: dict[str, Any] = {}
    for what in ("kernelcraft.cli", "torch", "triton"):
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {what}"], check=True, env=env, cwd=REPO)
            times.append(time.perf_counter() - t)
        out[f"import {what} s"] = round(statistics.median(times), 3)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import kernelcraft.cli"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=REPO,
    )
    top = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) <= 1:  # top-level imports only
            top.append((int(m.group(2)) / 1e6, m.group(4)))
    out["slowest top-level imports of kernelcraft.cli (s)"] = [
        (name, round(s, 3)) for s, name in sorted(top, reverse=True)[:8]
    ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", nargs="*", default=list(EXAMPLES[:3]), choices=EXAMPLES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--no-compile-facts", action="store_true", help="compile again in every job (before)")
    ap.add_argument("--no-kernel-cache", action="store_true", help="no job gets what an earlier one compiled")
    ap.add_argument("--imports", type=int, default=3, help="fresh interpreters per import timed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    report: dict[str, Any] = {
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {device})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip(),
        "compile_facts": not args.no_compile_facts,
        "kernel_cache": not args.no_kernel_cache,
        "warm": asyncio.run(
            warm(args.examples, args.rounds, device, not args.no_compile_facts, not args.no_kernel_cache)
        ),
        "imports": import_costs(args.imports),
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
