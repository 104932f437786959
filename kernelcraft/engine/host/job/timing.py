"""A job's timing: the profile stage (the candidate against the reference, interleaved rounds on
the GPU; the roofline floor without one) and the baseline stage (the reference alone), for `Job`.

The compiled reference's timing of a task is measured once and reused (`timingcache.py`), on the
same GPU as the reference worker names it. It reads and reports through the job's `JobState`
(`job/state.py`: the spec, the device, progress) and asks its processes through the job's
`JobWorkers` (the reference, the candidate, the GPU lock); its own state is timing's alone.
"""

from __future__ import annotations

import secrets
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from kernelcraft.base.errortext import exception_text
from kernelcraft.base.failures import FailureClass, is_out_of_memory
from kernelcraft.engine.host.job.state import JobState
from kernelcraft.engine.host.job.workers import JobWorkers, Stop
from kernelcraft.engine.host.verdicts import device_label, evidence_from, profile_result, timing_note
from kernelcraft.engine.machine.pool import WorkerProcess
from kernelcraft.engine.measure import gpustate, timingcache
from kernelcraft.engine.measure.samples import agreeing_rounds, round_spread, spread_within, summarize
from kernelcraft.engine.wire.protocol import (
    AuditTimed,
    Compared,
    ComputeRoofline,
    Msg,
    ProtocolError,
    RooflineCounted,
    RunCompiled,
    Samples,
    TimeCandidate,
    Timed,
    TimeReference,
    TimingMethod,
    UseInputs,
    Warm,
    WarmupReference,
)
from kernelcraft.schema.evaluation import Evidence, KernelTime, ProfileResult, Roofline, Timing

# Timing runs interleaved rounds (candidate, then reference) until, for every timed callable, at
# least MIN_PROFILE_ROUNDS rounds agree: each round's median within ROUND_AGREEMENT of the median of
# rounds (for callables over samples.ROUND_CHECK_ABOVE_US); a round that does not is an outlier (a
# burst from another tenant, a clock dip), left out of the figures and measured again. The samples
# of the agreeing rounds must also have an interquartile range within TARGET_SPREAD of their median
# (over samples.SPREAD_CHECK_ABOVE_US). At MAX_PROFILE_ROUNDS it stops, and says the profile may not
# repeat.
MIN_PROFILE_ROUNDS = 3
MAX_PROFILE_ROUNDS = 10
TARGET_SPREAD = 0.02
ROUND_AGREEMENT = 0.05
PROFILE_BUDGET_MS = 60.0
NO_GPU_MESSAGE = "timing needs a CUDA GPU and this machine has none; the roofline floor below is for {target}"


@dataclass
class _Rounds:
    """The timing samples gathered so far, round by round, per timed callable ("candidate",
    "eager", "compiled")."""

    keys: tuple[str, ...]
    samples: dict[str, list[list[float]]] = field(default_factory=dict)
    methods: dict[str, TimingMethod] = field(default_factory=dict)
    sets: dict[str, int] = field(default_factory=dict)
    estimates: dict[str, float] = field(default_factory=dict)
    """µs a call, as the first round of each callable estimated it (`TimeReference.estimates`)."""
    count: int = 0

    def add(self, key: str, s: Samples) -> None:
        self.samples.setdefault(key, []).append(list(s.times_us))
        self.methods[key] = s.method
        self.sets[key] = s.sets
        if s.estimate_us and key not in self.estimates:
            self.estimates[key] = s.estimate_us

    def kept(self, key: str) -> list[list[float]]:
        """The rounds of `key` that agree with the median of its rounds (`agreeing_rounds`)."""
        return agreeing_rounds(self.samples.get(key, []), ROUND_AGREEMENT)

    def settled(self, key: str) -> bool:
        kept = self.kept(key)
        return len(kept) >= MIN_PROFILE_ROUNDS and spread_within([x for r in kept for x in r], TARGET_SPREAD)

    def done(self) -> bool:
        if self.count < MIN_PROFILE_ROUNDS:
            return False
        return self.count >= MAX_PROFILE_ROUNDS or all(self.settled(k) for k in self.keys)

    def timings(self) -> dict[str, Timing]:
        out = {}
        for k in self.keys:
            kept = self.kept(k)
            out[k] = summarize([x for r in kept for x in r], self.methods[k], self.sets.get(k, 1))
            out[k].round_spread = round(round_spread(kept), 4)
        return out

    def outliers(self) -> int:
        """Rounds left out of some callable's figures."""
        return max(len(self.samples.get(k, [])) - len(self.kept(k)) for k in self.keys)

    def disagreeing(self) -> list[str]:
        """Callables for which fewer than `MIN_PROFILE_ROUNDS` rounds agreed: their median may not
        repeat. (A wide spread within agreeing rounds moves no median: it only asks for rounds.)"""
        return [k for k in self.keys if len(self.kept(k)) < MIN_PROFILE_ROUNDS]

    def words(self) -> str:
        out = self.outliers()
        return f"{self.count} interleaved rounds" + (
            f" ({out} outlier round{'s' if out > 1 else ''} left out and measured again)" if out else ""
        )


