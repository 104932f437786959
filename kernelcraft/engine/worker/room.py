"""The replay's memory: what forward needed, given to the replay on top of the candidate's limit.

The candidate's limit (`machine/memory.py`) is sized for forward. The replay (`replay/replay.py`)
runs forward's launches and ops again on fresh memory while forward's outputs are still held, so
at its peak it needs about what forward needed once more. On a GPU the limit is a memory fraction
(`torch.cuda.set_per_process_memory_fraction`): `ForwardPeak` measures what forward allocated
at its peak, and `replay_room` raises the fraction by that much for the replay only (never past
the device) and puts it back after. On the CPU the limit is an address-space cap that cannot be
raised from inside; the replay runs under it, and running out there is reported the same way.

Running out anyway is the harness's limit, never the candidate's doing: `limit_message` is the
harness-limit verdict's text, with the figures (the host runs the job again alone, with more).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

GIB = 1024**3


class ForwardPeak:
    """What forward allocated on the GPU at its peak, above what was allocated before it."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.before = 0
        self.peak = 0

    def __enter__(self) -> ForwardPeak:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()
            self.before = int(self.torch.cuda.memory_allocated())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self.peak = max(0, int(self.torch.cuda.max_memory_allocated()) - self.before)


def replay_fraction(limit: int, need: int, total: int) -> float:
    """The memory fraction for the replay: the candidate's limit plus what forward needed."""
    if total <= 0:
        return 1.0
    return min(1.0, (limit + need) / total)


@contextlib.contextmanager
def replay_room(torch: Any, device: str, limit: int | None, need: int) -> Iterator[None]:
    """The replay's memory fraction raised by `need` bytes (a GPU under a limit), then put back."""
    if not (device.startswith("cuda") and limit):
        yield
        return
    total = int(torch.cuda.get_device_properties(0).total_memory)
    torch.cuda.set_per_process_memory_fraction(replay_fraction(limit, need, total))
    try:
        yield
    finally:
        torch.cuda.empty_cache()  # the replay's blocks go back before forward's limit returns
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))


def limit_message(error: str, limit: int | None, need: int) -> str:
    """The harness-limit verdict's words when the replay ran out of memory."""
    cap = f"{limit / GIB:.2f} GiB" if limit else "the machine's memory"
    extra = f" plus the {need / GIB:.2f} GiB forward needed" if need else ""
    return (
        f"harness limit: replaying forward (the check that its result came from its recorded launches "
        f"and ops) ran out of memory under the harness's cap ({cap}{extra}): {error[:500]}. This is "
        "a limit kernelcraft set, not the candidate's failure"
    )
