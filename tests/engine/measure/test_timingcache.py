"""The compiled reference's timings outlive the process that measured them (a file in
KERNELCRAFT_HOME), for the same task, GPU and torch/Triton, within the TTL; a bad file is a miss."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from kernelcraft.base import knobs
from kernelcraft.engine.host.references import ReferencePool, task_key
from kernelcraft.engine.measure.timingcache import CompiledTimings
from kernelcraft.schema.evaluation import EvalResult, Timing

H200 = "cuda:0 (NVIDIA H200)"


def _timing(us: float) -> Timing:
    return Timing(median_us=us, iqr_us=1.0, min_us=us - 1, reps=50, method="cuda_events")


def test_a_timing_kept_by_one_process_is_found_by_the_next_on_the_same_task_and_gpu_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache" / "timings.json"
    first = CompiledTimings(path)
    first.put(first.entry("abc", 0, H200), _timing(12.5))
    later = CompiledTimings(path)  # a fresh process: nothing in memory
    hit = later.get(later.entry("abc", 0, H200))
    assert hit is not None and hit.median_us == 12.5
    assert later.get(later.entry("abc", 0, "cuda:0 (NVIDIA A100-SXM4-80GB)")) is None  # another GPU
    assert later.get(later.entry("abc", 1, H200)) is None  # another device index
    assert later.get(later.entry("abd", 0, H200)) is None  # another task


def test_an_upgrade_of_torch_or_triton_measures_afresh(tmp_path: Path) -> None:
    path = tmp_path / "timings.json"
    before = CompiledTimings(path)
    before.put(before.entry("abc", 0, H200), _timing(12.5))
    after = CompiledTimings(path)
    after._versions = "torch 9.9.9, triton 9.9.9"
    assert after.get(after.entry("abc", 0, H200)) is None


def test_expired_timings_are_misses_and_are_dropped_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "timings.json"
    c = CompiledTimings(path)
    c.put(c.entry("old", 0, H200), _timing(1.0))
    raw = json.loads(path.read_text())
    for v in raw.values():
        v["at"] -= c.ttl_s + 1
    path.write_text(json.dumps(raw))
    fresh = CompiledTimings(path)
    assert fresh.get(fresh.entry("old", 0, H200)) is None
    fresh.put(fresh.entry("new", 0, H200), _timing(2.0))
    assert [k.split("|")[0] for k in json.loads(path.read_text())] == ["new"]


def test_two_processes_writing_keep_each_others_entries(tmp_path: Path) -> None:
    path = tmp_path / "timings.json"
    a, b = CompiledTimings(path), CompiledTimings(path)
    a.put(a.entry("task-a", 0, H200), _timing(1.0))
    b.put(b.entry("task-b", 0, H200), _timing(2.0))
    c = CompiledTimings(path)
    assert c.get(c.entry("task-a", 0, H200)) is not None and c.get(c.entry("task-b", 0, H200)) is not None


def test_a_corrupt_or_unwritable_file_is_a_miss_with_a_warning_never_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "timings.json"
    path.write_text('{"abc": {"at": "yesterday"')  # cut off mid-write by something else
    c = CompiledTimings(path)
    with caplog.at_level(logging.WARNING):
        assert c.get(c.entry("abc", 0, H200)) is None
    assert "timed afresh" in caplog.text
    c.put(c.entry("abc", 0, H200), _timing(3.0))  # rewritten whole
    assert CompiledTimings(path).get(c.entry("abc", 0, H200)) is not None
    blocked = CompiledTimings(tmp_path / "a-file" / "timings.json")
    (tmp_path / "a-file").write_text("not a folder")
    with caplog.at_level(logging.WARNING):
        blocked.put(blocked.entry("abc", 0, H200), _timing(3.0))  # kept in memory only
    assert "could not keep" in caplog.text
    assert blocked.get(blocked.entry("abc", 0, H200)) is not None


def test_the_reference_pool_reuses_a_timing_another_pool_measured(tmp_path: Path) -> None:
    path = tmp_path / "timings.json"
    key = task_key("class Model: ...", 0)
    ReferencePool(per_task=2, idle_per_device=2, timings_file=path).remember_compiled(key, H200, _timing(7.0))
    pool = ReferencePool(per_task=2, idle_per_device=2, timings_file=path)
    hit = pool.compiled_timing(key, H200)
    assert hit is not None and hit.median_us == 7.0
    assert ReferencePool(per_task=2, idle_per_device=2).compiled_timing(key, H200) is None  # no file


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.slow
@pytest.mark.gpu
def test_on_a_gpu_the_next_process_profiling_a_task_skips_the_references_torch_compile(
    tmp_path: Path, job_for
) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.engine.host.local import LocalEvaluator

    path = tmp_path / "timings.json"
    job = job_for(
        EXAMPLES / "softmax" / "task.py", EXAMPLES / "softmax" / "seed.py", stages=["verify", "profile"]
    )

    async def once() -> tuple[EvalResult, list[str]]:
        said: list[str] = []

        async def progress(fraction: float, message: str) -> None:
            said.append(message)

        async with LocalEvaluator(
            settings=knobs.settings(), device="cuda", lazy=True, timings_file=path, protect_environ=False
        ) as ev:
            return await ev.submit(job, progress), said

    first, said_first = asyncio.run(once())
    second, said_second = asyncio.run(once())  # a new evaluator: nothing of the first in memory
    assert first.profile.available and second.profile.available, (first.profile, second.profile)
    assert any("torch.compile" in m for m in said_first)
    assert not any("torch.compile" in m for m in said_second), said_second
    assert "timed by an earlier evaluation" in second.profile.message
    assert second.profile.reference_compiled.median_us == first.profile.reference_compiled.median_us


def test_without_a_usable_home_the_cache_is_off_and_nothing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcraft.base.config import cache_file
    from kernelcraft.base.knobs import PathSettings

    assert (
        cache_file(PathSettings(home=tmp_path / "home"), "t.json") == tmp_path / "home" / "cache" / "t.json"
    )
    (tmp_path / "a-file").write_text("")
    assert cache_file(PathSettings(home=tmp_path / "a-file" / "home"), "t.json") is None
