"""No correct kernel beats its roofline floor: the cookbook's recorded H200 timings against the
floors the roofline gives their KernelBench tasks (`bench/cookbook_floors.py` wrote the fixture:
each task's source and its measured median)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kernelcraft.engine.checks.compare import tolerances  # noqa: E402
from kernelcraft.engine.measure.roofline import count_work, floor_of, roofline  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "floors" / "cookbook_h200.json"
DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))


def _work(row: dict[str, Any]) -> Any:
    scope: dict[str, Any] = {"__name__": "kernelbench_task"}
    exec(compile(row["source"], row["kernelbench"], "exec"), scope)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = scope["Model"](*scope["get_init_inputs"]())
        inputs = list(scope["get_inputs"]())
    return count_work(model, inputs)


@pytest.fixture(scope="module")
def floors() -> list[tuple[dict[str, Any], Any, Any]]:
    out = []
    for row in DATA["rows"]:
        work = _work(row)
        new = floor_of(work, DATA["target"], lambda d: tolerances(d)[0])
        old = roofline(DATA["target"], work.flops, work.bytes, "ieee", work.elementwise_flops)
        out.append((row, new, old))
    return out


def test_no_recorded_cookbook_timing_beats_its_roofline_floor(
    floors: list[tuple[dict[str, Any], Any, Any]],
) -> None:
    assert len(floors) >= 40
    beaten = [
        f"{row['kernelbench']}: {row['measured_us']:.1f} µs < floor {new.floor_us:.1f} µs ({new.precision})"
        for row, new, _ in floors
        if row["measured_us"] < new.floor_us
    ]
    assert not beaten, "\n".join(beaten)


def test_the_fp32_cuda_core_floor_was_beaten_by_the_gemm_kernels(
    floors: list[tuple[dict[str, Any], Any, Any]],
) -> None:
    # What the test above guards against: the old floor (every matmul FLOP at the fp32 CUDA-core
    # peak) was beaten by every tensor-core GEMM, the three issue 41 reported among them.
    beaten_old = {row["kernelbench"] for row, _, old in floors if row["measured_us"] < old.floor_us}
    assert {
        "level2/28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply",
        "level2/53_Gemm_Scaling_Hardtanh_GELU",
        "level1/10_3D_tensor_matrix_multiplication",
        "level1/1_Square_matrix_multiplication_",
    } <= beaten_old
    for row, new, old in floors:
        if row["kernelbench"] in beaten_old and new.bound == "compute":
            assert new.precision == "bf16x3" and new.floor_us == pytest.approx(
                old.floor_us * 67.0 / (989.5 / 3), rel=0.05
            )
