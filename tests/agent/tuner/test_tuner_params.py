"""What the offline tuner counts as a tunable launch parameter: each named decision of
`agent/tuner/params.py` (and the source reading of `agent/tuner/source.py`) on its own, then
`find_params` putting them together, with `agent/tuner/axes.py`'s precisions and persistent grids."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelcraft.agent.tuner.params import (
    autotune_configs,
    config_arguments,
    constant_for,
    dot_floor,
    find_params,
    is_launch_parameter,
    is_tunable,
    kind_of,
    unpassed_defaults,
)
from kernelcraft.agent.tuner.search import Space
from kernelcraft.agent.tuner.source import (
    MIN_DOT_DIM,
    JitFn,
    Launch,
    assignments,
    jit_functions,
    launch_arguments,
    launch_name,
    launches,
)

KERNELS = """import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, n, BLOCK_M: tl.constexpr, BLOCK_K: "tl.constexpr" = 32, EVEN: constexpr = 1):
    acc = tl.dot(a_ptr, a_ptr)


@triton.jit
def add_kernel(x_ptr, n, BLOCK: tl.constexpr, GROUP: tl.constexpr = 8):
    pass


@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned_kernel(x_ptr, BLOCK: tl.constexpr = 64):
    pass
"""


def jit_of(src: str = KERNELS) -> dict[str, JitFn]:
    return jit_functions(ast.parse(src))


def call(src: str) -> ast.Call:
    node = ast.parse(src).body[0]
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
    return node.value


def launch_of(src: str, jit: dict[str, JitFn], scope: str = "", local: str = "") -> Launch:
    c = call(src)
    kernel = launch_name(c)
    assert kernel is not None
    return Launch(c, kernel, jit.get(kernel), scope, assignments(ast.parse(local).body))


def test_jit_functions_read_constexpr_annotations_defaults_autotune_and_dot() -> None:
    jit = jit_of()
    assert set(jit) == {"mm_kernel", "add_kernel", "tuned_kernel"}
    mm = jit["mm_kernel"]
    assert mm.params == ["a_ptr", "n", "BLOCK_M", "BLOCK_K", "EVEN"]
    assert mm.constexpr == {"BLOCK_M", "BLOCK_K", "EVEN"}  # tl.constexpr, "tl.constexpr", constexpr
    assert set(mm.defaults) == {"BLOCK_K", "EVEN"} and mm.uses_dot and not mm.autotuned
    assert jit["tuned_kernel"].autotuned and not jit["add_kernel"].uses_dot
    assert isinstance(jit["tuned_kernel"].configs, ast.List) and mm.configs is None  # autotune's configs=


@pytest.mark.parametrize(
    ("src", "kernel"),
    [("k[grid](x)\n", "k"), ("lib.k[(1,)](x)\n", "k"), ("k(x)\n", None), ("f()[0](x)\n", None)],
)
def test_only_a_subscripted_name_called_is_a_launch(src: str, kernel: str | None) -> None:
    assert launch_name(call(src)) == kernel


def test_launches_are_found_at_module_level_and_in_functions_but_not_for_autotuned_kernels() -> None:
    src = KERNELS + (
        "add_kernel[(1,)](x, n, 64)\n"
        "def run(x):\n"
        "    T = 128\n"
        "    mm_kernel[(1,)](x, n, T)\n"
        "    tuned_kernel[(1,)](x)\n"
        "    def again(y):\n"
        "        add_kernel[(2,)](y, n, 16)\n"
    )
    jit = jit_of(src)
    found = [(x.scope, x.kernel, sorted(x.local)) for x in launches(ast.parse(src), jit)]
    assert found == [
        ("", "add_kernel", []),
        ("run", "mm_kernel", ["T"]),
        ("run", "add_kernel", ["T"]),  # a nested function's launch is seen from its parent too
        ("again", "add_kernel", []),
    ]


def test_launch_arguments_bind_by_position_to_a_known_kernel_and_by_keyword_to_any() -> None:
    jit = jit_of()
    known = launch_of("mm_kernel[g](a, n, 64, 32, 1, 99, num_warps=4, **kw)\n", jit)
    assert [name for name, _ in launch_arguments(known)] == [
        "a_ptr",
        "n",
        "BLOCK_M",
        "BLOCK_K",
        "EVEN",  # the sixth positional argument binds to no parameter; **kw to none either
        "num_warps",
    ]
    imported = launch_of("ext_kernel[g](a, 64, BLOCK=64, num_stages=2)\n", jit)
    assert [name for name, _ in launch_arguments(imported)] == ["BLOCK", "num_stages"]


@pytest.mark.parametrize(
    ("name", "kernel", "expected"),
    [
        ("num_warps", "add_kernel", True),
        ("num_stages", None, True),
        ("BLOCK", "add_kernel", True),  # a constexpr of a kernel defined here
        ("n", "add_kernel", False),
        ("BLOCK_M", "add_kernel", False),  # UPPERCASE but no parameter of this kernel
        ("BLOCK_M", None, True),  # a kernel imported from elsewhere: the UPPERCASE convention
        ("block_m", None, False),
    ],
)
def test_a_launch_parameter_is_an_option_a_constexpr_or_uppercase_for_an_imported_kernel(
    name: str, kernel: str | None, expected: bool
) -> None:
    fn = jit_of()[kernel] if kernel else None
    assert is_launch_parameter(name, fn) is expected


def test_launch_options_are_their_own_kind_and_the_rest_meta_parameters() -> None:
    assert [kind_of(n) for n in ("num_warps", "num_stages", "BLOCK")] == ["num_warps", "num_stages", "meta"]


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("num_warps", 16, True),
        ("num_warps", 3, False),
        ("num_stages", 5, True),
        ("num_stages", 6, False),
        ("meta", 2, True),
        ("meta", 65536, True),
        ("meta", 1, False),  # a flag, not a tile
        ("meta", 784, False),  # a shape, not a tile
    ],
)
def test_options_are_tuned_within_tritons_ranges_and_meta_parameters_as_powers_of_two(
    kind: str, value: int, expected: bool
) -> None:
    assert is_tunable(kind, value) is expected  # type: ignore[arg-type]


def test_a_name_passed_to_a_launch_is_a_constant_when_its_first_scope_assigns_it_once() -> None:
    jit = jit_of()
    module = assignments(ast.parse("B = 64\nTWICE = 8\nTWICE = 16\nS = 32\n").body)

    def const(arg: str, local: str = "") -> tuple[object, str, str] | None:
        launch = launch_of(f"add_kernel[g](x, n, {arg})\n", jit, "run" if local else "", local)
        value = launch.call.args[2]
        assert isinstance(value, ast.Name)
        found = constant_for(value, launch, module)
        return None if found is None else (ast.literal_eval(found[0]), found[1], found[2])

    assert const("B") == (64, "B", "")  # a module constant configures every launch passing it
    assert const("L", local="L = 128\n") == (128, "run.L", "add_kernel")
    assert const("B", local="B = 256\n") == (256, "run.B", "add_kernel")  # the function's own first
    assert const("TWICE") is None
    assert const("S", local="S = 1\nS = 2\n") is None  # assigned twice locally: no constant at all
    assert const("UNKNOWN") is None


def test_a_tl_dot_kernel_is_not_given_a_tile_under_16_unless_it_has_one() -> None:
    jit = jit_of()
    assert dot_floor("meta", 64, jit["mm_kernel"]) == MIN_DOT_DIM
    assert dot_floor("meta", 8, jit["mm_kernel"]) == 8
    assert dot_floor("num_warps", 4, jit["mm_kernel"]) == 2
    assert dot_floor("meta", 64, jit["add_kernel"]) == 2
    assert dot_floor("meta", 64, None) == 2


def test_constexpr_defaults_no_launch_passes_are_found_except_for_autotuned_kernels() -> None:
    jit = jit_of()
    found = [(k, n, ast.literal_eval(d)) for k, n, d in unpassed_defaults(jit, {"mm_kernel": {"BLOCK_K"}})]
    assert found == [("mm_kernel", "EVEN", 1), ("add_kernel", "GROUP", 8)]


def test_assignments_of_a_scope_leave_out_nested_functions_and_classes() -> None:
    body = ast.parse(
        "A = 1\nif x:\n    B = 2\nC, D = 3, 4\nE += 1\ndef f():\n    F = 5\nclass K:\n    G = 6\n"
    ).body
    assert sorted(assignments(body)) == ["A", "B"]


def test_find_params_gives_a_constant_shared_with_a_dot_kernel_the_dot_floor_and_numbers_repeated_keys() -> (
    None
):
    src = KERNELS + (
        "SHARED = 32\n"
        "def run(x):\n"
        "    add_kernel[(1,)](x, n, SHARED, num_warps=4)\n"
        "    mm_kernel[(1,)](x, n, SHARED, num_warps=8)\n"
        "    add_kernel[(1,)](x, n, BLOCK=64, num_warps=2)\n"
    )
    found = [(p.key, p.value, p.launch, p.floor) for p in find_params(src)]
    assert found == [
        ("mm_kernel.BLOCK_K", 32, "mm_kernel", 16),
        ("mm_kernel.dot@7:10.input_precision", 2, "mm_kernel", 0),  # its tl.dot: TF32, the default
        ("add_kernel.GROUP", 8, "add_kernel", 2),
        ("SHARED", 32, "", 16),
        ("add_kernel.num_warps", 4, "add_kernel", 2),
        ("mm_kernel.num_warps", 8, "mm_kernel", 2),
        ("add_kernel.BLOCK", 64, "add_kernel", 2),
        ("add_kernel.num_warps#2", 2, "add_kernel", 2),
    ]


PRECISION_SRC = """
import triton
import triton.language as tl


