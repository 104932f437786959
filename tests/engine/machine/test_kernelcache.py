"""What a candidate's processes compiled, given to its next process and to no other (`kernelcache.py`).

The compiles are real (Triton's AOT compile for sm_90a runs on the CPU, as tests/engine/checks/test_aot.py
does); a cache hit is Triton's own word, through its compilation listener.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from kernelcraft.base import knobs  # noqa: E402
from kernelcraft.engine.machine.kernelcache import KernelCache  # noqa: E402
from kernelcraft.schema.evaluation import EvalJob  # noqa: E402

KERNELS = Path(__file__).parents[2] / "fixtures" / "kernels" / "launch_kernels.py"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
KEY = "a" * 64


@pytest.fixture(scope="module")
def k() -> Any:
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compiling needs kernels decorated without TRITON_INTERPRET")
    spec = importlib.util.spec_from_file_location("kc_test_kernelcache_kernels", KERNELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def compiles() -> Iterator[list[bool]]:
    """Triton's word on each compile from here on: True for a cache hit."""
    from triton import knobs

    seen: list[bool] = []
    previous, previous_dir = knobs.compilation.listener, knobs.cache.dir
    knobs.compilation.listener = lambda **kw: seen.append(bool(kw["cache_hit"]))
    try:
        yield seen
    finally:
        knobs.compilation.listener, knobs.cache.dir = previous, previous_dir


def _compile_in(k: Any, cache: Path) -> None:
    from triton import knobs

    from kernelcraft.engine.checks.aot import compile_launch
    from kernelcraft.engine.watch.launches import intercept_launches

    knobs.cache.dir = str(cache)
    x = torch.ones(100)
    with intercept_launches() as rec:
        k.add_kernel[(4,)](x, x, x, 100, BLOCK=32)
    compile_launch(rec.records[0], "sm_90a")


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_kernel_one_worker_compiled_is_a_cache_hit_in_the_copy_the_next_worker_gets(
    k: Any, compiles: list[bool], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from kernelcraft.engine.worker import compiled

    store = KernelCache(tmp_path / "store")
    first = tmp_path / "first" / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(first))
    _compile_in(k, first)
    assert compiles == [False]
    names, blobs = compiled.collect([])  # the worker's answer at the end of its job
    assert store.keep(KEY, names, blobs) >= 1 and store.kept >= 1
    shutil.rmtree(first)  # the first worker's directory is gone, as after its job
    second = tmp_path / "second" / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(second))
    given, data = store.entry(KEY)  # the next worker's Load
    compiled.seed(given, data)
    seeded = _files(second)
    assert seeded and store.seeded == len(given)
    _compile_in(k, second)
    assert compiles == [False, True]  # Triton found it: no compile
    assert _files(second) == seeded  # and wrote nothing
    assert compiled.collect(sorted({n.split("/")[0] for n in given})) == ([], [])  # nothing new to send


def test_an_entry_is_given_only_to_a_worker_of_the_same_candidate_on_the_same_task(tmp_path: Path) -> None:
    task, cand = (
        (EXAMPLES / "softmax" / "task.py").read_text(),
        (EXAMPLES / "softmax" / "seed.py").read_text(),
    )
    spec = EvalJob(task_source=task, candidate_source=cand)
    device = "cuda:0 (NVIDIA H200)"
    key = KernelCache.key(spec, device)
    others = [
        EvalJob(task_source=task, candidate_source=cand + "\n# another candidate\n"),
        EvalJob(task_source=task + "\n# another task\n", candidate_source=cand),
        EvalJob(task_source=task, candidate_source=cand, model_mode="eval"),
    ]
    assert len({key, *(KernelCache.key(o, device) for o in others), KernelCache.key(spec, "cpu")}) == 5
    store = KernelCache(tmp_path / "store")
    assert store.keep(key, ["K" * 52 + "/k.cubin"], [b"\x7fELF"]) == 1
    assert store.entry(KernelCache.key(others[0], device)) == ([], [])
    assert store.entry(key) == (["K" * 52 + "/k.cubin"], [b"\x7fELF"])


