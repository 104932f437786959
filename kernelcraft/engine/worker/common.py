"""`Worker`: what both roles of a worker process share (see `worker/main.py` for the roles).

Messaging over the socket (`protocol.py`'s models), tensor records, and the task's side of a job:
loading the task, building a model after the seed, making a trial's inputs on the device. The
roles subclass it: `ReferenceWorker` (`worker/reference.py`) and `CandidateWorker`
(`worker/candidate.py`). Runs in the worker process only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import socket
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kernelcraft.engine.wire.protocol import Load, Progress, Reply, TaskFailed

if TYPE_CHECKING:
    from kernelcraft.engine.wire.channel import Frame

MAX_ERROR_CHARS = 4000


def trim(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


def trim_keeping_candidate(text: str, e: BaseException) -> str:
    """`trim(text)`, but a traceback cut short keeps the candidate's own frames (its kernel's line
    in the interpreter, under many frames of Triton's) at its head, through chained exceptions."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    frames: list[traceback.FrameSummary] = []
    seen: set[int] = set()
    link: BaseException | None = e
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        frames = [
            f for f in traceback.extract_tb(link.__traceback__) if Path(f.filename).name in CLIENT_FILES
        ] + frames
        link = link.__cause__ or link.__context__
    if not frames:
        return trim(text)
    head = "the candidate's frames (the traceback is cut below):\n" + "".join(
        traceback.format_list(frames[-8:])
    )
    head = head[: MAX_ERROR_CHARS // 2]
    return head + "…" + text[-(MAX_ERROR_CHARS - len(head)) :]


def error_line(e: BaseException) -> str:
    return trim(f"{type(e).__name__}: {e}")


# The files a client sent, as the worker names them, and as the client knows them.
CLIENT_FILES = {"kernelcraft_task.py": "task.py", "kernelcraft_candidate.py": "candidate.py"}


def client_traceback(e: BaseException) -> str:
    """The traceback of `e` as its author should see it: only the frames in the files the client
    sent (the task, the candidate), named as the client knows them, then the exception. Nothing
    of ours (no worker directory, no frames of kernelcraft, torch or Triton) goes back to a client
    in a task's error answer."""
    frames = [
        traceback.FrameSummary(CLIENT_FILES[Path(f.filename).name], f.lineno, f.name, line=f.line)
        for f in traceback.extract_tb(e.__traceback__)
        if Path(f.filename).name in CLIENT_FILES
    ]
    head = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) if frames else ""
    return trim(head + "".join(traceback.format_exception_only(type(e), e)))


