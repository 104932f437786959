"""A job's GPU path as the evaluator's process runs it (warm-up, shared verification, interleaved
timing rounds, the compiled reference's cache, hostile timing messages), against scripted workers
on a pretend GPU: no process and no CUDA, so it runs on every machine. The scripted answers are
built with the protocol's models, as the real workers build them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kernelcraft.base.errors import TaskError
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.host.job.run import Job
from kernelcraft.engine.host.job.state import CandidateSettings
from kernelcraft.engine.host.job.timing import MIN_PROFILE_ROUNDS
from kernelcraft.engine.host.references import ReferencePool
from kernelcraft.engine.machine.gpulock import Device, GpuLock
from kernelcraft.engine.wire.channel import Frame
from kernelcraft.engine.wire.protocol import (
    Compared,
    Compiled,
    CompiledFiles,
    GpuWanted,
    InputsMade,
    KnockedOut,
    Loaded,
    Outputs,
    Replayed,
    RooflineCounted,
    Samples,
    Sized,
    TaskFailed,
    TaskReady,
    Timed,
    Verdict,
    Warm,
)
from kernelcraft.schema.evaluation import EvalJob, EvalResult

REC = {"tensor": {"dtype": "float32", "shape": [4]}}
LAUNCH = {
    "name": "relu_kernel",
    "signature": {"x_ptr": "*fp32"},
    "constexprs": {"BLOCK": 4},
    "grid": [1, 1, 1],
}
CANDIDATE_US, EAGER_US, COMPILED_US = 10.0, 20.0, 15.0


def _samples(us: float) -> Samples:
    return Samples(times_us=[us] * 20, method="cuda_graph", sets=8)


def _program(run: dict[str, Any]) -> dict[str, Any]:
    """The first run's record for the fresh-input replay (asked for with `program`)."""
    if not run.get("program"):
        return {}
    return {
        "program": {"inputs": [], "storages": [], "steps": [], "kernels": [], "outputs": []},
        "program_kept": [],
    }


AUDITED = Timed(candidate=_samples(CANDIDATE_US), audited=[5, 6], audit_outputs=[REC, REC], audit_calls=40)
"""A candidate's round of timing, with the two timed calls it kept for the reference to check."""


