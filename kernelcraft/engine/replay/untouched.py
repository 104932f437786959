"""The reference's own memory during the fresh-input replay (`fresh.py`), on the CPU.

Under Triton's interpreter a kernel's pointer is a raw address of the process that runs it, so a
kernel reads and writes any memory there, not only its arguments. Run in the reference worker
itself, the candidate's recorded kernels could read Model's answer for the fresh inputs (a kernel
computing two rows of six found the rest by scanning below its input and passed as correct:
`fresh_reads_reference_memory.py`), or write what the answer and the comparison read (Model's
weights, a tolerance). So on the CPU the re-run runs in a child forked from the reference for it
(`run_apart`), which sends its outputs back as plain bytes through a pipe and exits; whatever its
kernels read or write is the child's copy of the process, made before Model's answer existed
(`answer` computes it in the reference afterwards). On a GPU a fork cannot use CUDA: the re-run
stays in the reference, its answer computed first and held in host memory, out of the kernels'
reach (docs/security.md says what is open there). Written by the evaluation engine only; runs
in the reference worker.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from collections.abc import Callable
from typing import Any

import torch

HEADER_BYTES = 1 << 20
"""The most the child's header (the outputs' dtypes and shapes, or a refusal's words) may take."""


class Apart(Exception):
    """The re-run in the child refused, raised or died: the candidate's verdict, in these words."""

    def __init__(self, message: str, kind: str = "refused") -> None:
        super().__init__(message)
        self.kind = kind
        """"refused" (the record itself), "raised" (its kernels or ops) or "died" (the child)."""


def answer(worker: Any, inputs: Any) -> Any:
    """Model's outputs, on the host, for clones of `inputs` (a `ReferenceWorker`'s)."""
    with torch.no_grad():
        out = worker.model(*[worker._map(x, lambda t: t.clone()) for x in inputs])
    worker.sync()
    return worker._map(out, lambda t: t.detach().to("cpu", copy=True))


def words(what: str, raised: bool) -> str:
    """The verdict's words for a re-run whose kernels or ops raised `what`, or whose process died."""
    if raised:
        return (
            "forward's recorded Triton launches and PyTorch ops, re-run on fresh inputs the candidate "
            f"never saw, raised {what[:400]}: forward's host code computed something the harness cannot "
            "re-derive from the inputs"
        )
    return (
        "re-running forward's record on fresh inputs the candidate never saw crashed the reference "
        f"worker's re-run ({what}): the launches depend on numbers taken from the trial's inputs, not "
        "on the inputs they are given"
    )


def cap(reference: Any) -> int:
    """The most bytes of outputs a re-run may send back: 4x the reference's answer, and 1 MiB."""
    from kernelcraft.engine.wire.tensors import leaves

    sizes = [t.numel() * t.element_size() for t in leaves(reference) if isinstance(t, torch.Tensor)]
    return 4 * sum(sizes) + (1 << 20)


def run_apart(
    run: Callable[[], list[torch.Tensor]], refusals: tuple[type, ...], limit: int
) -> list[torch.Tensor]:
    """`run()` in a forked child of this (CPU) process: its output tensors, read back as bytes, at
    most `limit` of them. `Apart` with the words of what `run` raised (`refusals`: the record's own
    refusals, said as they are), or of the child's death."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of it returns to the caller
        os.close(read_fd)
        _child(run, refusals, write_fd)
    os.close(write_fd)
    try:
        data = _read_all(read_fd, HEADER_BYTES + limit + 8)
    finally:
        os.close(read_fd)
    if data is None:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if data is None:
        raise Apart(f"re-running forward's record sent back more than {limit} bytes of outputs")
    return _outputs(data, status, limit)


def _child(run: Callable[[], list[torch.Tensor]], refusals: tuple[type[BaseException], ...], fd: int) -> None:
    code = 0
    try:
        os.closerange(3, fd)  # (the channel to the parent among them: this process says nothing there)
        os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
        # A forked child of a process whose OpenMP pool ran deadlocks in its first parallel region
        # (GNU libgomp); with one thread, ATen runs every loop inline (as DataLoader's workers do).
        torch.set_num_threads(1)
        head: dict[str, Any]
        blobs: list[bytes] = []
        try:
            outs = run()
            head = {"outputs": [[str(t.dtype).removeprefix("torch."), list(t.shape)] for t in outs]}
            blobs = [t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for t in outs]
        except refusals as e:
            head = {"refused": str(e)[:4000]}
        except Exception as e:  # noqa: BLE001 - what the candidate's record raises is its verdict
            head = {"raised": f"{type(e).__name__}: {str(e)[:400]}"}
        text = json.dumps(head).encode()
        _write_all(fd, struct.pack("<Q", len(text)) + text + b"".join(blobs))
    except BaseException:  # noqa: BLE001 - the parent reads a short message as a death
        code = 1
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int, cap: int) -> bytes | None:
    """Everything the child wrote, or None past `cap` bytes."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            return None
        chunks.append(chunk)


def _outputs(data: bytes, status: int, limit: int) -> list[torch.Tensor]:
    from kernelcraft.engine.wire.tensors import DTYPES

    died = (
        f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
        if os.WIFSIGNALED(status)
        else f"exited with code {os.WEXITSTATUS(status)}"
    )
    try:
        (size,) = struct.unpack("<Q", data[:8])
        if size > HEADER_BYTES or len(data) < 8 + size:
            raise ValueError("short")
        head = json.loads(data[8 : 8 + size])
    except (struct.error, ValueError):
        raise Apart(
            f"the process re-running forward's record was {died} before it reported", "died"
        ) from None
    if not isinstance(head, dict):
        raise Apart("the process re-running forward's record sent a malformed answer")
    if "refused" in head:
        raise Apart(str(head["refused"]))
    if "raised" in head:
        raise Apart(str(head["raised"]), "raised")
    out, at = [], 8 + size
    for dtype_name, shape in head.get("outputs", []):
        dtype = DTYPES.get(str(dtype_name))
        if dtype is None or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise Apart("the process re-running forward's record sent a malformed answer")
        n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        if at + n - 8 - size > limit:
            raise Apart(f"re-running forward's record sent back more than {limit} bytes of outputs")
        if at + n > len(data):
            raise Apart("the process re-running forward's record sent a malformed answer")
        flat = (
            torch.frombuffer(bytearray(data[at : at + n]), dtype=torch.uint8)
            if n
            else torch.empty(0, dtype=torch.uint8)
        )
        out.append(flat.view(dtype).reshape(shape))
        at += n
    return out
