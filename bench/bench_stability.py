"""Do profiles repeat? The same kernels profiled again and again on one warm evaluator (issue 29,
item 2: repeated profiles of a kernel agree within 5%, or the profile says why not).

    python bench/bench_stability.py --repeats 12 --json OUT.json      # on a GPU (the H200)

For each example under examples/ (task.py + seed.py), `--repeats` profile jobs run one after
another on one `LocalEvaluator`; each job times the candidate, eager PyTorch and (on the first
job; then reused) torch.compile in interleaved rounds. Reported per example: the candidate's
median over the repeats, the largest gap of one profile's median from that (as a percentage),
how many profiles said they may not repeat (`unstable`) and how many rounds were outliers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kernelcraft.base import knobs  # noqa: E402
from kernelcraft.engine.host.local import LocalEvaluator  # noqa: E402
from kernelcraft.schema.evaluation import EvalJob  # noqa: E402

EXAMPLES = REPO / "examples"


async def run(names: list[str], repeats: int, device: str) -> list[dict[str, object]]:
    out = []
    async with LocalEvaluator(settings=knobs.settings(), workers=2, device=device) as ev:
        for name in names:
            folder = EXAMPLES / name
            job = EvalJob(
                task_source=(folder / "task.py").read_text(),
                candidate_source=(folder / "seed.py").read_text(),
                task_name=f"{name}/task.py",
                candidate_name=f"{name}/seed.py",
                stages=["verify", "profile"],
                trials=1,
            )
            medians, eager, unstable, outliers, spreads, why = [], [], 0, 0, [], ""
            for _ in range(repeats):
                p = (await ev.submit(job)).profile
                if p is None or not p.available or p.candidate is None or p.reference_eager is None:
                    print(f"{name}: not timed: {p.message if p else 'no profile'}", flush=True)
                    break
                medians.append(p.candidate.median_us)
                eager.append(p.reference_eager.median_us)
                spreads.append(p.candidate.round_spread or 0.0)
                unstable += p.unstable is not None
                why = why or (p.unstable or "")
                outliers += p.message.count("outlier round")
            if not medians:
                continue
            centre = statistics.median(medians)
            row = {
                "example": name,
                "profiles": len(medians),
                "candidate_median_us": round(centre, 2),
                "candidate_worst_gap_pct": round(100 * max(abs(m - centre) for m in medians) / centre, 2),
                "eager_worst_gap_pct": round(
                    100 * max(abs(m - statistics.median(eager)) for m in eager) / statistics.median(eager), 2
                ),
                "max_round_spread_pct": round(100 * max(spreads), 2),
                "unstable_profiles": unstable,
                "profiles_with_outlier_rounds": outliers,
                "first_unstable_reason": why,
            }
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--examples", nargs="*", default=sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = asyncio.run(run(args.examples, args.repeats, args.device))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
