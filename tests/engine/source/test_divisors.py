"""The CPU shrink keeps what a candidate's kernels divide the task's sizes by (`source/divisors.py`,
`source/gridmap.py`, `Multiples`, `sizing.shrink_keeping`): read from its source, never run."""

from __future__ import annotations

import asyncio
import types

from kernelcraft.engine.source import divisors, shrink
from kernelcraft.engine.source.divisors import read_divisors
from kernelcraft.engine.source.gridmap import per_program
from kernelcraft.engine.source.multiples import Multiples
from kernelcraft.engine.worker import sizing

KERNEL = """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    {body}
"""
UNMASKED = "tl.store(out_ptr + offs, tl.load(x_ptr + offs))"
MASKED = "tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)"


def _candidate(body: str, forward: str) -> str:
    return KERNEL.format(body=body) + "\nclass ModelNew:\n    def forward(self, x):\n" + forward


def test_the_block_a_launch_gives_a_kernel_without_masks_is_read() -> None:
    found = read_divisors(
        _candidate(UNMASKED, "        k[(x.numel() // 1024,)](x, x, x.numel(), BLOCK=1024)\n")
    )
    assert found.canonical() == [1024]
    assert "BLOCK=1024 in k's launch" in found.describe()


def test_a_kernel_that_masks_every_access_relies_on_no_divisor() -> None:
    launch = "        k[(triton.cdiv(x.numel(), 1024),)](x, x, x.numel(), BLOCK=1024)\n"
    assert read_divisors(_candidate(MASKED, launch)).canonical() == []


def test_a_scalar_store_at_a_programs_index_is_not_an_unmasked_block() -> None:
    body = "s = tl.sum(tl.load(x_ptr + offs, mask=offs < n), axis=0)\n    tl.store(out_ptr + tl.program_id(0), s)"
    launch = "        k[(triton.cdiv(x.numel(), 256),)](x, x, x.numel(), BLOCK=256)\n"
    assert read_divisors(_candidate(body, launch)).canonical() == []


def test_blocks_are_read_through_names_positions_defaults_and_the_grid() -> None:
    source = """
import triton
import triton.language as tl
TILE_N = 512

@triton.jit
def tile(x_ptr, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr = 128, GROUP_M: tl.constexpr = 8):
    pid_m = tl.program_id(0) // GROUP_M
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k in range(0, n, BLOCK_N):
        acc += tl.load(x_ptr + rm + k)
    tl.store(x_ptr + rm, acc)

class ModelNew:
    def __init__(self):
        self.block = 64

    def forward(self, x):
        m = x.shape[0]
        grid = (m // 48,)
        tile[grid](x, m, self.block, TILE_N)
"""
    # BLOCK_M from self.block (by position), BLOCK_N (a loop's step) given TILE_N and defaulting
    # to 128, the grid's 48; GROUP_M's 8 groups programs, it tiles nothing
    assert read_divisors(source).canonical() == [48, 64, 128, 512]


def test_an_autotuned_kernels_configs_count_comprehensions_included() -> None:
    source = KERNEL.format(body=UNMASKED).replace(
        "@triton.jit",
        '@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in [256, 2048]], key=["n"])\n@triton.jit',
    )
    assert read_divisors(source).canonical() == [256, 2048]


def test_a_divisibility_the_candidate_asserts_counts_even_when_it_masks() -> None:
    forward = (
        "        assert x.shape[1] % 96 == 0\n"
        "        if x.numel() % 4096 != 0:\n            raise ValueError('pad it')\n"
        "        k[(triton.cdiv(x.numel(), 1024),)](x, x, x.numel(), BLOCK=1024)\n"
    )
    assert read_divisors(_candidate(MASKED, forward)).canonical() == [96, 4096]
    static = MASKED + "\n    tl.static_assert(BLOCK % 32 == 0)"
    assert read_divisors(_candidate(static, "        pass\n")).canonical() == [32]


def test_a_source_that_does_not_parse_relies_on_nothing() -> None:
    assert read_divisors("def (:").canonical() == []


ROWS_TASK = """
import torch
batch_size = 4096
dim = 8192
def get_inputs():
    return [torch.randn(batch_size, dim)]
def get_init_inputs():
    return []
"""


