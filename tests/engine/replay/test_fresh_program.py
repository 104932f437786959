"""The fresh-input replay's trusted side takes nothing of a candidate's record on trust: a kernel's
recorded source must be Triton language before it is rebuilt (`kernelsource.check`), and a
record that names other operators, storages or views than it may is refused (`fresh.run_program`),
with words that say what was wrong. Fast: no kernel runs, no worker starts."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kernelcraft.engine.replay import fresh, kernelsource
from kernelcraft.engine.replay.program import DerivedDesc, KernelDesc, OpStep, Program, RefDesc, StorageDesc

TL = {"tl": {"module": "triton.language"}}


def desc(body: str, name: str = "k", **globals_: object) -> KernelDesc:
    source = textwrap.dedent(body).strip() + "\n"
    return KernelDesc(name=name, source=source, globals={**TL, **globals_})


GOOD = """
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, helper(x) * SCALE + min(n, 3), mask=offs < n)
"""


def test_a_triton_kernel_with_a_helper_and_constants_is_accepted() -> None:
    kernelsource.check(desc(GOOD, helper={"kernel": 1}, SCALE={"f": 2.0}), count=2)


@pytest.mark.parametrize(
    ("body", "globals_", "words"),
    [
        (GOOD, {"helper": {"kernel": 1}, "SCALE": {"module": "numpy"}}, "the Python module 'numpy'"),
        (GOOD, {"helper": {"opaque": "builtins.function"}, "SCALE": {"f": 1.0}}, "a Python object"),
        (GOOD, {"helper": {"kernel": 7}, "SCALE": {"f": 1.0}}, "names no recorded kernel"),
        (GOOD, {"helper": {"kernel": 1}}, "reads 'SCALE', which is neither Triton"),
        ("def k(x):\n    import numpy\n", {}, "contains an import"),
        ("def k(x):\n    def inner():\n        pass\n", {}, "contains a nested function"),
        ("def k(x):\n    f = lambda: 0\n", {}, "contains a lambda"),
        ("def k(x):\n    y = x.__class__\n", {}, "the attribute '__class__'"),
        ("def k(x):\n    y = tl.load(x).handle\n", {}, "the attribute 'handle'"),
        ("def k(x):\n    y = tl.core.builtins\n", {}, "reaches the module builtins"),
        ("def k(x):\n    y = triton.runtime\n", {"triton": {"module": "triton"}}, "reaches triton.runtime"),
        ("def k(x):\n    y = getattr(x, 'handle')\n", {}, "reads 'getattr'"),
        ("def k(x):\n    y = eval('1')\n", {}, "reads 'eval'"),
        ("def other(x):\n    pass\n", {}, "is not one function named k"),
    ],
)
def test_a_kernel_that_is_not_triton_language_is_refused(body: str, globals_: dict, words: str) -> None:
    with pytest.raises(kernelsource.KernelRefused, match=None) as caught:
        kernelsource.check(desc(body, **globals_), count=2)
    assert words in str(caught.value), str(caught.value)


def ref(storage: int, size: list[int], dtype: str = "float32", offset: int = 0) -> RefDesc:
    stride = [1] * len(size)
    for i in range(len(size) - 2, -1, -1):
        stride[i] = stride[i + 1] * size[i + 1]
    return RefDesc(storage=storage, offset=offset, size=size, stride=stride, dtype=dtype)


def program(*steps: OpStep, outputs: list[RefDesc] | None = None) -> Program:
    return Program.model_validate(
        {
            "inputs": [{"dtype": "float32", "shape": [4]}],
            "storages": [StorageDesc(kind="input", index=0, nbytes=16), StorageDesc(kind="fresh", nbytes=16)],
            "steps": [s.model_dump() for s in steps],
            "kernels": [],
            "outputs": outputs if outputs is not None else [ref(1, [4])],
        }
    )


def op(name: str, args: list, outs: list[RefDesc] | None = None, created: list[int] | None = None) -> OpStep:
    return OpStep(op=name, args=args, kwargs={}, outs=outs or [], created=created or [])


def run(p: Program, allowed: frozenset[str] | None = frozenset({"copy_"})) -> list[torch.Tensor]:
    return fresh.run_program(p, [torch.arange(4, dtype=torch.float32)], [], allowed)


def test_a_record_of_allowed_ops_re_runs_on_the_inputs_it_is_given() -> None:
    (out,) = run(
        program(
            op("aten.copy_.default", [{"ref": ref(1, [4]).model_dump()}, {"ref": ref(0, [4]).model_dump()}])
        )
    )
    assert torch.equal(out, torch.arange(4, dtype=torch.float32))


@pytest.mark.parametrize(
    ("step", "words"),
    [
        (op("aten.mm.default", []), "aten.mm, which forward may not run"),
        (op("mylib.clone.default", []), "not an ATen operator"),
        (op("aten.no_such_op.default", []), "not an ATen operator"),
        (op("aten.lift_fresh.default", [], [ref(1, [4])]), "from host values"),
        (op("aten.copy_.default", [{"ref": ref(5, [4]).model_dump()}, {"i": 1}]), "storage it does not list"),
        (
            op("aten.copy_.default", [{"ref": ref(1, [4], offset=3).model_dump()}, {"i": 1}]),
            "beyond its storage",
        ),
        (op("aten.copy_.default", [{"opaque": "numpy.ndarray"}]), "a Python object (numpy.ndarray)"),
    ],
)
def test_a_record_that_names_what_it_may_not_is_refused(step: OpStep, words: str) -> None:
    with pytest.raises(fresh.Refused) as caught:
        run(program(step), allowed=frozenset({"copy_", "lift_fresh", "clone"}))
    assert words in str(caught.value), str(caught.value)


def test_a_host_read_that_differs_is_traced_into_sizes_scalars_and_grids() -> None:
    s = fresh.Substitutions()
    s.add(3, 37, 41)
    assert s.number(37) == 41 and s.number(36) == 36 and s.number(37.0) == 37.0
    assert s.grid(37, [8]) == 41 and s.grid(5, [8]) == 6 and s.grid(9, [8]) == 9
    moved = s.ref(RefDesc(storage=0, offset=0, size=[37, 2], stride=[2, 1], dtype="float32"))
    assert moved.size == [41, 2] and moved.stride == [2, 1]


@pytest.mark.parametrize(("recorded", "got"), [(True, False), (1, 2), (0, 5), (-1, 3)])
def test_a_host_read_that_cannot_be_traced_is_refused(recorded: object, got: object) -> None:
    with pytest.raises(fresh.Refused):
        fresh.Substitutions().add(2, recorded, got)


def test_a_triton_dtype_passed_as_a_constexpr_travels_as_data() -> None:
    import triton.language as tl

    from kernelcraft.engine.replay.program import decode_constant, encode_plain

    for dt in (tl.float16, tl.bfloat16, tl.float32, tl.int8):
        assert decode_constant(encode_plain(tl.constexpr(dt), lambda fn: 0)) is dt


def test_a_kernel_made_at_run_time_or_reading_python_of_its_module_is_not_held_to_the_source() -> None:
    sent = (
        "import numpy as np\nimport triton\nimport triton.language as tl\n\ndef helper(x):\n    return x\n\n"
    )
    kernel = "@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, VALUE)\n"
    assert kernelsource.submitted_problems(sent + kernel) is None
    for body, words in [
        ("    tl.store(x_ptr, np.float32(1.0))\n", "the module numpy"),
        ("    tl.store(x_ptr, helper(1.0))\n", "a plain Python function"),
        ("    y = tl.load(x_ptr).handle\n", "the attribute 'handle'"),
    ]:
        why = kernelsource.submitted_problems(sent + "@triton.jit\ndef k(x_ptr):\n" + body)
        assert why is not None and words in why, why
    made = desc("def k(x_ptr):\n    tl.store(x_ptr, 1.0)\n")
    assert kernelsource.not_submitted([made], [sent + kernel]) is not None
    assert kernelsource.not_submitted([desc(kernel.split("\n", 1)[1])], [sent + kernel]) is None


def test_a_kernels_decorators_are_host_code_not_its_body() -> None:
    """`@triton.heuristics({"EVEN_K": lambda args: ...})` (and an autotune's hook) runs on the host
    at launch; an honest split-K kernel under one was refused as "contains a lambda"
    (tests/fixtures/user_tasks/11_*). Its body is still held to Triton language."""
    sent = "import triton\nimport triton.language as tl\n\n"
    decorated = (
        '@triton.autotune(configs=[triton.Config({"B": 4}, pre_hook=lambda nargs: None)], key=["n"])\n'
        '@triton.heuristics({"EVEN": lambda args: args["n"] % 4 == 0})\n'
        "@triton.jit\ndef k(x_ptr, n, B: tl.constexpr, EVEN: tl.constexpr):\n"
    )
    assert kernelsource.submitted_problems(sent + decorated + "    tl.store(x_ptr, 1.0)\n") is None
    why = kernelsource.submitted_problems(sent + decorated + "    f = lambda: 0\n")
    assert why is not None and "contains a lambda (line 8)" in why, why


BLOCK_SIZE = None  # set by the test below: a module-level tl.constexpr, as users write it


def test_a_module_level_constexpr_is_rebuilt_as_one_for_the_gpu_compiler() -> None:
    """`BLOCK_SIZE = tl.constexpr(256)` read by a kernel: the record kept only 256, and the GPU
    check's compile refused the rebuilt kernel ("Cannot access global variable BLOCK_SIZE"), which
    Triton on the GPU compiles. A constant that is not a constexpr stays plain, as the GPU sees it,
    and a constexpr holding a module is refused."""
    import triton
    import triton.language as tl

    global BLOCK_SIZE
    BLOCK_SIZE = tl.constexpr(256)

    def k(x_ptr):
        tl.store(x_ptr + tl.arange(0, BLOCK_SIZE), 1.0)

    recorded = kernelsource.describe(triton.jit(k), lambda fn: 0)
    assert recorded.globals["BLOCK_SIZE"] == {"constexpr": {"i": 256}}
    (built,) = kernelsource.build([recorded])
    again = getattr(built, "fn", built).__globals__["BLOCK_SIZE"]
    assert isinstance(again, tl.constexpr) and again.value == 256
    plain = desc("def k(x_ptr):\n    tl.store(x_ptr, SCALE)\n", SCALE={"f": 2.0})
    (built,) = kernelsource.build([plain])
    assert getattr(built, "fn", built).__globals__["SCALE"] == 2.0
    with pytest.raises(kernelsource.KernelRefused, match="malformed"):
        kernelsource.check(desc(plain.source, SCALE={"constexpr": {"module": "numpy"}}), count=1)


def _tdesc(shape: list[int], **kw: object) -> dict:
    return {
        "tdesc": {"base": ref(0, [4]).model_dump(), "shape": shape, "strides": [1], "block_shape": [4], **kw}
    }


def test_a_host_tensor_descriptor_is_rebuilt_over_the_fresh_memory() -> None:
    p = program()
    runner = fresh.Runner(
        p, fresh.FreshMemory(p, [torch.arange(4, dtype=torch.float32)], [], "cpu"), [], None
    )
    d = runner.decode(_tdesc([4]))
    assert torch.equal(d.base, torch.arange(4, dtype=torch.float32)) and list(d.shape) == [4]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (_tdesc([64]), "beyond its base tensor's storage"),
        (_tdesc([4], padding="python"), "malformed tensor descriptor"),
        (_tdesc([4, 4]), "another rank than its strides"),
        (_tdesc([-4]), "negative size or stride"),
    ],
    ids=["beyond-its-storage", "unknown-padding", "rank", "negative"],
)
def test_a_host_tensor_descriptor_that_lies_about_its_base_is_refused(value: dict, words: str) -> None:
    p = program()
    runner = fresh.Runner(
        p, fresh.FreshMemory(p, [torch.arange(4, dtype=torch.float32)], [], "cpu"), [], None
    )
    with pytest.raises(fresh.Refused) as caught:
        runner.decode(value)
    assert words in str(caught.value), str(caught.value)


def test_a_forged_record_that_derives_a_number_from_reads_past_the_traced_few_is_refused() -> None:
    """The candidate's process traces only a forward's first reads; the record is its word, so the
    reference holds a record to the same bound."""
    from kernelcraft.engine.replay import traced

    p = program()
    p.derived = [
        DerivedDesc(value={"f": 1.0}, expr=["add", ["read", 0], ["read", traced.MAX_READS]]),
    ]
    runner = fresh.Runner(
        p, fresh.FreshMemory(p, [torch.arange(4, dtype=torch.float32)], [], "cpu"), [], None
    )
    runner.reads = [0.0] * (traced.MAX_READS + 1)
    with pytest.raises(fresh.Refused) as caught:
        runner.derive(1)
    assert "only the first 8 reads" in str(caught.value), str(caught.value)
