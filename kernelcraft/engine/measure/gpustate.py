"""What else was happening on the GPU while it was timed: clocks held down, other tenants.

A profile's figures repeat only on a GPU that runs at its clocks for our kernels alone. After the
timing rounds the evaluator (the parent process: it never initialises CUDA) asks `nvidia-smi` for
the device's active clock-event reasons (thermal or power slowdown, a clock capped below its
maximum) and for the processes computing on it; a process that is not ours (not a descendant of
the evaluator) is another tenant. Either is said in the profile, and makes it `unstable`. Where
`nvidia-smi` is absent or fails, the state is unknown and the profile says so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass, field

QUERY_TIMEOUT_S = 5.0
# Clock-event reasons that only describe an idle or a configured GPU, not one held down under load.
_BENIGN = {"gpu_idle", "applications_clocks_setting", "none", "not active", "sw_power_cap"}


@dataclass(frozen=True)
class GpuState:
    """The device's state as `nvidia-smi` reported it; `known` False when it could not be asked."""

    known: bool
    slowdowns: list[str] = field(default_factory=list)
    """Active clock-event reasons that slow a loaded GPU (thermal, power brake, HW slowdown)."""
    tenants: list[str] = field(default_factory=list)
    """Other processes computing on the device: 'pid (name, MiB)'."""
    hidden: int = 0
    """Processes on the device whose pids this PID namespace cannot see (ours or not: unknown)."""
    why_unknown: str = ""

    def words(self) -> str:
        if not self.known:
            return f"GPU state unknown ({self.why_unknown})"
        parts = [
            f"clocks held down ({', '.join(self.slowdowns)})" if self.slowdowns else "clocks not held down"
        ]
        parts.append(
            f"other processes on the GPU: {', '.join(self.tenants)}" if self.tenants else "no other processes"
        )
        if self.hidden:
            parts.append(f"{self.hidden} process(es) on the GPU outside this PID namespace (ours or not)")
        return "; ".join(parts)

    @property
    def disturbed(self) -> bool:
        return bool(self.slowdowns or self.tenants)


def parse_reasons(csv_line: str, names: list[str]) -> list[str]:
    """The active slowdown reasons of one `--query-gpu=clocks_event_reasons.*` CSV line."""
    values = [v.strip().lower() for v in csv_line.split(",")]
    return [n for n, v in zip(names, values, strict=False) if v == "active" and n not in _BENIGN]


def parse_apps(
    csv_text: str, gpu_uuid: str, ours: set[int], visible: set[int] | None = None
) -> tuple[list[str], int]:
    """Processes of `--query-compute-apps=gpu_uuid,pid,process_name,used_memory` on `gpu_uuid`
    that are not ours, and how many this PID namespace cannot see (a container's GPU lists the
    host's pids: those may be ours or not). `visible`: the pids here (default: /proc's)."""
    seen = visible if visible is not None else {int(e) for e in os.listdir("/proc") if e.isdigit()}
    others, hidden = [], 0
    for line in csv_text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 4 or (gpu_uuid and cols[0] != gpu_uuid) or not cols[1].isdigit():
            continue
        pid = int(cols[1])
        if pid in ours:
            continue
        if pid not in seen:
            hidden += 1
        else:
            others.append(f"{pid} ({os.path.basename(cols[2])}, {cols[3]})")
    return others, hidden


def our_processes() -> set[int]:
    """This process and its descendants (the evaluator's workers, its zygote's children)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    ours, me = set(), os.getpid()
    for pid in parents:
        p, seen = pid, 0
        while p and p != me and seen < 64:
            p, seen = parents.get(p, 0), seen + 1
        if p == me:
            ours.add(pid)
    return ours | {me}


_REASONS = (
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)


async def _ask(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), QUERY_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise OSError(f"exit {proc.returncode}")
    return out.decode(errors="replace")


async def gpu_state(index: int) -> GpuState:
    """The state of GPU `index` (CUDA's numbering under CUDA_VISIBLE_DEVICES as nvidia-smi sees it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuState(known=False, why_unknown="no nvidia-smi on this machine")
    fields = ",".join(f"clocks_event_reasons.{r}" for r in _REASONS)
    try:
        reasons = await _ask(smi, "-i", str(index), f"--query-gpu=uuid,{fields}", "--format=csv,noheader")
        apps = await _ask(
            smi, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader"
        )
    except (OSError, asyncio.TimeoutError) as e:
        return GpuState(known=False, why_unknown=f"nvidia-smi failed: {e or type(e).__name__}")
    line = reasons.strip().splitlines()[0] if reasons.strip() else ""
    uuid, _, rest = line.partition(",")
    tenants, hidden = parse_apps(apps, uuid.strip(), our_processes())
    return GpuState(known=True, slowdowns=parse_reasons(rest, list(_REASONS)), tenants=tenants, hidden=hidden)