class ScriptedWorker:
    """Stands in for a worker process: records every header the job sends and answers at once,
    as the role its `Load` gave it."""

    def __init__(self, pid: int, candidate_timing: dict[str, Any] | None = None) -> None:
        self.pid = pid
        self.dir = Path("/nonexistent")
        self.interpret = False
        self.triton_cache = self.dir / "triton-cache"
        self.info = {"type": "ready", "pid": pid, "device": "cuda:0 (NVIDIA H200)"}
        self.frames: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.role = ""
        self.killed_for: str | None = None
        self.candidate_timing = candidate_timing or AUDITED.to_header()

    async def send(self, header: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        self.sent.append(header)
        await self.frames.put(Frame(self.answer(header)))

    def answer(self, h: dict[str, Any]) -> dict[str, Any]:
        if "role" in h:
            self.role = h["role"]
            return (
                Sized(
                    inputs_bytes=16,
                    outputs_bytes=16,
                    outputs_measured=True,
                    elements=4,
                    device_free=80 << 30,
                    device_total=140 << 30,
                )
                if self.role == "reference"
                else Loaded(sandbox_unavailable=None)
            ).to_header()
        answers = {
            "next": lambda: TaskReady(input_sets=1).to_header(),
            "inputs": lambda: InputsMade(inputs=[REC]).to_header(),
            "compare": lambda: Compared(failure_class=None).to_header(),
            # gated (a baseline's): compiled, the first run waits for the GPU (`run_compiled`)
            "warmup_reference": lambda: (GpuWanted() if h.get("gated") else Warm()).to_header(),
            "run_compiled": lambda: Warm(compiled=1).to_header(),
            "roofline": lambda: RooflineCounted(roofline=None, error="not counted here").to_header(),
            "time_reference": lambda: Timed(
                eager=_samples(EAGER_US), **({"compiled": _samples(COMPILED_US)} if h["compiled"] else {})
            ).to_header(),
            "warmup": lambda: Warm(compiled=1).to_header(),
            "run": lambda: Outputs(
                outputs=[REC] * (2 if h.get("determinism") else 1),
                inputs_after=[REC],
                kernels=["relu_kernel"],
                **_program(h),
            ).to_header(),
            "fresh_replay": lambda: Replayed().to_header(),
            "audit_timed": lambda: Compared(failure_class=None).to_header(),
            "send_compiled": lambda: CompiledFiles().to_header(),
            # without its kernels, forward breaks: the knockout check passes without a comparison
            "knockout": lambda: KnockedOut(skipped=1, error="RuntimeError: no output").to_header(),
            "time_candidate": lambda: self.candidate_timing,
            "compile": lambda: Compiled(
                launches=[LAUNCH],
                targets=[
                    {"target": t, "ok": True, "kernels": [{"name": "relu_kernel", "registers": 32}]}
                    for t in h["targets"]
                ],
                shapes="get_inputs()",
            ).to_header(),
        }
        return answers[h["op"]]()

    def ops(self) -> list[str | None]:
        return [h.get("op") for h in self.sent]

    def alive(self) -> bool:
        return self.killed_for is None

    def kill(self, reason: str | None = None) -> None:
        self.killed_for = self.killed_for or reason or "killed"

    def rss_bytes(self) -> int:
        return 0

    def limit(self, extra_tasks: int, memory_bytes: int | None) -> None:
        self.limited = extra_tasks

    def out_of_memory(self) -> bool:
        return False


class ScriptedPool:
    lazy = True
    """(A server's pool is not: there a reference that re-ran candidate kernels is replaced.)"""

    def __init__(self, candidate_timing: dict[str, Any] | None = None) -> None:
        self.started: list[ScriptedWorker] = []
        self.released: list[ScriptedWorker] = []
        self.candidate_timing = candidate_timing

    async def acquire(self) -> ScriptedWorker:
        self.started.append(ScriptedWorker(len(self.started) + 1, self.candidate_timing))
        return self.started[-1]

    async def release(self, w: ScriptedWorker) -> None:
        self.released.append(w)


async def _run(
    pool: ScriptedPool, refs: ReferencePool, stages: list[str] | None = None, targets: list[str] | None = None
) -> EvalResult:
    device = Device("cuda", 0, pool, GpuLock())  # type: ignore[arg-type]
    spec = EvalJob(
        task_source="task",
        candidate_source="candidate",
        stages=stages or ["verify", "profile"],  # type: ignore[arg-type]
        trials=2,
        **({"targets": targets} if targets else {}),
    )
    settings = CandidateSettings(memory_limit_bytes=None, sandbox=True)
    result = await Job(spec, device, refs, settings, set(), None).run()
    assert not device.lock.busy()
    return result


async def _parked(refs: ReferencePool) -> None:
    """Wait for the parked references' rebuilds (sent when they were parked)."""
    await asyncio.gather(*(p.rebuilt for v in refs._idle.values() for p in v))


@pytest.mark.anyio
async def test_a_gpu_job_warms_up_verifies_then_times_candidate_and_reference_in_interleaved_rounds() -> None:
    pool, refs = ScriptedPool(), ReferencePool(per_task=2, idle_per_device=2)
    result = await _run(pool, refs)
    assert result.verify is not None and result.verify.correct, result.verify
    assert result.verify.trials_passed == 2 and result.verify.kernels_launched == ["relu_kernel"]
    assert result.verify.device == "cuda:0 (NVIDIA H200)"
    p = result.profile
    assert p is not None and p.available, p
    assert p.speedup_vs_eager == pytest.approx(EAGER_US / CANDIDATE_US)
    assert p.speedup_vs_compiled == pytest.approx(EAGER_US / CANDIDATE_US * COMPILED_US / EAGER_US)
    assert f"{MIN_PROFILE_ROUNDS} interleaved rounds" in p.message
    assert f"{2 * MIN_PROFILE_ROUNDS} timed calls on fresh inputs checked by the reference" in p.message
    ref, cand = pool.started
    rounds = ["audit_timed", "time_reference"] * MIN_PROFILE_ROUNDS  # each round's kept calls checked
    await _parked(refs)
    assert ref.ops() == [
        None,  # load: the reference measures the task ("sized")
        "next",  # the job reserved its memory: build Model
        "inputs",
        "warmup_reference",
        "inputs",
        "compare",
        "inputs",
        "compare",
        "inputs",
        "fresh_replay",  # each distinct trial record re-run on fresh inputs, last of verify (one:
        # the scripted candidate sends the same record every trial)
        "roofline",
        *rounds,
    ]
    assert cand.ops() == [
        None,
        "warmup",
        "run",
        "run",
        "knockout",
        *["time_candidate"] * MIN_PROFILE_ROUNDS,
        "send_compiled",  # it passed: what it compiled, for its candidate's next process
    ]
    # The first round lets the worker choose; later rounds keep the method it chose.
    assert [h["method"] for h in cand.sent if h.get("op") == "time_candidate"] == [
        "auto",
        "cuda_graph",
        "cuda_graph",
    ]
    assert [h["compiled"] for h in ref.sent if h.get("op") == "time_reference"] == [True] * MIN_PROFILE_ROUNDS
    # The reference ran the candidate's kernels (the fresh-input replay): not kept for another
    # job; the candidate is killed too.
    assert refs.idle_pids() == [] and cand.killed_for and ref.killed_for


@pytest.mark.anyio
async def test_the_next_job_on_the_task_reuses_the_kept_reference_and_its_compiled_timing() -> None:
    # (profile alone: a job that verifies ran the candidate's kernels in its reference, which is
    # then not kept)
    pool, refs = ScriptedPool(), ReferencePool(per_task=2, idle_per_device=2)
    first = await _run(pool, refs, ["profile"])
    second = await _run(pool, refs, ["profile"])
    ref = pool.started[0]
    assert len(pool.started) == 3  # one reference, two candidates
    await _parked(refs)
    nexts = [i for i, op in enumerate(ref.ops()) if op == "next"]
    assert len(nexts) == 3  # built for the first job, rebuilt when parked after each
    again = ref.sent[nexts[1] : nexts[2]]
    assert "warmup_reference" not in again
    assert [h["compiled"] for h in again if h.get("op") == "time_reference"] == [False] * MIN_PROFILE_ROUNDS
    assert second.profile is not None and first.profile is not None
    assert second.profile.reference_compiled == first.profile.reference_compiled
    assert "timed by an earlier evaluation of this task" in second.profile.message


@pytest.mark.anyio
async def test_a_baseline_job_times_the_reference_alone_and_parks_no_reference() -> None:
    """A level's baseline: torch.compile's compile under no lock, then one hold of the GPU for the
    compiled model's first run and the rounds. Its task comes once: its reference is not kept."""
    pool, refs = ScriptedPool(), ReferencePool(per_task=2, idle_per_device=2)
    result = await _run(pool, refs, ["baseline"])
    assert result.baseline is not None and result.baseline.available, result.baseline
    assert result.baseline.reference_compiled is not None
    (ref,) = pool.started  # no candidate
    assert ref.ops()[:6] == [None, "next", "inputs", "roofline", "warmup_reference", "run_compiled"]
    assert refs.idle_pids() == [] and ref.killed_for


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("timing", "cls"),
    [
        (
            {"type": "timed", "error": "Traceback ...", "summary": "RuntimeError()"},
            FailureClass.RUNTIME_ERROR,
        ),
        (
            {"type": "timed", "candidate": {"times_us": "fast", "method": "cuda_graph"}},
            FailureClass.RUNTIME_CRASH,
        ),
        (
            {"type": "timed", "candidate": {"times_us": [1.0], "method": "a stopwatch"}},
            FailureClass.RUNTIME_CRASH,
        ),
        (
            {"type": "timed", "candidate": {"times_us": [], "method": "cuda_graph"}},
            FailureClass.RUNTIME_CRASH,
        ),
        ({"type": "timed"}, FailureClass.RUNTIME_CRASH),
        # samples, but no timed call kept for the reference and no reason why
        (Timed(candidate=_samples(CANDIDATE_US)).to_header(), FailureClass.FORBIDDEN_CONSTRUCT),
        (
            Timed(candidate=_samples(CANDIDATE_US), audited=[5, 6], audit_outputs=[REC]).to_header(),
            FailureClass.FORBIDDEN_CONSTRUCT,
        ),
        ({"type": "outputs", "outputs": []}, FailureClass.FORBIDDEN_CONSTRUCT),  # not what was asked
        (
            Verdict(
                failure_class="forbidden_construct", evidence={"message": "work on another stream"}
            ).to_header(),
            FailureClass.FORBIDDEN_CONSTRUCT,
        ),
    ],
)
async def test_a_candidate_timing_that_fails_or_is_malformed_is_a_verdict(
    timing: dict[str, Any], cls: FailureClass
) -> None:
    pool = ScriptedPool(candidate_timing=timing)
    result = await _run(pool, ReferencePool(per_task=2, idle_per_device=2))
    assert result.verify is not None and result.verify.correct
    assert result.profile is not None and not result.profile.available
    assert result.profile.failure_class == cls, result.profile


