"""Threat: a worker runs client code and may send the parent anything: a frame that says gigabytes
follow, an output far larger than the reference's, frames faster than the job reads them. The parent
reads every frame within bounds set by its type and by what the job expects (`wire/bounds.py`),
refuses one over them before reading its tensors, and reads at most `pool.FRAMES_QUEUED` frames
ahead (docs/security.md, "The box": frames from a worker)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import struct
from pathlib import Path

import pytest

from kernelcraft.base.knobs import Knobs
from kernelcraft.engine.machine import pool
from kernelcraft.engine.wire import bounds
from kernelcraft.engine.wire.channel import (
    MAX_HEADER_BYTES,
    TEXT_HEADER_BYTES,
    FrameRefused,
    read_frame,
)

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"


def _frame(header: dict[str, object]) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


async def _read(data: bytes, b: object) -> object:
    reader = asyncio.StreamReader()
    reader.feed_data(data)  # no blob bytes follow: a refusal must not wait for them
    return await asyncio.wait_for(read_frame(reader, b), 5)  # type: ignore[arg-type]


def test_a_frame_declaring_more_tensor_bytes_than_the_job_expects_is_refused_before_they_are_read() -> None:
    job = bounds.for_task(inputs_bytes=8580, outputs_bytes=8580)
    with pytest.raises(FrameRefused, match="'outputs' frame carrying 7516192768 bytes"):
        asyncio.run(_read(_frame({"type": "outputs", "outputs": [], "blobs": [7 * 1024**3]}), job))
    # A text message carries no tensors at all, whatever the job.
    for b in (job, bounds.starting(), bounds.unsized(2 * 1024**3)):
        with pytest.raises(FrameRefused, match="'progress' frame carrying 1 bytes"):
            asyncio.run(_read(_frame({"type": "progress", "message": "x", "blobs": [1]}), b))


def test_a_text_frame_over_its_header_bound_is_refused_and_no_header_may_exceed_the_largest() -> None:
    job = bounds.for_task(8580, 8580)
    big = _frame({"type": "verdict", "failure_class": "x" * TEXT_HEADER_BYTES})
    with pytest.raises(FrameRefused, match="'verdict' frame with a"):
        asyncio.run(_read(big, job))
    # An outputs frame may carry nested records up to the largest header, not beyond.
    asyncio.run(
        _read(_frame({"type": "outputs", "outputs": ["x" * TEXT_HEADER_BYTES], "inputs_after": None}), job)
    )
    with pytest.raises(FrameRefused, match="header"):
        asyncio.run(_read(struct.pack("<Q", MAX_HEADER_BYTES + 1), job))


def test_the_job_bounds_grow_with_the_references_outputs_and_stay_within_the_memory_limit() -> None:
    small, large = bounds.for_task(1000, 1000), bounds.for_task(10**9, 10**9)
    assert small.blob_limit("outputs") < 2 * 1024**2 < large.blob_limit("outputs")
    assert large.blob_limit("outputs") >= 3 * 10**9  # two runs and the inputs after, with headroom
    assert bounds.unsized(256 * 1024**2).blob_limit("outputs") == 256 * 1024**2
    assert bounds.unsized(None).blob_limit("outputs") == bounds.UNSIZED_BLOB_BYTES


def _flood(sock: socket.socket, frame: bytes) -> int:
    """Frames sent before a send blocks for half a second (the reader stopped reading)."""
    sock.settimeout(0.5)
    sent = 0
    with contextlib.suppress(TimeoutError):
        while sent < 100_000:
            sock.sendall(frame)
            sent += 1
    return sent


def test_a_worker_flooding_frames_is_read_no_further_than_the_queue(tmp_path: Path) -> None:
    async def main() -> tuple[int, int]:
        w = pool.WorkerProcess("cpu", tmp_path, None, settings=Knobs())
        parent, child = socket.socketpair()
        reader, _writer = await asyncio.open_unix_connection(sock=parent)
        task = asyncio.create_task(w._read(reader))
        sent = await asyncio.to_thread(_flood, child, _frame({"type": "progress", "message": "m" * 1000}))
        queued = w.frames.qsize()
        task.cancel()
        child.close()
        return sent, queued

    sent, queued = asyncio.run(main())
    assert queued == pool.FRAMES_QUEUED
    assert sent < 5000  # held by the socket's buffers, not by the parent's memory


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["huge_output.py", "raw_frame.py"])
def test_a_candidate_sending_more_than_the_job_expects_gets_a_verdict_and_the_parent_reads_none_of_it(
    evaluator, static_checks_off, probe: str
) -> None:  # type: ignore[no-untyped-def]
    from kernelcraft.schema.evaluation import EvalJob

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = evaluator.submit(
        EvalJob(
            task_source=TASK.read_text(),
            candidate_source=(PROBES / probe).read_text(),
            trials=1,
            timeout_s=120,
        )
    )
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    v = result.verify
    assert v is not None and v.status == "runtime_crash", result
    assert v.evidence is not None and "the harness refused" in v.evidence.message
    assert grown < 200 * 1024**2, f"the parent grew by {grown / 1024**2:.0f} MB"