def test_a_dimension_the_grid_takes_whole_is_launched_one_program_per_index() -> None:
    rows = _candidate(UNMASKED, "        rows, n = x.shape\n        k[(rows,)](x, x, n, BLOCK=1024)\n")
    assert per_program(ROWS_TASK, rows) == ["batch_size"]
    # the same rows also tiled by another launch, or x reshaped first: nothing is said
    tiled = rows.replace(
        "k[(rows,)](x, x, n, BLOCK=1024)\n",
        "k[(rows,)](x, x, n, BLOCK=1024)\n        k[(rows // 64,)](x, x, n)\n",
    )
    assert per_program(ROWS_TASK, tiled) == []
    viewed = rows.replace("rows, n = x.shape", "x = x.view(-1, 64)\n        rows, n = x.shape")
    assert per_program(ROWS_TASK, viewed) == []
    # a square input: the grid's rows are also its tiled columns
    square = ROWS_TASK.replace("torch.randn(batch_size, dim)", "torch.randn(dim, dim)")
    assert per_program(square, rows) == []


def test_the_shrink_keeps_each_size_a_multiple_of_the_blocks_that_divided_it() -> None:
    tiles = Multiples.of([32, 512])
    plan = shrink.plan_sizes({"rows": 2048, "cols": 8192}, 256, multiples=tiles)
    assert plan == {"rows": 512, "cols": 512}  # without: 64 and 256, under a 512 tile
    # a reduction dim alone over the limit, a floor over the limit itself
    assert shrink.plan_sizes({"n_rows": 16384, "n_cols": 256}, 16, multiples=tiles) == {
        "n_rows": 512,
        "n_cols": 32,
    }
    # a block that does not divide the task's size asks nothing of it (its kernel masks)
    assert shrink.plan_sizes({"dim": 16000}, 256, multiples=Multiples.of([1024])) == {"dim": 250}
    # rows the grid takes whole shrink as for any candidate: their ratio to the columns may go
    rows = Multiples.of([1024], ["batch_size"])
    assert shrink.plan_sizes({"batch_size": 4096, "dim": 8192}, 256, multiples=rows) == {
        "batch_size": 128,
        "dim": 1024,
    }
    assert (
        shrink.structure_broken(
            {"batch_size": 4096, "dim": 8192}, {"batch_size": 128, "dim": 1024}, 256, set(), rows
        )
        == []
    )
    # the model's linked sizes keep their ratio: one power of two for all, as far as the blocks allow
    model = shrink.plan_sizes({"c": 4096, "g": 256 * 16}, 64, model=frozenset({"c", "g"}), multiples=rows)
    assert model["c"] % 1024 == 0 and model["c"] == model["g"]


def test_a_product_of_sizes_a_block_divided_stays_divided() -> None:
    # 512 x 8000 elements are 4000 blocks of 1024, though neither size is a multiple of it
    one = Multiples.of([1024])
    plan = shrink.plan_sizes({"batch": 512, "dim": 8000}, 256, multiples=one)
    assert one.broken([[512, 8000]], [[plan["batch"], plan["dim"]]], {}) is not None
    products = Multiples(one.values, products=True)
    plan = shrink.plan_sizes({"batch": 512, "dim": 8000}, 256, multiples=products)
    assert products.broken([[512, 8000]], [[plan["batch"], plan["dim"]]], {}) is None


def _load(source: str, tag: str) -> types.ModuleType:
    module = types.ModuleType(tag)
    exec(compile(source, tag, "exec"), module.__dict__)
    return module


def _keeping(source: str, multiples: Multiples) -> sizing.Shrunk:
    task = _load(source, "task")
    return sizing.shrink_keeping(source, task, sizing.measure(task, interpret=True), _load, multiples)


def test_blocks_no_plan_can_keep_within_the_interpreters_budget_are_dropped_with_a_warning() -> None:
    source = ROWS_TASK.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dim, 4)")
    source += "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    kept = _keeping(source, Multiples.of([1024], ["batch_size"]))
    assert kept.multiples == "kept" and kept.changes == {"batch_size": [4096, 128], "dim": [8192, 1024]}
    dropped = _keeping(source, Multiples.of([4096]))  # 4096 x 4096 x 4 at the least
    plain = _keeping(source, Multiples())
    assert dropped.multiples == "dropped" and plain.multiples is None and dropped.changes == plain.changes
    assert "elements of work" in dropped.dropped
    found = divisors.Divisors({4096}, {4096: "BLOCK=4096 in k's launch at line 9"})
    note = divisors.note(found, dropped.multiples, dropped.dropped)
    assert note is not None and note.startswith("warning:")
    assert "--cpu-sizes" in note and "KERNELCRAFT_CPU_SIZES" in note and "BLOCK=4096" in note


