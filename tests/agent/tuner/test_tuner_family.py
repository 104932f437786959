"""Issue 41 item 4: the offline tuner starts from the cookbook's kernel when its Model fits the task,
and searches the axes that matter for the kernel's family first (`agent/tuner/family.py`): tiles,
stages, warps, split-K and precision for a GEMM; the block, warps and rows per program for a
reduction; the block, warps and vector width for an elementwise kernel."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from server_support import NoEvaluations, settings_for

from kernelcraft.agent.loop.cookbook_seed import compatible, input_ranks, misfit, tunable_match
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.agent.tuner.family import axis_of, kernel_family, name_axis
from kernelcraft.agent.tuner.params import find_params
from kernelcraft.agent.tuner.search import Observation, Space, apply_config, current_config, next_config
from kernelcraft.knowledge.cookbook import load_cookbook
from kernelcraft.server.app import create_server

ENTRIES = Path(__file__).resolve().parents[3] / "kernelcraft" / "knowledge" / "cookbook" / "entries"
REDUCE_DIM = (ENTRIES / "reduce_dim" / "kernel.py").read_text()
GEMM = (ENTRIES / "gemm" / "kernel.py").read_text()
ACTIVATION = (ENTRIES / "activation" / "kernel.py").read_text()

# KernelBench level 1's task 47 in its own format, shapes cut down: what a level run hands optimize.
SUM_TASK_FILE = (
    Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "47_Sum_reduction_over_a_dimension.py"
)
SUM_TASK = SUM_TASK_FILE.read_text()
MEAN_TASK = SUM_TASK.replace("torch.sum(x, dim=self.dim, keepdim=True)", "torch.mean(x, dim=self.dim)")
MATMUL_3D_TASK = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

N, M, K, L = 4, 8, 16, 8

def get_inputs():
    A = torch.randn(N, M, K)
    B = torch.randn(K, L)
    return [A, B]

def get_init_inputs():
    return []
"""


def family_and_axes(source: str) -> tuple[str, list[str]]:
    params = find_params(source)
    return kernel_family(ast.parse(source)), sorted({p.axis for p in params})


def test_a_kernels_family_is_gemm_with_a_dot_a_reduction_with_a_sum_over_an_axis_else_elementwise() -> None:
    assert family_and_axes(GEMM) == (
        "gemm",
        ["block", "group M", "precision", "split-K", "stages", "tile K", "tile M", "tile N", "warps"],
    )  # its split-K kernel's SPLIT_K; its operand split pass, an elementwise kernel, has a block
    assert family_and_axes(REDUCE_DIM) == ("reduction", ["block", "warps"])
    assert family_and_axes(ACTIVATION) == ("elementwise", ["block", "warps"])
    # a tile name means a GEMM's tile in a GEMM, rows per program in a reduction, a block elsewhere
    assert axis_of("meta", "BLOCK_SIZE_M", "gemm") == "tile M"
    assert axis_of("meta", "BLOCK_M", "reduction") == "rows per program"
    assert axis_of("meta", "BLOCK_M", "elementwise") == "block"
    assert axis_of("persistent", "", "reduction") == "programs per SM"
    constexpr_max = ACTIVATION.replace("tl.arange(0, BLOCK)", "tl.arange(0, max(BLOCK, 16))", 1)
    assert constexpr_max != ACTIVATION and family_and_axes(constexpr_max)[0] == "elementwise"


SPLIT_SRC = """import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
              GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr))


@triton.jit
def rows_kernel(x_ptr, y_ptr, ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr):
    tl.store(y_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), axis=0))


def run(a, b, c, x, y):
    mm_kernel[(1,)](a, b, c, 64, BLOCK_M=64, BLOCK_K=32, SPLIT_K=1, GROUP_M=8, EVEN_K=1, num_stages=3)
    rows_kernel[(1,)](x, y, ROWS_PER_PROGRAM=1, BLOCK=256, VEC=1, num_warps=4)
"""


def test_split_k_rows_per_program_and_vector_width_are_counts_tuned_from_1_and_a_flag_is_not() -> None:
    params = {p.key: p for p in find_params(SPLIT_SRC)}
    axes = {k: p.axis for k, p in params.items() if p.kind == "meta"}
    assert axes == {
        "mm_kernel.BLOCK_M": "tile M",
        "mm_kernel.BLOCK_K": "tile K",
        "mm_kernel.SPLIT_K": "split-K",
        "mm_kernel.GROUP_M": "group M",
        "rows_kernel.ROWS_PER_PROGRAM": "rows per program",
        "rows_kernel.BLOCK": "block",  # each kernel by its own family: rows_kernel is a reduction
        "rows_kernel.VEC": "vector width",
    }
    values = Space.of(list(params.values())).values
    assert values["mm_kernel.SPLIT_K"] == [1, 2, 4, 8]  # no split, up to 8 K slices
    assert values["mm_kernel.GROUP_M"][0] == 1 and values["mm_kernel.BLOCK_K"][0] == 16  # a dot's floor
    assert values["rows_kernel.ROWS_PER_PROGRAM"] == [1, 2, 4, 8]
    assert "mm_kernel.EVEN_K" not in params  # 1 in a name that counts nothing is a flag
    assert name_axis("N_ROWS") is None and name_axis("BLOCK_ROWS") == "rows per program"


