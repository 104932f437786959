"""How much of torch.compile's first call a baseline can overlap with other tasks' timing: the
reference's compile as a level's baseline runs it (`engine/worker/refcompile.py`), split at the gate.

    python bench/probe_compile_gate.py TASK.py [TASK.py ...] [--device cpu|cuda] [--json OUT.json]

Per task, in this process, each task's Model built after `torch.manual_seed(42)` on its own
`get_inputs()`, compiled as the worker does: the seconds before the gate opens (dynamo, inductor and the kernels' compile: CPU
work, which holds no GPU lock in a baseline) and after it (the compiled model's first run with
inductor's autotuning, under the GPU held alone), and the eager model's first run for scale.
Tasks run one after another in one process (a worker compiles one); set TORCHINDUCTOR_CACHE_DIR
to a fresh folder for a worker's cold caches. Pick tasks whose `get_inputs()` fit the device (on
the CPU, `examples/`' tasks or `tests/fixtures/level/`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch._inductor import config

from kernelcraft.engine.worker.refcompile import gpu_gate


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"task_{path.stem}", path)
    if spec is None or spec.loader is None:
        sys.exit(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def probe(path: Path, device: str, one_thread: bool = False) -> dict[str, Any]:
    task = _load(path)
    torch.manual_seed(42)
    model = task.Model(*task.get_init_inputs()).to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        t = time.perf_counter()
        model(*inputs)
        _sync(device)
        eager_first = time.perf_counter() - t
        torch._dynamo.reset()
        gate: list[float] = []
        t = time.perf_counter()
        threads = config.patch(compile_threads=1) if one_thread else contextlib.nullcontext()
        with threads, gpu_gate(gate.append) as g:
            torch.compile(model)(*inputs)
            _sync(device)
        total = time.perf_counter() - t
    before = gate[0] if g.opened else total
    return {
        "task": str(path),
        "device": device,
        "compile_before_gate_s": round(before, 3),
        "first_run_after_gate_s": round(total - before, 3),
        "share_before_gate": round(before / total, 4) if total else None,
        "eager_first_run_s": round(eager_first, 4),
        "gate_opened": g.opened,
    }


def _short(task: str) -> str:
    """examples/softmax/task.py -> softmax/task.py."""
    return "/".join(Path(task).parts[-2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", type=Path, nargs="+")
    ap.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"]
    )
    ap.add_argument(
        "--one-thread",
        action="store_true",
        help="inductor compiles in this process, no pool of compile processes (the default starts one)",
    )
    ap.add_argument("--json", type=Path, metavar="FILE")
    args = ap.parse_args()
    rows = [probe(p, args.device, args.one_thread) for p in args.tasks]
    print(f"{'task':<44} {'before gate s':>13} {'after s':>8} {'share':>6} {'eager 1st s':>11}")
    for r in rows:
        print(
            f"{_short(r['task']):<44} {r['compile_before_gate_s']:>13.2f} {r['first_run_after_gate_s']:>8.3f} "
            f"{r['share_before_gate']:>6.1%} {r['eager_first_run_s']:>11.4f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
