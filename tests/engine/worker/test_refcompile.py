"""The reference's gated torch.compile (`worker/refcompile.py`): the GPU is asked for once, after
the compile and before the compiled code's first run, or before inductor benchmarks on the GPU
during the compile. On the CPU with dynamo's eager backend (the gate is dynamo's, not the backend's)."""

from __future__ import annotations

import functools
import types
from typing import Any

import pytest
import torch

from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import GpuWanted, Msg, RunCompiled, Warm
from kernelcraft.engine.worker import refcompile


class _Breaks(torch.nn.Module):
    """Forward with a graph break in the middle: dynamo compiles two frames."""

    def __init__(self, ran: list[str]) -> None:
        super().__init__()
        self.ran = ran

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        y = _mark(self.ran, y)
        return y.cos()


@torch._dynamo.disable
def _mark(ran: list[str], y: torch.Tensor) -> torch.Tensor:
    ran.append("ran")
    return y


class _Worker:
    """What `compile_reference` uses of the reference worker; its channel scripted: the job
    answers `gpu_wanted` with `answer`."""

    def __init__(self, model: torch.nn.Module, answer: dict[str, Any]) -> None:
        self.torch = types.SimpleNamespace(
            compile=functools.partial(torch.compile, backend="eager"), no_grad=torch.no_grad
        )
        self.model = model
        self.private_inputs = [torch.ones(4)]
        self.compiled: Any = None
        self.compiles = 0
        self.said: list[dict[str, Any]] = []
        self.answer = answer

    def send(self, msg: Any) -> None:
        self.said.append(msg.to_header())

    def recv(self) -> Frame:
        return Frame(self.answer)

    def sync(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    """Each test compiles afresh (dynamo keeps what it compiled per code object)."""
    torch._dynamo.reset()


def test_a_gated_compile_asks_for_the_gpu_once_after_compiling_and_before_its_first_run() -> None:
    order: list[str] = []
    with refcompile.gpu_gate(lambda s: order.append("gpu")) as gate:
        torch.compile(_Breaks(order), backend="eager")(torch.ones(4))
    assert order == ["gpu", "ran"] and gate.opened  # the second frame (after the break) asks nothing
    assert gate.open not in torch._dynamo.callback.callback_handler.end_callbacks


def test_inductor_benchmarking_during_the_compile_opens_the_gate_first() -> None:
    from torch._inductor.runtime import benchmarking

    asked: list[float] = []
    with refcompile.gpu_gate(asked.append) as gate:
        try:
            benchmarking.benchmarker.benchmark_gpu(lambda: None)
        except Exception:  # noqa: BLE001 - no GPU here: only the order matters
            pass
    assert gate.opened and len(asked) == 1
    assert "benchmark_gpu" not in vars(benchmarking.benchmarker)  # the method is the class's again


def test_the_reference_worker_says_gpu_wanted_and_runs_only_once_told() -> None:
    ran: list[str] = []
    w = _Worker(_Breaks(ran), RunCompiled().to_header())
    assert refcompile.compile_reference(w, gated=True) == Warm()
    assert [h["type"] for h in w.said] == [Msg.GPU_WANTED.value] and ran == ["ran"]
    assert GpuWanted.from_header(w.said[0]).compile_s is not None and w.compiled is not None


def test_a_process_that_compiled_before_asks_for_the_gpu_before_its_call() -> None:
    """Its Model's code may be in dynamo's cache: nothing compiles, nothing would open the gate."""
    ran: list[str] = []
    w = _Worker(_Breaks(ran), RunCompiled().to_header())
    assert refcompile.compile_reference(w, gated=True) == Warm()
    w.said.clear()
    assert refcompile.compile_reference(w, gated=True) == Warm()  # from dynamo's cache
    assert [h["type"] for h in w.said] == [Msg.GPU_WANTED.value] and ran == ["ran", "ran"]


def test_ungated_the_reference_compiles_and_runs_without_asking() -> None:
    ran: list[str] = []
    w = _Worker(_Breaks(ran), {})
    assert refcompile.compile_reference(w, gated=False) == Warm() and w.said == [] and ran == ["ran"]


@pytest.mark.gpu
def test_on_a_gpu_inductors_gated_compile_opens_once_and_computes_what_eager_does() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda()
    x = torch.randn(32, 64, device="cuda")
    asked: list[float] = []
    with torch.no_grad(), refcompile.gpu_gate(asked.append) as gate:
        out = torch.compile(model)(x)
    assert gate.opened and len(asked) == 1 and asked[0] > 0
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
