"""The parent's keeping of forward's records for the fresh-input replay (`host/job/replay.py`).

Every trial sends forward's record (`Run.program`). `Records` keeps each distinct one once (by its
program and the kept tensors' bytes: an honest forward whose numbers come from shapes and
constants writes the same record every trial, and the same record re-run on the small-magnitude
trial's scaled inputs adds nothing to its re-run on the first trial's), holding only the kept
tensors' blobs, not the trial's outputs. Another input set has other shapes, so another record. `to_rerun` names the records the reference re-runs on fresh
inputs: every distinct one of the trials proper, so that no trial is one a candidate can keep
honest while it computes on the host in the others, and one of the interpreter's autotune config
trials, drawn in secret (each config's launches differ, so each of those records is distinct,
and all of them cost as much again as the config trials). Written by the evaluation engine only.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Record:
    """One trial's answer with forward's record (an `Outputs`), the blobs of the kept tensors it
    names, and which trial it was."""

    out: Any
    blobs: list[bytes]
    trial: int
    input_set: int
    scale: float | None
    config: bool
    """From a trial the interpreter ran for another `@triton.autotune` config."""


@dataclass
class Records:
    distinct: list[Record] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    """Each kept blob once, by its digest: records that differ in their program (a value read
    back differs every trial) hold the same parameters' bytes once, not once a trial."""

    def add(
        self, out: Any, blobs: list[bytes], trial: int, input_set: int, scale: float | None, config: bool
    ) -> None:
        """Keep trial `trial`'s answer `out` (an `Outputs`, with `blobs`) unless an earlier trial
        sent the same record."""
        kept, held = only_kept(out.program_kept, blobs)
        said = json.dumps([out.program, out.program_error, kept], sort_keys=True, default=str)
        digest = hashlib.sha256(said.encode())
        for i, b in enumerate(held):
            own = hashlib.sha256(b).digest()
            held[i] = self.blobs.setdefault(own, b)
            digest.update(own)
        key = digest.digest()
        if key in self.seen:
            return
        self.seen.add(key)
        out = out.model_copy(update={"program_kept": kept})
        self.distinct.append(Record(out, held, trial, input_set, scale, config))

    def programs(self) -> list[dict[str, Any]]:
        """Each distinct record's program (the GPU check compiles the kernels of all of them)."""
        found: list[dict[str, Any]] = []
        for r in self.distinct:
            if r.out.program is not None and r.out.program not in found:
                found.append(r.out.program)
        return found

    def to_rerun(self) -> list[Record]:
        """Every distinct record of the trials proper, first trial first, and one of the
        autotune config trials', drawn in secret."""
        trials = [r for r in self.distinct if not r.config]
        configs = [r for r in self.distinct if r.config]
        return trials + ([configs[secrets.randbelow(len(configs))]] if configs else [])


def only_kept(kept: Any, blobs: list[bytes]) -> tuple[Any, list[bytes]]:
    """The kept tensors' record with its blob indices renumbered over just their blobs; as sent
    (with all of the frame's blobs) where it is not a record `wire.tensors.pack` writes."""
    held: list[bytes] = []

    def rebase(rec: Any) -> Any:
        if isinstance(rec, dict) and isinstance(rec.get("tensor"), dict) and "blob" in rec["tensor"]:
            inner = dict(rec["tensor"])
            held.append(blobs[inner["blob"]])
            inner["blob"] = len(held) - 1
            return {"tensor": inner}
        if isinstance(rec, dict) and isinstance(rec.get("seq"), list):
            return {**rec, "seq": [rebase(x) for x in rec["seq"]]}
        if isinstance(rec, dict) and isinstance(rec.get("dict"), dict):
            return {**rec, "dict": {k: rebase(v) for k, v in rec["dict"].items()}}
        if isinstance(rec, list):
            return [rebase(x) for x in rec]
        return rec

    try:
        return rebase(kept), held
    except (IndexError, KeyError, TypeError):  # a malformed record: the reference refuses it
        return kept, list(blobs)