@pytest.mark.anyio
async def test_a_timed_call_the_reference_finds_wrong_fails_the_profile_and_a_round_with_a_reason_passes() -> (
    None
):
    class WrongWhenTimed(ScriptedWorker):
        def answer(self, h: dict[str, Any]) -> dict[str, Any]:
            if h.get("op") == "audit_timed" and h.get("seeds_for_claim"):  # the draws can stand in
                assert h["seeds"] == [] and len(h["seeds_for_claim"]) == 2
                return Compared(
                    failure_class="forbidden_construct", evidence={"message": "draws alike"}
                ).to_header()
            if h.get("op") == "audit_timed":
                assert h["seeds"] == [5, 6] and len(h["outputs"]) == 2
                return Compared(
                    failure_class="numerical_mismatch", evidence={"message": "max abs diff 3.1"}
                ).to_header()
            return super().answer(h)

    class Pool(ScriptedPool):
        async def acquire(self) -> ScriptedWorker:
            self.started.append(WrongWhenTimed(len(self.started) + 1, self.candidate_timing))
            return self.started[-1]

    result = await _run(Pool(), ReferencePool(per_task=2, idle_per_device=2))
    p = result.profile
    assert p is not None and p.failure_class == FailureClass.FORBIDDEN_CONSTRUCT, p
    assert p.evidence is not None and p.evidence.op == "timed call", p
    assert "timed by the profile" in p.evidence.message and "max abs diff 3.1" in p.evidence.message
    assert result.failure_class == FailureClass.FORBIDDEN_CONSTRUCT
    # A task whose draws change shape: timed on its inputs, unaudited, and the profile says so.
    note = "timed calls not audited: the task's get_inputs() draws a (3,) torch.float32 where the timed inputs hold a (4,)"
    unaudited = Timed(candidate=_samples(CANDIDATE_US), audit_note=note).to_header()
    result = await _run(
        ScriptedPool(candidate_timing=unaudited), ReferencePool(per_task=2, idle_per_device=2)
    )
    assert result.profile is not None and result.profile.available and note in result.profile.message
    # The same claim where the reference's own draws stand in for each other: a lie.
    result = await _run(Pool(candidate_timing=unaudited), ReferencePool(per_task=2, idle_per_device=2))
    p = result.profile
    assert p is not None and p.failure_class == FailureClass.FORBIDDEN_CONSTRUCT and p.evidence is not None
    assert "were not audited" in p.evidence.message and "draws alike" in p.evidence.message, p.evidence


