"""`RayEvaluator`: the `Evaluator` on a Ray cluster — one actor per GPU, each a whole `LocalEvaluator`.

    ev = RayEvaluator(settings=knobs, address="auto")   # None: a one-machine cluster started here
    result = await ev.submit(job, progress)

Each actor (`EvalActor`) owns a `LocalEvaluator` on its node: its worker pool and zygote, its
kept reference workers and compiled-reference timings, its GPU lock. So every verdict and timing
rule of the local evaluator holds unchanged on every node: Ray only carries a job's JSON to an
actor and its result's JSON back. One actor per GPU of the cluster (Ray pins it to its GPU with
CUDA_VISIBLE_DEVICES); on a cluster without GPUs, one per `cpus_per_actor` CPUs.

Routing (`routing.py`): a job goes to a free actor (at most `jobs_per_actor` jobs each), one that
served the same task (sha256 of its source) recently first, as its local evaluator probably still
keeps that task's reference. An actor or node that dies under a job gives the job an
infrastructure fault, never a verdict: the job is run again once on another actor, and
`InfrastructureError` is raised when that fails too or no other actor is alive. A dead actor is
asked again later (Ray restarts it once where it can) and takes jobs again when it answers.

Progress: an actor cannot call the driver's coroutine, so it keeps each job's latest
(fraction, message) and the driver polls it every `PROGRESS_POLL_S` while the job runs.

Secrets: the driver (the server or `optimize`) holds the tokens and API keys; candidate code
never runs in it. A cluster started here is started with an environment without them (the
names outside `box/environment.py`'s allowlist, beside Ray's own and a home), so Ray's processes
and the actors never hold them. On a cluster started elsewhere (`ray start`), an actor whose
environment holds the server's secrets (`knobs.SERVE_SECRETS`) refuses to start and says so;
every name outside the allowlist is removed from its `os.environ`. Candidates run, as locally,
in workers with a scrubbed environment and the box.

Settings: each actor gets the driver's engine settings (`EngineSettings`, read once by the
driver's entry point, `base/knobs.py`) as an argument, never through its environment, so every
actor boxes, shrinks and starts workers as the driver was told to; its home is its node's own.

Ray is imported here only, and only when a `RayEvaluator` is made (`pip install 'kernelcraft[ray]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelcraft.base.errors import InfrastructureError, KernelcraftError, TaskError, UsageError
from kernelcraft.base.knobs import EngineSettings, Knobs, secrets_held
from kernelcraft.engine.cluster.routing import Router, Slot
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.engine.machine.pool import scrubbed_env
from kernelcraft.engine.source.intake import check_candidate, check_task
from kernelcraft.schema.evaluation import EvalJob, EvalResult

log = logging.getLogger(__name__)

# What Ray's own processes need beyond a worker's allowlist (`box/environment.py`): a home, a
# user and a temporary directory, and Ray's settings. The workers an actor starts get the
# allowlist alone (`pool.py`).
RAY_KEPT = ("HOME", "USER", "LOGNAME", "TMPDIR")


def _kept_for_ray(name: str) -> bool:
    return name in RAY_KEPT or name.startswith("RAY_")


PROGRESS_POLL_S = 0.5
REVIVE_WAIT_S = 300.0
CLOSE_WAIT_S = 60.0


class ActorLost(Exception):
    """The actor (or its node) died under a job."""


# ------------------------------------------------------------------------------------ the actor


class EvalActor:
    """One `LocalEvaluator` on a Ray node. Made a Ray actor by `RayEvaluator` (`ray.remote`), with
    the driver's engine settings (`engine`); its home (caches) is its node's default."""

    def __init__(self, workers: int | None, memory_limit_gb: float | None, engine: EngineSettings) -> None:
        held = secrets_held()
        if held:
            raise UsageError(
                f"this Ray node's environment holds {', '.join(held)}: candidates are evaluated here, "
                "so restart the node (`ray start`) from an environment without them"
            )
        clean = scrubbed_env()
        for name in [n for n in os.environ if n not in clean and not _kept_for_ray(n)]:
            del os.environ[name]
        from kernelcraft.engine.host.local import LocalEvaluator

        self.evaluator = LocalEvaluator(
            workers=workers, memory_limit_gb=memory_limit_gb, settings=Knobs(engine=engine)
        )
        self.progress: dict[str, tuple[float, str]] = {}

    async def describe(self) -> dict[str, Any]:
        import socket

        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "has_gpu": self.evaluator.has_gpu,
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "workers": self.evaluator.workers,
            "settings": self.evaluator.settings.engine.to_env(),
            "start_modes": self.evaluator.worker_start_modes(),
        }

    async def start(self) -> None:
        await self.evaluator.start()

    async def submit(self, job_id: str, job_json: str) -> dict[str, Any]:
        """The job's result as JSON, or the error it raised (its class name and message)."""
        job = EvalJob.model_validate_json(job_json)

        async def note(fraction: float, message: str) -> None:
            self.progress[job_id] = (fraction, message)

        try:
            result = await self.evaluator.submit(job, note)
        except KernelcraftError as e:
            return {"error": type(e).__name__, "message": str(e)}
        finally:
            self.progress.pop(job_id, None)
        return {"result": result.model_dump_json()}

    async def progress_of(self, job_id: str) -> tuple[float, str] | None:
        return self.progress.get(job_id)

    async def aclose(self) -> None:
        await self.evaluator.aclose()


