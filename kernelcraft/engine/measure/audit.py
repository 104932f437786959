"""The audit of timed calls: the calls a profile times run on inputs nobody saw, and some of their
outputs, chosen after the calls ran, go to the reference to be checked.

Without it a forward could do less while timed than while verified: return an answer it cached
(keyed on its inputs' addresses or values, or on a count of calls), or capture a copy of an
earlier answer into the CUDA graph the timer replays. The physical floor (`roofline.py`) stops
that for compute-bound work, not for a memory-bound op that copies a cached answer.

- **Fresh inputs.** "cuda_events": every timed call gets its own draw of the task's inputs
  (`get_inputs()` on the device, seeded from the round's secret), made before the call's L2
  flush and start event, so not timed. "cuda_graph": the graph's calls are fixed at capture, so
  before every replay each rotating set's tensors are overwritten in place (the addresses the
  graph holds) with one of `POOL` fresh draws, picked at random.
- **Outputs kept.** `KEEP` calls are chosen by reservoir sampling, each decision taken after the
  call returned (events) or was captured (graph): forward cannot know, while it runs, whether its
  answer is the one checked. A kept output is cloned (after the sample's end event) with the seed
  its inputs were drawn from.
- **A witness call.** After the round, forward runs once more on a fresh draw as a trial runs
  (ops recorded, launches counted, fresh memory poisoned: `CandidateWorker.call`), late in the
  process's count of calls like the timed ones: a forward that turns to PyTorch (cuBLAS) after a
  count of calls, whose right answers the output check cannot fault, is `pytorch_fallback` there.
  Its output is checked with the kept ones.
- **Checked elsewhere.** The job sends the seeds and outputs to the reference worker, which draws
  the same inputs from the same seeds, runs Model and compares (`ReferenceWorker.audit_timed`):
  the verdict is decided where the candidate's code does not run.

A task whose draws differ in shape or in their non-tensor values cannot be refreshed in place:
the round is timed on its given inputs and `note` says why. Pure bookkeeping but for the tensor
copies; the timer (`timing.py`) calls the hooks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from kernelcraft.engine.wire.bounds import TIMED_KEPT

KEEP = TIMED_KEPT - 1
"""Timed calls checked per round; with the witness call, as many as a `Timed` frame may carry."""
POOL = 8
"""Fresh draws a graph's rotating sets are refreshed from, per round."""
DRAW_BUDGET_S = 0.25
"""Seconds of drawing a round with events may spend; past it (and `MIN_CALLS`), the round ends
early: a task whose get_inputs() is slow gets shorter rounds, not a profile of minutes."""
MIN_CALLS = 5


@dataclass
class Kept:
    seed: int
    """The seed the call's inputs were drawn from (`Worker.make_inputs(task, job, 0, seed)`)."""
    output: Any


def _tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors among `obj`'s leaves, in order (a set of arguments, an output)."""
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _clone(out: Any) -> Any:
    return tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, out)


def unlike(given: Sequence[Any], fresh: Sequence[Any]) -> str | None:
    """Why `fresh` cannot stand in for `given` (other tensor shapes, dtypes or devices, other
    non-tensor values), or None."""
    a, spec_a = tree_flatten(list(given))
    b, spec_b = tree_flatten(list(fresh))
    if spec_a != spec_b:
        return "the task's get_inputs() returns a differently nested list from one draw to the next"
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return "the task's get_inputs() returns a tensor in one draw and a value in another"
        if isinstance(x, torch.Tensor):
            if (x.shape, x.dtype, x.device) != (y.shape, y.dtype, y.device):
                return (
                    f"the task's get_inputs() draws a {tuple(y.shape)} {y.dtype} where the timed "
                    f"inputs hold a {tuple(x.shape)} {x.dtype}"
                )
        elif not (x is y or x == y):
            return f"the task's get_inputs() draws the value {y!r} where the timed inputs hold {x!r}"
    return None


