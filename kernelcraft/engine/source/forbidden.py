"""What the static rules (`static.py`) forbid a candidate's source: the modules it may not import,
the internals it may not reach, the attributes and builtins that lead past its own code to the
harness's state. Data only: `static.py`'s rules say where each list applies and why.
Written by the evaluation engine only.
"""

from __future__ import annotations

BANNED_MODULES = (
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "gc",
    "builtins",
    "importlib",
    "kernelcraft",
    # introspection: frames, code objects, raw memory, forged functions
    "inspect",
    "types",
    "marshal",
    "ctypes",
    "_ctypes",
    "cffi",
    "dis",
    "code",
    "codeop",
    "runpy",
    "pkgutil",
    # what imports or runs code by a name in a string or a file: pickles, profilers, debuggers
    "pickle",
    "_pickle",
    "copyreg",
    "shelve",
    "dill",
    "cloudpickle",
    "timeit",
    "cProfile",
    "profile",
    "trace",
    "pdb",
    "bdb",
    "doctest",
    "imp",
    "_imp",
    "zipimport",
    "site",
    "posix",
    "_posixsubprocess",
    "pty",
    "sysconfig",
    "pydoc",
    "unittest",
)
# Modules (and everything under them) that reach past PyTorch's and Triton's public behaviour:
# the dispatcher's switches (`torch._C._DisableTorchDispatch`), the mode stacks the harness's
# recorder sits on, and Triton's interpreter and native bindings.
INTERNAL_MODULES = (
    "torch._C",
    "torch.utils._python_dispatch",
    "torch.overrides",
    "torch._dispatch",
    "torch._ops",
    "triton._C",
    "triton.runtime.interpreter",
)
# Attributes that reach a function's globals and closure, frames, class internals or raw
# namespaces: the way from a candidate's code to the harness's state.
INTROSPECTION_ATTRS = frozenset(
    {
        "__globals__",
        "__closure__",
        "cell_contents",
        "__code__",
        "__defaults__",
        "__kwdefaults__",
        "__wrapped__",
        "__func__",
        "__dict__",
        "__subclasses__",
        "__getattribute__",
        "__mro__",
        "__bases__",
        "__base__",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "tb_frame",
        "attrgetter",
        "methodcaller",
        "settrace",
        "setprofile",
        "addaudithook",
        "meta_path",
        "path_hooks",
    }
)
STREAM_ATTRS = ("Stream", "stream", "set_stream", "ExternalStream", "StreamContext")
FRAME_ATTRS = ("_getframe", "currentframe", "stack", "getouterframes", "modules")
EXIT_ATTRS = {("os", "_exit"), ("sys", "exit"), ("os", "kill"), ("os", "abort")}
ENV_ATTRS = {("os", "environ"), ("os", "environb"), ("os", "getenv"), ("os", "getenvb"), ("os", "putenv")}
DYNAMIC_BUILTINS = (
    "__import__",
    "__builtins__",
    "exit",
    "quit",
    "exec",
    "eval",
    "compile",
    "globals",
    "vars",
    "locals",
    "breakpoint",
)
REFERENCE_MODULES = ("task", "reference", "__main__")

# Attribute names that reach a module from any object (`torch.sys`, `os.sys`, `np.os`, a
# from-import of one: `from torch import sys`): a module reached so is one the rules never name.
REACH_ATTRS = frozenset(
    {"sys", "os", "builtins", "importlib", "posix", "io", "_io", "ctypeslib"}
    | {m for m in BANNED_MODULES if m not in ("code", "dis", "trace", "profile", "site", "kernelcraft")}
)
# The only dunder attributes a candidate may touch (any other reaches the interpreter's
# machinery: `__builtins__`, `__import__`, a builtin's `__self__` (the builtins module),
# `__loader__`, `__spec__`, `__reduce_ex__`, `__getattr__`, `__objclass__`, ...). Those that lead
# to frames, globals and namespaces are INTROSPECTION_ATTRS, which their own rule reports.
ALLOWED_DUNDERS = frozenset(
    """
    __init__ __name__ __qualname__ __doc__ __class__ __version__ __len__ __call__ __enter__
    __exit__ __iter__ __next__ __getitem__ __setitem__ __contains__ __repr__ __str__ __eq__ __ne__
    __lt__ __le__ __gt__ __ge__ __hash__ __bool__ __int__ __float__ __index__ __neg__ __pos__
    __abs__ __add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__
    __matmul__ __rmatmul__ __truediv__ __rtruediv__ __floordiv__ __rfloordiv__ __mod__ __pow__
    __and__ __or__ __xor__ __invert__ __lshift__ __rshift__ __post_init__ __annotations__
    """.split()
)
# Builtins that reach attributes by a name: only ever called directly, with the object in hand.
ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr")
# Attributes that evaluate a string, import by name or load code: typing's annotation
# evaluation, string.Formatter's field lookup, C++ extensions (and any attribute whose name holds
# "import": `import_module`, `__import__`, `_import_module`).
EVALUATING_ATTRS = frozenset(
    {
        "get_type_hints",
        "ForwardRef",
        "_eval_type",
        "evaluate_forward_ref",
        "get_field",
        "dictConfig",
        "fileConfig",
        "compile_module_from_src",
        "cpp_extension",
        "load_inline",
    }
)
# Loaders that unpickle (a pickle imports and calls whatever it names), by (package, attribute).
PICKLE_LOADERS = frozenset(
    {("torch", "load"), ("torch", "serialization"), ("torch", "package"), ("torch", "hub"), ("numpy", "load")}
)
# os functions that start a process or a program (`os.system`, `os.fork`, `os.posix_spawn`): work
# that outlives forward, out of every recorder's sight, as `subprocess` (banned) would.
PROCESS_ATTRS = frozenset(
    {"system", "popen", "fork", "forkpty", "vfork", "startfile", "register_at_fork"}
    | {f"exec{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
    | {f"spawn{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
    | {"posix_spawn", "posix_spawnp"}
)