@pytest.mark.anyio
async def test_a_reference_that_fails_comparing_outputs_is_a_task_error_not_the_candidates_verdict() -> None:
    # An output of 1.6 G elements once ran the reference out of memory while comparing; the
    # candidate was then called a crash. Now the reference says what it was doing, and the job
    # answers with the task's error (exit 2 at the CLI), never a verdict against the candidate.
    class FailsComparing(ScriptedWorker):
        def answer(self, h: dict[str, Any]) -> dict[str, Any]:
            if h.get("op") == "compare":
                return TaskFailed(
                    summary="OutOfMemoryError()",
                    error="Traceback ...",
                    doing="the reference compared the candidate's outputs (out of memory?)",
                ).to_header()
            return super().answer(h)

    class Pool(ScriptedPool):
        async def acquire(self) -> ScriptedWorker:
            self.started.append(FailsComparing(len(self.started) + 1))
            return self.started[-1]

    with pytest.raises(TaskError, match="while the reference compared the candidate's outputs"):
        await _run(Pool(), ReferencePool(per_task=2, idle_per_device=2))


def test_stage_seconds_add_up_to_the_job_when_stages_overlap() -> None:
    """The reference and the candidate load at the same time, and waits nest inside stages: each
    instant counts once, for the stage that started last, and the gaps are "other"."""
    from kernelcraft.engine.host.job.state import add_up, partition

    spans = [
        ("workers", 0.0, 1.0),  # the reference's worker
        ("workers", 0.0, 3.0),  # the candidate's, waiting for the reference's sizes
        ("gpu_wait", 1.5, 2.0),  # inside loading the reference
        ("reference", 1.0, 4.0),
        ("candidate", 3.0, 5.0),
        ("verify", 6.0, 8.0),
    ]
    got = partition(spans, 0.0, 9.0)
    assert got == {
        "workers": 1.0,
        "reference": 1.5,
        "gpu_wait": 0.5,
        "candidate": 2.0,
        "other": 2.0,
        "verify": 2.0,
    }
    assert sum(got.values()) == 9.0
    assert add_up({"verify": 2.0}, 2.5) == {"verify": 2.0, "other": 0.5}
    assert add_up({"verify": 2.0}, 1.9) == {"verify": 2.0}


