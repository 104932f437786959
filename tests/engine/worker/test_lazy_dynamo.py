"""A one-off command's verify does without torch._dynamo (1-3 s of a fresh process's first verdict),
and the integrity check still tells dynamo's own rewrap of torch.manual_seed from a candidate's.

The harness parts run in a fresh Python: this test process has imported dynamo long ago."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcraft.cli.common import EXIT_NEGATIVE, EXIT_OK

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "softmax"

PROBE = r"""
import json, sys, types, importlib.util
import torch, triton, triton.language
from kernelcraft.engine.watch import guard, knockout
from kernelcraft.engine.worker import sizing

spec = importlib.util.spec_from_file_location("task", sys.argv[1])
task = importlib.util.module_from_spec(spec); spec.loader.exec_module(task)
out = {}
integrity = guard.Integrity()
with guard.OpRecorder(frozenset()):
    torch.ones(4).exp()
with knockout.knocked_out():
    torch.empty(4)
sizes = sizing.measure(task, interpret=False, quick=True)
out["outputs_measured_quick"] = sizes["outputs_measured"]
out["dynamo_before"] = "torch._dynamo" in sys.modules
import torch._dynamo
out["changed_after_dynamo"] = integrity.changed()
out["outputs_measured_after"] = sizing.measure(task, interpret=False, quick=True)["outputs_measured"]

genuine = torch.manual_seed
original = torch.random.manual_seed
wrapper = torch._disable_dynamo(original)
forged = {
    "a lambda": lambda seed: None,
    "the wrapper of another function": torch._disable_dynamo(lambda seed: None),
    "the wrapper's code with other globals": types.FunctionType(
        genuine.__code__, {"__builtins__": __builtins__}, "inner", None, genuine.__closure__
    ),
}
out["a fresh wrapper of the original"] = (setattr(torch, "manual_seed", wrapper), integrity.changed())[1]
for name, fake in forged.items():
    torch.manual_seed = fake
    out[name] = integrity.changed()
# the wrapper's code with globals of its own, which sys.modules then names as torch's module
own = dict(vars(sys.modules["torch._compile"]))
holder = type("Holder", (), {})()
holder.__dict__ = own
sys.modules["torch._compile"] = holder
torch.manual_seed = types.FunctionType(genuine.__code__, own, "inner", None, genuine.__closure__)
out["the wrapper's code with globals sys.modules was made to name"] = integrity.changed()
torch.manual_seed = genuine
print(json.dumps(out))
"""


# A KernelBench level-1 style task: factory-made inputs and no parameters, which the meta device
# builds in C++ (arithmetic there, `torch.randn(n) * 4`, runs a Python decomposition: dynamo).
SMALL_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return []
"""


def test_the_candidates_harness_and_a_small_tasks_sizing_leave_dynamo_unimported(tmp_path: Path) -> None:
    task = tmp_path / "task.py"
    task.write_text(SMALL_TASK)
    p = subprocess.run(
        [sys.executable, "-c", PROBE, str(task)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)
    assert got["dynamo_before"] is False, "the op recorder, the knockout or the sizing imported dynamo"
    assert got["outputs_measured_quick"] is False  # small: its outputs were left unmeasured
    assert got["outputs_measured_after"] is True  # with dynamo loaded, forward on meta costs nothing
    # dynamo's import rewrapped torch.manual_seed: that is no change; a replacement of it is
    assert got["changed_after_dynamo"] == []
    assert got["a fresh wrapper of the original"] == []
    for name in (
        "a lambda",
        "the wrapper of another function",
        "the wrapper's code with other globals",
        "the wrapper's code with globals sys.modules was made to name",
    ):
        assert got[name] == ["torch.manual_seed"], (name, got[name])


def _verify(tmp_path: Path, name: str, head: str) -> subprocess.CompletedProcess[str]:
    cand = tmp_path / name
    cand.write_text(head + (EXAMPLE / "seed.py").read_text())
    return subprocess.run(
        [sys.executable, "-m", "kernelcraft", "verify", str(EXAMPLE / "task.py"), str(cand), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "KERNELCRAFT_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)},
    )


@pytest.mark.slow
def test_a_candidate_that_imports_dynamo_passes_and_one_that_swaps_the_seed_function_is_caught(
    tmp_path: Path,
) -> None:
    # `kernelcraft verify` starts its workers without dynamo; a candidate may import it (torch.compile,
    # a custom op), which rewraps torch.manual_seed as dynamo does.
    ok = _verify(tmp_path, "imports_dynamo.py", "import torch._dynamo\n")
    assert ok.returncode == EXIT_OK, ok.stdout[-2000:] + ok.stderr[-2000:]
    swap = (
        # setattr under another name: once past the static rules, now refused by them as an alias
        # (builtin-alias); the swap itself is the guard's (the in-process checks above)
        "import torch\nput = setattr\nput(torch, 'manual_seed', lambda seed: None)\n"
    )
    swapped = _verify(tmp_path, "swaps_seed.py", swap)
    assert swapped.returncode == EXIT_NEGATIVE, swapped.stdout[-2000:]
    verdict = json.loads(swapped.stdout)
    assert verdict["failure_class"] == "forbidden_construct", verdict
    assert verdict["evidence"]["op"] == "setattr", verdict["evidence"]
