"""The CLI's head start (kernelcraft/engine/machine/prestart.py): a one-off evaluation's zygote starts
before the command line is read, the evaluator takes it, and nothing of it outlives the command
when nothing took it (a usage error, another device)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kernelcraft.base.knobs import EngineSettings, Knobs
from kernelcraft.engine.machine import prestart

ROOT = Path(__file__).resolve().parents[3]
CHEATS = ROOT / "tests" / "cheats"


def _left_in(tmp: Path) -> list[str]:
    """Processes whose working directory is under `tmp` (the zygote runs in its log's folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.readlink(f"/proc/{pid}/cwd").startswith(str(tmp)):
                    found.append(pid)
            except OSError:
                pass
    return found


def _kernelcraft(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCRAFT_")}
    env |= {"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), "KERNELCRAFT_HOME": str(tmp / "home")}
    return subprocess.run(
        [sys.executable, "-m", "kernelcraft", "-v", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_command_starts_its_zygote_first_and_the_evaluator_takes_it(tmp_path: Path) -> None:
    out = _kernelcraft(
        tmp_path, "verify", str(CHEATS / "task_scale.py"), str(CHEATS / "good.py"), "--device", "cpu"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "the zygote started as the command did" in out.stderr
    assert "PASSED" in out.stdout
    assert not _left_in(tmp_path) and not list(tmp_path.glob("kernelcraft-eval-*"))


def test_a_command_that_fails_before_its_evaluator_starts_leaves_nothing_behind(tmp_path: Path) -> None:
    out = _kernelcraft(tmp_path, "verify", str(tmp_path / "missing.py"), str(CHEATS / "good.py"))
    assert out.returncode == 2, out.stderr[-2000:]
    assert "missing.py" in out.stderr
    deadline = time.monotonic() + 5
    while _left_in(tmp_path) and time.monotonic() < deadline:  # killed at exit; reaped by init
        time.sleep(0.1)
    assert not _left_in(tmp_path) and not list(tmp_path.glob("kernelcraft-eval-*"))


def test_a_head_start_for_other_settings_is_ended_not_taken(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    prestart.start(["verify", "t.py", "c.py", "--device", "cpu"], Knobs())
    assert len(prestart._waiting) == 1
    head = prestart._waiting[0]
    scratch = Path(head.scratch.name)
    assert scratch.is_dir() and scratch.is_relative_to(tmp_path)
    assert prestart.take("cuda", 0, False) is None  # another device: ended
    assert not prestart._waiting and not scratch.exists()
    assert head.zygote._proc is not None and head.zygote._proc.wait(10) is not None
    # only the evaluating commands, and not for their help
    for argv in (
        ["tree", "start", "t.py"],
        ["verify", "--help"],
        ["verify", "t.py", "c.py", "--device", "tpu"],
    ):
        prestart.start(argv, Knobs())
        assert not prestart._waiting, argv
    prestart.start(["verify", "t.py", "c.py", "--device", "cpu"], Knobs(engine=EngineSettings(zygote=False)))
    assert not prestart._waiting, "the zygote switched off"