@triton.jit
def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    a = tl.load(a_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    b = tl.load(b_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    c = tl.dot(a, b, input_precision="ieee")
    d = tl.dot(a, b)
    e = tl.dot(
        a,
        b,
    )
    f = tl.dot(a, b, allow_tf32=False)
    tl.store(c_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], c + d + e + f)


def run(a, b, c):
    k[(1,)](a, b, c, BLOCK=16)
"""


def test_a_dots_input_precision_is_a_tunable_choice_from_exact_to_tf32() -> None:
    """Issue 29, item 3: the tuner searches precision modes (IEEE, 3xTF32, TF32); verify decides
    which the task's tolerance allows. A dot given allow_tf32 (deprecated) is left alone."""
    from kernelcraft.agent.tuner.search import Space, apply_config
    from kernelcraft.agent.tuner.source import PRECISIONS

    params = find_params(PRECISION_SRC)
    dots = [p for p in params if p.kind == "precision"]
    assert [(p.line, p.value) for p in dots] == [(10, 0), (11, 2), (12, 2)]  # ieee, default, default
    assert Space.of(params).values[dots[0].key] == [0, 1, 2] and PRECISIONS == ("ieee", "tf32x3", "tf32")
    config = {dots[0].key: 1, dots[1].key: 1, dots[2].key: 0}
    lines = apply_config(PRECISION_SRC, params, config).splitlines()
    assert '    c = tl.dot(a, b, input_precision="tf32x3")' in lines
    assert '    d = tl.dot(a, b, input_precision="tf32x3")' in lines
    assert '        b,\n    input_precision="ieee")' in "\n".join(lines)  # after the trailing comma
    assert "    f = tl.dot(a, b, allow_tf32=False)" in lines
    ast.parse(apply_config(PRECISION_SRC, params, config))
    assert apply_config(PRECISION_SRC, params, {p.key: p.value for p in params}) == PRECISION_SRC


COOKBOOK = Path(__file__).resolve().parents[3] / "kernelcraft" / "knowledge" / "cookbook" / "entries"

AUTOTUNED = """import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK": 64, "EVEN": 1}, num_warps=4),
    make_config(128),
    triton.Config({"BLOCK": 128}, 8, 2),
]
TWICE = [triton.Config({"BLOCK": 64})]
TWICE = [triton.Config({"BLOCK": 128})]
BLOCK = 256


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def named_kernel(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    pass


@triton.autotune([triton.Config({"BLOCK": 32}, num_stages=4)], key=["n"])
@triton.jit
def inline_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])
@triton.jit
def built_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=TWICE, key=["n"])
@triton.jit
def twice_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=CONFIGS + [triton.Config({"BLOCK": 512})], key=["n"])
@triton.jit
def sum_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": BLOCK}, num_warps=4)], key=["n"])
@triton.jit
def named_values_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass
"""


def test_autotune_configs_are_the_config_calls_of_a_list_in_the_decorator_or_assigned_once() -> None:
    tree = ast.parse(AUTOTUNED)
    jit, module = jit_functions(tree), assignments(tree.body)
    found = {kernel: [(i, c.lineno) for i, c in autotune_configs(fn, module)] for kernel, fn in jit.items()}
    assert found == {
        "named_kernel": [(0, 5), (2, 7)],  # make_config(128) is no triton.Config: index 1 is skipped
        "inline_kernel": [(0, 20)],  # configs passed by position
        "built_kernel": [],  # a comprehension: one literal stands for several configs
        "twice_kernel": [],  # a name assigned twice is no constant
        "sum_kernel": [],  # CONFIGS + [...]: not a list literal
        "named_values_kernel": [(0, 44)],
    }


def test_a_config_sets_its_dict_entries_that_are_constexprs_and_its_num_warps_and_num_stages() -> None:
    fn = jit_of()["mm_kernel"]

    def names(src: str) -> list[tuple[str, int]]:
        return [(name, ast.literal_eval(value)) for name, value in config_arguments(call(src), fn)]

    every = 'triton.Config({"BLOCK_M": 128, "EVEN": 1, "n": 64, "X": 32, **more}, 8, num_stages=3)\n'
    assert names(every) == [
        ("BLOCK_M", 128),
        ("EVEN", 1),  # a flag: is_tunable leaves it out later
        ("num_warps", 8),  # by position, as triton.Config(kwargs, num_warps, num_stages) takes it
        ("num_stages", 3),
    ]  # "n" is no constexpr, "X" no parameter, **more no name
    assert names("Config(kwargs=META, num_stages=2)\n") == [("num_stages", 2)]  # a dict not written here
    assert names('triton.Config({"BLOCK_K": 32}, *options)\n') == [("BLOCK_K", 32)]  # nothing after *


def test_find_params_tunes_each_triton_config_of_the_gemm_cookbook_entry() -> None:
    source = (COOKBOOK / "gemm" / "kernel.py").read_text()
    line = [i + 1 for i, text in enumerate(source.splitlines()) if "triton.Config(" in text][1]  # CONFIGS[1]
    found = [
        (p.key, p.value, p.line, p.launch, p.floor, p.config)
        for p in find_params(source)
        if p.config == 1 and p.launch == "matmul_kernel"
    ]
    assert found == [
        ("matmul_kernel.configs[1].BLOCK_M", 128, line, "matmul_kernel", MIN_DOT_DIM, 1),
        ("matmul_kernel.configs[1].BLOCK_N", 128, line, "matmul_kernel", MIN_DOT_DIM, 1),
        ("matmul_kernel.configs[1].BLOCK_K", 32, line, "matmul_kernel", MIN_DOT_DIM, 1),
        ("matmul_kernel.configs[1].GROUP_M", 8, line, "matmul_kernel", 1, 1),  # a count: no dot dimension
        ("matmul_kernel.configs[1].num_warps", 8, line, "matmul_kernel", 2, 1),
        ("matmul_kernel.configs[1].num_stages", 3, line, "matmul_kernel", 2, 1),
    ]
    params = find_params(source)
    for kernel in ("matmul_kernel", "matmul_split_k_kernel"):  # 4 tiles (or 3 and SPLIT_K), warps, stages
        assert [sum(p.config == i and p.launch == kernel for p in params) for i in (0, 1, 2)] == [6, 6, 6]
    assert {p.key for p in params if p.launch == "matmul_split_k_kernel" and p.config == 0} >= {
        "matmul_split_k_kernel.configs[0].SPLIT_K"  # split-K is a tuner axis where a kernel has one
    }
    (split,) = [p for p in params if p.kind == "split"]  # the operands' split: bf16 or TF32 parts
    assert (split.key, source[split.start : split.end], split.text(0)) == (
        "PRECISION",
        '"bf16x3"',
        '"tf32x3"',
    )
    assert Space.of(params).values["PRECISION"] == [0, 1]  # the tuner proposes both; verify decides


def test_a_split_precision_is_a_module_constant_named_so_assigned_once_to_a_split_it_knows() -> None:
    def splits(src: str) -> list[tuple[str, int]]:
        return [(p.key, p.value) for p in find_params(src) if p.kind == "split"]

    assert splits('PRECISION = "tf32x3"\nDOT_PRECISION = "bf16x3"\n') == [
        ("PRECISION", 0),
        ("DOT_PRECISION", 1),
    ]
    assert splits('MODE = "bf16x3"\n') == []  # the name does not say precision
    assert splits('PRECISION = "ieee"\n') == []  # not a split this axis knows
    assert splits('PRECISION = "bf16x3"\nPRECISION = "tf32x3"\n') == []  # assigned twice: not a constant
    assert splits('def f():\n    PRECISION = "bf16x3"\n') == []  # not at module level


@pytest.mark.parametrize("entry", ["gemm", "bmm", "linear_epilogue", "attention", "gemm_small_k"])
def test_every_triton_config_of_an_autotuned_cookbook_entry_gives_unique_keys_over_its_own_literals(
    entry: str,
) -> None:
    source = (COOKBOOK / entry / "kernel.py").read_text()
    params = [p for p in find_params(source) if p.config is not None]
    config_lines = {i + 1 for i, line in enumerate(source.splitlines()) if "triton.Config(" in line}
    assert {p.line for p in params} == config_lines
    assert len({p.key for p in params}) == len(params)
    for p in params:
        assert source[p.start : p.end] == str(p.value)
        assert f".configs[{p.config}]." in p.key and p.key.startswith(f"{p.launch}.")


def test_find_params_tunes_only_the_literal_values_of_a_config_list_written_out() -> None:
    found = [(p.key, p.kind, p.value, p.line, p.config) for p in find_params(AUTOTUNED)]
    assert found == [
        ("named_kernel.configs[0].BLOCK", "meta", 64, 5, 0),  # EVEN=1 is a flag
        ("named_kernel.configs[0].num_warps", "num_warps", 4, 5, 0),
        ("named_kernel.configs[2].BLOCK", "meta", 128, 7, 2),
        ("named_kernel.configs[2].num_warps", "num_warps", 8, 7, 2),
        ("named_kernel.configs[2].num_stages", "num_stages", 2, 7, 2),
        ("inline_kernel.configs[0].BLOCK", "meta", 32, 20, 0),
        ("inline_kernel.configs[0].num_stages", "num_stages", 4, 20, 0),
        ("named_values_kernel.configs[0].num_warps", "num_warps", 4, 44, 0),  # BLOCK: a name, no literal
    ]  # nothing of built_kernel, twice_kernel, sum_kernel; BLOCK = 256 is passed by no launch


def test_a_config_list_shared_by_two_kernels_is_keyed_by_the_first_and_floored_by_the_dot_kernel() -> None:
    src = (
        "import triton\nimport triton.language as tl\n\n"
        'CONFIGS = [triton.Config({"BLOCK": 8}, num_warps=4), triton.Config({"BLOCK": 64})]\n\n\n'
        '@triton.autotune(configs=CONFIGS, key=["n"])\n'
        "@triton.jit\n"
        "def copy_kernel(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    pass\n\n\n"
        '@triton.autotune(configs=CONFIGS, key=["n"])\n'
        "@triton.jit\n"
        "def mm_kernel(a_ptr, n, BLOCK: tl.constexpr):\n"
        '    acc = tl.dot(a_ptr, a_ptr, input_precision="ieee")\n'
    )
    found = [(p.key, p.value, p.launch, p.floor, p.config) for p in find_params(src) if p.kind != "precision"]
    assert found == [
        ("copy_kernel.configs[0].BLOCK", 8, "copy_kernel", 8, 0),  # mm_kernel's dot floor, but 8 is given
        ("copy_kernel.configs[0].num_warps", 4, "copy_kernel", 2, 0),
        ("copy_kernel.configs[1].BLOCK", 64, "copy_kernel", MIN_DOT_DIM, 1),  # once, mm_kernel's floor
    ]


PERSISTENT = """import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def _sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def add(x):
    y = torch.empty_like(x)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    grid = lambda meta: (min(sms * 2, triton.cdiv(x.numel(), meta["BLOCK"])),)
    add_kernel[grid](x, y, x.numel(), BLOCK=64)
    return y


def add_bare(x):
    y = torch.empty_like(x)
    add_kernel[(min(_sm_count(x.device), triton.cdiv(x.numel(), 64)),)](x, y, x.numel(), BLOCK=64)
    return y


def split(x):
    return 4 * 128 <= _sm_count(x.device) * 2
"""


def test_a_persistent_launch_gets_its_programs_per_sm_as_a_tunable_factor() -> None:
    """Issue 29, item 3: the tuner searches persistent launches. A grid that reads the SM count
    (through a name, a lambda or a helper function) is persistent; its factor is a param."""
    from kernelcraft.agent.tuner.axes import PROGRAMS_PER_SM
    from kernelcraft.agent.tuner.search import Space, apply_config

    params = find_params(PERSISTENT)
    factors = [p for p in params if p.kind == "persistent"]
    assert [(p.line, p.value, PERSISTENT[p.start : p.end]) for p in factors] == [
        (20, 2, "2"),  # sms * 2 in the lambda
        (27, 1, "_sm_count(x.device)"),  # a bare read: no factor written yet
    ]
    # the heuristic in split() compares the SM count with a tile count: no grid, no param
    assert all(p.line != 32 for p in params)
    space = Space.of(params)
    assert all(space.values[p.key] == list(PROGRAMS_PER_SM) for p in factors)
    out = apply_config(PERSISTENT, params, {factors[0].key: 4, factors[1].key: 3})
    assert "(min(sms * 4, triton.cdiv" in out
    assert "add_kernel[(min((_sm_count(x.device) * 3), triton.cdiv" in out
    assert "return 4 * 128 <= _sm_count(x.device) * 2" in out
    assert apply_config(PERSISTENT, params, {p.key: p.value for p in params}) == PERSISTENT
    ast.parse(out)


def test_every_programs_per_sm_the_tuner_proposes_runs_right_in_the_interpreter(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    from kernelcraft.agent.tuner.axes import PROGRAMS_PER_SM
    from kernelcraft.agent.tuner.search import apply_config

    params = find_params(PERSISTENT)
    factors = [p for p in params if p.kind == "persistent"]
    for k in PROGRAMS_PER_SM:
        (tmp_path / f"k{k}.py").write_text(apply_config(PERSISTENT, params, {p.key: k for p in factors}))
    script = (
        "import importlib.util, json, sys, torch\n"
        "out = {}\n"
        f"for k in {list(PROGRAMS_PER_SM)}:\n"
        f"    spec = importlib.util.spec_from_file_location(f'k{{k}}', {str(tmp_path)!r} + f'/k{{k}}.py')\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "    x = torch.arange(1000, dtype=torch.float32)\n"
        "    out[k] = [bool(torch.equal(m.add(x), x + 1)), bool(torch.equal(m.add_bare(x), x + 1))]\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {str(k): [True, True] for k in PROGRAMS_PER_SM}


ROW_SUM = """import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def row_sum(x, out):
    rows, n_cols = x.shape
    row_sum_kernel[(rows,)](x, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))


def row_sum_kw(x, out, **options):
    row_sum_kernel[(1,)](x, out, 1, BLOCK=2, **options)
"""


def test_a_kernel_with_nothing_else_to_tune_gets_the_num_warps_its_launch_does_not_set() -> None:
    # A whole-row reduction's block must cover the row (`next_power_of_2(n_cols)`): no literal to
    # tune, and `--llm none` refused such a seed. Its launch's warps are a param at Triton's default,
    # written as a keyword once moved; a launch passing **options is left alone (it may set them).
    from kernelcraft.agent.tuner.search import apply_config, family_of

    row_sum = ROW_SUM.split("\n\ndef row_sum_kw")[0] + "\n"
    (warps,) = find_params(row_sum)
    assert (warps.key, warps.kind, warps.value, warps.axis) == (
        "row_sum_kernel.num_warps",
        "num_warps",
        4,
        "warps",
    )
    assert warps.start == warps.end == row_sum.rindex(")")  # before the launch's closing parenthesis
    assert apply_config(row_sum, [warps], {warps.key: 4}) == row_sum  # Triton's default: unchanged
    moved = apply_config(row_sum, [warps], {warps.key: 8})
    assert "BLOCK=triton.next_power_of_2(n_cols), num_warps=8)" in moved
    # the tuned child is the literal it wrote: the same key and the same family as its parent
    (literal,) = find_params(moved)
    assert (literal.key, literal.value) == (warps.key, 8) and family_of(moved, [literal]) == family_of(
        row_sum, [warps]
    )
    # a kernel with a literal to tune keeps only that; a launch passing **options gets nothing added
    assert [p.key for p in find_params(ROW_SUM)] == ["row_sum_kernel.BLOCK"]
    assert find_params(ROW_SUM.replace("BLOCK=2, **options", "BLOCK=n, **options")) == [warps]
