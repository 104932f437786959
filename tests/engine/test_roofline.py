"""Roofline floors: FLOPs and bytes counted from the reference, peaks from named datasheets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from kernelcraft.base.errors import UsageError  # noqa: E402
from kernelcraft.engine.measure.roofline import PEAKS, count_work, peak, roofline, roofline_for  # noqa: E402


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


def test_a_large_add_is_memory_bound_at_the_datasheet_and_measured_bandwidth() -> None:
    n = 8192 * 8192
    datasheet = roofline("sm_90a", flops=n, bytes=3 * 4 * n, dtype="fp32")
    measured = roofline("h200-measured", flops=n, bytes=3 * 4 * n, dtype="fp32")
    assert datasheet.bound == "memory" and measured.bound == "memory"
    assert datasheet.floor_us == pytest.approx(3 * 4 * n / 4.8e12 * 1e6)
    assert measured.floor_us == pytest.approx(3 * 4 * n / 4.3e12 * 1e6)


def test_a_large_bf16_matmul_is_compute_bound_at_the_tensor_core_rate() -> None:
    n = 4096
    r = roofline("gfx942", flops=2 * n**3, bytes=3 * 2 * n * n, dtype="bf16")
    assert r.bound == "compute"
    assert r.peak_tflops == 1307.4
    assert r.floor_us == pytest.approx(2 * n**3 / 1307.4e12 * 1e6)


def test_elementwise_flops_run_at_the_vector_rate() -> None:
    r = roofline("sm_80", flops=19.5e12, bytes=0, dtype="bf16", elementwise_flops=19.5e12)
    assert r.floor_us == pytest.approx(1e6)


def test_every_target_has_fp32_and_bf16_peaks_and_unknown_ones_are_usage_errors() -> None:
    for name in ("sm_80", "sm_89", "sm_90a", "sm_100", "gfx942", "h200-measured"):
        p = PEAKS[name]
        assert p.gbps > 0 and p.tflops["fp32"] > 0 and p.tflops["bf16"] > p.tflops["fp32"] and p.source
    assert peak("H200").name == "H200 SXM"
    with pytest.raises(UsageError):
        peak("sm_75")
    with pytest.raises(UsageError):
        roofline("sm_80", 1.0, 1.0, "fp8")


def test_roofline_for_runs_the_reference_once() -> None:
    r = roofline_for(Add(), [torch.randn(4, 4), torch.randn(4, 4)], "sm_90a")
    assert r.flops == 16 and r.bytes == 3 * 16 * 4 and r.floor_us > 0
