"""Cold start: seconds to a first verdict from a fresh `kernelcraft` process (issue 13, item 3).

Each run starts a new process, as a user meets the CLI:

  verify            `kernelcraft verify TASK CANDIDATE`: wall seconds to the verdict, and seconds
                    until its first trial began (from the progress lines on stderr)
  verify+profile    `kernelcraft verify ...` then `kernelcraft profile ...`, one after the other
  profile           that `kernelcraft profile ...` alone (it verifies, then times against eager
                    and torch.compile): the task's first profile, which compiles the reference
  profile again     one more `kernelcraft profile ...`: what a user iterating on a kernel meets
                    (the compiled reference's timing is kept in KERNELCRAFT_HOME by the first)
  kernelbench       (with --kernelbench PATH, a KernelBench checkout) KernelBench's own
                    `eval_kernel_against_ref` on the same task and candidate, fresh process each
                    (correctness trials plus timing, as its harness runs them)

Each run has a fresh KERNELCRAFT_HOME (no kept timing), but the bytecode that kernelcraft keeps
where Python writes none (`kernelcraft/base/bytecode.py`) and Triton's C helpers
(`kernelcraft/engine/startup/prebuilt.py`) are shared between runs, as a user's home keeps them: the first run is reported apart (it compiles what it imports) and the medians are over the
later runs. KernelBench's harness is timed both as this machine runs Python and with bytecode
kept the same way (`PYTHONPYCACHEPREFIX`), so the two compare on equal terms.

Medians over --runs (default 3) after the first. Targets on the H200: verify <= 5 s,
verify and profile <= 8 s (`profile` verifies too).

    python bench/bench_cold_start.py                                   # examples/layernorm
    python bench/bench_cold_start.py --kernelbench ~/KernelBench --task T.py --candidate C.py
    python bench/bench_cold_start.py --device cpu                      # this machine, no GPU

Prints a table; with $OUT set (or --json FILE) writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIRST_TRIAL = re.compile(r"^\[\s*\d+%\s+([\d.]+)s\] trial 1 of", re.MULTILINE)

# Runs in a fresh process with the KernelBench checkout importable: its own evaluation of one
# candidate (correctness trials, then timing), whatever the checkout names its module.
KERNELBENCH_DRIVER = r"""
import inspect, sys, time
start = time.perf_counter()
root, task, cand, device = sys.argv[1:5]
sys.path[:0] = [root, root + "/src"]
import importlib, types
for name, attr in (("litellm", "completion"), ("openai", "OpenAI")):
    # kernelbench.utils imports its LLM clients at the top; eval never calls them. Where one is
    # not installed (the GPU machine has no network), an empty module that raises if called.
    try:
        importlib.import_module(name)
    except ImportError:
        def absent(*a, _n=name, **k):
            raise RuntimeError(_n + " is not installed")
        sys.modules[name] = types.SimpleNamespace(**{attr: absent})
try:
    from kernelbench.eval import eval_kernel_against_ref
except ImportError:
    from src.eval import eval_kernel_against_ref
import torch
params = inspect.signature(eval_kernel_against_ref).parameters
kw = dict(measure_performance=True, num_correct_trials=5, num_perf_trials=100, verbose=False)
if "backend" in params:
    kw["backend"] = "triton"
if "device" in params and device == "cuda":
    kw["device"] = torch.device("cuda:0")
