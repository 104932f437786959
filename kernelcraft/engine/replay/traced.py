"""Host numbers derived from values read back from kernels, traced so the fresh replay re-derives them.

An honest forward may read a kernel's result on the host (`.item()`, `float(t)`, `int(t)`) and
compute with it before handing the result to a kernel: a maximum read back, then `1.0 / m` as a
normalisation scale; a count, then `n * 2 + 1` as a size. The fresh-input replay (`fresh.py`)
re-reads each such value on its own inputs, but a number computed from it in host Python is, to
the record, a constant: on fresh inputs it is the trial's number, and an honest kernel gets the
wrong answer and is called a cheat.

So while forward runs under the recorder, `ReadTracer` (a torch function mode) hands forward
`Traced` numbers for its host reads: an `int` or `float` subclass that carries an expression of
the reads it came from (`("read", k)`: the k-th host read of forward). Arithmetic on one (`+ - *
/ // % ** abs`, `round()`, `math.floor`/`ceil`/`trunc`, with plain numbers or other traced ones)
gives another, and each result is noted
on the tape (`Tape.derive`): its value and its expression. The record carries these (`derived`);
the fresh replay evaluates each expression on the fresh reads (`evaluate`) and uses the fresh
number wherever the trial's number appears (as it does for a read itself).

What this does not let through: a number computed on the host from the inputs (numpy, Python)
enters an expression only as a constant, the trial's, which is wrong on fresh inputs; a traced
number's expression is the candidate's word, but it can only say how a number follows from reads
of recorded kernels' outputs on the fresh inputs, which is kernel work. Kernel launches get plain
numbers (`watch/launches.py`): Triton's specialisation computes with its arguments, which is none
of forward's arithmetic. Lost on the way: other `math` functions (`math.sqrt`: use `** 0.5`),
`round(x, digits)`, `int()`/`float()` of a traced number (they return plain numbers), comparisons
(a branch on a read is not traced), expressions deeper than `MAX_DEPTH`, reads after a forward's
first `MAX_READS`.
Written by the evaluation engine only.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode

MAX_DEPTH = 32
"""Deeper expressions (a sum over many reads) are not traced: the number stays plain."""
MAX_READS = 8
"""Only a forward's first reads are traced. An honest forward reads back a few numbers (a count, a
maximum); one that reads back every element and computes the answer in Python from them (a sum
as a shallow tree of additions) would have its host work re-derived, not refused: past these, its
reads are constants of the trial, wrong on fresh inputs."""
MAX_DERIVED = 256
"""At most this many traced numbers a forward; after, arithmetic gives plain numbers."""

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
}
_UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": operator.neg,
    "abs": abs,
    "pos": operator.pos,
    "float": float,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
}
_READS = frozenset({"item", "__float__", "__int__", "__index__"})


class Traced:
    """Mixed into `TracedInt` and `TracedFloat`: `expr` (nested tuples), `depth`, `tape`."""

    expr: Any
    depth: int
    tape: Any


def _wrap(value: Any, expr: Any, depth: int, tape: Any) -> Any:
    if depth > MAX_DEPTH or not tape.tracing or len(tape.derived) >= MAX_DERIVED:
        return value  # (after forward's recorded run, a traced number kept computes plainly)
    if type(value) is int:
        out: Any = TracedInt(value)
    elif type(value) is float:
        out = TracedFloat(value)
    else:
        return value
    out.expr, out.depth, out.tape = expr, depth, tape
    if expr[0] != "read":
        tape.derive(value, expr)
    return out


def _operand(x: Any, tape: Any) -> tuple[Any, Any, int] | None:
    """(plain value, expression, depth) of an operand, or None for one that is not a number. A
    number traced in another run of forward is, in this one, a constant."""
    if isinstance(x, (TracedInt, TracedFloat)):
        plain_x = _plain_number(x)
        return (plain_x, x.expr, x.depth) if x.tape is tape else (plain_x, ("c", plain_x), 0)
    if type(x) in (int, float):
        return x, ("c", x), 0
    return None


def _plain_number(x: Any) -> Any:
    return int.__int__(x) if isinstance(x, int) else float.__float__(x)


def _binary(name: str, reflected: bool = False) -> Any:
    fn = _BINARY[name]

    def method(self: Any, other: Any) -> Any:
        mine, theirs = _operand(self, self.tape), _operand(other, self.tape)
        if mine is None or theirs is None:
            return NotImplemented
        (a, ea, da), (b, eb, db) = (theirs, mine) if reflected else (mine, theirs)
        value = fn(a, b)
        return _wrap(value, (name, ea, eb), max(da, db) + 1, self.tape)

    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


def _unary(name: str) -> Any:
    fn = _UNARY[name]

    def method(self: Any) -> Any:
        value = fn(_plain_number(self))
        return _wrap(value, (name, self.expr), self.depth + 1, self.tape)

    method.__name__ = f"__{name}__"
    return method


def _round(self: Any, ndigits: Any = None) -> Any:
    if ndigits is not None:  # (a rounding to digits: the trial's number)
        return round(_plain_number(self), ndigits)
    return _wrap(round(_plain_number(self)), ("round", self.expr), self.depth + 1, self.tape)


class TracedInt(Traced, int):
    """An `int` read back from a kernel's output, or computed from such reads."""


