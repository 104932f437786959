"""The seed step's cookbook hook: the cookbook kernel that best fits a task, found through the
server's `search_examples` tool (the agent reaches the knowledge layer only over MCP).

    example = await cookbook_seed(session, task_source)
    if example is not None:
        seed_code = example.kernel_code    # a ModelNew for the cookbook's own task

The example's ModelNew takes the init arguments of the cookbook's task, which may differ from
the task at hand: the writer adapts it (the LLM's first step), or, with `--llm none`, the offline
tuner starts from it only when it fits as it is (`tunable_match`, `tuner_misfit`): as the seed when
none was given, else as its first step beside the given seed, so the tree keeps whichever is
faster. When no entry fits, `TunerMatch.why_not` says why in a sentence the run's report quotes.
A cookbook entry is advice: the verdict on whatever is built from it comes from the evaluator like
any other candidate's.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.agent.tuner.search import find_params
from kernelcraft.schema.cookbook import CookbookExample

TUNER_CANDIDATES = 5
"""How many of the cookbook's nearest entries the tuner's match looks through for one that fits."""


async def cookbook_seed(session: ToolSession, task_source: str) -> CookbookExample | None:
    """The best-matching cookbook entry for `task_source` (a KernelBench task), with its kernel and
    task code; None when nothing in the cookbook matches."""
    found = await _search(session, task_source, 1)
    return found[0] if found else None


async def _search(session: ToolSession, task_source: str, limit: int) -> list[CookbookExample]:
    data = await session._call(
        "search_examples", {"query": task_source, "limit": limit, "include_code": True}
    )
    return [CookbookExample.model_validate(x) for x in data.get("examples") or []]


@dataclass(frozen=True)
class TunerMatch:
    """What the cookbook offers the offline tuner for a task: the entry it can start from, else
    why none fits (a clause: "the cookbook's nearest entry, reduce_dim, computes other ops ...")."""

    example: CookbookExample | None
    why_not: str | None = None


async def tunable_match(session: ToolSession, task_source: str) -> TunerMatch:
    """The cookbook kernel the offline tuner can start from for this task: the nearest of the
    cookbook's few best matches whose Model fits the task's as it is (`tuner_misfit`), else none,
    with why the nearest did not fit."""
    found = await _search(session, task_source, TUNER_CANDIDATES)
    if not found:
        return TunerMatch(None, "the cookbook has no entry near this task")
    for example in found:
        if tuner_misfit(example, task_source) is None:
            return TunerMatch(example)
    nearest = found[0]
    return TunerMatch(
        None, f"the cookbook's nearest entry, {nearest.id}, {tuner_misfit(nearest, task_source)}"
    )


def tuner_misfit(example: CookbookExample, task_source: str) -> str | None:
    """Why the offline tuner cannot start from the example's kernel on this task (a clause, its
    subject the example), or None when it can: the Models fit (`misfit`) and the kernel has launch
    parameters to tune."""
    if not example.kernel_code:
        return "has no kernel"
    why = misfit(example, task_source)
    if why is not None:
        return why
    try:
        tunable = find_params(example.kernel_code)
    except SyntaxError:
        tunable = []
    return None if tunable else "has a kernel with no launch parameters the tuner can change"


def compatible(example: CookbookExample, task_source: str) -> bool:
    """Whether the example's ModelNew can stand in for the task's Model as it is (`misfit`)."""
    return misfit(example, task_source) is None


def misfit(example: CookbookExample, task_source: str) -> str | None:
    """Why the example's ModelNew cannot stand in for the task's Model as it is, or None when it
    can: both Models must take the same init parameters and forward arguments (by name and order),
    compute with the same ops (`model_ops`: a sum is no mean, a matmul under `torch.triu` no plain
    one, a Conv3d no Conv2d), and take inputs of the same ranks where both tasks build them with
    literal shapes (a 2-D GEMM is no 3-D tensor matmul). A task that does not parse fits nothing."""
    theirs, ours = _model_facts(task_source), _model_facts(example.task_code)
    if theirs is None:
        return "cannot be matched: the task has no Model class that parses"
    if ours is None:
        return "cannot be matched: its own task has no Model class that parses"
    for what, mine, task in (
        ("__init__ parameters", ours[0], theirs[0]),
        ("forward arguments", ours[1], theirs[1]),
    ):
        if mine != task:
            return f"takes other {what}: {_names(mine)} where the task's Model takes {_names(task)}"
    if theirs[2] != ours[2]:
        only_ours = sorted(set(ours[2]) - set(theirs[2]))
        only_theirs = sorted(set(theirs[2]) - set(ours[2]))
        said = [f"it uses {_ops(only_ours)}"] if only_ours else []
        said += [f"the task's Model uses {_ops(only_theirs)}"] if only_theirs else []
        return (
            "computes other ops (" + ("; ".join(said) or "the same ones, a different number of times") + ")"
        )
    ranks_theirs, ranks_ours = theirs[3], ours[3]
    if ranks_theirs is not None and ranks_ours is not None and ranks_theirs != ranks_ours:
        return f"takes {_ranks(ranks_ours)} inputs where the task's Model takes {_ranks(ranks_theirs)}"
    return None


OPERATORS = {
    "Add": "+", "Sub": "-", "Mult": "*", "Div": "/", "FloorDiv": "//", "Mod": "%", "Pow": "**",
    "MatMult": "@", "USub": "unary -", "UAdd": "unary +", "Invert": "~", "Not": "not",
    "BitAnd": "&", "BitOr": "|", "BitXor": "^", "LShift": "<<", "RShift": ">>",
}  # fmt: skip
"""`model_ops`' names of Python's operators, as a reader writes them."""


def _ops(names: list[str]) -> str:
    return ", ".join(OPERATORS.get(n, n) for n in names)


def _names(names: tuple[str, ...]) -> str:
    return f"({', '.join(names)})" if names else "none"


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(f"{r}-D" for r in ranks) or "no tensor"


Facts = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[int, ...] | None]


def _model_facts(source: str) -> Facts | None:
    """The Model's init parameters, forward arguments, ops (`model_ops`) and input ranks
    (`input_ranks`); None when the source does not parse or has no Model class."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == "Model":
            fns = {fn.name: fn for fn in cls.body if isinstance(fn, ast.FunctionDef)}
            args = {name: tuple(a.arg for a in fn.args.args[1:]) for name, fn in fns.items()}
            ops = model_ops(fns.get("__init__"), fns.get("forward"))
            return args.get("__init__", ()), args.get("forward", ()), ops, input_ranks(tree)
    return None