def moved_axes(source: str, n: int) -> list[str]:
    """The axes of the first `n` proposals from the kernel's own configuration, each tried and slower."""
    params = find_params(source)
    space, start = Space.of(params), current_config(params)
    by_key = {p.key: p for p in params}
    obs = [Observation(start, ok=True, time_us=10.0)]
    out = []
    for _ in range(n):
        config = next_config(space, start, obs, seed=3)
        assert config is not None
        out += [by_key[k].axis for k, v in config.items() if v != start[k]]
        obs.append(Observation(config, ok=True, time_us=11.0))
    return out


def test_the_search_moves_the_axes_that_matter_for_the_family_first() -> None:
    # the cookbook GEMM's 50-odd literals: every one-step move of its tiles before any of its stages
    gemm = list(dict.fromkeys(moved_axes(GEMM, 110)))
    assert gemm == [
        "tile M",
        "tile N",
        "tile K",
        "stages",
        "warps",
        "split-K",
        "precision",
        "group M",
        "block",
    ]
    reduction = moved_axes(REDUCE_DIM, 8)
    assert reduction[:6] == ["block"] * 6 and reduction[6:] == ["warps"] * 2
    assert moved_axes(ACTIVATION, 4) == ["block", "block", "warps", "warps"]


def test_a_value_set_in_branches_or_capped_in_an_expression_is_tuned_each_alone() -> None:
    # the cookbook's reduction picks its tile per class of shapes: each branch's literal is its own
    params = find_params(REDUCE_DIM)
    found = [(p.key.split("@")[0], p.value, p.axis, p.alone) for p in params]
    assert found == [
        ("reduce_dim.block_r", 2048, "block", True),  # inner == 1: a row reduction
        ("reduce_dim.warps", 8, "warps", True),
        ("reduce_dim.block_i", 128, "block", True),  # min(128, next_power_of_2(inner)): its cap
        ("reduce_dim.block_r", 8192, "block", True),  # max(1, 8192 // block_i): the tile's budget
        ("reduce_dim.warps", 8, "warps", True),
    ]
    cap = next(p for p in params if p.value == 8192)
    rewritten = apply_config(REDUCE_DIM, params, {cap.key: 16384})
    assert rewritten == REDUCE_DIM.replace("max(1, 8192 // block_i)", "max(1, 16384 // block_i)")
    # a tile set alone does not count in the launch's tile product: every value is a proposal
    space = Space.of(params)
    assert space.structurally_valid(current_config(params) | {cap.key: 65536})
    shapes = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, BLOCK: tl.constexpr, N4: tl.constexpr):
    pass


