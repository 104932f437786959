"""The cookbook on KernelBench: 33 level-1/level-2 tasks, each against a cookbook kernel, timed in one
run against eager and torch.compile through kernelcraft's own level path (issue 29, item 5).

    python bench/bench_cookbook.py .kb/KernelBench --out runs/bench-cookbook            # H200
    python bench/bench_cookbook.py .kb/KernelBench --out runs/bench-cookbook --write-figures
    python bench/bench_cookbook.py .kb/KernelBench --out /tmp/cb-cpu --device cpu       # anywhere
    python bench/bench_cookbook.py .kb/KernelBench --list                               # the pairs
    python bench/bench_cookbook.py --figures-from OUT/bench_cookbook.json                # figures of a run

KERNELBENCH is a KernelBench checkout (its root, or the `KernelBench/` folder inside it holding
`level1/` and `level2/`); nothing is downloaded. Each task in `BENCH` names its cookbook entry and,
where the task's Model differs from the entry's own task (another op of the same kernel, other
init arguments), an adapter: a `ModelNew` that replaces the entry's own, calling the entry's host
function with the task's arguments. The candidate is the entry's `kernel.py` up to its
`class ModelNew`, then the adapter: one self-contained module, as a client would send it.

The tasks are copied under OUT/tasks (renumbered 1..N, level-2 names prefixed `L2_`), the candidates
under OUT/candidates, and `kernelcraft.level.run_level` evaluates them with a `LocalEvaluator`: on a
GPU, verify (--trials input draws, default 2) then profile (candidate, eager and torch.compile
interleaved, the engine's timing); on the CPU, verdicts only (Triton's interpreter, the tasks
shrunk). Rerunning with the same --out resumes: finished tasks are read back, so a run cut by a
time limit continues where it stopped. It writes OUT/bench_cookbook.json (every outcome and the
summary) and OUT/bench_cookbook.md (a table per task, geomeans per family and overall); with
--write-figures (GPU runs only) each entry's H200 figures in kernelcraft/knowledge/cookbook/index.json
are replaced by this run's; --figures-from does the same later, from a run's JSON (made on the GPU
machine, written into the index of this checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kernelcraft.base import knobs  # noqa: E402
from kernelcraft.knowledge.cookbook import load_cookbook  # noqa: E402
from kernelcraft.knowledge.cookbook.book import INDEX, with_figures  # noqa: E402
from kernelcraft.schema.cookbook import CookbookFigure  # noqa: E402
from kernelcraft.schema.level import LevelSummary, TaskOutcome  # noqa: E402


@dataclass(frozen=True)
class BenchTask:
    level: str
    name: str  # the file's stem in KernelBench/<level>/
    entry: str  # the cookbook entry's id
    adapter: str | None = None  # a ModelNew for this task's Model; None: the entry's own fits

    @property
    def key(self) -> str:
        return f"{self.level}/{self.name}"


def _adapter(init: str, body: str, forward: str = "x") -> str:
    return (
        "class ModelNew(nn.Module):\n"
        f"    def __init__(self, {init}):\n"
        "        super().__init__()\n"
        f"{body}\n\n"
        f"    def forward(self, {forward}):\n"
    )


MEAN = _adapter("dim: int", "        self.dim = dim") + '        return reduce_dim(x, self.dim, "mean")\n'
MAX = _adapter("dim: int", "        self.dim = dim") + '        return reduce_dim(x, self.dim, "max")\n'
ARGMIN = (
    _adapter("dim: int", "        self.dim = dim")
    + "        return argreduce_dim(x, self.dim, largest=False)\n"
)
LOG_SOFTMAX = (
    _adapter("dim: int = 1", "        self.dim = dim") + "        return softmax(x, self.dim, log=True)\n"
)
CUMPROD = _adapter("dim", "        self.dim = dim") + '        return scan(x, self.dim, "prod")\n'
GELU_TANH = (
    "class ModelNew(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n\n"
    "    def forward(self, x):\n"
    '        return activation(x, "gelu_tanh")\n'
)
# nn.BatchNorm2d as a module: batch statistics in training mode (updating the running ones, as
# PyTorch does), the running ones in eval mode (kernelcraft's verify calls .eval() on both models).
BATCHNORM = (
    _adapter("num_features: int", "        self.bn = nn.BatchNorm2d(num_features=num_features)")
    + "        bn = self.bn\n"
    + "        return batch_norm(\n"
    + "            x, bn.weight, bn.bias, bn.eps, training=bn.training, running_mean=bn.running_mean,\n"
    + "            running_var=bn.running_var, num_batches_tracked=bn.num_batches_tracked, momentum=bn.momentum,\n"
    + "        )\n"
)
DIVIDE_GELU = (
    _adapter(
        "input_size, output_size, divisor",
        "        self.linear = nn.Linear(input_size, output_size)\n        self.divisor = divisor",
    )
    + '        return linear_epilogue(x, self.linear.weight, self.linear.bias, scale=1.0 / self.divisor, activation="gelu")\n'
)
MULTIPLY_LEAKY = (
    _adapter(
        "in_features, out_features, multiplier, negative_slope",
        "        self.gemm = nn.Linear(in_features, out_features)\n"
        "        self.multiplier = multiplier\n"
        "        self.leaky_relu = nn.LeakyReLU(negative_slope)",
    )
    + "        return linear_epilogue(\n"
    + '            x, self.gemm.weight, self.gemm.bias, scale=self.multiplier, activation="leaky_relu",\n'
    + "            slope=self.leaky_relu.negative_slope,\n"
    + "        )\n"
)
CONV_RELU_BIAS = (
    _adapter(
        "in_channels, out_channels, kernel_size, bias_shape",
        "        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)\n"
        "        self.bias = nn.Parameter(torch.randn(bias_shape))",
    )
    + "        c = self.conv\n"
    + '        return conv2d(x, c.weight, c.bias, c.stride, c.padding, c.dilation, activation="relu", post_bias=self.bias.reshape(-1))\n'
)

BENCH: list[BenchTask] = [
    BenchTask("level1", "1_Square_matrix_multiplication_", "gemm"),
    BenchTask("level1", "2_Standard_matrix_multiplication_", "gemm"),
    BenchTask("level1", "8_Matmul_with_irregular_shapes_", "gemm"),
    BenchTask("level1", "6_Matmul_with_large_K_dimension_", "gemm"),
    BenchTask("level1", "9_Tall_skinny_matrix_multiplication_", "gemm_small_k"),
    BenchTask("level1", "4_Matrix_vector_multiplication_", "gemv"),
    BenchTask("level1", "3_Batched_matrix_multiplication", "bmm"),
    BenchTask("level2", "76_Gemm_Add_ReLU", "linear_epilogue"),
    BenchTask("level2", "86_Matmul_Divide_GELU", "linear_epilogue", DIVIDE_GELU),
    BenchTask("level2", "12_Gemm_Multiply_LeakyReLU", "linear_epilogue", MULTIPLY_LEAKY),
    BenchTask("level1", "47_Sum_reduction_over_a_dimension", "reduce_dim"),
    BenchTask("level1", "48_Mean_reduction_over_a_dimension", "reduce_dim", MEAN),
    BenchTask("level1", "49_Max_reduction_over_a_dimension", "reduce_dim", MAX),
    BenchTask("level1", "51_Argmax_over_a_dimension", "argreduce_dim"),
    BenchTask("level1", "52_Argmin_over_a_dimension", "argreduce_dim", ARGMIN),
    BenchTask("level1", "40_LayerNorm", "layernorm"),
    BenchTask("level1", "36_RMSNorm_", "rmsnorm"),
    BenchTask("level1", "35_GroupNorm_", "groupnorm"),
    BenchTask("level1", "34_InstanceNorm", "instancenorm"),
    BenchTask("level1", "33_BatchNorm", "batchnorm", BATCHNORM),
    BenchTask("level1", "23_Softmax", "softmax"),
    BenchTask("level1", "24_LogSoftmax", "softmax", LOG_SOFTMAX),
    BenchTask("level1", "97_ScaledDotProductAttention", "attention"),
    BenchTask("level1", "63_conv_standard_2D__square_input__square_kernel", "conv2d"),
    BenchTask("level2", "1_Conv2D_ReLU_BiasAdd", "conv2d", CONV_RELU_BIAS),
    BenchTask("level1", "82_conv_depthwise_2D_square_input_square_kernel", "depthwise_conv2d"),
    BenchTask("level1", "89_cumsum", "scan"),
    BenchTask("level1", "90_cumprod", "scan", CUMPROD),
    BenchTask("level1", "94_MSELoss", "elementwise_loss"),
    BenchTask("level1", "95_CrossEntropyLoss", "cross_entropy"),
    BenchTask("level1", "42_Max_Pooling_2D", "pool2d"),
    BenchTask("level1", "26_GELU_", "activation"),
    BenchTask("level1", "88_MinGPTNewGelu", "activation", GELU_TANH),
]


def candidate_source(task: BenchTask) -> str:
    """The entry's kernel module, with the adapter's ModelNew in place of its own when there is one."""
    code = load_cookbook().kernel_code(task.entry)
    if task.adapter is None:
        return code
    cut = code.rfind("\nclass ModelNew(")
    if cut < 0:
        raise SystemExit(f"the {task.entry} entry's kernel.py has no top-level class ModelNew to replace")
    return code[:cut].rstrip() + "\n\n\n" + task.adapter


def kernelbench_root(path: Path) -> Path:
    """The folder holding level1/ and level2/: PATH itself or PATH/KernelBench."""
    for root in (path, path / "KernelBench"):
        if (root / "level1").is_dir() and (root / "level2").is_dir():
            return root
    raise SystemExit(
        f"{path}: no level1/ and level2/ here or in {path / 'KernelBench'}; give a KernelBench checkout"
    )


def stage(tasks: list[BenchTask], kb: Path, out: Path) -> dict[int, BenchTask]:
    """Copy the tasks and write the candidates into OUT/tasks and OUT/candidates, numbered 1..N."""
    numbered: dict[int, BenchTask] = {}
    for folder in (out / "tasks", out / "candidates"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.py"):
            old.unlink()
    for n, task in enumerate(tasks, start=1):
        src = kb / task.level / f"{task.name}.py"
        if not src.is_file():
            raise SystemExit(f"{src} is missing: is {kb} a KernelBench checkout?")
        prefix = "L2_" if task.level == "level2" else ""
        shutil.copyfile(src, out / "tasks" / f"{n}_{prefix}{task.name}.py")
        (out / "candidates" / f"{n}_{task.entry}.py").write_text(candidate_source(task), encoding="utf-8")
        numbered[n] = task
    return numbered


async def evaluate(out: Path, args: argparse.Namespace) -> LevelSummary:
    from kernelcraft.base.config import cache_file
    from kernelcraft.engine.host.local import LocalEvaluator
    from kernelcraft.engine.measure import timingcache
    from kernelcraft.level.runner import LevelRun, run_level

    run = LevelRun(
        tasks_dir=out / "tasks",
        out_dir=out / "level",
        candidates_dir=out / "candidates",
        trials=args.trials,
        timeout_s=args.timeout,
        jobs=args.jobs,
        level_key="cookbook",
        resume=not args.restart,
    )
    ev = LocalEvaluator(
        settings=knobs.settings(),
        workers=2 * args.jobs,
        device=args.device,
        timings_file=cache_file(knobs.settings().paths, timingcache.FILE_NAME),
    )

    async def progress(done: int, total: int, message: str) -> None:
        print(f"[{done:>2}/{total}] {message}", file=sys.stderr, flush=True)

    try:
        return await run_level(ev, run, progress)
    finally:
        await ev.aclose()


def _ms(t: object) -> float | None:
    us = getattr(t, "median_us", None)
    return None if us is None else us / 1000.0


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def rows(numbered: dict[int, BenchTask], summary: LevelSummary) -> list[dict[str, object]]:
    book = load_cookbook()
    by_id: dict[int, TaskOutcome] = {o.problem_id: o for o in summary.tasks}
    out = []
    for n, task in numbered.items():
        o = by_id.get(n)
        out.append(
            {
                "n": n,
                "kernelbench": task.key,
                "entry": task.entry,
                "family": book.get(task.entry).family,
                "adapted": task.adapter is not None,
                "status": o.status if o else "missing",
                "failure": o.failure_class.value if o and o.failure_class else None,
                "message": (o.message or "")[:300] if o and o.status != "correct" else None,
                "ms": _ms(o.candidate_time) if o else None,
                "eager_ms": _ms(o.eager) if o else None,
                "compiled_ms": _ms(o.compiled_ref) if o else None,
                "x_eager": o.speedup_vs_eager if o else None,
                "x_compiled": o.speedup_vs_compiled if o else None,
                "device": o.device if o else None,
                "seconds": o.seconds if o else None,
            }
        )
    return out


def by_family(table: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    fams: dict[str, dict[str, object]] = {}
    for fam in dict.fromkeys(str(r["family"]) for r in table):
        mine = [r for r in table if r["family"] == fam]
        fams[fam] = {
            "tasks": len(mine),
            "correct": sum(r["status"] == "correct" for r in mine),
            "x_eager": _geomean([float(r["x_eager"]) for r in mine if r["x_eager"]]),  # type: ignore[arg-type]
            "x_compiled": _geomean([float(r["x_compiled"]) for r in mine if r["x_compiled"]]),  # type: ignore[arg-type]
        }
    return fams


def _f(x: object, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def markdown(
    table: list[dict[str, object]], fams: dict[str, dict[str, object]], head: dict[str, object]
) -> str:
    lines = [
        f"# Cookbook on KernelBench ({head['device']}, {head['date']}, commit {head['commit']})",
        "",
        f"{head['correct']} of {head['total']} correct; geomean x{_f(head['x_eager'], '.2f')} vs eager, "
        f"x{_f(head['x_compiled'], '.2f')} vs torch.compile; at or above torch.compile on "
        f"{head['at_or_above_compile']} of {head['timed']} timed; {head['seconds']} s wall.",
        "",
        "| # | KernelBench task | cookbook entry | status | ms | eager ms | compile ms | x eager | x compile |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        status = str(r["status"]) + (f" ({r['failure']})" if r["failure"] else "")
        entry = f"{r['entry']}{' (adapted)' if r['adapted'] else ''}"
        lines.append(
            f"| {r['n']} | {r['kernelbench']} | {entry} | {status} | {_f(r['ms'], '.3f')} | {_f(r['eager_ms'], '.3f')} "
            f"| {_f(r['compiled_ms'], '.3f')} | {_f(r['x_eager'], '.2f')} | {_f(r['x_compiled'], '.2f')} |"
        )
    lines += [
        "",
        "| family | tasks | correct | geomean x eager | geomean x compile |",
        "|---|---|---|---|---|",
    ]
    for fam, f in fams.items():
        lines.append(
            f"| {fam} | {f['tasks']} | {f['correct']} | {_f(f['x_eager'], '.2f')} | {_f(f['x_compiled'], '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def commit() -> str:
    if os.environ.get("KERNELCRAFT_COMMIT"):
        return os.environ["KERNELCRAFT_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def figures(table: list[dict[str, object]], measured: str) -> dict[str, list[CookbookFigure]]:
    """Each entry's figures from the correct, timed rows of this run."""
    found: dict[str, list[CookbookFigure]] = {}
    for r in table:
        if r["status"] != "correct" or r["ms"] is None:
            continue
        found.setdefault(str(r["entry"]), []).append(
            CookbookFigure(
                kernelbench=str(r["kernelbench"]),
                device=str(r["device"] or "unknown GPU"),
                ms=round(float(r["ms"]), 4),  # type: ignore[arg-type]
                eager_ms=None if r["eager_ms"] is None else round(float(r["eager_ms"]), 4),  # type: ignore[arg-type]
                compiled_ms=None if r["compiled_ms"] is None else round(float(r["compiled_ms"]), 4),  # type: ignore[arg-type]
                x_eager=None if r["x_eager"] is None else round(float(r["x_eager"]), 3),  # type: ignore[arg-type]
                x_compiled=None if r["x_compiled"] is None else round(float(r["x_compiled"]), 3),  # type: ignore[arg-type]
                measured=measured,
            )
        )
    return found