@pytest.mark.anyio
async def test_a_timed_verdicts_first_trial_holds_the_gpu_alone_the_others_share_it() -> None:
    """The first call of a candidate runs each @triton.autotune's benchmarks; when the verdict is
    timed, the config they keep must not be chosen under other jobs' load: trial 1 holds the GPU
    alone, later trials and the knockout share it, and timing holds it alone."""
    lock = GpuLock()
    held: list[tuple[str, str]] = []
    send = ScriptedWorker.send

    async def watched(self: ScriptedWorker, header: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        if header.get("op") in ("run", "knockout", "time_candidate"):
            held.append((header["op"], "alone" if lock._writer else "shared" if lock._readers else "none"))
        await send(self, header, blobs)

    pool, refs = ScriptedPool(), ReferencePool(per_task=2, idle_per_device=2)
    device = Device("cuda", 0, pool, lock)  # type: ignore[arg-type]
    spec = EvalJob(task_source="task", candidate_source="candidate", stages=["verify", "profile"], trials=2)
    settings = CandidateSettings(memory_limit_bytes=None, sandbox=True)
    ScriptedWorker.send = watched  # type: ignore[method-assign]
    try:
        result = await Job(spec, device, refs, settings, set(), None).run()
    finally:
        ScriptedWorker.send = send  # type: ignore[method-assign]
    assert result.verify is not None and result.verify.correct and not lock.busy()
    assert held == [
        ("run", "alone"),
        ("run", "shared"),
        ("knockout", "shared"),
        *[("time_candidate", "alone")] * MIN_PROFILE_ROUNDS,
    ]


@pytest.mark.anyio
async def test_a_profile_never_compiles_again_what_an_earlier_job_compiled_for_the_same_target() -> None:
    pool, refs = ScriptedPool(), ReferencePool(per_task=2, idle_per_device=2)
    first = await _run(pool, refs, ["compile", "verify", "profile"], ["sm_90a"])
    compiled_by = [w for w in pool.started if "compile" in w.ops()]
    assert len(compiled_by) == 1 and first.compile is not None and first.compile.ok
    second = await _run(pool, refs, ["compile", "profile"], ["sm_90a"])
    assert [w for w in pool.started if "compile" in w.ops()] == compiled_by  # no worker compiled again
    assert second.compile is not None and second.compile.ok and second.profile is not None
    assert (
        second.compile.targets == first.compile.targets and second.compile.launches == first.compile.launches
    )
    # A job asking for one more target compiles that one alone and reports both, in its order.
    third = await _run(pool, refs, ["compile", "profile"], ["gfx942", "sm_90a"])
    last = [w for w in pool.started if "compile" in w.ops()][-1]
    assert [h["targets"] for h in last.sent if h.get("op") == "compile"] == [["gfx942"]]
    assert third.compile is not None and [t.target for t in third.compile.targets] == ["gfx942", "sm_90a"]
    assert refs.compile_facts.hits == 2 and refs.compile_facts.misses == 2


def test_the_gpu_checks_compile_of_a_record_is_kept_by_the_records_content_and_target() -> None:
    """Verifying the same kernel again does not compile its record again (the trusted kernels
    role's result depends on the record alone); a changed record, another target, or a result that
    is no compiler's word (a timeout) is compiled again."""
    from kernelcraft.base.failures import FailureClass
    from kernelcraft.engine.host.compilefacts import CompileFacts
    from kernelcraft.schema.evaluation import CompileResult

    facts = CompileFacts()
    program = {
        "kernels": [{"name": "relu_kernel", "source": "@triton.jit\ndef relu_kernel(x): ..."}],
        "steps": [],
    }
    ok = CompileResult(ok=True, seconds=0.6)
    assert facts.recorded(program, "sm_90a") is None
    facts.keep_recorded(program, "sm_90a", ok)
    assert facts.recorded(dict(reversed(program.items())), "sm_90a") == ok  # the same record
    assert facts.recorded(program, "gfx942") is None
    other = {**program, "steps": [{"op": "launch"}]}
    assert facts.recorded(other, "sm_90a") is None
    facts.keep_recorded(other, "sm_90a", CompileResult(ok=False, failure_class=FailureClass.RUNTIME_TIMEOUT))
    assert facts.recorded(other, "sm_90a") is None
    refused = CompileResult(ok=False, failure_class=FailureClass.COMPILE_ERROR)
    facts.keep_recorded(other, "sm_90a", refused)
    assert facts.recorded(other, "sm_90a") == refused


@pytest.mark.anyio
async def test_a_reference_that_re_ran_the_candidates_kernels_is_replaced_by_a_fresh_one_for_the_next_job() -> (
    None
):
    """The fresh-input replay runs the candidate's kernels in the reference worker, so it is never
    kept; from a task's second job on, a fresh reference is started and parked in its place, and
    the next job takes that one: no reference serves a job after it re-ran a candidate's kernels."""
    pool, refs = ScriptedPool(), ReferencePool(per_task=2, idle_per_device=2)
    pool.lazy = False  # a server's pool
    device = Device("cuda", 0, pool, GpuLock())  # type: ignore[arg-type]
    spec = EvalJob(task_source="task", candidate_source="candidate", stages=["verify"], trials=2)
    settings = CandidateSettings(memory_limit_bytes=None, sandbox=True)
    candidates = []
    for _ in range(3):
        result = await Job(spec, device, refs, settings, set(), None).run()
        assert result.verify is not None and result.verify.correct
        candidates.append(next(w for w in reversed(pool.started) if w.role == "candidate"))
        await refs.settled()
    references = [w for w in pool.started if w.role == "reference"]
    served, parked = references[:3], references[3:]
    assert all("fresh_replay" in w.ops() and w.killed_for for w in served)  # none kept after its replay
    # job 2's replacement served job 3 (no start of its own); job 3's waits, parked, for job 4
    assert [w.ops() for w in parked] == [[None, "next"]] and parked[0].killed_for is None
    third = references[2]
    assert third.ops()[:3] == [None, "next", "inputs"]  # loaded and rebuilt while parked
    assert pool.started.index(third) < pool.started.index(candidates[2])
    await _parked(refs)
    assert not device.lock.busy()
    await refs.aclose()
