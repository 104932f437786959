"""Cookbook entries as clients see them: `search_examples`, `kernelcraft cookbook list|search|show`
and the driver agent's seed step all return these models. The entries themselves (kernels, tasks,
metadata) live in `kernelcraft/knowledge/cookbook/`."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

Family = Literal[
    "gemm",
    "gemm_epilogue",
    "batched_gemm",
    "skinny_gemm",
    "reduction",
    "arg_reduction",
    "norm",
    "softmax",
    "attention",
    "convolution",
    "scan",
    "loss",
    "pooling",
    "elementwise",
]
FAMILIES: tuple[str, ...] = get_args(Family)


class CookbookFigure(BaseModel):
    """One measurement of an entry's kernel on a KernelBench task (`bench/bench_cookbook.py`)."""

    kernelbench: str = Field(description="The task timed, e.g. level1/1_Square_matrix_multiplication_.")
    device: str = Field(description="The GPU, e.g. NVIDIA H200.")
    ms: float = Field(description="The kernel's median time, ms.")
    eager_ms: float | None = None
    compiled_ms: float | None = Field(default=None, description="torch.compile's median, ms.")
    x_eager: float | None = Field(default=None, description="Speedup over eager.")
    x_compiled: float | None = Field(default=None, description="Speedup over torch.compile.")
    measured: str = Field(description="When (UTC date) and at which commit.")


class CookbookEntry(BaseModel):
    """A verified Triton kernel for one op family, with the conditions it needs."""

    id: str
    title: str
    family: Family
    summary: str = Field(description="How the kernel works, in a sentence or two.")
    task: str = Field(default="", description="The task it solves (its docstring).")
    kernelbench: list[str] = Field(
        default_factory=list, description="KernelBench problems it solves as is or adapted."
    )
    ops: list[str] = Field(default_factory=list, description="Ops and words it is found by.")
    conditions: list[str] = Field(default_factory=list, description="What the kernel needs of its inputs.")
    precision: str = Field(default="", description="Arithmetic and tl.dot precision used.")
    figures: list[CookbookFigure] = Field(
        default_factory=list, description="H200 timings; empty until measured."
    )


class CookbookListing(BaseModel):
    """An entry as `kernelcraft cookbook list --json` prints it."""

    id: str
    family: str
    task: str
    kernelbench: list[str]
    figures: list[CookbookFigure]


class CookbookExample(BaseModel):
    """A cookbook entry and its code."""

    id: str
    family: str
    summary: str
    conditions: list[str]
    precision: str
    figures: list[str] = Field(description="H200 timings per KernelBench task; none until measured.")
    score: float = Field(description="Relevance, higher is better.")
    kernel_code: str = Field(default="", description="The candidate (class ModelNew); empty if not asked.")
    task_code: str = Field(default="", description="The task it passed.")


def figure_line(f: CookbookFigure) -> str:
    """One measurement in a line: 'level1/1_…: 1.23 ms, x2.10 eager, x1.70 torch.compile (H200, …)'."""
    parts = [f"{f.ms:.3g} ms"]
    if f.x_eager is not None:
        parts.append(f"x{f.x_eager:.2f} eager")
    if f.x_compiled is not None:
        parts.append(f"x{f.x_compiled:.2f} torch.compile")
    return f"{f.kernelbench}: {', '.join(parts)} ({f.device}, {f.measured})"