def _call_name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def model_ops(init: ast.FunctionDef | None, forward: ast.FunctionDef | None) -> tuple[str, ...]:
    """What a Model computes, as a sorted list of names: each call in forward by its last name
    (`torch.sum` and `x.sum` are `sum`; `self.conv(x)` is the class `__init__` built it from,
    `Conv2d`), each arithmetic operator (`@`, `*`, ...) and each class or function `__init__`
    calls to build its modules and parameters. Argument values are left out: the evaluator checks
    those on the task's inputs."""
    built: dict[str, str] = {}
    ops: list[str] = []
    for node in ast.walk(init) if init is not None else ():
        if isinstance(node, ast.Call) and _call_name(node.func) not in ("__init__", "super"):
            ops.append(_call_name(node.func))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    built[t.attr] = _call_name(node.value.func)
    for node in ast.walk(forward) if forward is not None else ():
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            on_self = isinstance(node.func, ast.Attribute) and _call_name(node.func.value) == "self"
            ops.append(built.get(name, name) if on_self else name)
        elif isinstance(node, ast.BinOp | ast.UnaryOp):
            ops.append(type(node.op).__name__)
    return tuple(sorted(o for o in ops if o))


TENSOR_MAKERS = ("rand", "randn", "zeros", "ones", "empty", "randint")


def input_ranks(tree: ast.Module) -> tuple[int, ...] | None:
    """The rank of each tensor `get_inputs` builds with `torch.rand`/`randn`/`zeros`/`ones`/
    `empty`/`randint`, in order (`torch.randn(N, M, K)` is 3, `torch.rand(shape)` the length of a
    module-level `shape = (...)`); None when a rank cannot be read so: then no rank is compared."""
    fn = next((f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "get_inputs"), None)
    if fn is None:
        return None
    module = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    ranks = [
        _rank(node, module)
        for node in ast.walk(fn)
        if isinstance(node, ast.Call) and _call_name(node.func) in TENSOR_MAKERS
    ]
    return None if any(r is None for r in ranks) else tuple(r for r in ranks if r is not None)


def _rank(call: ast.Call, module: dict[str, ast.expr]) -> int | None:
    """The rank of the tensor one maker call builds; None when its shape is not written out."""
    args: list[ast.expr] = list(call.args)
    if _call_name(call.func) == "randint":  # randint(low, high, size) or size=...
        size = next((k.value for k in call.keywords if k.arg == "size"), args[2] if len(args) >= 3 else None)
        args = [size] if size is not None else []
    if len(args) == 1 and isinstance(args[0], ast.Name):
        value = module.get(args[0].id)
        if isinstance(value, ast.Tuple | ast.List):
            return len(value.elts)
        return 1 if isinstance(value, ast.Constant | ast.BinOp) else None
    if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List):
        args = list(args[0].elts)
    if not args or any(isinstance(a, ast.Starred) for a in args):
        return None
    return len(args)
