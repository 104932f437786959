"""Branches on the device (source/devices.py): a CPU verdict names the host code that asks where
its tensors live, and the kernels only the other way launches."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcraft.engine.source import devices

BRANCHING = """
import torch, triton, triton.language as tl

@triton.jit
def fast_kernel(x_ptr, BLOCK: tl.constexpr):
    pass

@triton.jit
def plain_kernel(x_ptr, BLOCK: tl.constexpr):
    pass

def choose(x):
    if x.device.type != "cuda":
        plain_kernel[(1,)](x, BLOCK=16)
    else:
        fast_kernel[(1,)](x, BLOCK=16)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        n = 4 if x.is_cuda else 2
        choose(x)
        return x
"""


def test_each_device_test_is_named_with_its_line_and_the_kernels_its_branches_launch() -> None:
    found = devices.branches(BRANCHING)
    assert [(line, test) for line, test, _ in found] == [(13, "x.device.type != 'cuda'"), (20, "x.is_cuda")]
    assert found[0][2] == ["plain_kernel (a kernel)", "fast_kernel (a kernel)"]
    (note,) = devices.note(BRANCHING)
    assert "line 13" in note and "fast_kernel (a kernel)" in note and "seen as CUDA), not run" in note
    (asks_torch,) = devices.note(BRANCHING.replace("x.is_cuda", "torch.cuda.is_available()"))
    assert "may take a way" in asks_torch and "Ask the tensors instead" in asks_torch


def test_a_test_for_the_interpreter_says_compile_took_the_gpus_way_and_none_says_nothing() -> None:
    cpu = BRANCHING.replace('x.device.type != "cuda"', 'x.device.type == "cpu"').replace(
        "4 if x.is_cuda else 2", "2"
    )
    (note,) = devices.note(cpu)
    assert "the GPU's way was compiled" in note
    assert devices.note("def f(x):\n    return x\n") == [] and devices.note("def (") == []


@pytest.mark.slow
def test_the_cookbooks_one_pass_softmax_is_launched_on_meta_tensors_as_on_a_gpu() -> None:
    """`compile` finds launches on meta tensors: the cookbook's softmax must take the GPU's way
    there (its one-pass kernel), not the interpreter's."""
    import importlib.util

    import torch

    from kernelcraft.engine.watch.fakecuda import looks_cuda
    from kernelcraft.engine.watch.launches import intercept_launches

    path = Path(__file__).parents[3] / "kernelcraft/knowledge/cookbook/entries/softmax/kernel.py"
    spec = importlib.util.spec_from_file_location("kc_softmax_entry", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with intercept_launches() as rec:
        module.softmax(torch.empty(4, 65536, device="meta"), dim=1)
    assert rec.kernel_names == ["softmax_one_pass_kernel"]
    with intercept_launches(execute=False) as rec, looks_cuda():  # compile's tensors: seen as CUDA
        module.softmax(torch.empty(4, 65536, device="meta"), dim=1)
    assert rec.kernel_names == ["softmax_one_pass_kernel"]
    with intercept_launches() as rec:
        module.softmax(torch.empty(4, 65536), dim=1)
    assert rec.kernel_names == ["softmax_online_kernel"]


def test_host_code_without_a_cpu_way_is_named_by_its_assertions_raises_and_cuda_allocations() -> None:
    """`assert x.is_cuda`, `if not x.is_cuda: raise`, `.cuda()`, `device="cuda"`, a `torch.cuda`
    device fact and Triton's `driver.active` have no CPU way (the trials then run the GPU's way,
    `watch/fakecuda.py`); a kernel's body, a branch that only chooses, and
    `torch.cuda.is_available()` are not such places."""
    source = (
        "import torch, triton\n"
        "@triton.jit\n"
        "def k(x_ptr):\n"
        "    assert x_ptr.is_cuda\n"
        "def f(x):\n"
        "    assert x.is_cuda, 'GPU only'\n"
        "    if x.device.type != 'cuda':\n"
        "        raise ValueError('GPU only')\n"
        "    n = 4 if x.is_cuda and torch.cuda.is_available() else 2\n"
        "    p = torch.cuda.get_device_properties(0).multi_processor_count\n"
        "    d = triton.runtime.driver.active.get_active_torch_device()\n"
        "    return torch.empty(3, device='cuda:0'), x.cuda(), x.to('cuda')\n"
    )
    assert [line for line, _ in devices.no_cpu_way(source)] == [6, 7, 10, 11, 12]
    (note,) = devices.note(source)
    assert "has no CPU way (line 6 `assert x.is_cuda, 'GPU only'`" in note and "the GPU's way" in note
    assert devices.no_cpu_way(BRANCHING) == [] and devices.no_cpu_way("def (") == []


def test_host_code_with_a_cpu_way_of_its_own_keeps_it_though_its_gpu_branch_names_cuda() -> None:
    """The cookbook's softmax: on the CPU it picks its two-pass kernel; only its GPU branch asks
    `torch.cuda` for the SM count. Run the GPU's way in the interpreter, its one-pass kernel's
    programs spin-wait on each other forever (a 120 s harness limit in CI)."""
    source = """
import torch

def chunk(x):
    if x.device.type == "cpu":
        return 0
    return torch.cuda.get_device_properties(x.device).multi_processor_count
"""
    assert devices.no_cpu_way(source) == []
    assert devices.no_cpu_way(source.replace('if x.device.type == "cpu":\n        return 0\n', "")) != []
