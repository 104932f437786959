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

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"


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


def test_the_sweep_removes_what_a_worker_left_in_shared_memory_and_keeps_what_is_held(tmp_path: Path) -> None:
    """A GPU worker shares the machine's /dev/shm (CUDA IPC): after it, the parent removes what it
    made there that no process holds (engine/box/shmsweep.py)."""
    import time

    from kernelcraft.engine.box import shmsweep

    old = tmp_path / "before-the-worker"
    old.write_bytes(b"x")
    time.sleep(0.6)
    since = time.time()
    junk = tmp_path / "kcjunk"
    junk.write_bytes(b"\0" * 4096)
    folder = tmp_path / "kcdir"
    (folder / "inner").mkdir(parents=True)
    (folder / "inner" / "f").write_bytes(b"y")
    in_use = tmp_path / "torch_ipc_refcount"
    in_use.write_bytes(b"z")
    with open(in_use, "rb"):
        removed = shmsweep.sweep(since, os.geteuid(), root=tmp_path)
    assert sorted(removed) == ["kcdir", "kcjunk"], removed
    assert old.exists() and in_use.exists() and not junk.exists() and not folder.exists()
    assert shmsweep.sweep(since, os.geteuid() + 1, root=tmp_path) == []  # another owner's: never


@pytest.mark.slow
@pytest.mark.gpu
def test_gpu_a_worker_leaves_nothing_in_the_machines_dev_shm(gpu_submit, job_for) -> None:
    token = f"kcprobe-{secrets.token_hex(6)}"
    source = (PROBES / "setuid_root.py").read_text().replace('\nTOKEN = ""', f"\nTOKEN = {token!r}", 1)
    v = gpu_submit(job_for(TASK, source, trials=1))
    assert v is not None and v.correct, v
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith(token)]


def test_a_checkout_in_a_closed_directory_has_its_packages_bound_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkout cloned into a 0700 directory (mktemp -d) and on sys.path: the cover over it must
    bring back its packages, or a worker that became nobody cannot import the rest of kernelcraft."""
    import shutil
    import tempfile

    from kernelcraft.engine.box import mounts

    tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own base may be closed itself
    checkout = tmp_path / "ci"
    (checkout / "kernelcraft").mkdir(parents=True)
    (checkout / ".git").mkdir()
    (checkout / "setup.py").write_text("")
    (checkout / "secret.key").write_text("k")
    (checkout / "secret.key").chmod(0o600)
    checkout.chmod(0o700)
    tmp_path.chmod(0o755)
    monkeypatch.setattr(mounts.sandbox, "python_dirs", lambda: [])
    monkeypatch.setattr("sys.path", [str(checkout)])
    try:
        closed = mounts._closed_dirs(None)
    finally:
        shutil.rmtree(tmp_path)
    assert closed.get(str(checkout.resolve())) == [
        str(checkout.resolve() / "kernelcraft"),
        str(checkout.resolve() / "setup.py"),
    ], closed
