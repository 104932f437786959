"""Roofline floors against recorded cookbook timings: does any correct kernel beat its floor?

    python bench/cookbook_floors.py .kb/KernelBench                       # print the table
    python bench/cookbook_floors.py .kb/KernelBench --write-fixture --commit 423217d  # the test's data

For every correct task of the recorded H200 cookbook runs (`RUNS`, in docs/results/) and the three
kernels issue 41 reported beating the old floor (`REPORTED`), it counts the reference's work from the
KernelBench task's source on the meta device (no GPU, no memory) and prints the floor the roofline
gives now (the matmul work at the fastest precision meeting kernelcraft's tolerance: bf16x3 for
fp32, `engine/measure/roofline.py`) beside the old one (every matmul FLOP at the fp32 CUDA-core
peak), the measured time and the fraction of the floor achieved. `--write-fixture` stores the task
sources and times in `tests/fixtures/floors/cookbook_h200.json`, which
`tests/engine/measure/test_cookbook_floors.py` reads to assert no correct kernel beats its floor.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kernelcraft.base.targets import DEFAULT_TARGET  # noqa: E402

RUNS = ("docs/results/bench_cookbook_h200_s12.json", "docs/results/bench_cookbook_h200_s12b_gemm.json")
# Issue 41: kernels written with the cookbook for unseen tasks, measured on the H200 (µs), each
# under the old floor (2052, 4103 and 769 µs).
REPORTED = (
    ("level2/28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply", 849.0),
    ("level2/53_Gemm_Scaling_Hardtanh_GELU", 1535.0),
    ("level1/10_3D_tensor_matrix_multiplication", 402.0),
)
KERNELBENCH_NOTE = "task sources from ScalingIntelligence/KernelBench (MIT licence)"
FIXTURE = REPO / "tests" / "fixtures" / "floors" / "cookbook_h200.json"


def kernelbench_root(path: Path) -> Path:
    for root in (path, path / "KernelBench"):
        if (root / "level1").is_dir() and (root / "level2").is_dir():
            return root
    raise SystemExit(
        f"{path}: no level1/ and level2/ here or in {path / 'KernelBench'}; give a KernelBench checkout"
    )


def recorded_rows(kb: Path) -> list[dict[str, Any]]:
    """Every correct, timed task of the recorded runs and the reported ones, with its source."""
    rows: list[dict[str, Any]] = []
    for run in RUNS:
        data = json.loads((REPO / run).read_text(encoding="utf-8"))
        head = data["summary"]
        for t in data["tasks"]:
            if t["status"] != "correct" or t.get("ms") is None:
                continue
            rows.append(
                {
                    "kernelbench": t["kernelbench"],
                    "measured_us": round(t["ms"] * 1000.0, 3),
                    "recorded": f"{run} ({head['device']}, {head['date']}, commit {head['commit']})",
                }
            )
    for key, us in REPORTED:
        rows.append({"kernelbench": key, "measured_us": us, "recorded": "issue 41 (NVIDIA H200)"})
    for row in rows:
        row["source"] = (kb / f"{row['kernelbench']}.py").read_text(encoding="utf-8")
    return rows


def floors(row: dict[str, Any], target: str = DEFAULT_TARGET) -> tuple[Any, Any]:
    """(the precision-aware roofline, the old fp32-vector one) of a row's task."""
    import torch

    from kernelcraft.engine.checks.compare import tolerances
    from kernelcraft.engine.measure.roofline import count_work, floor_of, roofline

    scope: dict[str, Any] = {"__name__": "kernelbench_task"}
    exec(compile(row["source"], row["kernelbench"], "exec"), scope)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = scope["Model"](*scope["get_init_inputs"]())
        inputs = list(scope["get_inputs"]())
    work = count_work(model, inputs)
    new = floor_of(work, target, lambda d: tolerances(d)[0])
    old = roofline(target, work.flops, work.bytes, "ieee", work.elementwise_flops)
    return new, old


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "kernelbench", type=Path, help="a KernelBench checkout (its root or its KernelBench/ folder)"
    )
    p.add_argument("--write-fixture", action="store_true", help=f"write {FIXTURE.relative_to(REPO)}")
    p.add_argument("--commit", default="unknown", help="the KernelBench checkout's commit, for the fixture")
    args = p.parse_args()
    rows = recorded_rows(kernelbench_root(args.kernelbench))
    print("| task | measured µs | floor µs (precision, bound) | fraction | old fp32 floor µs |")
    print("|---|---|---|---|---|")
    beaten = 0
    for row in rows:
        new, old = floors(row)
        beaten += new.floor_us > row["measured_us"]
        print(
            f"| {row['kernelbench']} | {row['measured_us']:.1f} | {new.floor_us:.1f} ({new.precision}, {new.bound}) "
            f"| {new.floor_us / row['measured_us']:.0%} | {old.floor_us:.1f}"
            f"{' (beaten)' if old.floor_us > row['measured_us'] else ''} |"
        )
    print(f"\n{len(rows)} timings, {beaten} under their floor")
    if args.write_fixture:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "target": DEFAULT_TARGET,
            "sources": f"{KERNELBENCH_NOTE}, commit {args.commit}",
            "rows": rows,
        }
        FIXTURE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {FIXTURE.relative_to(REPO)}")
    return 1 if beaten else 0


if __name__ == "__main__":
    raise SystemExit(main())
