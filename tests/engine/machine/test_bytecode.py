"""The bytecode cache for a Python that keeps none (kernelcraft/base/bytecode.py).

Each case runs a fresh Python whose `torch` is a small package of ours with no bytecode, as torch
is on a machine whose image sets PYTHONDONTWRITEBYTECODE and installed it without any."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROBE = """
import json, os, sys
from kernelcraft.base import bytecode, knobs
settings = knobs.settings()  # this probe's entry point
used = bytecode.use_cache(settings)
import torch
env = {"PYTHONDONTWRITEBYTECODE": "1"}
bytecode.add_to_env(env, settings)
print(json.dumps({"used": str(used) if used else None, "prefix": sys.pycache_prefix, "child": env}))
"""


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("VALUE = 1\n")
    return site


def _probe(site: Path, home: Path, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELCRAFT_"))}
    base |= {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "KERNELCRAFT_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=base | env, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(out.stdout)


def test_a_python_that_writes_no_bytecode_keeps_it_in_kernelcrafts_cache(
    fake_torch: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    got = _probe(fake_torch, home, PYTHONDONTWRITEBYTECODE="1")
    cache = home / "cache" / "pycache"
    assert got["used"] == str(cache) and got["prefix"] == str(cache)
    assert oct(cache.stat().st_mode & 0o777) == "0o711"  # entered by workers, listed by nobody else
    # torch's bytecode went to the cache, none beside its source; a child is told the same
    assert list(cache.rglob("torch/__init__.*.pyc")), sorted(cache.rglob("*"))
    assert not (fake_torch / "torch" / "__pycache__").exists()
    assert got["child"] == {"PYTHONPYCACHEPREFIX": str(cache)}


def test_workers_may_enter_the_cache_only_where_its_folders_are_closed_to_others_writes(
    fake_torch: Path, tmp_path: Path
) -> None:
    # Under a umask of 0 the folders Python makes in the cache are anyone's to write: no worker
    # (nor anyone else) may enter it then, or a candidate could leave bytecode for the next zygote.
    home = tmp_path / "home"
    cache = home / "cache" / "pycache"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELCRAFT_"))}
    base |= {
        "PYTHONPATH": os.pathsep.join([str(fake_torch), str(REPO)]),
        "KERNELCRAFT_HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for umask, mode in ((0, "0o700"), (0o022, "0o711"), (0o002, "0o700")):
        out = subprocess.run(
            [sys.executable, "-c", PROBE],
            env=base,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda m=umask: os.umask(m),  # type: ignore[misc]
        )
        assert out.returncode == 0, out.stderr
        assert oct(cache.stat().st_mode & 0o777) == mode, umask
        if umask == 0:  # what Python wrote under that umask is anyone's to write...
            assert any(p.stat().st_mode & 0o002 for p in cache.rglob("*"))
    # ...until the folder is opened to workers (umask 022 above): then nothing in it is
    assert not [p for p in cache.rglob("*") if p.stat().st_mode & 0o022 and not p.is_symlink()]


def test_the_cache_is_left_out_where_python_or_the_user_needs_none(fake_torch: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    # the user's own prefix, and the switch
    mine = str(tmp_path / "mine")
    got = _probe(fake_torch, home, PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=mine)
    assert got["used"] is None and got["prefix"] == mine and got["child"] == {"PYTHONDONTWRITEBYTECODE": "1"}
    got = _probe(fake_torch, home, PYTHONDONTWRITEBYTECODE="1", KERNELCRAFT_BYTECODE_CACHE="off")
    assert got["used"] is None and got["prefix"] is None
    # a Python that writes bytecode beside the sources writes torch's there itself; then it is there
    got = _probe(fake_torch, home)
    assert got["used"] is None and (fake_torch / "torch" / "__pycache__").is_dir()
    got = _probe(fake_torch, home, PYTHONDONTWRITEBYTECODE="1")
    assert got["used"] is None, "torch's own bytecode would be hidden by a prefix"
    assert not (home / "cache" / "pycache").exists()


def test_the_evaluators_workers_get_the_cache_in_their_environment(fake_torch: Path, tmp_path: Path) -> None:
    probe = (
        "import json; from kernelcraft.base import knobs; from kernelcraft.engine.machine.pool import base_env; "
        "e = base_env('cpu', None, True, lazy=True, settings=knobs.settings()); print(json.dumps([e.get('PYTHONPYCACHEPREFIX'), "
        "e.get('PYTHONDONTWRITEBYTECODE'), e.get('KERNELCRAFT_WORKER_IMPORTS')]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELCRAFT_"))}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(fake_torch), str(REPO)]),
        "KERNELCRAFT_HOME": str(tmp_path / "home"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # what most tasks' sizing imports, the zygote imports from that cache (workers only read it)
    assert json.loads(out.stdout) == [str(tmp_path / "home" / "cache" / "pycache"), None, "lazy-inductor"]


def test_the_command_keeps_its_own_modules_bytecode_there_before_importing_them(
    fake_torch: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELCRAFT_"))}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(fake_torch), str(REPO)]),
        "KERNELCRAFT_HOME": str(tmp_path / "home"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "kernelcraft", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    cache = tmp_path / "home" / "cache" / "pycache"
    assert list(cache.rglob("kernelcraft/cli/__init__.*.pyc")), sorted(cache.rglob("*.pyc"))[:5]


@pytest.mark.slow
def test_workers_write_no_bytecode_for_the_tasks_and_candidates_they_import(tmp_path: Path) -> None:
    # Box off (it would refuse the writes anyway): a worker that could write still does not.
    prefix = tmp_path / "pycache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELCRAFT_"))}
    env |= {
        "PYTHONPATH": str(REPO),
        "PYTHONPYCACHEPREFIX": str(prefix),
        "KERNELCRAFT_HOME": str(tmp_path / "home"),
        "KERNELCRAFT_SANDBOX": "off",
    }
    cheats = REPO / "tests" / "cheats"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelcraft",
            "verify",
            str(cheats / "task_scale.py"),
            str(cheats / "good.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-1000:] + out.stderr[-2000:]
    assert list(prefix.rglob("kernelcraft/engine/worker/main.*.pyc")), "the zygote writes to the prefix"
    assert not list(prefix.rglob("kernelcraft_task*.pyc")) and not list(prefix.rglob("kernelcraft_cand*.pyc"))


def test_a_worker_that_left_root_reads_the_cache_through_the_handle_it_kept(tmp_path: Path) -> None:
    # The cache lives in the user's home, under a folder closed to others (/root on the H200):
    # a worker opens it before it becomes nobody and reads what it imports late through that
    # handle. The bytecode here was compiled from `X = 2`, the source says `X = 1`: the value
    # tells which was imported.
    if os.geteuid() != 0:
        pytest.skip("only root leaves root")
    import importlib._bootstrap_external as bx
    import tempfile

    closed = tmp_path / "home"  # 0700, as pytest makes it
    closed.mkdir(mode=0o700)
    prefix = closed / "pycache"
    prefix.mkdir(mode=0o711)
    src = Path(tempfile.mkdtemp(prefix="kc-src-"))
    try:
        src.chmod(0o755)
        source = src / "fakemod.py"
        source.write_text("X = 1\n")
        source.chmod(0o644)
        st = source.stat()
        pyc = prefix / str(src).lstrip(os.sep) / f"fakemod.{sys.implementation.cache_tag}.pyc"
        pyc.parent.mkdir(parents=True)
        for p in [pyc.parent, *pyc.parent.parents]:
            if p == prefix:
                break
            p.chmod(0o755)
        code = compile("X = 2\n", str(source), "exec")
        pyc.write_bytes(bx._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
        pyc.chmod(0o644)
        probe = f"""
import os, sys
sys.dont_write_bytecode = True
from kernelcraft.base import bytecode
sys.pycache_prefix = {str(prefix)!r}
handle = bytecode.keep_handle()
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
if sys.argv[1] == "through":
    bytecode.read_through(handle)
sys.path.insert(0, {str(src)!r})
import fakemod
print(fakemod.X, sys.pycache_prefix.startswith("/proc/self/fd/"))
"""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELCRAFT_"))}
        env["PYTHONPATH"] = str(REPO)
        results = {}
        for mode in ("through", "by path"):
            out = subprocess.run(
                [sys.executable, "-c", probe, mode], env=env, capture_output=True, text=True, timeout=60
            )
            assert out.returncode == 0, out.stderr
            results[mode] = out.stdout.split()
        assert results == {"through": ["2", "True"], "by path": ["1", "False"]}
    finally:
        subprocess.run(["rm", "-rf", str(src)], check=False)