# ---------------------------------------------------------------------------- the driver's side


@contextlib.contextmanager
def _environment_for_ray() -> Iterator[None]:
    """While a local cluster starts (its processes inherit this environment): no secrets, no
    setting of ours (the actors get theirs as arguments), and this package importable first."""
    clean = scrubbed_env()
    removed = {k: v for k, v in os.environ.items() if k not in clean and not _kept_for_ray(k)}
    old_path = os.environ.get("PYTHONPATH")
    root = str(Path(__file__).resolve().parents[3])
    try:
        for k in removed:
            del os.environ[k]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, old_path) if p)
        yield
    finally:
        os.environ.update(removed)
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise UsageError(
            "the Ray evaluator needs Ray: pip install 'kernelcraft[ray]' (on every node of the cluster)"
        ) from e
    return ray


class RayEvaluator:
    """Runs `EvalJob`s on the actors of a Ray cluster (see the module docstring).

    address: None starts a one-machine cluster here (or joins the one RAY_ADDRESS names); "auto"
      joins the cluster `ray start` runs on this machine; "ray://host:10001" a remote one through
      Ray Client. A Ray already initialised in this process is used as it is.
    actors: at most this many actors (default: one per GPU, else one per `cpus_per_actor` CPUs).
    jobs_per_actor: jobs an actor runs at once; default: one more than its evaluator's workers
      run at once (two a job), so that a job's loading and JIT overlap another's GPU time, as a
      local batch does, and no job queues on a busy actor while another is free.
    workers, memory_limit_gb: each actor's `LocalEvaluator`'s (None: sized to each task).
    settings: what the driver's entry point read (`base/knobs.py`); each actor gets their `engine`.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        actors: int | None = None,
        cpus_per_actor: float = 2.0,
        jobs_per_actor: int | None = None,
        workers: int | None = None,
        memory_limit_gb: float | None = None,
        settings: Knobs,
    ) -> None:
        ray = _import_ray()
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            self._connect(address)
        resources = ray.cluster_resources()
        self._gpus = int(resources.get("GPU", 0))
        count = self._gpus or max(1, int(resources.get("CPU", 1) // cpus_per_actor))
        self._count = min(count, actors) if actors else count
        self._per_actor = {"num_gpus": 1, "num_cpus": 0} if self._gpus else {"num_cpus": cpus_per_actor}
        self._actor_args = (workers, memory_limit_gb, settings.engine)
        # The actors start with `start` (or the first job), not here: a server that never
        # evaluates (a `tree show`) starts none.
        self.handles: dict[str, Any] = {}
        self.described: dict[str, dict[str, Any]] = {}
        """What each started actor said of itself (`EvalActor.describe`: host, GPU, the settings it
        runs with and how its pools start workers)."""
        self._jobs_per_actor = jobs_per_actor
        self.router = Router(Slot(f"actor-{i}", capacity=jobs_per_actor or 2) for i in range(self._count))
        self.faults: deque[str] = deque(maxlen=100)  # infrastructure faults, newest last
        self.placements: deque[tuple[str, str]] = deque(maxlen=1000)  # (task sha256, actor), per job
        self._started: asyncio.Task[None] | None = None
        self._revivals: set[asyncio.Task[None]] = set()
        self._closed = False

    def _connect(self, address: str | None) -> None:
        kwargs: dict[str, Any] = {"log_to_driver": False}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            kwargs["include_dashboard"] = False
        try:
            with _environment_for_ray():
                self._ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UsageError(
                f"cannot reach a Ray cluster at {address or 'this machine'} ({type(e).__name__}: {e}); "
                "check --ray-address and that `ray status` answers there"
            ) from e

    @property
    def has_gpu(self) -> bool:
        return self._gpus > 0

    async def start(self) -> None:
        """Wait until every actor has started its evaluator (optional; `submit` waits too)."""
        if self._closed:
            raise UsageError("this RayEvaluator is closed; create a new one")
        if self._started is None:
            self._started = asyncio.ensure_future(self._start_all())
        await asyncio.shield(self._started)

    async def _start_all(self) -> None:
        remote = self._ray.remote(EvalActor).options(max_restarts=1, max_task_retries=0, **self._per_actor)
        for name in self.router.slots:
            self.handles[name] = remote.remote(*self._actor_args)

        async def one(name: str) -> None:
            slot = self.router.slots[name]
            try:
                info = await self.handles[name].describe.remote()
                slot.where = f"{info['host']} pid {info['pid']}" + (
                    f" GPU {info['gpu']}" if info.get("gpu") else ""
                )
                slot.capacity = self._jobs_per_actor or info["workers"] // 2 + 1
                await self.handles[name].start.remote()
                self.described[name] = await self.handles[name].describe.remote()  # its pools too
            except Exception as e:
                self._fault(f"{name} could not start: {_cause(e)}")
                await self.router.lost(slot)

        await asyncio.gather(*(one(name) for name in self.handles))
        if not self.router.usable():
            raise InfrastructureError(f"no evaluation actor started: {'; '.join(self.faults)}")

    async def __aenter__(self) -> RayEvaluator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        # The sources are checked here (ast only) so an unusable job fails before it travels.
        check_task(job.task_source, job.task_name)
        check_candidate(job.candidate_source, job.candidate_name)
        await self.start()
        task = hashlib.sha256(job.task_source.encode()).hexdigest()
        tried: list[str] = []
        while True:
            slot = await self.router.acquire(task, exclude=tried)
            served = False
            try:
                answer = await self._run_on(slot, job, progress)
                served = True
            except ActorLost as e:
                await self._lose(slot, str(e))
                tried.append(slot.name)
                if len(tried) == 2:
                    raise InfrastructureError(
                        f"the job was run twice and its actor died both times ({'; '.join(list(self.faults)[-2:])}); "
                        "no verdict on the candidate was reached: check the cluster (`ray status`) and submit again"
                    ) from e
                if progress is not None:
                    await progress(0.0, f"{slot.name} died under the job (not a verdict): running it again")
                continue
            finally:
                await self.router.release(slot, task, served=served)
            self.placements.append((task, slot.name))
            return _result_of(answer, slot)

    async def _run_on(self, slot: Slot, job: EvalJob, progress: ProgressCallback | None) -> dict[str, Any]:
        """Run the job on the slot's actor, relaying its progress; ActorLost when it dies."""
        ray = self._ray
        handle = self.handles[slot.name]
        job_id = uuid.uuid4().hex
        ref = handle.submit.remote(job_id, job.model_dump_json())
        done = asyncio.wrap_future(ref.future())
        last: tuple[float, str] | None = None
        try:
            while True:
                finished, _ = await asyncio.wait({done}, timeout=PROGRESS_POLL_S if progress else None)
                if finished:
                    return dict(done.result())
                with contextlib.suppress(Exception):  # a dying actor: `done` says so
                    now = await handle.progress_of.remote(job_id)
                    if now is not None and now != last and progress is not None:
                        last = now
                        await progress(now[0], now[1])
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
            raise
        except ray.exceptions.RayTaskError as e:
            raise InfrastructureError(f"the evaluation actor {slot.name} failed: {_cause(e)}") from e
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.NodeDiedError,
        ) as e:
            raise ActorLost(f"{slot.name} on {slot.where or 'its node'} died: {_cause(e)}") from e

    async def _lose(self, slot: Slot, why: str) -> None:
        self._fault(why)
        await self.router.lost(slot)
        if not self._closed:
            task = asyncio.ensure_future(self._revive(slot))
            self._revivals.add(task)
            task.add_done_callback(self._revivals.discard)

    async def _revive(self, slot: Slot) -> None:
        """Ray restarts a dead actor once where it can: use it again when it answers."""
        handle = self.handles[slot.name]
        try:
            await asyncio.wait_for(_await_ref(handle.start.remote()), REVIVE_WAIT_S)
        except Exception as e:
            log.warning("evaluation actor %s stays out of service: %s", slot.name, _cause(e))
            return
        log.info("evaluation actor %s is back", slot.name)
        await self.router.revived(slot)

    def _fault(self, why: str) -> None:
        log.warning("infrastructure fault (not a verdict): %s", why)
        self.faults.append(why)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._revivals):
            task.cancel()
        ray = self._ray

        async def close(handle: Any) -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_await_ref(handle.aclose.remote()), CLOSE_WAIT_S)
            with contextlib.suppress(Exception):
                ray.kill(handle)

        await asyncio.gather(*(close(h) for h in self.handles.values()))
        if self._owns_ray and ray.is_initialized():
            await asyncio.to_thread(ray.shutdown)


async def _await_ref(ref: Any) -> Any:
    return await ref


def _cause(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:500]


_ERRORS: dict[str, type[KernelcraftError]] = {"TaskError": TaskError, "UsageError": UsageError}


def _result_of(answer: dict[str, Any], slot: Slot) -> EvalResult:
    """The actor's answer: a result, or the error its evaluator raised (a fault of the evaluator
    unless the job itself was unusable)."""
    if "result" in answer:
        return EvalResult.model_validate_json(answer["result"])
    error = _ERRORS.get(answer.get("error", ""))
    if error is not None:
        raise error(answer["message"])
    raise InfrastructureError(
        f"the evaluator on {slot.name} ({slot.where or 'its node'}) failed: "
        f"{answer.get('error')}: {answer.get('message')}"
    )
