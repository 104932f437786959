"""A whole level's baseline, timed from outside: `kernelcraft level TASKS_DIR --baseline` in a fresh
process and a fresh out dir, its wall time and how many tasks were timed.

    python bench/bench_level.py .kb/KernelBench/level1 [--jobs N] [--problems 1-20] [--device cpu] [--json OUT.json]

Issue 41's target: KernelBench level 1 in at most 120 s on one H200, every task timed. The wall
time is the command's own, process start included. From the run's summary: the tasks timed (or,
without a GPU, given their roofline floor) and why the others were not, the seconds of all tasks
by stage (with a GPU, "timing" is the GPU held alone: the bound the run cannot go under,
"reference_compile" torch.compile's compile, which other tasks' timing overlaps), and the
slowest tasks. Exit 0 when every task has an outcome; the target is printed, not enforced.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_S = 120.0


def run_level(args: argparse.Namespace, out: Path) -> tuple[float, dict[str, Any], str]:
    cmd = [sys.executable, "-m", "kernelcraft", "level", str(args.tasks_dir), "--baseline"]
    cmd += ["--out", str(out), "--restart", "--json", "--device", args.device]
    if args.jobs is not None:
        cmd += ["--jobs", str(args.jobs)]
    if args.problems:
        cmd += ["--problems", args.problems]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, json.loads(done.stdout), " ".join(cmd[1:])


def record(wall: float, summary: dict[str, Any], command: str) -> dict[str, Any]:
    tasks = summary["tasks"]
    ok = "timed" if summary["timed"] else "untimed"  # without a GPU: the floor, nothing timed
    counted = [t for t in tasks if t["status"] == ok and (summary["timed"] or t.get("floor_us") is not None)]
    others = [t for t in tasks if t not in counted]
    slowest = sorted(tasks, key=lambda t: -t["seconds"])[:5]
    return {
        "command": command,
        "wall_s": round(wall, 2),
        "level_s": summary["seconds"],
        "jobs": summary.get("jobs"),
        "gpu": summary["timed"],
        "tasks": len(tasks),
        "with_compiled": sum(1 for t in tasks if t.get("compiled_ref")),
        "timed" if summary["timed"] else "floors": len(counted),
        "not_timed": [
            {"name": t["name"], "status": t["status"], "why": (t.get("message") or "")[:300]} for t in others
        ],
        "stage_seconds": summary.get("stage_seconds", {}),
        "slowest": [
            {"name": t["name"], "s": t["seconds"], "stages": t.get("stage_seconds", {})} for t in slowest
        ],
        "target_met": summary["timed"] and wall <= TARGET_S and not others,
    }


def show(r: dict[str, Any]) -> str:
    what = "timed" if r["gpu"] else "given their roofline floor (no GPU: nothing timed)"
    lines = [
        f"{r['command']}",
        f"wall {r['wall_s']:.1f} s (the level itself {r['level_s']:.1f} s), {r['jobs']} at once",
        f"{r.get('timed', r.get('floors'))} of {r['tasks']} tasks {what}"
        + (f" ({r['with_compiled']} with torch.compile's time too)" if r["gpu"] else ""),
    ]
    lines += [f"  not: {t['name']}: {t['status']}: {t['why']}" for t in r["not_timed"]]
    stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stage_seconds"].items())
    lines.append(f"task-seconds by stage: {stages}")
    for t in r["slowest"]:
        lines.append(f"  {t['s']:7.2f} s  {t['name']}  {t['stages']}")
    if r["gpu"]:
        verdict = "met" if r["target_met"] else "not met"
        lines.append(f"target (<= {TARGET_S:.0f} s, every task timed): {verdict}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks_dir", type=Path, help="a KernelBench level folder, e.g. .kb/KernelBench/level1")
    ap.add_argument("--jobs", type=int, help="tasks at once (default: the command's own)")
    ap.add_argument("--problems", help="only these problem ids, e.g. 1-20")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--out", type=Path, help="the level's out dir (default: a fresh temporary one)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the record here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-level-") as tmp:
        wall, summary, command = run_level(args, args.out or Path(tmp) / "out")
    r = record(wall, summary, command)
    print(show(r))
    if args.json:
        args.json.write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
