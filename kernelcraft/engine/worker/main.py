"""A single-use evaluation worker process: `python -m kernelcraft.engine.worker.main FD`.

The parent (`pool.py`) starts it with a scrubbed environment, in its own session, with one end of
a socket pair as file descriptor FD. It imports torch and Triton (and initialises CUDA when it has
a GPU), says `ready`, and waits for its one job, which gives it a role:

- **reference** (trusted, `worker/reference.py`): loads only the task; builds `Model` after `torch.manual_seed(seed0)`;
  for each trial draws inputs from the seed the parent sends, computes the reference outputs,
  shares a copy of the inputs, and later compares what the candidate returned against its own
  private copies (outputs, and inputs for mutation). Also counts FLOPs/bytes and times the
  reference for profile. It never imports candidate code, so the parent may keep it for the next
  job on the same task (`next`: state dropped, `Model` rebuilt from the seed).
- **candidate** (untrusted, `worker/candidate.py`): loads the task (for `get_init_inputs`) and then the candidate,
  builds `ModelNew` after the same seed, and for each trial runs forward on fresh clones of the
  inputs, with memory poisoned underneath, aten ops recorded and Triton launches counted, and
  sends the outputs back. It never decides a verdict on the numbers.

Nothing is printed on stdout for the parent: every message goes over the socket (see
`channel.py`; the messages are `protocol.py`'s). A candidate process exits after its one job; the parent kills its process group regardless.

Written by the evaluation engine only.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from kernelcraft.engine.wire import childenv
from kernelcraft.engine.wire.protocol import Load, Ready
from kernelcraft.engine.worker.candidate import CandidateWorker
from kernelcraft.engine.worker.reference import ReferenceWorker


def _import_base() -> None:
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import triton  # noqa: F401  (imported before any job: the pool's workers start warm)
    import triton.language  # noqa: F401

    from kernelcraft.base import failures  # noqa: F401

    # timing captures the timers before any candidate is imported
    from kernelcraft.engine.measure import (
        timing,  # noqa: F401
    )
    from kernelcraft.schema import evaluation  # noqa: F401


def _import_dynamo() -> None:
    import threading

    # Triton's key (`_warm_triton`) is mostly hashing its 400 MB library, which frees the GIL:
    # computed beside dynamo's import, it costs the zygote ~0.1 s instead of 0.4 s (H200). The
    # thread ends before this stage does (the zygote forks with one thread only).
    beside = threading.Thread(target=_triton_key, daemon=True) if _compiles() else None
    if beside is not None:
        beside.start()
    try:
        import torch._dynamo  # noqa: F401
    finally:
        if beside is not None:
            beside.join()

    from kernelcraft.engine.watch import guard

    guard.Integrity()  # runs the dispatch-mode machinery once


def _compiles() -> bool:
    """Whether this process's Triton compiles (the interpreter's does not)."""
    return os.environ.get("TRITON_INTERPRET") != "1"


def _triton_key() -> None:
    """Triton's cache key for itself, kept by Triton for the process (a failure here is only
    paid again at the first compile)."""
    import contextlib

    from triton.runtime.cache import triton_key

    with contextlib.suppress(Exception):
        triton_key()


def _import_inductor() -> None:
    import torch._inductor.compile_fx  # noqa: F401


def _warm_triton() -> None:
    """What Triton does once per process before its first compile, done once for every worker:
    `triton_key()` hashes Triton's own sources and library (0.46 s on the H200; done beside
    dynamo's import where there is one), and the first argument binder imports
    triton.experimental.gluon (0.2 s). Both were in every candidate's first compile, and in the
    reference's torch.compile (inductor's cache keys use the former)."""
    import contextlib

    import torch
    import triton
    import triton.language as tl

    from kernelcraft.engine.watch import records

    _triton_key()
    with contextlib.suppress(Exception):  # a warm-up: the first compile pays whatever fails here

        @triton.jit
        def probe(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
            pass

        records.specialize(probe, records.probe_backend(), (torch.empty(1), 1), {"BLOCK": 16})


def import_stages(*, cuda: bool) -> list[tuple[str, Any]]:
    """One-off costs a worker pays before it reports ready, so they fall outside every job's
    time: torch, Triton and the harness modules; torch._dynamo (what running a task on the meta
    device imports, to measure its outputs, and counting its FLOPs: ~1 s, 3.2 s without bytecode);
    Triton's one-off costs before a first compile (`_warm_triton`), where Triton compiles; on a
    GPU, torch's inductor (what the reference's torch.compile imports). In order; the zygote runs
    each stage that leaves the GPU driver alone."""
    stages: list[tuple[str, Any]] = [("base", _import_base)]
    # A one-off command's workers (the pool's `lazy`: KERNELCRAFT_WORKER_IMPORTS=lazy) leave dynamo
    # and inductor to the job that needs them: `verify` of a small task with factory-made inputs
    # needs neither (the candidate's dispatch modes skip dynamo's wrapper, `sizing.measure` leaves
    # its outputs unmeasured rather than import it), and on the H200 the workers that imported
    # inductor took 17.6 s of a 22 s first verdict. `lazy-inductor` leaves inductor only (where
    # kernelcraft keeps the bytecode: pool.base_env).
    imports = childenv.mine().imports
    if imports != "lazy":
        stages.append(("dynamo", _import_dynamo))
    if _compiles():  # (after dynamo, whose import it overlaps; the interpreter compiles nothing)
        stages.append(("triton", _warm_triton))
    if cuda and not imports.startswith("lazy"):
        stages.append(("inductor", _import_inductor))
    return stages


def prepare(*, cuda: bool) -> None:
    """Everything a worker imports before it can take a job (what is imported already costs
    nothing again)."""
    for _name, stage in import_stages(cuda=cuda):
        stage()


def serve(fd: int) -> None:
    """Say `ready` on the socket `fd` (after initialising CUDA on a GPU), take one job and run it.
    Called in a spawned worker, or in a worker the zygote forked (which imports here what the
    zygote could not import without touching the GPU)."""
    from kernelcraft.base import bytecode
    from kernelcraft.engine import box

    t0 = time.perf_counter()
    handle = bytecode.keep_handle()  # the bytecode cache, while this process can still reach it
    box.start()  # namespaces, while this process has one thread (in a PID namespace: a child)
    bytecode.read_through(handle)
    t1 = time.perf_counter()
    import torch

    from kernelcraft.engine.wire import channel

    want = childenv.mine().device
    prepare(cuda=want == "cuda")
    t2 = time.perf_counter()
    # The job's own modules (the task, the candidate, each in this worker's directory) are used
    # once: their bytecode would only pile up, in kernelcraft's bytecode cache too where it is in use.
    sys.dont_write_bytecode = True

    sock = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    # Nothing but this process's own code talks on the socket; its stdout is a log file.
    if want == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        device, cuda_ipc, name = "cuda", True, f"cuda:0 ({torch.cuda.get_device_name(0)})"
    else:
        torch.set_num_threads(1)
        device, cuda_ipc, name = "cpu", False, "cpu"
    t3 = time.perf_counter()
    startup = {"box": round(t1 - t0, 3), "imports": round(t2 - t1, 3), "device": round(t3 - t2, 3)}
    channel.send_frame(sock, Ready(pid=box.host_pid(), device=name, startup=startup).to_header())
    try:
        frame = channel.recv_frame(sock)
        job = Load.from_header(frame.header)
    except Exception:
        return
    if job.role == "candidate" and job.compiled:  # before the candidate is imported (kernelcache.py)
        from kernelcraft.engine.worker import compiled

        try:
            compiled.seed(job.compiled, frame.blobs)
        except (OSError, ValueError, KeyError):  # it compiles them itself, as without
            pass
    if job.role == "kernels":
        from kernelcraft.engine.worker.kernels import KernelsWorker

        KernelsWorker(sock, device, cuda_ipc).run(job, Path(job.workdir))
        return
    role = ReferenceWorker if job.role == "reference" else CandidateWorker
    role(sock, device, cuda_ipc).run(job, Path(job.workdir))


def main() -> None:
    serve(int(sys.argv[1]))


if __name__ == "__main__":
    main()
