"""Roofline floors: FLOPs and bytes counted from the reference, peaks from the target registry, the
matmul work at the fastest precision that meets the task's tolerance."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from kernelcraft.base.errors import UsageError  # noqa: E402
from kernelcraft.base.targets import REGISTRY, facts  # noqa: E402
from kernelcraft.engine.measure.roofline import (  # noqa: E402
    PRECISIONS,
    count_work,
    fastest_precision,
    physical_floor_us,
    roofline,
    roofline_for,
)


def kernelcraft_rtol(dtype: torch.dtype) -> float:
    from kernelcraft.engine.checks.compare import tolerances

    return tolerances(dtype)[0]


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


class LinearRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.linear(x))


def test_an_elementwise_add_counts_one_flop_per_output_and_three_tensors_of_bytes() -> None:
    work = count_work(Add(), [torch.randn(8, 8), torch.randn(8, 8)])
    assert work.flops == 64 and work.elementwise_flops == 64
    assert work.bytes == 3 * 64 * 4
    assert work.dtype == "fp32"


def test_a_softmax_counts_one_flop_per_input_element() -> None:
    work = count_work(Softmax(), [torch.randn(8, 10)])
    assert work.flops == 80
    assert work.bytes == 2 * 80 * 4


def test_a_linear_counts_matmul_flops_parameters_and_the_activation() -> None:
    model = LinearRelu().to(torch.bfloat16)
    work = count_work(model, [torch.randn(16, 64, dtype=torch.bfloat16)])
    assert work.flops == 2 * 16 * 64 * 32 + 16 * 32  # matmul + relu (FlopCounterMode ignores the bias add)
    assert work.elementwise_flops == 16 * 32
    assert work.bytes == 2 * (16 * 64 + 64 * 32 + 32 + 16 * 32)
    assert work.dtype == "bf16"


def test_a_large_add_is_memory_bound_at_the_measured_bandwidth() -> None:
    n = 8192 * 8192
    r = roofline("sm_90a", flops=n, bytes=3 * 4 * n)
    assert r.bound == "memory" and r.peak_gbps == 4490.0
    assert r.floor_us == pytest.approx(3 * 4 * n / 4.49e12 * 1e6)


def test_a_large_bf16_matmul_is_compute_bound_at_the_tensor_core_rate() -> None:
    n = 4096
    r = roofline("gfx942", flops=2 * n**3, bytes=3 * 2 * n * n, precision_name="bf16")
    assert r.bound == "compute"
    assert r.peak_tflops == 1307.4
    assert r.floor_us == pytest.approx(2 * n**3 / 1307.4e12 * 1e6)


def test_elementwise_flops_run_at_the_vector_rate() -> None:
    r = roofline("sm_80", flops=19.5e12, bytes=0, precision_name="bf16", elementwise_flops=19.5e12)
    assert r.floor_us == pytest.approx(1e6)


def test_an_fp32_task_at_its_tolerance_gets_bf16x3_at_a_third_of_the_bf16_peak() -> None:
    # 1e-4 (kernelcraft's fp32 tolerance): tf32 and bf16 (1e-3, 4e-3) are too coarse, bf16x3 fits
    # and beats tf32x3 (a third of the tf32 peak) and ieee (the fp32 CUDA-core peak).
    p = fastest_precision("sm_90a", 1e-4)
    assert p.name == "bf16x3" and p.rate(facts("sm_90a")) == pytest.approx(989.5 / 3)
    assert fastest_precision("sm_90a", 5e-2).name == "bf16"  # AdaExplore's looser rule
    assert fastest_precision("sm_89", 1e-2, prefer="fp16").name == "fp16"
    assert fastest_precision("sm_89", 1e-1).name == "fp8"
    assert fastest_precision("sm_90a", 1e-9).name == "ieee"  # nothing fits: the exact unit


@pytest.mark.parametrize("target", list(REGISTRY))
def test_no_precision_that_meets_a_tolerance_is_faster_than_the_chosen_one(target: str) -> None:
    t = facts(target)
    for rtol in (1e-7, 1e-4, 1e-3, 1e-2, 5e-2, 1e-1):
        best = fastest_precision(target, rtol)
        assert best.roundoff <= rtol or best.name == "ieee"
        for p in PRECISIONS:
            if p.roundoff <= rtol and p.rate(t):
                assert (p.rate(t) or 0) <= (best.rate(t) or 0)


def test_the_bmm_instancenorm_floor_counts_bf16x3_not_the_fp32_vector_peak() -> None:
    # KernelBench level 2, 28_BMM_InstanceNorm: a 1024 x 8192 x 8192 fp32 linear, measured at
    # 849 µs on the H200; the fp32 CUDA-core floor (2052 µs) was beaten 2.4 times.
    flops = 2 * 1024 * 8192 * 8192
    old = roofline("sm_90a", flops=flops, bytes=0, precision_name="ieee")
    new = roofline("sm_90a", flops=flops, bytes=0, precision_name=fastest_precision("sm_90a", 1e-4).name)
    assert old.floor_us == pytest.approx(2051, abs=2) and new.precision == "bf16x3"
    assert new.floor_us == pytest.approx(flops / (989.5e12 / 3) * 1e6) and new.floor_us < 849


@pytest.mark.parametrize("target", list(REGISTRY))
def test_the_physical_floor_is_never_above_the_roofline_floor(target: str) -> None:
    for flops, nbytes in ((1e12, 1e6), (1e6, 1e9), (5e11, 4e9)):
        for p in PRECISIONS:
            if p.rate(facts(target)) is None:
                continue
            r = roofline(target, flops=flops, bytes=nbytes, precision_name=p.name)
            assert physical_floor_us(flops, nbytes, facts(target)) <= r.floor_us * (1 + 1e-12)


def test_unknown_targets_and_precisions_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="sm_75"):
        roofline("sm_75", 1.0, 1.0)
    with pytest.raises(UsageError, match="fp8"):
        roofline("sm_80", 1.0, 1.0, "fp8")
    with pytest.raises(UsageError, match="ieee"):
        roofline("sm_80", 1.0, 1.0, "fp4")


def test_roofline_for_runs_the_reference_once_and_picks_the_precision_by_tolerance() -> None:
    r = roofline_for(Add(), [torch.randn(4, 4), torch.randn(4, 4)], "sm_90a", kernelcraft_rtol)
    assert r.flops == 16 and r.bytes == 3 * 16 * 4 and r.floor_us > 0
    assert r.precision == "bf16x3" and r.rtol == 1e-4
    model = LinearRelu().to(torch.bfloat16)
    r = roofline_for(model, [torch.randn(16, 64, dtype=torch.bfloat16)], "sm_90a", kernelcraft_rtol)
    assert r.precision == "bf16" and r.rtol == 1e-2 and r.elementwise_flops == 16 * 32
