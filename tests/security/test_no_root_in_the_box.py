"""Threat: a worker keeps root, or leaves something behind in a tmpfs it shares with the machine (a
setuid-root file, /dev/shm filled past its memory). Workers run as nobody wherever they can, a
Python under a directory closed to others (/root) included: their mount namespace covers that
directory with an empty tmpfs and binds back only what they need, read-only. A CPU worker's
/dev/shm is a tmpfs of its own, nosuid, nodev, capped, gone with it (docs/security.md)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

PROBES = Path(__file__).parent / "probes"
TASK = Path(__file__).parents[1] / "cheats" / "task_scale.py"


@pytest.mark.slow
def test_worker_never_runs_as_root_and_leaves_nothing_in_dev_shm(evaluator, job_for) -> None:
    if os.geteuid() != 0:
        pytest.skip("the server runs as an ordinary user here: its workers never had root")
    token = f"kcprobe-{secrets.token_hex(6)}"
    source = (PROBES / "setuid_root.py").read_text().replace('\nTOKEN = ""', f"\nTOKEN = {token!r}", 1)
    result = evaluator.submit(job_for(TASK, source, trials=1))
    v = result.verify
    assert v is not None and v.correct, result
    assert not any("runs as root" in n for n in v.notes), v.notes
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith(token)]
