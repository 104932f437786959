"""A task's CPU sizes from its sidecar file: `foo.py`'s `foo.cpu.json`, `{"batch_size": 16}`.

The interpreter runs a task too large for it at these values of its size constants instead of
shrinking it (`verify`/`compile`/`profile` read the sidecar beside TASK, `level` the one beside each
task of the folder; `--cpu-sizes` overrides it for a one-off command). Which names are the task's
size constants is checked by the engine (`source/shrink.given`), not here.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelcraft.base.errors import UsageError


def sidecar_sizes(task: str | Path) -> dict[str, int] | None:
    """The CPU sizes in TASK's sidecar file (foo.py: foo.cpu.json), or None when it has none."""
    path = Path(task).with_suffix(".cpu.json")
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not readable JSON ({e})") from e
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and type(v) is int and v >= 1 for k, v in data.items()
    ):
        raise UsageError(f'{path}: must be one object of size constants, e.g. {{"batch_size": 16}}')
    return data or None
