"""The commit-msg hook and CI's check hold subjects to 72 characters (tools/check_commit_subjects.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "check_commit_subjects.py"


def _hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run([sys.executable, str(TOOL), str(path)], capture_output=True, text=True)


def test_the_hook_refuses_a_subject_over_72_characters_and_takes_one_at_72(tmp_path: Path) -> None:
    long = _hook(tmp_path, "x" * 73 + "\n\nbody\n")
    assert long.returncode == 1 and "73 characters" in long.stdout
    assert _hook(tmp_path, "y" * 72 + "\n\n" + "a long body line " * 20 + "\n").returncode == 0
    assert _hook(tmp_path, "# a comment git strips\nshort subject\n").returncode == 0


def test_every_commit_since_the_rule_has_a_short_subject() -> None:
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout
