"""The offline tuner: what it finds in a kernel's source, what it proposes, how it rewrites."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from kernelcraft.agent.loop.edits import Edit, EditError, apply_edits, parse_edits
from kernelcraft.agent.tuner.search import (
    Observation,
    Space,
    apply_config,
    current_config,
    family_of,
    find_params,
    next_config,
    tune,
)

SAMPLE = """import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 4  # réglage: rows per program


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, scale, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr = 1, GROUP: tl.constexpr = 8):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


@triton.jit
def rows_kernel(x_ptr, y_ptr, n_cols, ROWS: tl.constexpr, N_COLS: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
        scale_kernel[grid](x, y, n, 2.0, BLOCK_SIZE=1024, num_warps=4)
        TILE = 64
        rows_kernel[(1,)](x, y, 784, ROWS_PER_PROGRAM, N_COLS=784, num_stages=2)
        tuned_kernel[(1,)](x, n)
        return y
"""


def test_tuner_finds_launch_options_constexpr_defaults_constants_and_autotune_configs_but_not_shapes() -> (
    None
):
    found = [(p.key, p.kind, p.value, p.line) for p in find_params(SAMPLE)]
    assert found == [
        ("ROWS_PER_PROGRAM", "meta", 4, 5),  # module constant passed by position to a constexpr
        ("scale_kernel.GROUP", "meta", 8, 9),  # constexpr default no launch overrides
        ("tuned_kernel.configs[0].BLOCK", "meta", 64, 21),  # a triton.Config the autotuner passes
        ("scale_kernel.BLOCK_SIZE", "meta", 1024, 32),
        ("scale_kernel.num_warps", "num_warps", 4, 32),
        ("rows_kernel.num_stages", "num_stages", 2, 34),
    ]
    # not found: EVEN=1 (a flag), N_COLS=784 (a shape, not a power of two), TILE (no launch uses it),
    # anything at tuned_kernel's launch (@triton.autotune passes its configs' values)


def test_tuner_first_proposals_are_exactly_the_one_step_neighbours_within_valid_ranges() -> None:
    params = find_params(SAMPLE)
    space = Space.of(params)
    start = current_config(params)
    assert space.values["scale_kernel.num_warps"] == [1, 2, 4, 8, 16]
    assert space.values["rows_kernel.num_stages"] == [1, 2, 3, 4, 5]
    assert space.values["scale_kernel.BLOCK_SIZE"] == [128, 256, 512, 1024, 2048, 4096, 8192]
    observations: list[Observation] = [Observation(start, ok=True)]
    proposed = []
    for _ in range(12):
        c = next_config(space, start, observations, seed=7)
        assert c is not None
        observations.append(Observation(c, ok=True))  # on a CPU: correct, but no time
        proposed.append(tuple(sorted((k, v) for k, v in c.items() if v != start[k])))
    assert set(proposed) == {
        (("ROWS_PER_PROGRAM", 8),),
        (("ROWS_PER_PROGRAM", 2),),
        (("scale_kernel.GROUP", 16),),
        (("scale_kernel.GROUP", 4),),
        (("tuned_kernel.configs[0].BLOCK", 128),),
        (("tuned_kernel.configs[0].BLOCK", 32),),
        (("scale_kernel.BLOCK_SIZE", 2048),),
        (("scale_kernel.BLOCK_SIZE", 512),),
        (("scale_kernel.num_warps", 8),),
        (("scale_kernel.num_warps", 2),),
        (("rows_kernel.num_stages", 3),),
        (("rows_kernel.num_stages", 1),),
    }
    # the next ones move two parameters together
    c = next_config(space, start, observations, seed=7)
    assert c is not None and sum(c[k] != start[k] for k in c) == 2


def test_tuner_proposals_replay_with_the_same_seed_and_differ_with_another() -> None:
    params = find_params(SAMPLE)
    space, start = Space.of(params), current_config(params)

    def sequence(seed: int) -> list[dict[str, int]]:
        obs: list[Observation] = []
        out = []
        for _ in range(6):
            c = next_config(space, start, obs, seed=seed)
            assert c is not None
            obs.append(Observation(c, ok=True))
            out.append(c)
        return out

    assert sequence(3) == sequence(3)
    assert sequence(3) != sequence(4)


def test_a_compile_failure_bounds_the_parameter_and_shared_memory_use_caps_the_tiles() -> None:
    params = find_params(SAMPLE)
    space, start = Space.of(params), current_config(params)
    big = {**start, "scale_kernel.BLOCK_SIZE": 2048}
    obs = [
        Observation(start, ok=True, shared_fraction=0.3),
        Observation(big, ok=False, failure_class="compile_out_of_shared_memory"),
    ]
    for _ in range(40):
        c = next_config(space, start, obs, seed=1)
        if c is None:
            break
        assert c["scale_kernel.BLOCK_SIZE"] < 2048
        # shared memory scales with the tiles and stages: 0.3 * (ratio product) must stay <= 1
        ratio = 1.0
        for k in (
            "ROWS_PER_PROGRAM",
            "scale_kernel.GROUP",
            "scale_kernel.BLOCK_SIZE",
            "rows_kernel.num_stages",
        ):
            ratio *= c[k] / start[k]
        assert 0.3 * ratio <= 1.0
        obs.append(Observation(c, ok=True))


def test_applying_a_config_rewrites_only_the_literals() -> None:
    params = find_params(SAMPLE)
    new = apply_config(SAMPLE, params, {"scale_kernel.BLOCK_SIZE": 256, "ROWS_PER_PROGRAM": 16})
    assert new == SAMPLE.replace("BLOCK_SIZE=1024", "BLOCK_SIZE=256").replace(
        "ROWS_PER_PROGRAM = 4", "ROWS_PER_PROGRAM = 16"
    )
    assert current_config(find_params(new))["scale_kernel.BLOCK_SIZE"] == 256
    assert family_of(new, find_params(new)) == family_of(SAMPLE, params)
    assert family_of(SAMPLE.replace("* scale", "* scale * 1.0"), params) != family_of(SAMPLE, params)


@pytest.mark.anyio
async def test_tune_finds_the_grid_optimum_of_a_smooth_objective_with_a_quarter_of_the_evaluations() -> None:
    params = find_params(SAMPLE)
    space = Space.of(params)
    optimum = {
        "ROWS_PER_PROGRAM": 16,
        "scale_kernel.GROUP": 4,
        "tuned_kernel.configs[0].BLOCK": 32,
        "scale_kernel.BLOCK_SIZE": 256,
        "scale_kernel.num_warps": 8,
        "rows_kernel.num_stages": 4,
    }

    def time_of(config: dict[str, int]) -> float:
        return 10.0 + sum((math.log2(config[k]) - math.log2(v)) ** 2 for k, v in optimum.items())

    async def objective(source: str, config: dict[str, int]) -> Observation:
        assert current_config(find_params(source)) == config
        return Observation(config, ok=True, time_us=time_of(config))

    grid = space.grid()
    result = await tune(SAMPLE, objective, budget=len(grid) // 4, seed=0)
    assert result.best is not None
    assert result.best.time_us == min(time_of(c) for c in grid)
    # it stops at the optimum once no neighbour or pair move improves (6 parameters: 12 neighbours
    # and 60 pair moves a center): far under the budget
    assert result.evaluations < 150 < len(grid) // 4


def test_edits_apply_in_order_and_a_missing_or_ambiguous_old_text_says_why() -> None:
    src = "a = 1\nb = 2\nb = 2\n"
    assert apply_edits(src, [Edit("a = 1", "a = 3"), Edit("a = 3\nb", "a = 4\nb")]) == "a = 4\nb = 2\nb = 2\n"
    try:
        apply_edits(src, [Edit("c = 1", "c = 2")])
        raise AssertionError("should not apply")
    except EditError as e:
        assert "edit 1 does not apply" in str(e)
    try:
        apply_edits(src, [Edit("b = 2", "b = 3")])
        raise AssertionError("should not apply")
    except EditError as e:
        assert "occurs 2 times" in str(e)
    try:
        parse_edits([{"old": "x"}])
        raise AssertionError("should not parse")
    except EditError as e:
        assert "`old` and `new`" in str(e)


DOT_SAMPLE = """import triton
import triton.language as tl

TILE = 32  # shared by the copy kernel and the matmul


@triton.jit
def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    pass


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr))


def run(x, y, a, b, c):
    copy_kernel[(1,)](x, y, BLOCK=32)
    copy_kernel[(1,)](x, y, BLOCK=TILE)
    mm_kernel[(1,)](a, b, c, BLOCK_M=TILE, BLOCK_K=32, GROUP_M=8)
"""


def test_a_kernel_that_calls_tl_dot_gets_no_tile_under_16_unless_it_already_uses_one() -> None:
    values = Space.of(find_params(DOT_SAMPLE)).values
    assert values["copy_kernel.BLOCK"] == [4, 8, 16, 32, 64, 128, 256]  # no dot: down to 32 / 8
    assert values["mm_kernel.BLOCK_K"] == [16, 32, 64, 128, 256]
    assert values["TILE"] == [16, 32, 64, 128, 256]  # a constant that also feeds the matmul
    assert values["mm_kernel.GROUP_M"] == [1, 2, 4, 8, 16, 32, 64]  # a count, no dot dimension


COOKBOOK = Path(__file__).resolve().parents[3] / "kernelcraft" / "knowledge" / "cookbook" / "entries"
GEMM = (COOKBOOK / "gemm" / "kernel.py").read_text()
GEMM_CONFIG_1 = """triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3)"""
GEMM_CONFIG_2 = """triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=5)"""


def test_applying_a_config_to_an_autotuned_kernel_rewrites_only_that_configs_literals() -> None:
    params = find_params(GEMM)
    assert apply_config(GEMM, params, current_config(params)) == GEMM
    config = {"matmul_kernel.configs[1].BLOCK_N": 64, "matmul_kernel.configs[2].num_stages": 2}
    new = apply_config(GEMM, params, config)
    assert new == GEMM.replace(
        GEMM_CONFIG_1, GEMM_CONFIG_1.replace('"BLOCK_N": 128', '"BLOCK_N": 64')
    ).replace(GEMM_CONFIG_2, GEMM_CONFIG_2.replace("num_stages=5", "num_stages=2"))
    ast.parse(new)
    assert current_config(find_params(new)) == {**current_config(params), **config}  # same keys, new values
    assert family_of(new, find_params(new)) == family_of(GEMM, params)


TILES = """import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_M": 1024, "BLOCK_N": 1024}, num_warps=8),
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4),
]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tile_kernel(x_ptr, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pass
"""


def test_the_tile_limit_holds_per_autotune_config_and_a_start_over_it_may_trade_tiles() -> None:
    space = Space.of(find_params(TILES))
    start = current_config(space.params)
    assert space.structurally_valid(start)  # 2**20 and 2**8 elements, never multiplied together
    assert space.structurally_valid({**start, "tile_kernel.configs[1].BLOCK_M": 128})
    assert not space.structurally_valid({**start, "tile_kernel.configs[0].BLOCK_M": 2048})
    # a GEMM config's BLOCK_M*BLOCK_N*BLOCK_K*GROUP_M is 2**23, over 2**20 from the start: its own
    # product is its limit, so the tuner may trade one tile for another but not grow them all
    gemm = Space.of(find_params(GEMM))
    gemm_start = current_config(gemm.params)
    assert gemm_start["matmul_kernel.configs[0].BLOCK_K"] == 64
    assert gemm.structurally_valid(gemm_start)
    assert not gemm.structurally_valid({**gemm_start, "matmul_kernel.configs[0].BLOCK_K": 128})
    traded = {**gemm_start, "matmul_kernel.configs[0].BLOCK_K": 128, "matmul_kernel.configs[0].BLOCK_M": 64}
    assert gemm.structurally_valid(traded)


@pytest.mark.anyio
async def test_tune_searches_an_autotuned_kernels_configs_through_the_rewritten_source() -> None:
    optimum = {"matmul_kernel.configs[0].BLOCK_M": 64, "matmul_kernel.configs[0].BLOCK_K": 64}

    async def objective(source: str, config: dict[str, int]) -> Observation:
        assert current_config(find_params(source)) == config
        return Observation(config, ok=True, time_us=10.0 + sum(config[k] != v for k, v in optimum.items()))

    # the GEMM's tiles are its first axes: one of its first two dozen proposals moves configs[0]'s tile M
    result = await tune(GEMM, objective, budget=24, seed=0)
    assert result.best is not None and result.best.time_us == 10.0


def test_a_proposal_names_the_axes_it_moves_along_and_the_run_times_and_gains_each_axis() -> None:
    from kernelcraft.agent.loop.proposers import axes_changed
    from kernelcraft.agent.loop.runwords import final_words, tuner_axis_seconds

    params = find_params(GEMM)
    start = current_config(params)
    by_kind = {p.kind: p.key for p in params}
    tile = next(p.key for p in params if p.axis == "tile K")
    moved = dict(start) | {
        tile: start[tile] * 2,
        by_kind["num_warps"]: 8 if start[by_kind["num_warps"]] != 8 else 4,
    }
    assert axes_changed(params, start, moved) == ["tile K", "warps"]  # the GEMM's order: tiles first
    assert axes_changed(params, start, start) == []
    records = [
        {"proposer": "tuner", "seconds": 1.0, "cookbook": "gemm", "outcome": "correct", "candidate_us": 80.0,
         "base_us": 100.0},
        {"proposer": "tuner", "seconds": 2.0, "tuner": {"axes": ["tile K", "warps"], "base_us": 80.0},
         "outcome": "correct", "candidate_us": 64.0, "new_best": True},
        {"proposer": "tuner", "seconds": 4.0, "tuner": {"axes": ["tile K"], "base_us": 64.0},
         "outcome": "wrong", "candidate_us": None},
        {"proposer": "llm", "seconds": 30.0},
    ]  # fmt: skip
    by_axis = tuner_axis_seconds(records)
    assert by_axis == {
        "cookbook": {"steps": 1, "median": 1.0, "total": 1.0, "new_best": 0, "best_gain": 1.25},
        "tile K": {"steps": 2, "median": 3.0, "total": 6.0, "new_best": 1, "best_gain": 1.25},
        "warps": {"steps": 1, "median": 2.0, "total": 2.0, "new_best": 1, "best_gain": 1.25},
    }
    assert list(by_axis) == ["cookbook", "tile K", "warps"]  # in the order the run moved them
    untimed = tuner_axis_seconds([{**r, "candidate_us": None} for r in records])
    assert all(v["best_gain"] is None for v in untimed.values())
    words = final_words(
        {"best": None, "steps_done": 3, "correct": 2, "stopped_because": "budget", "run_dir": "r",
         "tuner_axis_seconds": by_axis}
    )  # fmt: skip
    assert "Tuner axes: cookbook 1 step, 1.0 s, best 1.25x; tile K 2 steps, 6.0 s, best 1.25x" in words


def test_a_tuner_run_that_found_nothing_correct_from_a_failing_seed_says_the_tuner_cannot_fix_code() -> None:
    from kernelcraft.agent.loop.runwords import final_words

    run = {"best": None, "steps_done": 3, "correct": 0, "stopped_because": "budget spent", "run_dir": "r",
           "llm": "none", "seed_outcome": "wrong", "failures_by_class": {"numerical_mismatch": 3}}  # fmt: skip
    lines = final_words(run).splitlines()
    assert lines[0] == "No correct kernel found." and lines[1].startswith(
        "3 steps, 0 correct; stopped: budget spent"
    )
    assert lines[2].startswith(
        "The seed kernel fails on this task, and none of the launch configurations tried"
    )
    assert "(numerical_mismatch 3)" in lines[2] and "--llm anthropic|openai" in lines[2]
    # not said where it would mislead: a correct seed, no seed, an LLM's run, a run that found one
    for other in ({"seed_outcome": "correct"}, {"seed_outcome": None}, {"llm": "anthropic"}):
        assert "The seed kernel fails" not in final_words(run | other)
    found = run | {"best": {"node_id": 4, "speedup": None, "path": "b.py"}}
    assert "The seed kernel fails" not in final_words(found)


@pytest.mark.anyio
async def test_the_tuners_first_step_beside_a_seed_is_the_cookbook_kernel_once() -> None:
    from kernelcraft.agent.loop.proposers import TunerProposer
    from kernelcraft.schema.tree import NextStep

    tuner = TunerProposer(
        None,  # type: ignore[arg-type]  # the cookbook step asks the server nothing
        task_source="task",
        seed_code=SAMPLE,
        seed_outcome="correct",
        search_seed=0,
        compile_check=False,
    )
    tuner.cookbook = ("gemm", "class ModelNew: pass  # the cookbook's kernel")
    step = NextStep.model_construct(
        kind="small", start_code=SAMPLE, pool=[], chain=[], target="sm_90a", speedup_measured=True
    )
    first = await tuner.step(step, [], None)
    assert first.code == "class ModelNew: pass  # the cookbook's kernel" and first.info == {
        "mode": "tuner",
        "cookbook": "gemm",
    }
    second = await tuner.step(step, [{"cookbook": "gemm", **first.info}], None)
    assert second.code != first.code and second.info.get("tuner") is not None
