"""Launch discovery sees the GPU's way (watch/fakecuda.py): meta tensors report a CUDA device, so
`compile` compiles the kernels a forward launches only on CUDA, and names one that fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelcraft.engine.watch.fakecuda import looks_cuda

ROOT = Path(__file__).parents[3]
FIXTURES = ROOT / "tests/fixtures/devbranch"


def test_meta_tensors_report_cuda_inside_and_meta_outside_and_cuda_allocations_are_meta() -> None:
    with torch.device("meta"):
        lin = torch.nn.Linear(8, 16)
        x = torch.empty(4, 8)
    with looks_cuda():
        assert x.device == torch.device("cuda", 0) and x.is_cuda and x.device.type == "cuda"
        assert not x.is_meta and not x.is_cpu and x.get_device() == 0
        y = lin(x)
        assert y.is_cuda and y.shape == (4, 16)
        out = torch.empty(3, device=x.device, dtype=x.dtype)
        assert out.is_cuda and torch.zeros(2, device="cuda").is_cuda and y.to("cuda").cuda().is_cuda
        assert not torch.ones(2).is_cuda  # a CPU tensor stays a CPU tensor
    assert x.device.type == "meta" and out.device.type == "meta"


@pytest.mark.slow
def test_compile_names_the_kernel_only_the_gpus_way_launches_when_it_fails_to_compile() -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelcraft",
            "compile",
            str(FIXTURES / "double_task.py"),
            str(FIXTURES / "double_gpu_broken.py"),
            "--device",
            "cpu",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    out = json.loads(p.stdout)
    assert not out["ok"], p.stdout
    assert out["shapes"].startswith("get_inputs() on the meta device, seen as CUDA")
    assert [la["name"] for la in out["launches"]] == ["double_fast"]
    assert "double_fast" in p.stdout and "undefined_name" in p.stdout


def test_cpu_tensors_say_cuda_only_to_code_under_the_candidates_folder(tmp_path: Path) -> None:
    """The CPU trials of a forward with no CPU way (`assert x.is_cuda`): the candidate's code sees
    cuda:0 and its CUDA allocations land on the CPU; the harness's code (the replay's tape, the
    launch records) reads inside the same forward where each tensor really is."""
    (tmp_path / "cand_mod.py").write_text(
        "import torch\n"
        "def forward(x):\n"
        "    assert x.is_cuda and x.device.type == 'cuda' and not x.is_cpu and x.get_device() == 0\n"
        "    y = torch.empty(x.shape, device='cuda').copy_(x.cuda())\n"
        "    return y, y.is_cuda, x.to(x.device).is_cuda\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import cand_mod  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    x = torch.arange(3.0)
    with looks_cuda("cpu", tmp_path):
        y, y_cuda, moved_cuda = cand_mod.forward(x)
        harness_sees = (x.device.type, x.is_cuda, y.device.type)
    assert y_cuda and moved_cuda and harness_sees == ("cpu", False, "cpu")
    assert torch.equal(y, x) and not x.is_cuda


def test_the_gpu_way_answers_torch_cudas_device_facts_and_tritons_driver_as_one_h200_then_puts_them_back(
    tmp_path: Path,
) -> None:
    """Triton's tutorials start with `DEVICE = driver.active.get_active_torch_device()` (on the CPU:
    "0 active drivers"); persistent kernels size their grid by the SM count."""
    from triton.runtime import driver

    from kernelcraft.engine.watch.fakecuda import gpu_way

    saved = torch.cuda.get_device_properties, torch.cuda.device, driver._active
    with gpu_way("cpu", tmp_path):
        assert torch.cuda.get_device_properties(0).multi_processor_count == 132
        assert driver.active.utils.get_device_properties(0)["multiprocessor_count"] == 132
        assert driver.active.get_active_torch_device() == torch.device("cuda", 0)
        with torch.cuda.device(torch.device("cuda", 0)):
            torch.cuda.synchronize()
        assert torch.zeros(2, device=driver.active.get_active_torch_device()).device.type == "cpu"
    assert (torch.cuda.get_device_properties, torch.cuda.device, driver._active) == saved