class TimedAudit:
    """One round's fresh inputs and kept outputs. `draw(seed)` is the task's inputs on the
    device from `seed`; `secret` seeds the round's draws and choices (the job's, per round)."""

    def __init__(
        self, draw: Callable[[int], Sequence[Any]], secret: int, keep: int = KEEP, pool: int = POOL
    ) -> None:
        self._draw = draw
        self._rng = random.Random(secret)
        self.keep = keep
        self.pool_size = pool
        self.kept: list[Kept] = []
        self.note: str | None = None
        """Why the round was not audited (its inputs could not be refreshed), or None."""
        self.draw_seconds = 0.0
        self.calls = 0
        """Timed calls that ran on fresh inputs (events) or replays over refreshed sets (graph)."""
        self._seen = 0
        self._seed = 0
        self._pool: list[tuple[int, list[torch.Tensor]]] = []
        self._held: list[int] = []
        self._captured: list[tuple[int, Any, list[int], int]] = []
        self._writer: dict[int, int] = {}
        self._last: tuple[int, Any] | None = None

    def restart(self) -> None:
        """Forget what a failed capture offered: the round goes on with events."""
        self._seen = 0
        self.kept, self._captured, self._writer, self._last, self._pool = [], [], {}, None, []

    @property
    def active(self) -> bool:
        return self.note is None

    def _fresh(self, like: Sequence[Any]) -> tuple[int, Sequence[Any]] | None:
        seed = self._rng.getrandbits(62)
        fresh = self._draw(seed)
        why = unlike(like, fresh)
        if why is not None:
            self.note = f"timed calls not audited: {why}"
            return None
        return seed, fresh

    def _slot(self) -> int | None:
        """Reservoir sampling: the slot of `kept` this call's output takes, or None."""
        self._seen += 1
        if self._seen <= self.keep:
            return self._seen - 1
        j = self._rng.randrange(self._seen)
        return j if j < self.keep else None

    def witness_draw(self) -> tuple[int, Sequence[Any]]:
        """The round's witness call's inputs: a fresh draw, and its seed."""
        seed = self._rng.getrandbits(62)
        return seed, self._draw(seed)

    def witnessed(self, seed: int, out: Any) -> None:
        """The witness call on the draw of `seed` returned `out`: checked with the kept calls."""
        self.kept.append(Kept(seed, _clone(out)))

    # ---- "cuda_events": a fresh draw per call ----

    def spent(self, calls: int) -> bool:
        """Whether a round that made `calls` timed calls should end: its draws took
        `DRAW_BUDGET_S`, and it has `MIN_CALLS`."""
        return calls >= MIN_CALLS and self.draw_seconds > DRAW_BUDGET_S

    def call_args(self, given: Sequence[Any]) -> Sequence[Any]:
        """The arguments of the next timed call: a fresh draw shaped as `given` (or `given` once
        the audit is off)."""
        if not self.active:
            return given
        t = time.perf_counter()
        drawn = self._fresh(given)
        self.draw_seconds += time.perf_counter() - t
        if drawn is None:
            return given
        self._seed, fresh = drawn
        return fresh

    def called(self, out: Any) -> None:
        """The call on `call_args`'s draw returned `out`; it may be kept."""
        if not self.active:
            return
        self.calls += 1
        slot = self._slot()
        if slot is not None:
            kept = Kept(self._seed, _clone(out))
            self.kept[slot : slot + 1] = [kept]

    # ---- "cuda_graph": sets refreshed in place before every replay ----

    def captured(self, set_index: int, out: Any) -> None:
        """Capture recorded a call on set `set_index` returning `out` (graph memory, holding what
        the call wrote at every replay); it may be kept (its memory then stays the call's)."""
        call = self._seen
        ptrs = [t.untyped_storage().data_ptr() for t in _tensors(out)]
        for p in ptrs:
            self._writer[p] = call
        self._last = (set_index, out)
        slot = self._slot()
        if slot is not None:
            self._captured[slot : slot + 1] = [(set_index, out, ptrs, call)]

    def refresh(self, sets: Sequence[Sequence[Any]]) -> None:
        """Overwrite each set's tensors with a pool draw picked at random (before a replay)."""
        if not self.active:
            return
        if not self._pool:
            for _ in range(min(len(sets), self.pool_size)):
                drawn = self._fresh(sets[0])
                if drawn is None:
                    self._pool = []
                    return
                seed, fresh = drawn
                self._pool.append((seed, _tensors(list(fresh))))
        self._held = []
        for args in sets:
            j = self._rng.randrange(len(self._pool))
            for dst, src in zip(_tensors(list(args)), self._pool[j][1], strict=True):
                dst.copy_(src)
            self._held.append(j)
        self.calls += 1

    def replayed(self) -> None:
        """After the round's last replay: the kept calls' outputs, with the seeds of the draws
        their sets held. A kept output whose memory a later call of the graph wrote again (a
        forward that returns one buffer it keeps) holds that call's answer, not its own: the
        graph's last call stands in for it."""
        if self.active and self._held:
            kept = []
            for set_index, out, ptrs, call in self._captured:
                if any(self._writer.get(p, call) > call for p in ptrs) and self._last is not None:
                    set_index, out = self._last
                kept.append(Kept(self._pool[self._held[set_index]][0], _clone(out)))
            self.kept = kept
        self._captured, self._writer, self._last = [], {}, None
        self._pool = []
