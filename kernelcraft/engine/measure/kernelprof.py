"""Where a forward's GPU time goes, kernel by kernel (issue 29: profiles that say why).

`breakdown(fn, inputs)` runs `fn` a few times under PyTorch's profiler (Kineto/CUPTI activity
records: kernel names and their GPU durations, no hardware counters, so no profiling privileges)
and returns each kernel's calls, time per forward and share of the forward's GPU time, largest
first. The candidate worker profiles its Triton kernels this way, the reference worker what eager
PyTorch and torch.compile launched (cuBLAS, cuDNN, ATen's and Inductor's kernels), so a writer
sees both sides. Informational: no verdict reads it, and a machine where the profiler cannot run
gives the reason instead.

GPU only; runs in a worker after its timing rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

REPS = 3
TOP = 8


def breakdown(
    fn: Callable[..., Any], make_inputs: Callable[[], Sequence[Any]], reps: int = REPS
) -> list[dict[str, Any]]:
    """The kernels `fn` launches: [{name, calls, us, share}], `us` and `calls` per forward, the
    `TOP` largest by time (the rest summed as one "other" entry)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sets = [make_inputs() for _ in range(reps)]
    torch.cuda.synchronize()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for inputs in sets:
            fn(*inputs)
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        us = float(getattr(event, "device_time", 0.0) or getattr(event, "cuda_time", 0.0) or 0.0)
        if us <= 0:
            continue
        name = _short(event.name)
        entry = totals.setdefault(name, [0.0, 0.0])
        entry[0] += 1
        entry[1] += us
    return summarise(totals, reps)


def summarise(totals: dict[str, list[float]], reps: int) -> list[dict[str, Any]]:
    """{name: [calls, us]} over `reps` forwards -> the per-forward entries, largest first."""
    whole = sum(us for _, us in totals.values()) or 1.0
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])
    out = [
        {
            "name": name,
            "calls": round(calls / reps, 2),
            "us": round(us / reps, 3),
            "share": round(us / whole, 4),
        }
        for name, (calls, us) in rows[:TOP]
    ]
    rest = rows[TOP:]
    if rest:
        calls = sum(c for _, (c, _u) in rest)
        us = sum(u for _, (_c, u) in rest)
        out.append(
            {
                "name": f"({len(rest)} other kernels)",
                "calls": round(calls / reps, 2),
                "us": round(us / reps, 3),
                "share": round(us / whole, 4),
            }
        )
    return out


def _short(name: str, limit: int = 120) -> str:
    """A kernel's name, its template arguments folded (`void at::native::vectorized_elementwise_kernel<4, ...>`)."""
    depth, out = 0, []
    for ch in name:
        if ch == "<":
            if depth == 0:
                out.append("<…>")
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out).removeprefix("void ").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(kernels: list[dict[str, Any]], top: int = 3) -> str:
    """The largest kernels in words: 'softmax_kernel 97% (12.3 µs, 1 call), …'."""
    parts = [
        f"{k['name']} {k['share']:.0%} ({k['us']:.1f} µs, {k['calls']:g} call(s))" for k in kernels[:top]
    ]
    return ", ".join(parts)