STEADY_MEDIAN = 0.005
"""A baseline stops once its last round moved the median of the agreeing rounds by at most this."""


class _BaselineRounds(_Rounds):
    """A baseline's rounds: done also when every callable's median is steady (`steady`). A
    kernel whose samples spread wider than `TARGET_SPREAD` asks for rounds up to
    `MAX_PROFILE_ROUNDS` in a profile, which moves no median; in a level's baseline, eight
    such tasks took ten rounds each of the GPU alone."""

    def steady(self, key: str) -> bool:
        """At least `MIN_PROFILE_ROUNDS` rounds agree, and the last one moved their median by
        at most `STEADY_MEDIAN`: more rounds would not move it either."""
        rounds = self.samples.get(key, [])
        kept, before = agreeing_rounds(rounds, ROUND_AGREEMENT), agreeing_rounds(rounds[:-1], ROUND_AGREEMENT)
        if len(kept) < MIN_PROFILE_ROUNDS or len(before) < MIN_PROFILE_ROUNDS - 1:
            return False
        now = statistics.median([x for r in kept for x in r])
        then = statistics.median([x for r in before for x in r])
        return abs(now - then) <= STEADY_MEDIAN * now

    def done(self) -> bool:
        if self.count < MIN_PROFILE_ROUNDS:
            return False
        return super().done() or all(self.settled(k) or self.steady(k) for k in self.keys)


