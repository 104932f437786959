"""Launch interception: which kernels a forward launches, with which types, without running them.

Normal-mode tests run in this process (Triton imported without TRITON_INTERPRET; nothing
executes, so no GPU is needed). Interpreter-mode tests run in a subprocess, because the flag must
be set before kernels are decorated and must not leak into other tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from kernelcraft.engine.watch.launches import in_triton_launch, intercept_launches  # noqa: E402

KERNELS = Path(__file__).parents[2] / "fixtures" / "kernels" / "launch_kernels.py"
REPO = Path(__file__).resolve().parents[3]


def _load_kernels() -> Any:
    spec = importlib.util.spec_from_file_location("kc_test_launch_kernels", KERNELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def k() -> Any:
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("normal-mode interception tests need TRITON_INTERPRET unset")
    return _load_kernels()


def test_a_plain_launch_is_recorded_with_types_constexprs_and_grid_without_running(k: Any) -> None:
    x, y = torch.ones(100), torch.ones(100)
    out = torch.full((100,), 7.0)
    with intercept_launches(execute=False) as rec:
        result = k.add_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, out, 100, BLOCK=32)
    assert result is None
    assert rec.count == 1
    (launch,) = rec.launches
    assert launch.name == "add_kernel"
    assert launch.signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    assert launch.constexprs == {"BLOCK": 32}
    assert launch.grid == [4, 1, 1]
    assert torch.equal(out, torch.full((100,), 7.0)), "the kernel body must not run"
    assert rec.records[0].interpreted is False


def test_argument_types_follow_dtypes_and_python_scalars(k: Any) -> None:
    x = torch.ones(64, dtype=torch.float16)
    out = torch.empty(64, dtype=torch.float16)
    with intercept_launches() as rec:
        k.scale_kernel.fn[(1,)](x, out, 2**40, 0.5, BLOCK=64, num_warps=8, num_stages=2)
    (launch,) = rec.launches
    assert launch.signature == {"x_ptr": "*fp16", "out_ptr": "*fp16", "n": "i64", "alpha": "fp32"}
    assert (launch.num_warps, launch.num_stages) == (8, 2)


def test_every_autotune_config_is_recorded_without_benchmarking(k: Any) -> None:
    x, out = torch.ones(100), torch.empty(100)
    with intercept_launches() as rec:
        k.scale_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, out, 100, 2.0)
    assert [(r.launch.constexprs["BLOCK"], r.launch.num_warps) for r in rec.records] == [(64, 2), (128, 4)]
    assert [r.launch.grid[0] for r in rec.records] == [2, 1]
    assert all(r.inside_autotune and r.autotune_configs == 2 for r in rec.records)


def test_heuristics_values_reach_the_recorded_constexprs(k: Any) -> None:
    x, out = torch.ones(100), torch.empty(100)
    with intercept_launches() as rec:
        k.negate_kernel[(1,)](x, out, 100)
    assert rec.launches[0].constexprs == {"BLOCK": 128}


def test_warmup_is_not_a_launch(k: Any) -> None:
    x = torch.ones(16)
    with intercept_launches() as rec:
        k.add_kernel.warmup(x, x, x, 16, BLOCK=16, grid=(1,))
    assert rec.count == 0 and rec.records == []


def test_interception_is_undone_after_the_block_and_is_not_reentrant(k: Any) -> None:
    from triton.runtime.jit import JITFunction

    original = JITFunction.__dict__["run"]
    with intercept_launches():
        assert JITFunction.__dict__["run"] is not original
        with pytest.raises(RuntimeError, match="not re-entrant"):
            with intercept_launches():
                pass
    assert JITFunction.__dict__["run"] is original
    assert not in_triton_launch()


def test_a_bad_launch_argument_raises_like_triton_does(k: Any) -> None:
    x = torch.ones(16)
    with intercept_launches(), pytest.raises(KeyError, match="not_an_option"):
        k.add_kernel[(1,)](x, x, x, 16, BLOCK=16, not_an_option=3)


INTERPRETER_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys
    import torch, triton
    from kernelcraft.engine.watch.launches import intercept_launches, in_triton_launch
    spec = importlib.util.spec_from_file_location("kc_interp_kernels", sys.argv[1])
    k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)
    x, y = torch.arange(100, dtype=torch.float32), torch.ones(100)
    out = torch.zeros(100)
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = []
    class Watch(TorchDispatchMode):  # the interpreter's own copies dispatch during the launch
        @classmethod
        def _should_skip_dynamo(cls):
            return False  # the handler called directly, as the op recorder's is
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(in_triton_launch())
            return func(*args, **(kwargs or {}))
    report = {}
    with intercept_launches(execute=True, autotune="first") as rec:
        with Watch():
            k.add_kernel[(4,)](x, y, out, 100, BLOCK=32)
        report["add_correct"] = bool(torch.equal(out, x + y))
        k.scale_kernel[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, out, 100, 3.0)
        report["scale_correct"] = bool(torch.equal(out, x * 3.0))
    report["count"] = rec.count
    report["names"] = rec.kernel_names
    report["interpreted"] = [r.interpreted for r in rec.records]
    report["signature"] = rec.launches[0].signature
    report["inside_during_launch"] = sorted(set(seen))
    report["inside_after"] = in_triton_launch()
    untouched = torch.full((100,), 5.0)
    with intercept_launches(execute=False) as rec2:
        k.double_kernel[(1,)](x, untouched, 100, BLOCK=128)
    report["not_executed"] = bool(torch.equal(untouched, torch.full((100,), 5.0)))
    report["recorded_without_executing"] = [la.name for la in rec2.launches]
    print("REPORT" + json.dumps(report))
    """
)


@pytest.mark.slow
def test_in_the_interpreter_launches_run_are_counted_and_flagged_as_inside() -> None:
    pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": pythonpath}
    proc = subprocess.run(
        [sys.executable, "-c", INTERPRETER_SCRIPT, str(KERNELS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    report = json.loads(lines[0][len("REPORT") :])
    assert report["add_correct"] and report["scale_correct"]
    assert report["count"] == 2
    assert report["names"] == ["add_kernel", "scale_kernel"]
    assert report["interpreted"] == [True, True]
    assert report["signature"] == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    assert report["inside_during_launch"] == [True]
    assert report["inside_after"] is False
    assert report["not_executed"] is True
    assert report["recorded_without_executing"] == ["double_kernel"]
