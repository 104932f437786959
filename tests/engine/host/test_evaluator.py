"""LocalEvaluator: examples pass, input sets are enforced, profile without a GPU, progress, GPU cases."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernelcraft.base import knobs
from kernelcraft.base.errors import TaskError
from tests.conftest import EXAMPLES

CHEATS = Path(__file__).parents[2] / "cheats"


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(p.parent.name for p in EXAMPLES.glob("*/seed.py")))
def test_every_example_seed_passes_its_task(evaluator, job_for, example: str) -> None:
    v = evaluator.submit(
        job_for(EXAMPLES / example / "task.py", EXAMPLES / example / "seed.py", trials=2)
    ).verify
    assert v is not None and v.correct, v
    assert v.trials_passed == v.trials_total == 2 * v.input_sets


@pytest.mark.slow
def test_a_candidate_hardcoding_the_default_shape_fails_the_extra_input_set(evaluator, job_for) -> None:
    seed = (EXAMPLES / "elementwise" / "seed.py").read_text()
    hardcoded = seed.replace("n_elements = x.numel()", "n_elements = 37 * 129")
    v = evaluator.submit(job_for(EXAMPLES / "elementwise" / "task.py", hardcoded, trials=1)).verify
    assert v is not None and not v.correct
    assert v.evidence is not None and v.evidence.input_set == 1 and v.trials_passed == 1


@pytest.mark.slow
def test_a_runtime_import_error_is_a_load_error_verdict(evaluator, job_for) -> None:
    src = "import no_such_module_kc\n" + (CHEATS / "good.py").read_text()
    v = evaluator.submit(job_for(CHEATS / "task_scale.py", src, trials=1)).verify
    assert v is not None and v.status == "load_error" and "no_such_module_kc" in (v.evidence.error_text or "")


@pytest.mark.slow
def test_a_kernel_error_in_the_interpreter_gets_a_compile_class(evaluator, job_for) -> None:
    src = (CHEATS / "good.py").read_text().replace("tl.maximum(x, 0.0)", "tl.no_such_function(x)")
    v = evaluator.submit(job_for(CHEATS / "task_scale.py", src, trials=1)).verify
    assert v is not None and not v.correct and v.status == "compile_unknown_api", v


@pytest.mark.slow
def test_profile_without_a_gpu_gives_the_roofline_floor(evaluator, job_for) -> None:
    r = evaluator.submit(
        job_for(
            EXAMPLES / "softmax" / "task.py",
            EXAMPLES / "softmax" / "seed.py",
            stages=["verify", "profile"],
            trials=1,
            roofline_target="sm_100",
        )
    )
    p = r.profile
    assert p is not None and not p.available and "needs a CUDA GPU" in p.message
    assert (
        p.roofline is not None and p.roofline.target == "sm_100" and p.roofline.bytes >= 2 * 8192 * 4000 * 4
    )


@pytest.mark.slow
def test_progress_reports_trials_only_moves_forward_and_ends_at_100_percent(evaluator, job_for) -> None:
    seen: list[tuple[float, str]] = []

    async def progress(fraction: float, message: str) -> None:
        assert 0.0 <= fraction <= 1.0
        seen.append((fraction, message))

    evaluator.submit(job_for(CHEATS / "task_scale.py", CHEATS / "good.py", trials=2), progress)
    messages = [m for _, m in seen]
    assert "trial 1 of 2" in messages and "trial 2 of 2" in messages
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions), seen  # a worker's own message never moves it back
    # the worker's "importing the candidate" comes at the fraction reached, not at 0
    assert {m: f for f, m in seen}["importing the candidate"] >= 0.05
    assert seen[-1] == (1.0, "done")


@pytest.mark.slow
def test_a_verdict_names_what_its_trial_counts_count_and_times_the_whole_job(evaluator, job_for) -> None:
    r = evaluator.submit(
        job_for(EXAMPLES / "elementwise" / "task.py", EXAMPLES / "elementwise" / "seed.py", trials=2)
    )
    v = r.verify
    assert v is not None and v.correct and v.input_sets == 2
    assert (v.trials, v.trials_total, v.trials_passed) == (2, 4, 4)
    assert v.seconds == r.seconds and v.stage_seconds == r.stage_seconds
    assert v.seconds >= v.stage_seconds["verify"]
    assert abs(sum(v.stage_seconds.values()) - v.seconds) <= 0.01, v.stage_seconds


@pytest.mark.slow
def test_a_batch_submitted_at_once_gets_one_result_each(evaluator, job_for) -> None:
    jobs = [
        job_for(CHEATS / "task_scale.py", CHEATS / name, trials=1)
        for name in ("good.py", "nan_output.py", "good.py")
    ]

    async def batch():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(evaluator.evaluator.submit(j) for j in jobs))

    results = evaluator.call(batch())
    assert [r.verify.status for r in results] == ["passed", "nan_or_inf", "passed"]


def _dead(pid: int) -> bool:
    """Gone, or a zombie (killed, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.slow
def test_a_cancelled_submit_kills_its_workers_even_when_cancelled_repeatedly(evaluator, job_for) -> None:
    # anyio (the MCP server) cancels again at every await until the task ends: the job's cleanup
    # must kill its workers before its first await, or they survive until shutdown.
    import time

    job = job_for(CHEATS / "task_scale.py", CHEATS / "hang.py", trials=1, timeout_s=600)
    ev = evaluator.evaluator

    async def cancel_mid_evaluation() -> list[int]:
        before = set(ev.active_worker_pids())
        task = asyncio.ensure_future(ev.submit(job))
        pids: list[int] = []
        for _ in range(600):  # wait until the candidate worker runs the hanging forward
            await asyncio.sleep(0.05)
            pids = [p for p in ev.active_worker_pids() if p not in before]
            if len(pids) >= 2:
                break
        assert len(pids) >= 2, "the job never held its two workers"
        await asyncio.sleep(1.0)
        for _ in range(50):  # cancel over and over, as anyio does
            task.cancel()
            await asyncio.sleep(0)
            if task.done():
                break
        with pytest.raises(asyncio.CancelledError):
            await task
        return pids

    pids = evaluator.call(cancel_mid_evaluation())
    kept = set(ev.idle_reference_pids())  # the reference was between requests: it is kept, idle
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not all(_dead(p) or p in kept for p in pids):
        time.sleep(0.05)
    alive = [p for p in pids if not _dead(p)]
    assert set(alive) <= kept and len(alive) < len(pids), (pids, alive, kept)  # the candidate is dead
    assert not set(pids) & set(ev.active_worker_pids())
    # The evaluator still works afterwards.
    assert evaluator.submit(job_for(CHEATS / "task_scale.py", CHEATS / "good.py", trials=1)).verify.correct


def test_obfuscated_side_streams_are_found_statically() -> None:
    import ast

    from kernelcraft.engine.source.static import check_candidate_source

    def constructs(src: str) -> list[str]:
        return [f.construct for f in check_candidate_source(ast.parse(src))]

    assert constructs("import torch\ns = getattr(torch.cuda, 'Str' + 'eam')()\n") == ["torch.cuda.Stream"]
    assert constructs("import torch\ngetattr(torch.cuda, f'set_{\"stream\"}')(s)\n") == [
        "torch.cuda.set_stream"
    ]
    assert constructs("import torch as t\nwith t.cuda.stream(s):\n    pass\n") == ["t.cuda.stream"]
    assert constructs("import torch\nname = 'set_stream'\ngetattr(torch.cuda, name)(s)\n") == [
        "getattr(torch.cuda, ...)"
    ]
    assert constructs("from torch import cuda\ngetattr(cuda, ''.join(['Str', 'eam']))()\n") == ["cuda.Stream"]
    assert constructs("import torch\ndt = getattr(torch, 'float16')\nx = getattr(self, 'w')\n") == []


def _timing(median: float, method: str = "cuda_graph", sets: int = 8, clipped: int = 0):  # type: ignore[no-untyped-def]
    from kernelcraft.schema.evaluation import Timing

    return Timing(
        median_us=median, iqr_us=0.1, min_us=median, reps=20, method=method, sets=sets, clipped=clipped
    )  # type: ignore[arg-type]


def test_a_timing_below_the_physical_floor_is_rejected_not_reported() -> None:
    from kernelcraft.base.targets import facts
    from kernelcraft.engine.host.verdicts import physical_floor_us, profile_result
    from kernelcraft.engine.measure import roofline

    # 8192 x 4000 fp32 softmax: 131 MB read, 131 MB written.
    nbytes = 2 * 8192 * 4000 * 4
    roof = roofline.roofline("sm_90a", flops=5 * 8192 * 4000, bytes=nbytes)
    dev = "cuda:0 (NVIDIA H200)"
    floor = physical_floor_us(roof, dev)
    assert floor == pytest.approx(nbytes / (facts("sm_90a").hbm_gbps * 1e3))
    assert floor <= roof.floor_us  # the anti-cheat floor is never above the roofline's
    ok = profile_result(_timing(70.0), _timing(150.0, "cuda_events", 1), _timing(90.0), roof, dev, 1.0)
    assert ok.failure_class is None and ok.speedup_vs_eager == pytest.approx(150 / 70)
    assert ok.roofline_fraction is not None and ok.roofline_fraction <= 1.05
    assert "candidate: cuda_graph, 8 rotating input sets" in ok.message
    assert "L2 flushed before each repetition" in ok.message
    for cand in (_timing(0.2 * floor), _timing(0.01, clipped=20)):
        bad = profile_result(cand, _timing(150.0), _timing(90.0), roof, dev, 1.0)
        assert bad.available and bad.failure_class is not None
        assert bad.failure_class.value == "forbidden_construct"
        assert bad.evidence is not None and "below the physical floor" in bad.evidence.message
        assert bad.speedup_vs_eager is None and bad.roofline_fraction is None and bad.achieved_gbps is None
        assert bad.candidate is not None and bad.candidate.median_us > 0


# ---- GPU cases (run on the H200; skipped without CUDA) ----

gpu = pytest.mark.gpu


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.fixture(scope="module")
def gpu_eval():  # type: ignore[no-untyped-def]
    if not _cuda():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.engine.host.local import LocalEvaluator

    async def make():  # type: ignore[no-untyped-def]
        ev = LocalEvaluator(settings=knobs.settings(), workers=2, device="cuda", protect_environ=False)
        await ev.start()
        return ev

    loop = asyncio.new_event_loop()
    ev = loop.run_until_complete(make())
    yield lambda job: loop.run_until_complete(ev.submit(job))
    loop.run_until_complete(ev.aclose())
    loop.close()


@pytest.mark.slow
@gpu
def test_gpu_seed_passes_and_profiles(gpu_eval, job_for) -> None:
    r = gpu_eval(
        job_for(
            EXAMPLES / "softmax" / "task.py",
            EXAMPLES / "softmax" / "seed.py",
            stages=["compile", "verify", "profile"],
        )
    )
    assert r.verify.correct, r.verify
    assert r.profile.available and r.profile.candidate.median_us > 0 and r.profile.speedup_vs_eager
    assert "clocks" in r.profile.message or "GPU state unknown" in r.profile.message, r.profile.message
    assert r.profile.candidate.round_spread is not None and r.profile.candidate.round_spread <= 0.05
    assert not r.verify.interpreter
    # Issue item 5: on a GPU, also the real JIT compile, as target "host".
    host = [t for t in r.compile.targets if t.target == "host"]
    assert len(host) == 1 and host[0].ok, r.compile
    k = host[0].kernels[0]
    assert k.name == "softmax_kernel" and k.registers and k.registers > 0, k
    assert k.spills is not None and k.shared_bytes is not None and k.num_warps, k


def _side_stream(seed: str, how: str) -> str:
    """The softmax seed switching the current stream before its launch, written `how`."""
    lines = {
        "getattr": "    s = getattr(torch.cuda, 'Str' + 'eam')()\n    getattr(torch.cuda, 'set_' + 'stream')(s)\n",
        # Hidden from the static check: only the worker's dynamic stream check can see it.
        "attrgetter": "    import operator\n"
        "    s = operator.attrgetter('Str' + 'eam')(torch.cuda)()\n"
        "    operator.attrgetter('set_' + 'stream')(torch.cuda)(s)\n",
    }[how]
    out = seed.replace("    softmax_kernel[(n_rows,)](", lines + "    softmax_kernel[(n_rows,)](")
    assert out != seed
    return out


@pytest.mark.slow
@gpu
@pytest.mark.parametrize("how", ["getattr", "attrgetter"])
def test_gpu_side_stream_work_is_not_hidden_from_the_timer(
    gpu_eval, job_for, static_checks_off, how: str
) -> None:
    # Seen on the H200 before the fix: median_us=0.0 (events recorded on the candidate's stream).
    task = EXAMPLES / "softmax" / "task.py"
    hidden = _side_stream((EXAMPLES / "softmax" / "seed.py").read_text(), how)
    r = gpu_eval(job_for(task, hidden, stages=["verify", "profile"], trials=1))
    assert not r.verify.correct and r.verify.status == "forbidden_construct", r.verify
    if how == "attrgetter":
        assert "changed the current CUDA stream" in r.verify.evidence.message, r.verify.evidence
    assert r.profile.failure_class is not None and not r.profile.speedup_vs_eager, r.profile


@pytest.mark.slow
@gpu
def test_gpu_side_stream_set_only_while_timing_is_rejected_by_the_timer(
    gpu_eval, job_for, static_checks_off
) -> None:
    # forward switches streams only from its 5th call on (after the verify trials): the timer's
    # own stream guard must catch it, and no timing may be reported.
    task = EXAMPLES / "softmax" / "task.py"
    seed = (EXAMPLES / "softmax" / "seed.py").read_text()
    sneaky = seed.replace(
        "    softmax_kernel[(n_rows,)](",
        "    import operator\n"
        "    _calls.append(1)\n"
        "    if len(_calls) > 4:\n"
        "        operator.attrgetter('set_' + 'stream')(torch.cuda)(operator.attrgetter('Str' + 'eam')(torch.cuda)())\n"
        "    softmax_kernel[(n_rows,)](",
    )
    sneaky = "_calls = []\n" + sneaky
    r = gpu_eval(job_for(task, sneaky, stages=["verify", "profile"], trials=1))
    assert r.profile is not None
    assert r.profile.failure_class is not None and r.profile.failure_class.value == "forbidden_construct", (
        r.profile
    )
    assert "CUDA stream" in r.profile.evidence.message
    assert r.profile.speedup_vs_eager is None


@pytest.mark.slow
@gpu
def test_gpu_softmax_timing_is_plausible_and_not_l2_hot(gpu_eval, job_for) -> None:
    r = gpu_eval(
        job_for(
            EXAMPLES / "softmax" / "task.py", EXAMPLES / "softmax" / "seed.py", stages=["verify", "profile"]
        )
    ).profile
    assert r.available and r.failure_class is None, r
    assert r.candidate.clipped == 0 and r.candidate.median_us > 0
    # A hand-written row softmax against eager PyTorch on an H200: between 0.5x and 5x.
    assert 0.5 < r.speedup_vs_eager < 5.0, r
    # Timed from HBM (L2 flushed or inputs rotated), so it cannot beat the roofline floor.
    assert r.roofline_fraction is not None and r.roofline_fraction <= 1.05, r
    if r.candidate.method == "cuda_graph":
        assert r.candidate.sets > 1 and "rotating input sets" in r.message, r.message
    print(r.model_dump_json(indent=1))


@pytest.mark.slow
@gpu
def test_gpu_stale_memory_is_not_the_reference_output(gpu_eval, job_for) -> None:
    v = gpu_eval(job_for(CHEATS / "task_scale.py", CHEATS / "uninitialised.py")).verify
    assert v is not None and not v.correct


@pytest.mark.slow
@gpu
def test_gpu_illegal_access_then_a_second_evaluation_succeeds(gpu_eval, job_for) -> None:
    src = (
        (CHEATS / "good.py")
        .read_text()
        .replace(
            "mask=mask)\n    tl.store", "mask=mask)\n    tl.store(y_ptr + offs + (1 << 40), x)\n    tl.store"
        )
    )
    v = gpu_eval(job_for(CHEATS / "task_scale.py", src, trials=1)).verify
    assert v is not None and not v.correct and v.status.startswith("runtime_")
    v2 = gpu_eval(job_for(CHEATS / "task_scale.py", CHEATS / "good.py", trials=1)).verify
    assert v2 is not None and v2.correct, v2


@pytest.mark.slow
def test_the_reference_worker_is_kept_for_the_next_job_on_the_same_task(evaluator, job_for, tmp_path) -> None:
    ev = evaluator.evaluator
    task = tmp_path / "task.py"
    task.write_text((CHEATS / "task_scale.py").read_text() + "\n# kept-reference test\n")
    # A wrong candidate first: its trials fail, no kernel of its runs in the reference...
    # (Earlier tests' replacement references park in the background: wait for them on both sides,
    # or one parked meanwhile counts as this task's.)
    evaluator.call(ev._references.settled())
    others = set(ev.idle_reference_pids())  # other tasks' (earlier tests'), parked
    bad = evaluator.submit(job_for(task, CHEATS / "off_by_one_mask.py", trials=2))
    assert bad.verify is not None and not bad.verify.correct and bad.verify.status == "numerical_mismatch"
    evaluator.call(ev._references.settled())
    kept = set(ev.idle_reference_pids()) - others
    assert kept, "a reference that finished cleanly is kept"
    assert {"reference", "candidate", "verify"} <= set(bad.stage_seconds)
    # ...so the next job takes it (rebuilt), not a new process, and passes a right candidate.
    again = evaluator.submit(job_for(task, CHEATS / "good.py", trials=2))
    assert again.verify is not None and again.verify.correct
    assert "workers" not in again.stage_seconds or again.stage_seconds["workers"] < 5
    # That job's fresh-input replay ran the candidate's kernels in the reference: not kept again.
    assert not set(ev.idle_reference_pids()) & kept


@pytest.mark.slow
def test_a_reference_that_failed_is_not_kept(evaluator, job_for, tmp_path) -> None:
    ev = evaluator.evaluator
    # Model breaks on the extra input set only: the job is unusable, and so is its reference.
    task = tmp_path / "task.py"
    task.write_text(
        (CHEATS / "task_scale.py").read_text()
        + ("\n\ndef get_input_sets():\n    return [['not a tensor']]\n")
    )
    evaluator.call(ev._references.settled())  # earlier tests' replacements, parked first
    before = set(ev.idle_reference_pids())
    src = (CHEATS / "good.py").read_text()
    with pytest.raises(TaskError, match="not a tensor|relu"):
        evaluator.submit(job_for(task, src, trials=1))
    evaluator.call(ev._references.settled())
    assert set(ev.idle_reference_pids()) <= before


@pytest.mark.anyio
async def test_gpu_lock_shares_verification_and_gives_timing_the_gpu_alone() -> None:
    from kernelcraft.engine.machine.gpulock import GpuLock

    lock = GpuLock()
    log: list[str] = []

    async def verify(name: str, hold: float) -> None:
        async with lock.shared():
            log.append(f"+{name}")
            await asyncio.sleep(hold)
            log.append(f"-{name}")

    async def time_it(name: str) -> None:
        async with lock.exclusive():
            log.append(f"+{name}")
            await asyncio.sleep(0.02)
            log.append(f"-{name}")

    a = asyncio.ensure_future(verify("v1", 0.05))
    b = asyncio.ensure_future(verify("v2", 0.05))
    await asyncio.sleep(0.01)
    t = asyncio.ensure_future(time_it("t1"))
    await asyncio.sleep(0.01)
    c = asyncio.ensure_future(verify("v3", 0.01))  # arrives while a timing waits: goes after it
    # A cancelled waiter leaves nothing held.
    d = asyncio.ensure_future(time_it("t2"))
    await asyncio.sleep(0)
    d.cancel()
    await asyncio.gather(a, b, t, c, return_exceptions=True)
    assert not lock.busy()
    assert log[:2] == ["+v1", "+v2"]  # verifications overlap
    i = log.index("+t1")
    assert {"-v1", "-v2"} <= set(log[:i]) and log[i + 1] == "-t1"  # timing alone
    assert log.index("+v3") > log.index("-t1")  # fair to the waiting timing


@pytest.mark.slow
def test_concurrent_jobs_on_one_task_share_a_few_reference_workers(evaluator, job_for, tmp_path) -> None:
    ev = evaluator.evaluator
    task = tmp_path / "task.py"
    task.write_text((CHEATS / "task_scale.py").read_text() + "\n# shared-references test\n")
    # (wrong candidates: a passing job's reference ran its kernels in the fresh-input replay and
    # is not kept, so only failing jobs hand theirs on)
    src = (CHEATS / "off_by_one_mask.py").read_text()
    pool = ev._ensure_started()[0].pool
    jobs = [job_for(task, src + f"\n# copy {i}\n", trials=1) for i in range(6)]

    async def batch() -> tuple[int, list]:  # type: ignore[type-arg]
        before = pool.started
        results = await asyncio.gather(*(ev.submit(j) for j in jobs))
        return pool.started - before, results

    started, results = evaluator.call(batch())
    assert all(r.verify is not None and r.verify.status == "numerical_mismatch" for r in results)
    # Six candidate workers, at most `per_task` reference workers, and the pool's refills;
    # one reference per job would need six more.
    assert started <= 6 + ev._references.per_task + pool.size, started


@pytest.mark.slow
def test_jobs_waiting_for_a_reference_never_block_a_timing(evaluator, job_for, tmp_path) -> None:
    # The GPU lock's ordering, with the CPU device made to take it as a GPU does: one reference
    # worker per task, so jobs queue for it while its holder waits to time alone. A job that held
    # the lock (shared) while waiting for the reference would block that timing for good.
    ev = evaluator.evaluator
    device = ev._ensure_started()[0]
    task = tmp_path / "task.py"
    task.write_text((CHEATS / "task_scale.py").read_text() + "\n# lock-ordering test\n")
    src = (CHEATS / "good.py").read_text()
    jobs = [job_for(task, src + f"\n# copy {i}\n", trials=1, stages=["verify", "profile"]) for i in range(4)]
    cap = ev._references.per_task

    async def batch() -> list:  # type: ignore[type-arg]
        return await asyncio.wait_for(asyncio.gather(*(ev.submit(j) for j in jobs)), 120)

    device.locked, ev._references.per_task = True, 1
    try:
        results = evaluator.call(batch())
        evaluator.call(ev._references.settled())  # a replacement reference loads under the lock too
    finally:
        device.locked, ev._references.per_task = False, cap
    assert all(r.verify is not None and r.verify.correct and r.profile is not None for r in results)
    assert not device.lock.busy()


def test_gpus_are_counted_one_per_nvidia_device_file_when_none_are_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcraft.engine.machine import prestart

    monkeypatch.setattr(prestart, "_torch_has_gpu_support", lambda: True)
    monkeypatch.setattr(prestart.sys, "platform", "linux")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name in ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-caps"):
        (tmp_path / name).touch()
    assert prestart.gpu_count("auto", dev=str(tmp_path)) == 2
    assert prestart.gpu_count("cpu", dev=str(tmp_path)) == 0
    (tmp_path / "nvidiactl").unlink()
    if not Path("/proc/driver/nvidia").exists():  # no driver at all: no GPU, still no torch
        assert prestart.gpu_count("auto", dev=str(tmp_path)) == 0


@pytest.mark.slow
def test_a_compile_that_runs_out_of_time_names_the_launches_it_had_found(evaluator, job_for) -> None:
    """Issue 26: a compile ran 300 s and said '0 launch(es)' where three had been found. Discovery
    runs forward's host code; when it runs out of time the verdict names what it had found and
    how to give it more."""
    hang = (
        (CHEATS / "hang.py")
        .read_text()
        .replace(
            "        while True:\n            pass",
            "        y = torch.empty_like(x)\n"
            "        for _ in range(3):\n"
            "            relu_affine_kernel[(1,)](x, y, x.numel(), BLOCK_SIZE=1024)\n"
            "        while True:\n            pass",
        )
    )
    r = evaluator.submit(job_for(CHEATS / "task_scale.py", hang, stages=["compile"], timeout_s=15))
    c = r.compile
    assert c is not None and not c.ok and c.failure_class is not None
    assert c.failure_class.value == "runtime_timeout", c
    assert c.evidence is not None and "relu_affine_kernel x3" in c.evidence.message, c.evidence
    assert "--timeout / timeout_s, now 15 s" in c.evidence.message
