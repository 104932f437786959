"""Benchmark of the offline tuner, and of the examples' kernels against PyTorch (run on the H200).

    python bench/bench_tuner.py                 # GPU: every example in examples/*/ (task.py + seed.py)
    python bench/bench_tuner.py --cpu-smoke     # tiny, in Triton's interpreter: checks the harness runs
    python bench/bench_tuner.py --examples layernorm softmax --json results.json
    python bench/bench_tuner.py --replay results.json   # the tuner again on those grids, no GPU
    python bench/bench_tuner.py --replay results.json --seeds 0 1 2 3 4 5 6 7   # how often it holds

Part 1, tuner vs grid. For each example's seed kernel, the launch-configuration space the tuner
reads from the source (`kernelcraft.agent.tuner.search`) is measured exhaustively (every configuration:
checked once against the reference, then timed), then the tuner searches the same space with the
same seed. Claim checked: the tuner's best is within 3% of the grid's best using at most 25% of
the grid's evaluations. The tuner reads the grid's measurements (a cache keyed by configuration)
rather than re-timing, so both see identical numbers and timing noise cannot favour either; its
evaluation count is the number of distinct configurations it asked for. When a space is larger
than --max-grid, it is narrowed the same way for both (meta-parameters within a factor 8, 4, then
2 of the seed's; num_warps in {2, 4, 8} and num_stages in {2, 3, 4}; then num_stages, then
num_warps held at the seed's).

Part 2, the examples' best kernels (the grid's best configuration) against PyTorch eager and
torch.compile, with the roofline fraction (`kernelcraft.engine.measure.roofline.roofline_for`).

Harness: in-process `triton.testing.do_bench(..., return_mode="median")` (L2 flushed by do_bench),
not the engine's `LocalEvaluator`. Why: a grid is hundreds of configurations per kernel, and each
evaluation through the engine (verify and profile) takes ~1.9 s on the H200 (docs/benchmarks.md; a
fresh-process harness like KernelBench's takes 8.9 s, docs/design.md "Measured facts"), i.e. many
minutes per kernel; in-process each configuration costs its JIT compile plus ~100 ms of timing. The
kernels timed are our own examples, so the evaluator's isolation (which exists for untrusted
candidates) buys nothing here.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny run in Triton's interpreter (no GPU)")
    p.add_argument(
        "--examples", nargs="*", help="example folder names (default: all with task.py and seed.py)"
    )
    p.add_argument(
        "--max-grid", type=int, default=400, help="narrow larger spaces to at most this many configs"
    )
    p.add_argument("--seed", type=int, default=0, help="the tuner's seed")
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="with --replay: run the tuner once per seed and count how often the claim holds",
    )
    p.add_argument("--target", default="sm_90a", help="roofline target")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument(
        "--replay",
        type=Path,
        help="run the tuner on the grids an earlier --json recorded (no GPU; same scoring)",
    )
    return p.parse_args()


ARGS = _parse()
if ARGS.cpu_smoke:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402

from kernelcraft.agent.tuner.params import launch_params  # noqa: E402
from kernelcraft.agent.tuner.search import (  # noqa: E402
    NUM_STAGES,
    NUM_WARPS,
    Observation,
    Space,
    apply_config,
    config_key,
    current_config,
    tune,
)
from kernelcraft.base.failures import classify  # noqa: E402

DEVICE = "cpu" if ARGS.cpu_smoke else "cuda"
_modules = 0


def load_module(source: str, name: str, folder: Path) -> Any:
    """Import `source` from a file (Triton reads kernel source from files), under a fresh name."""
    global _modules
    _modules += 1
    path = folder / f"{name}_{_modules}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"{name}_{_modules}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def to_device(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(DEVICE)
    if isinstance(x, list | tuple):
        return type(x)(to_device(v) for v in x)
    return x


def inputs_of(task: Any) -> list[Any]:
    torch.manual_seed(1234)
    if ARGS.cpu_smoke and hasattr(task, "get_cpu_inputs"):
        return to_device(task.get_cpu_inputs())
    return to_device(task.get_inputs())


def build(cls: Any, task: Any) -> Any:
    torch.manual_seed(42)
    return cls(*task.get_init_inputs()).to(DEVICE).eval()


def time_us(fn: Any) -> float:
    if ARGS.cpu_smoke:
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best * 1e6
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e3


# Narrowing levels, widest first: (factor around each meta-parameter's seed value, num_warps
# choices, num_stages choices); None keeps the seed's value.
_LEVELS: tuple[tuple[int, tuple[int, ...] | None, tuple[int, ...] | None], ...] = (
    (8, NUM_WARPS, NUM_STAGES),
    (4, NUM_WARPS, NUM_STAGES),
    (2, (2, 4, 8), (2, 3, 4)),
    (2, (2, 4, 8), None),
    (2, None, None),
    (1, None, None),
)


def narrowed(space: Space, params: list[Any], limit: int) -> Space:
    """The same space, narrowed until it has at most `limit` configurations: meta-parameters
    within a factor of the seed's value, then num_warps and num_stages held at the seed's, so a
    matmul keeps its block-size choices rather than collapsing to the seed alone."""
    if ARGS.cpu_smoke:
        limit = min(limit, 12)
    s = space
    for factor, warps, stages in _LEVELS:
        values = {}
        for p in params:
            if p.kind == "meta":
                values[p.key] = [v for v in space.values[p.key] if p.value / factor <= v <= p.value * factor]
            else:
                choices = warps if p.kind == "num_warps" else stages
                values[p.key] = list(choices) if choices is not None else [p.value]
            if p.value not in values[p.key]:
                values[p.key].append(p.value)
                values[p.key].sort()
        s = Space(params, values)
        if s.size() <= limit:
            return s
    return s


def bench_example(folder: Path, scratch: Path) -> dict[str, Any]:
    task = load_module((folder / "task.py").read_text(), f"{folder.name}_task", scratch)
    seed_source = (folder / "seed.py").read_text()
    params = launch_params(seed_source)
    full = Space.of(params)
    space = narrowed(full, params, ARGS.max_grid)
    inputs = inputs_of(task)
    reference = build(task.Model, task)
    with torch.no_grad():
        expected = reference(*inputs)
    measured: dict[str, Observation] = {}

    def measure(config: dict[str, int]) -> Observation:
        source = apply_config(seed_source, params, config)
        try:
            model = build(load_module(source, f"{folder.name}_cand", scratch).ModelNew, task)
            with torch.no_grad():
                out = model(*inputs)
                tol = 1e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1e-4
                if not torch.allclose(out, expected, atol=tol, rtol=tol):
                    return Observation(config, ok=False, failure_class="numerical_mismatch")
                t = time_us(lambda: model(*inputs))
            return Observation(config, ok=True, time_us=t)
        except Exception as e:  # a configuration that fails to compile or run is a data point
            return Observation(config, ok=False, failure_class=classify(str(e)).value)

    t0 = time.monotonic()
    grid = space.grid()
    for config in grid:
        measured[config_key(config)] = measure(config)
    grid_seconds = time.monotonic() - t0
    row = tuner_row(folder.name, seed_source, params, space, measured, measure)
    row["space_full"] = full.size()
    row["grid_seconds"] = round(grid_seconds, 1)
    best = row.pop("_grid_best")
    if best is not None:
        row.update(compare_with_pytorch(task, reference, inputs, seed_source, params, best, scratch))
    return row


def tuner_row(
    name: str,
    seed_source: str,
    params: list[Any],
    space: Space,
    measured: dict[str, Observation],
    measure: Any = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """Run the tuner over `space`, answering from `measured` (the grid), and score it."""
    grid = space.grid()
    timed = [o for o in measured.values() if o.ok and o.time_us is not None]
    grid_best = min(timed, key=lambda o: o.time_us or math.inf) if timed else None

    asked: list[str] = []

    async def objective(source: str, config: dict[str, int]) -> Observation:
        # the grid spans launch configurations; a dot's precision stays the seed's (not in `space`)
        key = config_key({k: v for k, v in config.items() if k in space.values})
        asked.append(key)
        if key in measured or measure is None:
            return measured.get(key) or Observation(config, ok=False, failure_class="not in the grid")
        return measure(config)

    # the tuner searches the same (narrowed) space
    original = Space.of

    def same_space(_: list[Any]) -> Space:
        return space

    Space.of = same_space  # type: ignore[method-assign,assignment]
    try:
        result = asyncio.run(
            tune(
                seed_source,
                objective,
                budget=max(len(grid) // 4, 1),
                seed=ARGS.seed if seed is None else seed,
            )
        )
    finally:
        Space.of = original  # type: ignore[method-assign]
    tuner_best = result.best
    within = (
        tuner_best is not None
        and grid_best is not None
        and (tuner_best.time_us or math.inf) <= 1.03 * (grid_best.time_us or math.inf)
    )
    row: dict[str, Any] = {
        "example": name,
        "params": {p.key: p.value for p in params},
        "grid_size": len(grid),
        "grid_ok": len(timed),
        "grid_best": None if grid_best is None else {"config": grid_best.config, "us": grid_best.time_us},
        "seed_config_us": measured[config_key(current_config(params))].time_us,
        "tuner_best": None if tuner_best is None else {"config": tuner_best.config, "us": tuner_best.time_us},
        "tuner_evaluations": len(set(asked)),
        "tuner_fraction_of_grid": round(len(set(asked)) / max(len(grid), 1), 3),
        "within_3pct": within,
        "tuner_log": [[o.config, o.time_us, o.failure_class] for o in result.observations],
        # every grid measurement, so another tuner strategy can be replayed on them without a GPU
        "grid": [[o.config, o.time_us, o.failure_class] for o in measured.values()],
        # below 8 configurations a quarter of the grid is one or two evaluations: no claim is made
        "passes": None if len(grid) < 8 else bool(within and len(set(asked)) <= len(grid) / 4),
        "_grid_best": grid_best,
    }
    return row


def replay(path: Path, seed: int | None = None) -> list[dict[str, Any]]:
    """The tuner on grids an earlier run measured (its JSON's "grid" lists): no GPU, same scoring."""
    rows = []
    for old in json.loads(path.read_text())["rows"]:
        if not old.get("grid") or (ARGS.examples and old["example"] not in ARGS.examples):
            continue
        seed_source = (ROOT / "examples" / old["example"] / "seed.py").read_text()
        # the literals the recording spans: the tuner may since read more of the seed (a branch's
        # value, a cap), which the grid never measured
        recorded = {k for config, _, _ in old["grid"] for k in config}
        params = [p for p in launch_params(seed_source) if p.key in recorded]
        values: dict[str, list[int]] = {p.key: [] for p in params}
        measured: dict[str, Observation] = {}
        for config, us, failure in old["grid"]:
            for k, v in config.items():
                if v not in values[k]:
                    values[k].append(v)
            ok = us is not None and failure is None
            measured[config_key(config)] = Observation(config, ok=ok, time_us=us, failure_class=failure)
        space = Space(params, {k: sorted(v) for k, v in values.items()})
        row = tuner_row(old["example"], seed_source, params, space, measured, seed=seed)
        row.pop("_grid_best")
        row.update({k: old.get(k) for k in ("space_full", "eager_us", "compiled_us", "roofline_fraction")})
        row["speedup_vs_eager"] = old.get("speedup_vs_eager")
        row["speedup_vs_compiled"] = old.get("speedup_vs_compiled")
        rows.append(row)
    return rows


def compare_with_pytorch(
    task: Any,
    reference: Any,
    inputs: list[Any],
    seed_source: str,
    params: list[Any],
    best: Observation,
    scratch: Path,
) -> dict[str, Any]:
    out: dict[str, Any] = {"best_us": best.time_us}
    with torch.no_grad():
        out["eager_us"] = time_us(lambda: reference(*inputs))
        if not ARGS.cpu_smoke:
            compiled = torch.compile(reference)
            compiled(*inputs)
            out["compiled_us"] = time_us(lambda: compiled(*inputs))
    out["speedup_vs_eager"] = out["eager_us"] / best.time_us if best.time_us else None
    if out.get("compiled_us") and best.time_us:
        out["speedup_vs_compiled"] = out["compiled_us"] / best.time_us
    try:
        from kernelcraft.engine.measure.roofline import roofline_for

        roof = roofline_for(reference, inputs, ARGS.target)
        out["roofline_floor_us"] = roof.floor_us
        out["roofline_bound"] = roof.bound
        out["roofline_fraction"] = roof.floor_us / best.time_us if best.time_us else None
    except Exception as e:  # the roofline is a report, not the benchmark's subject
        out["roofline_error"] = str(e)[:200]
    return out


def main() -> int:
    if ARGS.replay and ARGS.seeds:
        return report_seeds(ARGS.replay, ARGS.seeds)
    if ARGS.replay:
        return report(replay(ARGS.replay))
    if not ARGS.cpu_smoke and not torch.cuda.is_available():
        print("no CUDA GPU: run on the H200, or use --cpu-smoke here", file=sys.stderr)
        return 2
    folders = sorted(
        p.parent for p in (ROOT / "examples").glob("*/seed.py") if (p.parent / "task.py").is_file()
    )
    if ARGS.examples:
        folders = [f for f in folders if f.name in ARGS.examples]
    elif ARGS.cpu_smoke:
        folders = [f for f in folders if f.name in ("elementwise", "row_mean")] or folders[:2]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kc-bench-") as scratch:
        for folder in folders:
            print(f"[bench] {folder.name} ...", file=sys.stderr, flush=True)
            row = bench_example(folder, Path(scratch))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return report(rows)


def report_seeds(path: Path, seeds: list[int]) -> int:
    """The tuner once per seed on recorded grids: per example, how often the claim held, the most
    evaluations it used and its worst gap to the grid's best."""
    by_example: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        for row in replay(path, seed):
            by_example.setdefault(row["example"], []).append(row)
    print("| example | grid | seeds passing | most evaluations | worst gap to the grid's best |")
    print("|---|---|---|---|---|")
    for name, rows in by_example.items():
        if rows[0]["passes"] is None:
            print(f"| {name} | {rows[0]['grid_size']} | no claim (grid < 8) | — | — |")
            continue
        gaps = [
            (r["tuner_best"]["us"] / r["grid_best"]["us"] - 1) * 100 if r["tuner_best"] else math.inf
            for r in rows
        ]
        print(
            f"| {name} | {rows[0]['grid_size']} | {sum(bool(r['passes']) for r in rows)} of {len(rows)} "
            f"| {max(r['tuner_evaluations'] for r in rows)} | {max(gaps):.1f}% |"
        )
    return 0


def report(rows: list[dict[str, Any]]) -> int:
    header = (
        "| example | grid | tuner evals (%) | grid best µs | tuner best µs | ≤3% & ≤25% | eager µs | compile µs "
        "| ×eager | ×compile | roofline |"
    )
    lines = [header, "|" + "---|" * 11]
    for r in rows:

        def f(v: Any, fmt: str = "{:.1f}") -> str:
            return "—" if v is None else fmt.format(v)

        lines.append(
            f"| {r['example']} | {r['grid_size']} | {r['tuner_evaluations']} ({100 * r['tuner_fraction_of_grid']:.0f}%) "
            f"| {f((r['grid_best'] or {}).get('us'))} | {f((r['tuner_best'] or {}).get('us'))} | "
            f"{'n/a (grid < 8)' if r['passes'] is None else 'yes' if r['passes'] else 'NO'} | {f(r.get('eager_us'))} | {f(r.get('compiled_us'))} | "
            f"{f(r.get('speedup_vs_eager'), '{:.2f}')} | {f(r.get('speedup_vs_compiled'), '{:.2f}')} | "
            f"{f(r.get('roofline_fraction'), '{:.0%}')} |"
        )
    table = "\n".join(lines)
    print(table)
    if ARGS.cpu_smoke:
        print("(cpu smoke: interpreter wall times, meaningless as performance; this checks the harness runs)")
    if ARGS.json:
        ARGS.json.write_text(json.dumps({"device": DEVICE, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
