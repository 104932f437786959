"""The offline tuner from the cookbook over a KernelBench level (issue 41 item 4), on the GPU.

For each task of the level the cookbook has a kernel for (`agent/loop/cookbook_seed.tuner_misfit`
as `tunable_match` reads it: the same Model arguments, ops and input ranks, with launch parameters
to tune), runs `kernelcraft
optimize TASK --llm none --steps N`: the tree's root is the cookbook's kernel, so no step starts
below it. Reports per task the root's and the best kernel's speedup (against the tree's
baseline), the kernel's family and, per axis the tuner moved along, its steps, seconds and best
gain (summary.json's `tuner_axis_seconds`).

    python bench/bench_tuner_cookbook.py .kb/KernelBench --level 1 --steps 8 --out runs/tuner-cookbook
    python bench/bench_tuner_cookbook.py .kb/KernelBench --problems 47 1 --steps 8 --out runs/tc

Resumable: a task whose run directory has a summary.json is read, not run again; a run cut short
resumes its tree. Writes bench_tuner_cookbook.json and .md into --out. Without a GPU the speedups
are not measured (the table says "—"), so the CPU run is a smoke test only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelcraft.agent.llm.config import LLMConfig  # noqa: E402
from kernelcraft.agent.loop.cookbook_seed import TUNER_CANDIDATES, tuner_misfit  # noqa: E402
from kernelcraft.agent.loop.explore import optimize  # noqa: E402
from kernelcraft.agent.loop.options import OptimizeOptions  # noqa: E402
from kernelcraft.knowledge.cookbook import load_cookbook  # noqa: E402


def problem_id(path: Path) -> int | None:
    head = path.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def fitting_tasks(level_dir: Path, problems: set[int]) -> list[tuple[Path, str]]:
    """(task, cookbook entry) of each task whose best cookbook match fits it and can be tuned."""
    book = load_cookbook()
    out = []
    for path in sorted(level_dir.glob("*.py"), key=lambda p: (problem_id(p) or 0, p.name)):
        if problems and problem_id(path) not in problems:
            continue
        source = path.read_text()
        found = book.search(source, limit=TUNER_CANDIDATES, with_code=True)
        fits = next((f for f in found if tuner_misfit(f, source) is None), None)  # as `tunable_match`
        if fits is not None:
            out.append((path, fits.id))
    return out


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


async def run_task(task: Path, entry: str, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = args.out / task.stem
    summary = read_json(run_dir / "summary.json")
    if not summary:
        summary = await optimize(
            OptimizeOptions(
                task=task,
                steps=args.steps,
                llm=LLMConfig(kind="none"),
                out=run_dir,
                db_path=args.out / "kernelcraft.db",
                progress=False,
            )
        )
    tree = read_json(run_dir / "tree.json")
    root = next((n for n in tree.get("nodes", []) if n.get("seed")), {})
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines() if line.strip()]
    family = next((s["tuner"]["op_family"] for s in steps if (s.get("tuner") or {}).get("op_family")), None)
    best = summary.get("best") or {}
    return {
        "task": task.stem,
        "entry": entry,
        "family": family,
        "baseline": tree.get("baseline"),
        "root_speedup": root.get("speedup"),
        "root_us": root.get("candidate_us"),
        "best_speedup": best.get("speedup"),
        "best_us": best.get("candidate_us"),
        "steps": summary.get("steps_done"),
        "correct": summary.get("correct"),
        "seconds": summary.get("seconds"),
        "axes": summary.get("tuner_axis_seconds") or {},
        "stopped": summary.get("stopped_because"),
    }


def times(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| task | cookbook entry | family | root (the cookbook's) | best | steps (correct) | s | per axis: steps, s, best gain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        axes = "; ".join(
            f"{a} {v['steps']}, {v['total']:.0f} s"
            + (f", {v['best_gain']:.2f}×" if v.get("best_gain") else "")
            for a, v in r["axes"].items()
        )
        lines.append(
            f"| {r['task']} | {r['entry']} | {r['family'] or '—'} | {times(r['root_speedup'])} | "
            f"{times(r['best_speedup'])} | {r['steps']} ({r['correct']}) | {r['seconds']} | {axes} |"
        )
    return "\n".join(lines) + "\n"


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "kernelbench", type=Path, help="the KernelBench folder that holds level1/, level2/, ..."
    )
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--problems", type=int, nargs="*", default=[], help="only these problem ids")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("runs/tuner-cookbook"))
    args = parser.parse_args()
    level_dir = args.kernelbench / f"level{args.level}"
    if not level_dir.is_dir():
        parser.error(
            f"{level_dir} is not a folder: pass the KernelBench folder that holds level{args.level}/"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = fitting_tasks(level_dir, set(args.problems))
    print(f"{len(tasks)} tasks of {level_dir} fit a cookbook entry", file=sys.stderr)
    rows = []
    for task, entry in tasks:
        rows.append(await run_task(task, entry, args))
        r = rows[-1]
        print(
            f"{r['task']}: root {times(r['root_speedup'])}, best {times(r['best_speedup'])}", file=sys.stderr
        )
    (args.out / "bench_tuner_cookbook.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    (args.out / "bench_tuner_cookbook.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
