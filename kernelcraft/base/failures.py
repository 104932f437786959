"""The failure taxonomy, and the classifier that maps what a compiler, a runtime or the verifier
said onto it.

One fixed, documented set of classes names every way a candidate can fail. The evaluation engine
puts one of them in every failed verdict; the rulebook stores it with every failure and maps
classes to seed rules. Classification is deterministic: the same text always gets the same class.

Taxonomy (value: meaning):

  load_error                 the candidate module does not import: syntax error, missing ModelNew,
                             an exception at import or construction time
  forbidden_construct        static check: try/except around a launch, reaching for the reference
                             Model, patching torch/triton/harness functions, side streams, threads
  compile_arange_not_pow2    `tl.arange` with a range that is not a power of two
  compile_not_constexpr      a value used where Triton needs a `tl.constexpr`
  compile_dot                `tl.dot` shape or dtype problems (K < 16, mismatched dtypes, rank)
  compile_unknown_api        an attribute or function Triton does not have (`tl.float32(x)`,
                             `tl.math.tanh`, a torch function inside a kernel, ...)
  compile_type_error         type errors in the kernel (incompatible types, bad casts, pointer math)
  compile_out_of_shared_memory   the kernel needs more shared memory (LDS) than the target has
  compile_out_of_registers   register allocation fails or spills beyond the limit
  compile_unsupported        Python constructs Triton's frontend rejects (break/continue, return in
                             loops, closures, keyword-only launch misuse, ...)
  compile_error              any other compiler error
  runtime_illegal_memory_access  CUDA illegal address / out-of-bounds access
  runtime_misaligned_address misaligned address
  runtime_out_of_resources   launch out of resources (too many threads/registers/shared memory)
  runtime_out_of_memory      the device (or host) ran out of memory
  runtime_timeout            the candidate did not finish within its wall-clock deadline
  runtime_crash              the process died (segfault, abort, exit before reporting a verdict)
  runtime_error              any other exception while running the candidate
  wrong_shape                an output's shape differs from the reference's
  wrong_dtype                an output's dtype differs from the reference's
  numerical_mismatch         outputs differ beyond the tolerances
  nan_or_inf                 NaN or Inf where the reference has finite values
  inputs_mutated             the candidate changed its inputs
  pytorch_fallback           PyTorch compute (matmul, reductions, activations, ...) ran in forward
  no_triton_launch           forward launched no Triton kernel
  nondeterministic           two runs on the same inputs with different memory underneath differ
  harness_limit              a limit kernelcraft set (the memory it sized for the candidate or the
                             replay, the interpreter's time) was reached: not the candidate's failure,
                             and not a pass. The evidence gives the figures. No rule is learnt from
                             it and no report counts it as incorrect; the search scores it as an
                             unverified kernel (no better than a wrong one: a candidate can always
                             reach a limit on purpose, so reaching one must never pay)
"""

from __future__ import annotations

import re
from enum import Enum

from kernelcraft.base.errortext import exception_text


class FailureClass(str, Enum):
    LOAD_ERROR = "load_error"
    FORBIDDEN_CONSTRUCT = "forbidden_construct"
    COMPILE_ARANGE_NOT_POW2 = "compile_arange_not_pow2"
    COMPILE_NOT_CONSTEXPR = "compile_not_constexpr"
    COMPILE_DOT = "compile_dot"
    COMPILE_UNKNOWN_API = "compile_unknown_api"
    COMPILE_TYPE_ERROR = "compile_type_error"
    COMPILE_OUT_OF_SHARED_MEMORY = "compile_out_of_shared_memory"
    COMPILE_OUT_OF_REGISTERS = "compile_out_of_registers"
    COMPILE_UNSUPPORTED = "compile_unsupported"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ILLEGAL_MEMORY_ACCESS = "runtime_illegal_memory_access"
    RUNTIME_MISALIGNED_ADDRESS = "runtime_misaligned_address"
    RUNTIME_OUT_OF_RESOURCES = "runtime_out_of_resources"
    RUNTIME_OUT_OF_MEMORY = "runtime_out_of_memory"
    RUNTIME_TIMEOUT = "runtime_timeout"
    RUNTIME_CRASH = "runtime_crash"
    RUNTIME_ERROR = "runtime_error"
    WRONG_SHAPE = "wrong_shape"
    WRONG_DTYPE = "wrong_dtype"
    NUMERICAL_MISMATCH = "numerical_mismatch"
    NAN_OR_INF = "nan_or_inf"
    INPUTS_MUTATED = "inputs_mutated"
    PYTORCH_FALLBACK = "pytorch_fallback"
    NO_TRITON_LAUNCH = "no_triton_launch"
    NONDETERMINISTIC = "nondeterministic"
    HARNESS_LIMIT = "harness_limit"

    def __str__(self) -> str:
        # Its value, on every Python: a sentence that names a class reads "numerical_mismatch",
        # never the enum's repr ("FailureClass.NUMERICAL_MISMATCH", str() of a str mixin).
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)

    @property
    def stage(self) -> str:
        """'load', 'compile', 'runtime' or 'verify': where in the pipeline this class arises."""
        if self in (FailureClass.LOAD_ERROR, FailureClass.FORBIDDEN_CONSTRUCT):
            return "load"
        if self is FailureClass.HARNESS_LIMIT:
            return "harness"
        return self.value.split("_", 1)[0] if self.value.startswith(("compile", "runtime")) else "verify"

    @property
    def compiled(self) -> bool:
        """Whether a candidate failing this way had compiled (the search tree's reward needs it)."""
        return self.stage in ("runtime", "verify", "harness")