def test_a_grid_in_a_helper_forward_passes_its_input_to_is_read_too() -> None:
    helper = KERNEL.format(body=UNMASKED) + (
        "\ndef l2(x):\n    rows, n = x.shape\n    k[(rows,)](x, x, n, BLOCK=1024)\n"
        "\nclass ModelNew:\n    def forward(self, x):\n        return l2(x.contiguous())\n"
    )
    assert per_program(ROWS_TASK, helper) == []  # an argument not a bare input: not followed
    assert per_program(ROWS_TASK, helper.replace("l2(x.contiguous())", "l2(x)")) == ["batch_size"]


def test_a_candidates_divisors_give_its_shrunk_task_a_reference_of_its_own() -> None:
    """Until the task is known to run at its own sizes whatever the candidate (`unshrunk`)."""
    from types import SimpleNamespace

    from kernelcraft.engine.host.job.state import CandidateSettings, JobState
    from kernelcraft.engine.host.references import ReferencePool
    from kernelcraft.schema.evaluation import EvalJob

    refs = ReferencePool(per_task=2, idle_per_device=4)
    cpu, gpu = SimpleNamespace(kind="cpu", index=None), SimpleNamespace(kind="cuda", index=0)
    unmasked = _candidate(UNMASKED, "        rows, n = x.shape\n        k[(rows,)](x, x, n, BLOCK=1024)\n")

    def state(candidate: str, device: object = cpu, **kw: object) -> JobState:
        spec = EvalJob(task_source=ROWS_TASK, candidate_source=candidate, **kw)  # type: ignore[arg-type]
        return JobState(spec, device, refs, CandidateSettings(None, sandbox=False))  # type: ignore[arg-type]

    async def check() -> None:  # JobState makes an asyncio future
        kept = state(unmasked)
        assert kept.key != kept.base_key and kept.untiled == ["batch_size"] and not kept.flat
        assert state(unmasked.replace("1024", "512")).key not in (kept.key, kept.base_key)
        assert state(_candidate(MASKED, "        pass\n")).key == kept.base_key
        assert state(unmasked, cpu_sizes={"dim": 2048}).divisors.values == set()  # the user's sizes win
        assert state(unmasked, gpu).divisors.values == set()  # a GPU runs the task's own sizes
        refs.unshrunk.add(kept.base_key)
        assert state(unmasked).key == kept.base_key

    asyncio.run(check())


def test_a_candidate_reading_its_inputs_flat_needs_only_their_element_counts_divided() -> None:
    from kernelcraft.engine.source.gridmap import untiled

    task = ROWS_TASK.replace("dim = 8192", "dim = 393216")
    task += "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    flat = _candidate(
        UNMASKED, "        x = x.view(-1)\n        k[(x.numel() // 1024,)](x, x, x.numel(), BLOCK=1024)\n"
    )
    assert untiled(task, flat) == (["batch_size", "dim"], True)
    shaped = flat.replace("x.numel() // 1024", "x.shape[0] * x.shape[1] // 1024")
    assert untiled(task, shaped) == ([], False)
    # 2 x 192 (the plain shrink) is 384 elements: doubled together until 1024 divides them again
    plan = _keeping(task, Multiples.of([1024], ["batch_size", "dim"], flat=True))
    assert plan.multiples == "kept" and plan.changes == {"batch_size": [4096, 8], "dim": [393216, 768]}


def test_a_source_nested_past_pythons_recursion_reads_as_relying_on_nothing() -> None:
    from kernelcraft.engine.source.gridmap import untiled

    deep = "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    assert read_divisors(deep).canonical() == [] and untiled(ROWS_TASK, deep) == ([], False)


