"""Triton's one-off costs paid once, not by every worker (issue 13, the first verdict): the C
helpers built by a trusted process and copied into each GPU worker's cache
(`engine/startup/prebuilt.py`), and the compiler's warm-up in the zygote (`worker._warm_triton`).
The `gpu` test runs on the H200 machine; the rest run anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from kernelcraft.base.knobs import EngineSettings, Knobs, PathSettings
from kernelcraft.engine.startup import prebuilt

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_built_helpers_are_copied_into_a_new_workers_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = Knobs(paths=PathSettings(home=tmp_path / "home"))
    built = prebuilt.folder(here)
    assert built is not None and built.is_relative_to(tmp_path / "home" / "cache" / "triton-helpers")
    cache = tmp_path / "worker" / "triton-cache"
    assert not prebuilt.seed(cache, here)  # nothing built yet: the worker compiles them itself
    (built / "c0ffee").mkdir(parents=True)
    (built / "c0ffee" / "cuda_utils.so").write_bytes(b"\x7fELF")
    assert prebuilt.seed(cache, here)
    assert (cache / "c0ffee" / "cuda_utils.so").read_bytes() == b"\x7fELF"
    off = replace(here, engine=EngineSettings(prebuilt=False))
    assert prebuilt.folder(off) is None
    assert not prebuilt.seed(tmp_path / "other", off)


def test_the_builder_is_started_until_torch_compiles_bytecode_is_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    prefix = tmp_path / "pycache"
    env = {"PYTHONPYCACHEPREFIX": str(prefix)}
    assert prebuilt._compile_bytecode_missing(env, Knobs())
    assert not prebuilt._compile_bytecode_missing({}, Knobs())  # no cache of ours: nothing to write
    # where Python itself looks for inductor's bytecode under that prefix
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    source = os.path.join(os.path.dirname(spec.origin), "_inductor", "compile_fx.py")
    monkeypatch.setattr(sys, "pycache_prefix", str(prefix))
    pyc = Path(importlib.util.cache_from_source(source))
    monkeypatch.undo()
    pyc.parent.mkdir(parents=True)
    pyc.write_bytes(b"")
    assert not prebuilt._compile_bytecode_missing(env, Knobs())
    pyc.unlink()
    assert not prebuilt._compile_bytecode_missing(env, Knobs(engine=EngineSettings(prebuilt=False)))


def test_a_build_that_fails_leaves_nothing_behind_and_is_not_retried_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No GPU driver here: Triton has no active driver, so the build fails. No half-built folder
    # is left for a worker to copy, and the next pools do not start a builder again for an hour.
    here = Knobs(paths=PathSettings(home=tmp_path / "home"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if k != "PYTHONPYCACHEPREFIX"}  # the helpers alone
    monkeypatch.setattr(prebuilt, "_builders", [])
    prebuilt.build_in_background(env, here)
    assert len(prebuilt._builders) == 1
    first = prebuilt._builders[0]
    if first.wait(300) == 0:
        pytest.skip("Triton has an active GPU driver here (the gpu test covers the build)")
    target = prebuilt.folder(here)
    assert target is not None and not target.exists()
    assert [p.name for p in target.parent.iterdir()] == []
    marker = tmp_path / "home" / "cache" / prebuilt.FAILED
    assert marker.exists()
    prebuilt.build_in_background(env, here)
    assert prebuilt._builders == [first]  # not started again
    os.utime(marker, (0, 0))  # an hour later (and more)
    prebuilt.build_in_background(env, here)
    assert len(prebuilt._builders) == 1 and prebuilt._builders[0] is not first
    prebuilt._builders[0].wait(300)


def test_a_worker_that_leaves_root_owns_what_the_pool_put_in_its_directory(tmp_path: Path) -> None:
    # The pool copies the helpers into the worker's Triton cache as root; Triton, in the worker,
    # then writes its compiled kernels beside them: as nobody it must own that cache.
    if os.geteuid() != 0:
        pytest.skip("only root leaves root")
    from kernelcraft.engine import box

    workdir = tmp_path / "worker"
    (workdir / "triton-cache" / "c0ffee").mkdir(parents=True)
    (workdir / "triton-cache" / "c0ffee" / "cuda_utils.so").write_bytes(b"\x7fELF")
    (workdir / "output.log").write_bytes(b"")
    (workdir / "elsewhere").symlink_to(tmp_path)  # not followed: its target stays root's
    box._own(str(workdir), 65534, 65534)
    owned = [workdir, *workdir.rglob("*")]
    assert {p.lstat().st_uid for p in owned} == {65534}
    assert tmp_path.stat().st_uid == 0


def test_the_zygote_warms_tritons_compiler_once_for_every_worker() -> None:
    # What a worker forked from the zygote inherits: triton_key() computed (it hashes Triton's
    # library: 0.46 s on the H200), the argument binder used once; no thread left running, no GPU.
    proc = _run(
        """
        import threading
        from kernelcraft.engine.worker import main as worker
        assert [n for n, _ in worker.import_stages(cuda=True)][:3] == ["base", "dynamo", "triton"]
        for name, stage in worker.import_stages(cuda=True)[:3]:
            stage()
            assert threading.active_count() == 1, name
        from triton.runtime.cache import triton_key
        import torch
        print(triton_key.cache_info().currsize, threading.active_count(), torch.cuda.is_initialized())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1", "False"]


@pytest.mark.gpu
def test_triton_takes_the_copied_helpers_without_compiling_them(tmp_path: Path) -> None:
    target = tmp_path / "helpers"
    subprocess.run(
        [sys.executable, "-m", "kernelcraft.engine.startup.prebuilt", str(target), "-"],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert any(target.rglob("*.so"))
    cache = tmp_path / "worker-cache"
    subprocess.run(["cp", "-r", str(target), str(cache)], check=True)
    proc = _run(
        """
        import triton.runtime.build as build
        def refuse(*a, **k):
            raise AssertionError("compiled a helper: " + str(a[0]))
        build._build = refuse
        from triton.runtime import driver
        driver.active.utils
        print("taken")
        """,
        {"TRITON_CACHE_DIR": str(cache)},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "taken", proc.stderr[-2000:]