class Worker:
    """A worker process's end of the socket, on `device` ("cpu" or "cuda"); `cuda_ipc`: send
    CUDA tensors as IPC handles."""

    def __init__(self, sock: socket.socket, device: str = "cpu", cuda_ipc: bool = False) -> None:
        import torch

        from kernelcraft.engine.wire import channel, tensors

        self.sock = sock
        self.torch = torch
        self.initial_values: dict[str, str] = {}
        """A digest of each tensor the model held as built, by name (`build`)."""
        self.channel = channel
        self.tensors = tensors
        self.device = device
        self.cuda_ipc = cuda_ipc

    # ---- messaging ----

    def send(self, msg: Reply, blobs: list[bytes] | None = None) -> None:
        self.channel.send_frame(self.sock, msg.to_header(), blobs)

    def recv(self) -> Frame:
        return self.channel.recv_frame(self.sock)

    def task_error(self, e: BaseException, doing: str | None = None) -> None:
        """Tell the parent the trusted task itself failed (called inside the `except`)."""
        said = {"doing": doing} if doing is not None else {}
        self.send(TaskFailed(error=client_traceback(e), summary=repr(e), **said))

    def progress(self, message: str) -> None:
        self.send(Progress(message=message))

    def pack(self, obj: Any) -> tuple[Any, list[bytes]]:
        blobs: list[bytes] = []
        return self.tensors.pack(obj, blobs, cuda_ipc=self.cuda_ipc), blobs

    def unpack_cloned(self, rec: Any, blobs: list[bytes]) -> Any:
        obj = self.tensors.unpack(rec, blobs)
        return self._map(obj, lambda t: t.clone())

    def shapes(self, obj: Any) -> list[list[int]]:
        """The shape of each tensor in `obj`, in the order `tensors.leaves` gives them."""
        return [list(x.shape) for x in self.tensors.leaves(obj) if isinstance(x, self.torch.Tensor)]

    def _map(self, obj: Any, fn: Any) -> Any:
        if isinstance(obj, self.torch.Tensor):
            return fn(obj)
        if isinstance(obj, (list, tuple)):
            items = [self._map(x, fn) for x in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        if isinstance(obj, dict):
            return {k: self._map(v, fn) for k, v in obj.items()}
        return obj

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    # ---- shared by both roles ----

    def load_task(self, job: Load, workdir: Path) -> Any:
        return import_source(job.task_source, workdir, "kernelcraft_task")

    def init_inputs(self, task: Any, seed0: int) -> list[Any]:
        self.torch.manual_seed(seed0)
        return list(task.get_init_inputs())

    def build(self, cls: Any, init: list[Any], seed0: int, mode: str = "train") -> Any:
        """`cls(*init)` after seeding the RNG with `seed0` (KernelBench's convention), on the
        device, left in the mode it was constructed in (training, as KernelBench's harness runs
        it) unless `mode` is "eval". Fresh parameter values come later, when the job has compared
        Model's with ModelNew's (`perturb_model`)."""
        self.torch.manual_seed(seed0)
        model = cls(*init)
        self.initial_values = initial_digests(self.torch, model)
        model = model.to(self.device) if hasattr(model, "to") else model
        if mode == "eval" and hasattr(model, "eval"):
            model = model.eval()
        return model

    def perturb_model(self, model: Any, seed: int) -> None:
        """The `perturb` request: fresh values for the model's float parameters and buffers,
        the same in Model and ModelNew (`perturb.py`)."""
        from kernelcraft.engine.checks import perturb

        if isinstance(model, self.torch.nn.Module):
            perturb.perturb(model, seed)
        self.sync()

    def make_inputs(self, task: Any, job: Load, input_set: int, seed: int) -> list[Any]:
        """Inputs of one trial, created on the device (no host copies of big tensors)."""
        import random

        import numpy as np

        torch = self.torch
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        small = job.interpret
        with torch.device(self.device):
            if input_set == 0:
                fn = getattr(task, "get_cpu_inputs", None) if small else None
                inputs = list((fn or task.get_inputs)())
            else:
                fn = getattr(task, "get_cpu_input_sets", None) if small else None
                sets = list((fn or task.get_input_sets)())
                inputs = list(sets[input_set - 1])
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]

    def count_input_sets(self, task: Any, interpret: bool) -> int:
        fn = getattr(task, "get_cpu_input_sets", None) if interpret else None
        fn = fn or getattr(task, "get_input_sets", None)
        if fn is None:
            return 1
        with self.torch.device(self.device):
            return 1 + len(list(fn()))


INITIAL_DIGEST_ELEMENTS = 4096
INITIAL_DIGEST_TENSORS = 256


def initial_digests(torch: Any, model: Any) -> dict[str, str]:
    """A digest of the first `INITIAL_DIGEST_ELEMENTS` values of each floating tensor a model holds
    as built (parameters, buffers and plain tensor attributes such as a hidden state), by name: what
    tells that two models built after the same seed drew their random numbers in another order.
    Sampled, so a multi-GB model costs microseconds."""
    if not isinstance(model, torch.nn.Module):
        return {}
    out: dict[str, str] = {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            tensors = value.items() if name in ("_parameters", "_buffers") else [(name, value)]
            for key, tensor in tensors:
                if len(out) >= INITIAL_DIGEST_TENSORS:
                    return out
                if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                    continue
                head = tensor.detach().flatten()[:INITIAL_DIGEST_ELEMENTS].to("cpu", torch.float64)
                digest = hashlib.sha256(head.numpy().tobytes()).hexdigest()[:16]
                out[f"{prefix}.{key}" if prefix else key] = digest
    return out


def import_source(source: str, directory: Path, module_name: str) -> ModuleType:
    """Write `source` to `directory/module_name.py` and import it as `module_name`: Triton's
    `@triton.jit` reads its kernels' source from a file. The checks the parent makes before any
    process starts are the intake's (`source/intake.py`)."""
    path = directory / f"{module_name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