def select(only: list[str] | None) -> list[BenchTask]:
    if not only:
        return list(BENCH)
    picked = [
        t for t in BENCH if t.entry in only or t.name in only or any(re.match(rf"{o}_", t.name) for o in only)
    ]
    if not picked:
        raise SystemExit(f"--only {' '.join(only)} matches no task; --list shows them")
    return picked


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "kernelbench",
        type=Path,
        nargs="?",
        help="a KernelBench checkout (its root or its KernelBench/ folder)",
    )
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs")) / "bench-cookbook")
    p.add_argument("--jobs", type=int, default=4, help="tasks evaluated at once")
    p.add_argument("--trials", type=int, default=2, help="correctness trials per task")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per task")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument(
        "--only", nargs="+", metavar="NAME", help="entry ids, task names or problem ids (1, 48 ...)"
    )
    p.add_argument("--restart", action="store_true", help="ignore the outcomes already in --out")
    p.add_argument(
        "--write-figures", action="store_true", help="write the H200 figures into the cookbook's index"
    )
    p.add_argument(
        "--figures-from",
        type=Path,
        metavar="JSON",
        help="no run: write the figures of an earlier run's bench_cookbook.json into the cookbook's index",
    )
    p.add_argument("--list", action="store_true", help="print the task/entry pairs and exit")
    args = p.parse_args()
    if args.figures_from is not None:
        done = json.loads(args.figures_from.read_text(encoding="utf-8"))
        head = done["summary"]
        changed = with_figures(INDEX, figures(done["tasks"], f"{head['date']} {head['commit']}"))
        print(f"wrote the figures of {changed} entries into {INDEX}")
        return
    tasks = select(args.only)
    if args.list:
        for t in tasks:
            print(f"{t.key:<62} {t.entry}{' (adapted)' if t.adapter else ''}")
        return
    if args.kernelbench is None:
        p.error("give KERNELBENCH, a KernelBench checkout (or --figures-from, or --list)")
    kb = kernelbench_root(args.kernelbench)
    numbered = stage(tasks, kb, args.out)
    summary = asyncio.run(evaluate(args.out, args))
    table = rows(numbered, summary)
    fams = by_family(table)
    timed = [r for r in table if r["x_compiled"] is not None]
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    devices = sorted({str(r["device"]) for r in table if r["device"]})
    head: dict[str, object] = {
        "device": ", ".join(devices) or "no device",
        "date": date,
        "commit": commit(),
        "total": len(table),
        "correct": sum(r["status"] == "correct" for r in table),
        "timed": len(timed),
        "at_or_above_compile": sum(float(r["x_compiled"]) >= 1.0 for r in timed),  # type: ignore[arg-type]
        "x_eager": _geomean([float(r["x_eager"]) for r in table if r["x_eager"]]),  # type: ignore[arg-type]
        "x_compiled": _geomean([float(r["x_compiled"]) for r in timed]),  # type: ignore[arg-type]
        "seconds": summary.seconds,
        "message": summary.message,
    }
    (args.out / "bench_cookbook.json").write_text(
        json.dumps({"summary": head, "families": fams, "tasks": table}, indent=2) + "\n", encoding="utf-8"
    )
    md = markdown(table, fams, head)
    (args.out / "bench_cookbook.md").write_text(md, encoding="utf-8")
    print(md)
    if args.write_figures:
        if not timed:
            raise SystemExit("--write-figures: this run timed nothing (no GPU?); the index is unchanged")
        changed = with_figures(INDEX, figures(table, f"{date} {head['commit']}"))
        print(f"wrote the figures of {changed} entries into {INDEX}")


if __name__ == "__main__":
    main()