def test_what_a_candidate_sends_back_is_kept_only_as_triton_keys_and_files_inside_its_entry(
    tmp_path: Path,
) -> None:
    """A hostile worker's answer: names that climb out or go deeper, a key with one such file, a
    group file that points elsewhere or at nothing, a group that is not one."""
    g, b, x, n = "G" * 52, "B" * 52, "X" * 52, "N" * 52
    sent = {
        f"{g}/k.cubin": b"cubin",
        f"{g}/k.json": b"{}",
        f"{g}/__grp__k.json": json.dumps(
            {"child_paths": {"k.cubin": "/old/cache/" + g + "/k.cubin"}}
        ).encode(),
        f"{b}/k.cubin": b"cubin",
        f"{b}/__grp__k.json": json.dumps({"child_paths": {"k.cubin": "/etc/passwd"}}).encode(),
        f"{x}/k.cubin": b"cubin",
        f"{x}/../../escape.txt": b"out",  # takes key X down with it
        f"{n}/__grp__n.json": b"not json",
        "../../escape.txt": b"out",
        f"{'D' * 52}/k.cubin": b"cubin",
        f"{'D' * 52}/deeper/x.cubin": b"x",  # and this one, key D
        "/etc/cron.d/x": b"x",
        "short/k.cubin": b"x",
    }
    store = KernelCache(tmp_path / "store")
    assert store.keep(KEY, list(sent), list(sent.values())) == 2  # G, and B without its group
    names, blobs = store.entry(KEY)
    assert sorted(names) == sorted([f"{g}/k.cubin", f"{g}/k.json", f"{g}/__grp__k.json", f"{b}/k.cubin"])
    assert json.loads(dict(zip(names, blobs, strict=True))[f"{g}/__grp__k.json"]) == {
        "child_paths": {"k.cubin": "k.cubin"}
    }
    assert _files(tmp_path / "store") == {f"{KEY}/{name}" for name in names}
    assert not (tmp_path / "escape.txt").exists()
    assert store.keep(KEY, ["Y" * 52 + "/k.cubin"], [b"x", b"y"]) == 0  # names and blobs differ


def test_the_store_keeps_to_its_capacity_least_recently_used_out(tmp_path: Path) -> None:
    store = KernelCache(tmp_path / "store", capacity_bytes=3000)
    for i, key in enumerate(("1" * 64, "2" * 64, "3" * 64)):
        if i == 2:
            os.utime(tmp_path / "store" / ("1" * 64), (1, 1))  # the oldest use
        store.keep(key, ["K" * 52 + "/k.cubin"], [bytes(1200)])
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["2" * 64, "3" * 64]


def test_a_temporary_store_goes_with_its_evaluator(tmp_path: Path) -> None:
    store = KernelCache()
    folder = store.folder()
    assert folder.is_dir()
    store.close()
    assert not folder.exists()
    kept = KernelCache(tmp_path / "kept")
    kept.folder()
    kept.close()
    assert (tmp_path / "kept").is_dir()  # a store that outlives the process stays


@pytest.mark.gpu
def test_gpu_a_profile_after_a_verify_compiles_nothing_the_verify_compiled() -> None:
    """Issue 41: the verify's candidate worker JIT-compiled the kernels; the profile job's worker
    (its compile stage for sm_90a, then the launches' warm-up) finds all of them in its copy."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.engine.host.local import LocalEvaluator

    task, cand = (
        (EXAMPLES / "softmax" / "task.py").read_text(),
        (EXAMPLES / "softmax" / "seed.py").read_text(),
    )

    async def run() -> tuple[int, int, int, Any]:
        async with LocalEvaluator(
            settings=knobs.settings(), workers=2, device="cuda", protect_environ=False
        ) as ev:
            kernels = ev._references.kernels
            v = await ev.submit(EvalJob(task_source=task, candidate_source=cand, stages=["verify"]))
            assert v.verify is not None and v.verify.correct, v.verify
            after_verify = kernels.kept
            p = await ev.submit(
                EvalJob(
                    task_source=task,
                    candidate_source=cand,
                    stages=["compile", "profile"],
                    targets=["sm_90a"],
                    roofline_target="sm_90a",
                )
            )
            return after_verify, kernels.kept, kernels.seeded, p

    after_verify, after_profile, seeded, p = asyncio.run(run())
    assert p.compile is not None and p.compile.ok and p.profile is not None and p.profile.available, p
    assert after_verify >= 1 and seeded >= 1
    assert after_profile == after_verify, "the profile's worker compiled what the verify had compiled"


def test_a_second_compile_of_the_same_candidate_finds_every_kernel_in_its_workers_copy(
    evaluator: Any, job_for: Any
) -> None:
    """The compile stage's worker (Triton's compiler, no interpreter) of a second job on the same
    candidate, its compile facts forgotten, compiles nothing: its copy has every kernel."""
    from kernelcraft.engine.host.compilefacts import CompileFacts

    refs = evaluator.evaluator._references
    task, cand = EXAMPLES / "elementwise" / "task.py", EXAMPLES / "elementwise" / "seed.py"
    job = job_for(task, cand, stages=["compile"], targets=["sm_90a"])
    first = evaluator.submit(job)
    kept, seeded = refs.kernels.kept, refs.kernels.seeded
    assert first.compile is not None and first.compile.ok, first.compile
    assert kept >= 1
    refs.compile_facts = CompileFacts()
    second = evaluator.submit(job)
    assert second.compile is not None and second.compile.ok, second.compile
    assert [t.kernels for t in second.compile.targets] == [t.kernels for t in first.compile.targets]
    assert refs.kernels.seeded > seeded and refs.kernels.kept == kept  # it compiled nothing new