class JobTiming:
    """The timing stages of one job, on its workers."""

    def __init__(self, state: JobState, workers: JobWorkers) -> None:
        self.state = state
        self.workers = workers
        self.kernels: dict[str, list[dict[str, Any]]] = {}
        """Each side's kernels and their GPU time per forward, from the first round (kernelprof.py)."""
        self.kernels_error: str | None = None
        self.audited = 0
        """Timed calls of the candidate the reference checked (`audit`)."""
        self.audit_notes: set[str] = set()

    def reference_device(self) -> str:
        """The GPU as the reference worker named it (a compiled timing is reused on the same one)."""
        info = self.workers.reference_info()
        return str(info.get("device", "")) if info is not None else ""

    def compiled_timing(self) -> Timing | None:
        return self.state.references.compiled_timing(self.state.key, self.reference_device())

    async def profile(self, cand: WorkerProcess | None, input_sets: int) -> ProfileResult:
        """Time the candidate against the reference on a GPU; without one, the roofline floor
        only (`cand` is None: no candidate runs)."""
        start = time.perf_counter()
        # Verification ended on the last extra input set: time on get_inputs(), the task's own.
        own = await self.workers.own_inputs(again=input_sets > 1)
        if own is not None:
            made, blobs = own
            if cand is not None and self.state.device.kind != "cpu":
                await cand.send(UseInputs(inputs=made.inputs).to_header(), blobs)
                self.workers.candidate_verdict(await self.workers.recv(cand, candidate=True), Msg.OK)
        if self.state.device.kind == "cpu":
            return await self.floor_only(start)
        assert cand is not None
        roof, _ = await self.roofline()
        return await self.time_on_gpu(cand, roof, start)

    async def floor_only(self, start: float) -> ProfileResult:
        """Without a GPU: the roofline floor, nothing timed."""
        roof, roof_error = await self.roofline()
        message = NO_GPU_MESSAGE.format(target=self.state.spec.roofline_target)
        if roof_error:
            message += f" (roofline unavailable: {roof_error[:300]})"
        return ProfileResult(
            available=False, message=message, roofline=roof, seconds=round(time.perf_counter() - start, 3)
        )

    async def roofline(self) -> tuple[Roofline | None, str | None]:
        frame = await self.workers.ask_ref(
            ComputeRoofline(target=self.state.spec.roofline_target, full_size=self.state.interpret),
            error_is_an_answer=True,
        )
        counted = RooflineCounted.from_header(frame.header)
        if counted.roofline is None:
            return None, counted.error or "the roofline could not be computed"
        return Roofline.model_validate(counted.roofline), None

    async def time_on_gpu(self, cand: WorkerProcess, roof: Roofline | None, start: float) -> ProfileResult:
        """Interleave rounds of candidate and reference timing (each in its own process, on the
        same inputs), then summarise each side's samples."""
        cached = self.compiled_timing()
        rounds = _Rounds(("candidate", "eager") if cached is not None else ("candidate", "eager", "compiled"))
        while not rounds.done():
            rounds.count += 1
            await self.state.progress(
                0.9 + 0.1 * (rounds.count - 1) / MAX_PROFILE_ROUNDS, f"timing, round {rounds.count}"
            )
            first = rounds.count == 1  # the first round also says where each side's time goes
            await self.time_candidate(cand, rounds, breakdown=first)
            failed = await self.time_reference(rounds, compiled=cached is None, breakdown=first)
            if failed is not None:
                return ProfileResult(available=False, message=failed, roofline=roof)
        t = rounds.timings()
        if cached is None:
            self.state.references.remember_compiled(self.state.key, self.reference_device(), t["compiled"])
        else:
            t["compiled"] = cached
        result = profile_result(
            t["candidate"],
            t["eager"],
            t["compiled"],
            roof,
            device_label(self.state.device, cand.info),
            round(time.perf_counter() - start, 3),
        )
        result.message += f"; {rounds.words()}"
        if self.audited:
            result.message += f"; {self.audited} timed calls on fresh inputs checked by the reference"
        for note in sorted(self.audit_notes):
            result.message += f"; {note}"
        await self.check_stability(result, rounds, ("candidate", "eager") if cached else rounds.keys)
        result.kernels = {k: [KernelTime.model_validate(x) for x in v] for k, v in self.kernels.items()}
        if self.kernels_error:
            result.message += f"; per-kernel times unavailable ({self.kernels_error})"
        if cached is not None:
            result.message += f"; {timingcache.REUSED} (reused for {timingcache.TTL_S / 60:.0f} min)"
        return result

    async def check_stability(self, result: ProfileResult, rounds: _Rounds, keys: tuple[str, ...]) -> None:
        """Say in the profile what may keep it from repeating within 5%: rounds that did not
        agree by the last one, clocks held down or another process on the GPU (`gpustate`)."""
        why = []
        unsettled = [k for k in rounds.disagreeing() if k in keys]
        if unsettled:
            why.append(
                f"after {rounds.count} rounds the timings of {', '.join(unsettled)} still varied by more than "
                f"{ROUND_AGREEMENT:.0%} between rounds"
            )
        state = await gpustate.gpu_state(self.state.device.index or 0)
        result.message += f"; {state.words()}"
        if state.disturbed:
            why.append(state.words())
        result.unstable = "; ".join(why) or None

    async def time_candidate(self, cand: WorkerProcess, rounds: _Rounds, *, breakdown: bool = False) -> None:
        method: TimingMethod | Literal["auto"] = rounds.methods.get("candidate", "auto")
        request = TimeCandidate(
            budget_ms=PROFILE_BUDGET_MS, method=method, breakdown=breakdown, audit=secrets.randbits(62)
        )
        await cand.send(request.to_header())
        frame = await self.workers.recv(cand, candidate=True)
        timed = self.workers.read(frame, Timed)
        self._keep_kernels(timed, ["candidate"])
        if timed.error is not None:
            raise Stop(
                FailureClass.RUNTIME_ERROR,
                Evidence(message="timing the candidate failed", error_text=timed.error),
            )
        try:
            rounds.add("candidate", timed.samples("candidate"))
        except ProtocolError as e:
            raise Stop(
                FailureClass.RUNTIME_CRASH, Evidence(message=f"the candidate sent malformed timings: {e}")
            ) from e
        await self.audit(timed, frame.blobs)

    async def audit(self, timed: Timed, blobs: list[bytes]) -> None:
        """The reference's check of the timed calls the candidate kept (`measure/audit.py`): each
        one's inputs drawn again from its seed, Model run on them, the outputs compared. A round
        with no kept call must say why (the task's draws differ in shape), and the reference
        checks that claim on two draws of its own; a round with neither fails."""
        if timed.audit_note is not None:
            claim = AuditTimed(seeds=[], outputs=[], seeds_for_claim=[secrets.randbits(62) for _ in range(2)])
            await self.checked(
                claim, [], f"the candidate's timed calls were not audited ({timed.audit_note})"
            )
            self.audit_notes.add(timed.audit_note)
            return
        if not timed.audited or len(timed.audited) != len(timed.audit_outputs):
            raise Stop(
                FailureClass.FORBIDDEN_CONSTRUCT,
                Evidence(
                    message="the candidate's timing round sent no outputs of its timed calls for the "
                    "reference to check, and no reason",
                    op="timed call",
                ),
            )
        await self.checked(AuditTimed(seeds=timed.audited, outputs=timed.audit_outputs), blobs, None)
        self.audited += len(timed.audited)

    async def checked(self, request: AuditTimed, blobs: list[bytes], claim: str | None) -> None:
        """Ask the reference to check timed calls (`request`); what it finds wrong stops the job.
        `claim`: the words of a round that said it could not be audited (no outputs sent)."""
        frame = await self.workers.ask_ref(request, blobs)
        if frame.header.get("type") != Msg.COMPARED:
            self.workers.task_error(frame)
            raise Stop(
                FailureClass.RUNTIME_CRASH,
                Evidence(message="the reference could not check the candidate's timed calls"),
            )
        compared = Compared.from_header(frame.header)
        if compared.failure_class is None:
            return
        ev = evidence_from(compared.evidence, "a timed call gave a wrong answer")
        if claim is None:
            ev.message = (
                "a call of forward timed by the profile, on fresh inputs drawn after verification, gave a "
                f"wrong answer ({ev.message}): forward computed less while it was timed than while it "
                "was verified (an answer kept from an earlier call, or work skipped after a count of "
                "calls), or its answers fall outside the tolerance on some draws of the inputs. Compute "
                "every call's answer from its inputs"
            )
        else:
            ev.message = f"{claim}: {ev.message}"
        ev.op = "timed call"
        raise Stop(FailureClass.FORBIDDEN_CONSTRUCT, ev)

    async def time_reference(
        self, rounds: _Rounds, *, compiled: bool, breakdown: bool = False, estimates: bool = False
    ) -> str | None:
        """One round of the reference's timings; why they failed, if they did. `estimates`: a
        round after the first reuses its estimate of each callable (no warm-up and estimate again)."""
        ref_keys = [k for k in rounds.keys if k != "candidate"]
        known = {k: rounds.estimates[k] for k in ref_keys if k in rounds.estimates} if estimates else {}
        frame = await self.workers.ask_ref(
            TimeReference(
                budget_ms=PROFILE_BUDGET_MS,
                methods={k: rounds.methods[k] for k in ref_keys if k in rounds.methods},
                compiled=compiled,
                breakdown=breakdown,
                **({"estimates": known} if known else {}),
            )
        )
        timed = Timed.from_header(frame.header)
        self._keep_kernels(timed, ["eager", "compiled"])
        if timed.error is not None:
            return f"timing the reference failed: {exception_text(timed.error).strip()[:600]}"
        for k in ref_keys:
            rounds.add(k, timed.samples(k))
        return None

    def _keep_kernels(self, timed: Timed, keys: list[str]) -> None:
        """Each side's kernel breakdown, as the worker's profiler gave it (kernelprof.py)."""
        for key in keys:
            if key in timed.kernels:
                self.kernels[key] = list(timed.kernels[key])[:9]
        if timed.kernels_error and not self.kernels_error:
            self.kernels_error = timed.kernels_error[:300]

    # ---- baseline: the reference alone ----

    async def baseline(self) -> ProfileResult:
        """Time the reference alone, eager and under torch.compile, on the task's get_inputs()
        (as KernelBench's baseline script does, with our interleaved rounds and L2 handling);
        without a GPU, the roofline floor of the task's real sizes, nothing run.

        The GPU, in order: the inputs, the eager reference's first run (its outputs) and the
        roofline's counted run share it; torch.compile's compile (CPU work, seconds) holds no
        lock, so other jobs' timings go on meanwhile; then one hold alone covers the compiled
        model's first run (inductor's autotuning, which must not pick its configs under other
        jobs' load) and the timing rounds, which reuse their first round's estimates and stop
        once the medians are steady (`_BaselineRounds`)."""
        start = time.perf_counter()
        st = self.state
        if st.device.kind == "cpu":
            return await self.floor_only(start)
        await st.progress(0.1, "making the inputs")
        async with self.workers.gpu_lock(exclusive=False, why="baseline inputs"):
            await self.workers.inputs(0)
            roof, _ = await self.roofline()  # counted on a run of the model on the GPU
        await st.progress(0.2, "compiling the reference with torch.compile")
        t = time.perf_counter()
        frame = await self.workers.ask_ref(WarmupReference(gated=True), error_is_an_answer=True)
        t = st.stage("reference_compile", t)
        async with self.workers.gpu_lock(exclusive=True, why="baseline timing"):
            if frame.header.get("type") == Msg.GPU_WANTED:  # (mid-request until its `warm`)
                frame = await self.workers.ask_ref(RunCompiled(), error_is_an_answer=True)
            warm = Warm.from_header(frame.header)
            if warm.error and is_out_of_memory(warm.error) and not st.alone:
                # Beside other jobs' memory: the evaluator runs it again alone (`memory.ran_out`),
                # rather than keep an eager time without the compiled one.
                message = f"torch.compile's first run ran out of memory: {warm.error[:300]}"
                return ProfileResult(available=False, message=message, roofline=roof)
            # A model torch.compile cannot handle still has its eager time.
            rounds = _BaselineRounds(("eager",) if warm.error else ("eager", "compiled"))
            while not rounds.done():
                rounds.count += 1
                await st.progress(
                    0.3 + 0.7 * (rounds.count - 1) / MAX_PROFILE_ROUNDS, f"timing, round {rounds.count}"
                )
                failed = await self.time_reference(rounds, compiled=warm.error is None, estimates=True)
                if failed is not None:
                    return ProfileResult(available=False, message=failed, roofline=roof)
        st.stage("timing", t)
        times = rounds.timings()
        if "compiled" in times:
            st.references.remember_compiled(st.key, self.reference_device(), times["compiled"])
        notes = [timing_note(k, v) for k, v in times.items()]
        if warm.error:
            notes.append(f"torch.compile failed: {warm.error[:300]}")
        if warm.ungated:
            notes.append("torch.compile compiled no frame: its first run went before the GPU was held")
        return ProfileResult(
            available=True,
            message="; ".join([*notes, f"{rounds.words()}, the reference alone"]),
            device=device_label(st.device, self.workers.reference_info()),
            reference_eager=times["eager"],
            reference_compiled=times.get("compiled"),
            roofline=roof,
            seconds=round(time.perf_counter() - start, 3),
        )