COMPILE_CLASSES = frozenset(c for c in FailureClass if c.stage == "compile")
# The kernel ran and its outputs were wrong: recorded, but no rule is learnt from them (AdaExplore
# distils rules from compile and runtime errors only; a mismatch names no construct to avoid).
WRONG_RESULT_CLASSES = frozenset(
    {
        FailureClass.WRONG_SHAPE,
        FailureClass.WRONG_DTYPE,
        FailureClass.NUMERICAL_MISMATCH,
        FailureClass.NAN_OR_INF,
        FailureClass.INPUTS_MUTATED,
        FailureClass.NONDETERMINISTIC,
    }
)
RUNTIME_CLASSES = frozenset(c for c in FailureClass if c.stage == "runtime")
# A limit of ours was reached: nothing about the candidate is known, so nothing is learnt or blamed.
NOT_THE_CANDIDATES = frozenset({FailureClass.HARNESS_LIMIT})

OUT_OF_MEMORY = r"out of memory|CUDA error: out of memory|MemoryError|Cannot allocate memory"
"""What an exhausted device (or host) says, whoever ran out."""

# Ordered: the first pattern that matches wins. Specific before general. Written against the texts
# Triton 3.9 gives (tests/fixtures/errors/triton-3.9/, captured by tests/fixtures/errors/capture.py);
# "non-power-of-two" covers every block shape (tl.arange, tl.zeros, tl.full), not only arange.
_PATTERNS: tuple[tuple[FailureClass, re.Pattern[str]], ...] = tuple(
    (cls, re.compile(pattern, re.IGNORECASE | re.DOTALL))
    for cls, pattern in (
        (FailureClass.RUNTIME_TIMEOUT, r"timed out|deadline exceeded|did not finish within"),
        (
            FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS,
            r"illegal memory access|illegal address|cudaErrorIllegalAddress|out of bounds|"
            r"memory access fault|page not present",
        ),
        (FailureClass.RUNTIME_MISALIGNED_ADDRESS, r"misaligned address"),
        # Triton checks a kernel's shared memory when it loads it ("out of resource: shared memory,
        # Required: …, Hardware limit: …"): a property of the compiled kernel, whatever the stage.
        (
            FailureClass.COMPILE_OUT_OF_SHARED_MEMORY,
            r"out of resource: shared memory|OutOfResources.*shared|shared memory.*(exceed|limit|too)|"
            r"\bLDS\b.*(exceed|limit|too)|local data share",
        ),
        (FailureClass.RUNTIME_OUT_OF_RESOURCES, r"out of resources?\b|too many resources requested"),
        (
            FailureClass.COMPILE_OUT_OF_REGISTERS,
            r"register(s)? .*(exceed|spill|allocation)|ran out of registers",
        ),
        (
            FailureClass.RUNTIME_OUT_OF_MEMORY,
            OUT_OF_MEMORY,
        ),
        (
            FailureClass.COMPILE_ARANGE_NOT_POW2,
            r"range must be a power of 2|Shape element \d+ must be a power of 2",
        ),
        (
            FailureClass.COMPILE_NOT_CONSTEXPR,
            r"must be a constexpr|constexpr expected|is not a constexpr|must be constexpr|"
            r"must be of type tl\.constexpr|must have type `constexpr\[|"
            r"Cannot access global variable .* from within @jit'ed function",
        ),
        (
            FailureClass.COMPILE_DOT,
            r"Input shapes should have M >= |Both operands must be same dtype|"
            r"input and other must have equal (ranks|reduction dimensions)|\bdot\b.*(shape|dtype)",
        ),
        (
            FailureClass.COMPILE_UNKNOWN_API,
            # A torch or math function handed a Triton tensor: "Unsupported function referenced" when
            # compiled; in the interpreter math.exp wants a real number and torch.exp a torch Tensor.
            r"Unsupported function referenced: <built-in|must be real number, not tensor|"
            r"must be Tensor, not tensor|"
            r"Block pointers have been removed|"
            # Triton 3.6: block pointers exist but take no mask/other (boundary_check instead).
            r"arguments cannot be specified for loading block pointers",
        ),
        (
            FailureClass.COMPILE_UNSUPPORTED,
            r"unsupported AST node|is not supported in triton|break.*not supported|continue.*not supported|"
            r"Cannot call @triton\.jit'd outside|Cannot have `return` statements inside|"
            r"unsupported tensor index|Unsupported function referenced|only tuple comprehensions|"
            r"'tuple' object has no attribute '?append|UnsupportedLanguageConstruct|"
            # Triton 3.6's frontend on a Python list method; its interpreter on Python control flow
            # (break, if/while) over a block value.
            r"'append' is not in list|only 0-dimensional arrays can be converted to Python scalars|"
            r"Boolean value of Tensor with more than one value is ambiguous",
        ),
        (
            FailureClass.COMPILE_UNKNOWN_API,
            r"has no attribute|is not defined|not callable|unsupported function",
        ),
        # Triton's launcher takes len() of the grid: a plain integer there is a launch error.
        (FailureClass.RUNTIME_ERROR, r"object of type 'int' has no len\(\)"),
        (
            FailureClass.COMPILE_TYPE_ERROR,
            r"TypeError|incompatible type|cannot cast|invalid operand|Expected dtype|cannot add pointers|"
            r"Cannot make_shape_compatible|Expected pointer argument to have shape|has no len\(\)",
        ),
    )
)

