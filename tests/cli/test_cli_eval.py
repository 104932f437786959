"""`kernelcraft verify|compile|profile` exit codes and JSON, through a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test runs the CLI in a subprocess

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "elementwise"


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelcraft", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_verify_json_passes_a_correct_candidate_with_exit_0() -> None:
    started = time.monotonic()
    p = cli("verify", str(EX / "task.py"), str(EX / "seed.py"), "--trials", "2", "--json")
    wall = time.monotonic() - started
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["correct"] is True and out["status"] == "passed" and out["interpreter"] is True
    # what the trial counts count: 2 per input set, 2 input sets
    assert (out["trials"], out["input_sets"], out["trials_total"], out["trials_passed"]) == (2, 2, 4, 4)
    # seconds: the job from the evaluator's start (workers included), the breakdown beside it
    stages = out["stage_seconds"]
    assert {"evaluator_start", "verify"} <= set(stages)
    assert out["seconds"] >= stages["evaluator_start"] + stages["verify"] and out["seconds"] < wall
    # progress off a terminal: plain lines, never back, ending at 100%
    lines = [line for line in p.stderr.splitlines() if line.startswith("[")]
    percents = [int(line[1:5].strip().rstrip("%")) for line in lines]
    assert percents == sorted(percents) and lines[-1].startswith("[100%") and lines[-1].endswith("] done")
    assert "\x1b" not in p.stderr and "trial 1 of 4 (input set 1 of 2)" in p.stderr


def test_verify_json_rejects_a_cheat_with_exit_1() -> None:
    cheats = ROOT / "tests" / "cheats"
    p = cli("verify", str(cheats / "task_scale.py"), str(cheats / "pytorch_only.py"), "--json")
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["correct"] is False and out["status"] == "pytorch_fallback"


def test_bad_files_exit_2_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "cand.py"
    bad.write_text("import torch\n\ndef forward(:\n")
    p = cli("verify", str(EX / "task.py"), str(bad), "--json")
    assert p.returncode == 2 and f"{bad}:3" in p.stderr
    assert json.loads(p.stdout)["error"]["kind"] == "usage"  # --json: the error as JSON too
    no_model = tmp_path / "nomodel.py"
    no_model.write_text("x = 1\n")
    p = cli("verify", str(EX / "task.py"), str(no_model))
    assert p.returncode == 2 and "ModelNew" in p.stderr
    p = cli("verify", str(tmp_path / "missing.py"), str(EX / "seed.py"))
    assert p.returncode == 2 and "no such file" in p.stderr
    p = cli("compile", str(EX / "task.py"), str(EX / "seed.py"), "--target", "sm_7x")
    assert p.returncode == 2 and "unknown target" in p.stderr


def test_compile_json_reports_each_target() -> None:
    p = cli(
        "compile",
        str(EX / "task.py"),
        str(EX / "seed.py"),
        "--target",
        "sm_80",
        "--target",
        "gfx942",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [t["target"] for t in out["targets"]] == ["sm_80", "gfx942"]
    assert all(t["ok"] and t["kernels"][0]["name"] == "gelu_residual_kernel" for t in out["targets"])
    assert out["targets"][0]["kernels"][0]["registers"] > 0


def test_allow_op_takes_the_mcp_forms_and_refuses_a_wildcard(capsys) -> None:
    from kernelcraft.cli import main
    from kernelcraft.cli.engine import _allowed_ops

    assert _allowed_ops(["aten::mm", "aten.add.Tensor", "mm"]) == ["mm", "add"]
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", "task.py", "cand.py", "--allow-op", "*"])
    assert exit_info.value.code == 2
    assert "--allow-op: '*' is not an aten op name" in capsys.readouterr().err


def test_profile_without_a_gpu_still_says_why_a_kernel_would_be_slow() -> None:
    """Issue 29: a profile says why. The matmul example's IEEE dot compiles for sm_90a to CUDA-core
    FMAs: the plain output says so, with registers and occupancy, and the JSON carries it in `why`."""
    ex = ROOT / "examples" / "matmul_epilogue"
    p = cli("profile", str(ex / "task.py"), str(ex / "seed.py"))
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("kernel linear_silu_kernel on sm_90a: "))
    assert "registers per thread" in line and "occupancy" in line
    assert "its tl.dot runs on CUDA cores, not tensor cores" in line and "'tf32x3'" in line
    out = json.loads(cli("profile", str(ex / "task.py"), str(ex / "seed.py"), "--json").stdout)
    assert out["available"] is False and out["why"] == [line]
