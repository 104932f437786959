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