# A Triton CompilationError quotes the kernel: "at 4:8:", the source lines, a caret line. Those
# lines are code, not diagnosis ("tl.dot" in the source says nothing about the error), so the
# patterns read only the rest. The chained-exception separators go too, and so do a traceback's
# frames (`errortext.exception_text`): paths like torch/nn/modules/module.py are the harness's.
_EXCERPT = re.compile(r"^[^\n]*\bat \d+:\d+:[ \t]*\n(?:.*?\n)??[ \t]*\^[ \t]*$", re.MULTILINE | re.DOTALL)
_CHAIN = re.compile(
    r"^(The above exception was the direct cause of the following exception:|"
    r"During handling of the above exception, another exception occurred:)$",
    re.MULTILINE,
)


def diagnosis(error_text: str) -> str:
    """The error text without traceback frames, quoted kernel source (CompilationError excerpts)
    and chain separators: the exceptions' own words."""
    text = _EXCERPT.sub("", exception_text(error_text or ""))
    return _CHAIN.sub("", text)


def is_out_of_memory(text: str) -> bool:
    """Whether an error text (any process's: the reference's too) says memory ran out."""
    return re.search(OUT_OF_MEMORY, diagnosis(text), re.IGNORECASE) is not None


def classify(error_text: str, stage: str | None = None) -> FailureClass:
    """Map an error text onto the taxonomy.

    `stage` is what the caller knows of where the text came from: "load", "compile" or "runtime".
    A compile-stage text never gets a runtime class and vice versa (except shared memory over the
    limit, which Triton reports when loading the kernel: always compile_out_of_shared_memory);
    without a stage, the text alone decides. Only the diagnosis is read, not the kernel source a
    CompilationError quotes. Deterministic: the same arguments always give the same class.
    """
    text = diagnosis(error_text)
    for cls, pattern in _PATTERNS:
        if stage == "compile" and cls in RUNTIME_CLASSES and cls is not FailureClass.RUNTIME_OUT_OF_RESOURCES:
            continue
        if (
            stage == "runtime"
            and cls in COMPILE_CLASSES
            and cls is not FailureClass.COMPILE_OUT_OF_SHARED_MEMORY
        ):
            continue
        if pattern.search(text):
            if stage == "compile" and cls is FailureClass.RUNTIME_OUT_OF_RESOURCES:
                return FailureClass.COMPILE_OUT_OF_SHARED_MEMORY
            return cls
    if stage == "compile":
        return FailureClass.COMPILE_ERROR
    if stage == "load":
        return FailureClass.LOAD_ERROR
    if re.search(
        r"Segmentation fault|SIGSEGV|SIGABRT|core dumped|exited with code|died", text, re.IGNORECASE
    ):
        return FailureClass.RUNTIME_CRASH
    if stage == "runtime":
        return FailureClass.RUNTIME_ERROR
    if re.search(r"CompilationError|triton\.compiler|UnsupportedLanguageConstruct", error_text or ""):
        return FailureClass.COMPILE_ERROR
    return FailureClass.RUNTIME_ERROR