def test_rows_of_an_input_viewed_as_rows_of_its_last_dimension_are_one_program_each() -> None:
    # a norm over the hidden size of [batch, seq, hidden], launched one program per row
    task = ROWS_TASK.replace("batch_size = 4096", "batch_size = 16\nseq = 4096").replace(
        "torch.randn(batch_size, dim)", "torch.randn(batch_size, seq, dim)"
    )
    forwards = [
        "x2 = x.contiguous().view(-1, x.shape[-1])\n        rows, n = x2.shape\n        k[(rows,)](x2, x2, n, BLOCK=1024)\n",
        "x = x.reshape(-1, x.shape[-1])\n        k[(x.shape[0],)](x, x, x.shape[1], BLOCK=1024)\n",
        "n = x.shape[-1]\n        k[(x.numel() // n,)](x, x, n, BLOCK=1024)\n",
    ]
    for forward in forwards:
        assert per_program(task, _candidate(UNMASKED, "        " + forward)) == ["batch_size", "seq"], forward
    # the same rows split among programs another way: they may be tiled
    both = forwards[2] + "        k[(x.numel() // n // 8,)](x, x, n, BLOCK=1024)\n"
    assert per_program(task, _candidate(UNMASKED, "        " + both)) == []
    # an input read before its name is reused for a view: its reads are not the view's
    before = "b = x.shape[0]\n        x = x.reshape(-1, x.shape[-1])\n        k[(b,)](x, x, x.shape[1], BLOCK=1024)\n"
    assert per_program(task, _candidate(UNMASKED, "        " + before)) == []
    plan = shrink.plan_sizes(
        {"seq": 4096, "dim": 8192}, 64, multiples=Multiples.of([1024], ["batch_size", "seq"])
    )
    assert plan == {"seq": 32, "dim": 1024}  # 16 x 32 rows of 1024, not 16 x 512


def test_sizes_the_task_refuses_while_doubling_leave_the_plain_shrink_and_a_warning() -> None:
    task = ROWS_TASK.replace("dim = 8192", "dim = 393216").replace(
        "def get_inputs():\n", "def get_inputs():\n    assert batch_size != 8, 'not 8 rows'\n"
    )
    task += "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    plan = _keeping(task, Multiples.of([1024], ["batch_size", "dim"], flat=True))
    assert plan.multiples == "dropped" and plan.changes == {"batch_size": [4096, 2], "dim": [393216, 192]}
    assert "1024 no longer divides" in plan.dropped


def test_two_equal_sizes_one_launched_per_program_stay_equal() -> None:
    # batch_size = dim = 4096: the rows may not part from the columns the block tiles
    task = ROWS_TASK.replace("dim = 8192", "dim = 4096")
    task += "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    plan = _keeping(task, Multiples.of([1024], ["batch_size"]))
    assert plan.multiples == "kept" and plan.changes == {"batch_size": [4096, 1024], "dim": [4096, 1024]}


def test_a_source_asserting_thousands_of_divisors_names_a_bounded_few() -> None:
    asserts = "".join(f"        assert x.numel() % {m} == 0\n" for m in range(2, 3000))
    found = read_divisors(_candidate(MASKED, asserts))
    assert len(found.values) == 2998 and found.canonical() == list(range(3000 - divisors.MAX_VALUES, 3000))


def test_every_plan_keeps_each_sizes_multiples_and_never_grows_a_size() -> None:
    import itertools
    import random

    rng = random.Random(7)
    for _ in range(300):
        names = ["a", "b", "c"][: rng.randint(1, 3)]
        sizes = {n: rng.choice([3, 96, 250, 1000, 4096, 8192, 12288, 65536, 393216]) for n in names}
        values = rng.sample([16, 32, 64, 128, 512, 1024, 2048, 48], rng.randint(1, 3))
        untiled = [n for n in names if rng.random() < 0.3]
        model = frozenset(n for n in names if rng.random() < 0.3)
        for limit, products in itertools.product((256, 64, 16, 4), (False, True)):
            multiples = Multiples(tuple(sorted(values)), products, frozenset(untiled))
            plan = shrink.plan_sizes(sizes, limit, model=model, multiples=multiples)
            for n, v in sizes.items():
                assert plan[n] <= v, (sizes, values, limit, plan)
                if v <= limit:
                    assert plan[n] == v
                elif n not in untiled or products:
                    assert plan[n] % multiples.need(n, v) == 0, (sizes, values, limit, plan)