kw = {k: v for k, v in kw.items() if k in params}
result = eval_kernel_against_ref(open(task).read(), open(cand).read(), **kw)
print("KB_RESULT", getattr(result, "correctness", None), getattr(result, "runtime", None))
print("KB_SECONDS", time.perf_counter() - start)
"""


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    return time.perf_counter() - start, p


def kernelcraft(command: str, args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "kernelcraft", command, str(args.task), str(args.candidate)]
    return cmd + (["--device", args.device] if args.device != "auto" else [])


def run_once(args: argparse.Namespace, env: dict[str, str], kept: Path) -> dict[str, Any]:
    """One cold run: a fresh KERNELCRAFT_HOME, so nothing of an earlier run is reused but the
    bytecode in `kept` (its cache/pycache)."""
    home = Path(tempfile.mkdtemp(prefix="kc-cold-"))
    (home / "cache").mkdir()
    (home / "cache" / "pycache").symlink_to(kept / "kernelcraft", target_is_directory=True)
    (home / "cache" / "triton-helpers").symlink_to(kept / "triton-helpers", target_is_directory=True)
    env = env | {"KERNELCRAFT_HOME": str(home)}
    row: dict[str, Any] = {"bytecode_kept": any((kept / "kernelcraft").iterdir())}
    wall, p = timed(kernelcraft("verify", args), env)
    first = FIRST_TRIAL.search(p.stderr)
    row["verify_s"] = round(wall, 2)
    row["verify_first_trial_s"] = float(first.group(1)) if first else None
    row["verify_rc"] = p.returncode
    if p.returncode not in (0, 1):
        row["verify_error"] = p.stderr[-800:]
    wall2, p2 = timed(kernelcraft("profile", args), env)
    row["verify_profile_s"] = round(wall + wall2, 2)
    row["profile_s"] = round(wall2, 2)
    row["profile_rc"] = p2.returncode
    wall4, p4 = timed(kernelcraft("profile", args), env)
    row["profile_again_s"] = round(wall4, 2)
    row["profile_again_reused_compiled"] = "kept from an earlier run" in p4.stdout
    if args.kernelbench:
        device = "cpu" if args.device == "cpu" else "cuda"
        cmd = [
            sys.executable,
            "-c",
            KERNELBENCH_DRIVER,
            str(args.kernelbench),
            str(args.task),
            str(args.candidate),
            device,
        ]
        wall3, p3 = timed(cmd, env)
        row["kernelbench_s"] = round(wall3, 2)
        row["kernelbench_rc"] = p3.returncode
        row["kernelbench_out"] = (p3.stdout + p3.stderr)[-800:] if p3.returncode else p3.stdout[-300:]
        if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
            bc = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
            wall5, p5 = timed(cmd, bc | {"PYTHONPYCACHEPREFIX": str(kept / "kernelbench")})
            row["kernelbench_bytecode_s"] = round(wall5, 2) if p5.returncode == 0 else None
    return row


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", type=Path, default=ROOT / "examples" / "layernorm" / "task.py")
    ap.add_argument("--candidate", type=Path, default=ROOT / "examples" / "layernorm" / "seed.py")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--kernelbench", type=Path, default=None, help="a KernelBench checkout: time its harness too"
    )
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument(
        "--json", type=Path, default=None, help="write the figures here (default: $OUT/bench_cold_start.json)"
    )
    args = ap.parse_args()
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    }
    kept = Path(tempfile.mkdtemp(prefix="kc-cold-bytecode-"))
    for name in ("kernelcraft", "kernelbench", "triton-helpers"):
        (kept / name).mkdir(mode=0o700)
    rows = []
    for i in range(args.runs + 1):
        rows.append(run_once(args, env, kept))
        print(f"run {i}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    keys = ["verify_s", "verify_first_trial_s", "verify_profile_s", "profile_s", "profile_again_s"] + (
        ["kernelbench_s", "kernelbench_bytecode_s"] if args.kernelbench else []
    )
    summary = {k: median(rows[1:], k) for k in keys}
    first = {k: rows[0].get(k) for k in keys}
    report = {
        "machine": platform.node(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "task": str(args.task),
        "candidate": str(args.candidate),
        "device": args.device,
        "runs": rows,
        "median": summary,
        "first_run": first,
    }
    print(f"\ncold start ({args.task.name}): the first run, then the median of {args.runs} after it")
    for k, v in summary.items():
        print(f"  {k:24s} {first[k] if first[k] is not None else '-':>8} {v if v is not None else '-':>8}")
    out = args.json or (Path(os.environ["OUT"]) / "bench_cold_start.json" if os.environ.get("OUT") else None)
    if out is not None:
        out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