class TracedFloat(Traced, float):
    """A `float` read back from a kernel's output, or computed from such reads."""


for _cls in (TracedInt, TracedFloat):
    for _name in _BINARY:
        setattr(_cls, f"__{_name}__", _binary(_name))
        setattr(_cls, f"__r{_name}__", _binary(_name, reflected=True))
    for _name in ("neg", "abs", "pos", "floor", "ceil", "trunc"):
        setattr(_cls, f"__{_name}__", _unary(_name))
    setattr(_cls, "__round__", _round)  # noqa: B010 - a method set on both classes


class ReadTracer(TorchFunctionMode):
    """While forward runs under the recorder: a host read of a tensor (`.item()`, `float(t)`,
    `int(t)`, `operator.index(t)`) returns a traced number naming that read on `tape`."""

    def __init__(self, tape: Any) -> None:
        super().__init__()
        self.tape = tape

    def __enter__(self) -> ReadTracer:
        self.tape.tracing = True
        return super().__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: Any) -> None:
        self.tape.tracing = False
        super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _READS:
            return func(*args, **kwargs)
        before = self.tape.reads
        value = func(*args, **kwargs)
        if self.tape.reads != before + 1 or type(value) not in (int, float) or before >= MAX_READS:
            return value  # not one read of the recorder's (inside a launch, a bool, a complex), or too many
        expr: Any = ("read", before)
        if name == "__float__" and type(self.tape.last_read) is int:
            expr = ("float", expr)
        return _wrap(value, expr, 0, self.tape)


# --------------------------------------------------------------------------------------------
# The reference's side: an expression (as the record carries it, lists) on the fresh reads.


class Unevaluable(Exception):
    """An expression of the record that cannot be evaluated (the verdict's message)."""


def evaluate(expr: Any, reads: list[Any], depth: int = 0) -> Any:
    """The value of a derived number's expression (`expr`, as decoded from JSON: lists) over the
    fresh reads `reads`; `decode`d constants. Raises `Unevaluable`."""
    from kernelcraft.engine.replay.program import Refused, decode_constant

    if depth > MAX_DEPTH + 1 or not isinstance(expr, (list, tuple)) or not expr:
        raise Unevaluable("forward's record has a malformed derived number")
    tag = expr[0]
    try:
        if tag == "read" and len(expr) == 2 and type(expr[1]) is int and 0 <= expr[1] < len(reads):
            return reads[expr[1]]
        if tag == "c" and len(expr) == 2:
            value = decode_constant(expr[1])
            if type(value) in (int, float):
                return value
        if tag in _UNARY and len(expr) == 2:
            return _UNARY[tag](evaluate(expr[1], reads, depth + 1))
        if tag in _BINARY and len(expr) == 3:
            a, b = evaluate(expr[1], reads, depth + 1), evaluate(expr[2], reads, depth + 1)
            if tag == "pow" and (abs(b) > 64 or (isinstance(a, int) and abs(a) > 1 << 64)):
                raise Unevaluable("forward's record raises a number to too high a power")
            return _BINARY[tag](a, b)
    except (ArithmeticError, TypeError, ValueError, Refused) as e:
        raise Unevaluable(f"a number forward derived from its host reads cannot be evaluated: {e}") from e
    raise Unevaluable("forward's record has a malformed derived number")


def same_number(a: Any, b: Any) -> bool:
    """Equal, NaN included."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