def run(x, n):
    k[(1,)](x, BLOCK=triton.next_power_of_2(max(n, 16)), N4=n // 4)
"""
    # a shape divided, a floor inside another call: no configuration; only the warps the launch does
    # not set are left to tune (`unset_warps`)
    assert [(p.key, p.insert) for p in find_params(shapes)] == [("k.num_warps", ", ")]


@pytest.mark.anyio
async def test_a_kernelbench_sum_task_gets_the_cookbooks_reduction_and_a_mean_task_does_not(
    tmp_path: Path,
) -> None:
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        session = ToolSession(client, "a test server")
        found = (await tunable_match(session, SUM_TASK)).example
        assert found is not None and found.id == "reduce_dim" and find_params(found.kernel_code or "")
        # same Model signature, another op: the sum kernel would be wrong, so the tuner gets no start,
        # and the run is told why in words (operators as written, not as the AST names them)
        mean = await tunable_match(session, MEAN_TASK)
        assert mean.example is None and mean.why_not is not None
        assert "computes other ops" in mean.why_not and "mean" in mean.why_not, mean.why_not
        matmul = await tunable_match(session, MATMUL_3D_TASK)  # a 2-D GEMM for a 3-D matmul
        assert matmul.example is None and "takes 2-D, 2-D inputs where the task's Model takes 3-D" in (
            matmul.why_not or ""
        )
        nothing = await tunable_match(session, "zzqx")
        assert nothing.example is None and nothing.why_not == "the cookbook has no entry near this task"


def test_a_cookbook_entry_fits_a_task_with_the_same_signature_ops_and_input_ranks() -> None:
    book = load_cookbook()
    reduce_dim, gemm = book.example("reduce_dim"), book.example("gemm")
    assert compatible(reduce_dim, SUM_TASK)
    assert not compatible(reduce_dim, MEAN_TASK)
    assert not compatible(reduce_dim, SUM_TASK.replace("torch.sum(", "torch.triu(torch.sum(") + ")")
    assert not compatible(gemm, MATMUL_3D_TASK)  # the same ops and signature, but a 3-D input
    assert compatible(gemm, MATMUL_3D_TASK.replace("torch.randn(N, M, K)", "torch.randn(M, K)"))
    assert not compatible(gemm, "class Model(:")  # a task that does not parse fits nothing
    # why not, in a clause a run's report quotes after the entry's name
    assert misfit(
        reduce_dim, SUM_TASK.replace("def __init__(self, dim: int)", "def __init__(self, axis: int)")
    ) == ("takes other __init__ parameters: (dim) where the task's Model takes (axis)")
    assert misfit(gemm, "class Model(:") == "cannot be matched: the task has no Model class that parses"
    for entry in book.entries:  # every entry fits its own task
        assert compatible(book.example(entry.id), book.task_code(entry.id)), entry.id


@pytest.mark.parametrize(
    ("get_inputs", "ranks"),
    [
        ("return [torch.randn(N, M, K), torch.rand(K, L)]", (3, 2)),
        ("return [torch.randn((N, M))]", (2,)),
        ("return [torch.rand(SHAPE)]", (4,)),
        ("return [torch.randint(0, 10, (N,))]", (1,)),
        ("return [torch.randn(*dims)]", None),  # a shape not written out: no rank compared
        ("return [torch.rand(unknown)]", None),
    ],
)
def test_input_ranks_reads_the_shapes_get_inputs_writes_out(get_inputs: str, ranks: Any) -> None:
    source = f"SHAPE = (1, 2, 3, 4)\nN = 4\n\ndef get_inputs():\n    {get_inputs}\n"
    assert input_ranks(ast.parse(source)) == ranks


BRANCHES = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), axis=0))


def run(x, n):
    if n == 1:
        block, warps = 2048, 8
    else:
        block, warps = 256, 4
    k[(1,)](x, BLOCK=block, num_warps=warps)
"""


class LaunchesOfTheElseBranch:
    """compile_kernel as the server answers it for a task whose n is never 1: the launch takes the
    else branch's values."""

    def __init__(self) -> None:
        self.compiled = 0

    async def compile(self, task: str, code: str, targets: list[str]) -> Any:
        from kernelcraft.schema.evaluation import CompileResult, KernelLaunch

        self.compiled += 1
        block, warps = re.findall(r"block, warps = (\d+), (\d+)", code)[1]
        launch = KernelLaunch(
            name="k", signature={}, constexprs={"BLOCK": int(block)}, grid=[1, 1, 1], num_warps=int(warps)
        )
        return CompileResult(ok=True, launches=[launch])


@pytest.mark.anyio
async def test_a_proposal_that_changes_no_launch_the_task_makes_is_skipped_not_evaluated() -> None:
    from kernelcraft.agent.loop.proposers import TunerProposer
    from kernelcraft.schema.tree import NextStep

    session = LaunchesOfTheElseBranch()
    tuner = TunerProposer(
        session,  # type: ignore[arg-type]
        task_source="task",
        seed_code=BRANCHES,
        seed_outcome="correct",
        search_seed=0,
        compile_check=False,  # a GPU run: no compile check, the launches alone are compared
    )
    step = NextStep.model_construct(
        kind="small",
        start_code=BRANCHES,
        pool=[],
        chain=[],
        target="sm_90a",
        speedup_measured=True,
        parent_id=1,
    )
    records: list[dict[str, Any]] = [{"mode": "llm", "unchanged": True}]  # an LLM step's edits missed
    for _ in range(4):
        out = await tuner.step(step, records, None)
        assert out.code is not None
        records.append({**out.info, "outcome": "correct", "candidate_us": None})
    dead_line = BRANCHES.splitlines().index("        block, warps = 2048, 8") + 1
    lines = {int(k.split("@")[1]) for r in records[1:] for k in r["tuner"]["changed"]}
    assert lines == {dead_line + 2}  # every step moved the branch the task takes
    skipped = [u for r in records[1:] for u in r["same_launches"]]
    assert skipped and all(u["axes"] for u in skipped)  # the dead branch's moves, each compiled once
    assert session.compiled == 4 + len(skipped) + 1  # and the base once, for its launches
