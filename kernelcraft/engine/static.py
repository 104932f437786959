"""Static (AST) anti-cheat checks on a candidate's source, run in the parent before any process.

Each finding is a `forbidden_construct` with the line and the construct. What is banned, and why:

- try/except inside `forward` or around a kernel launch: a fallback to PyTorch when the kernel
  fails hides the failure (Kevin, arXiv 2507.11948).
- side streams (`torch.cuda.Stream`, `torch.cuda.stream`, `set_stream`, ...): work hidden from the
  timer's stream; also `getattr(torch..., "set_" + "stream")` (literal names are folded) and any
  `getattr` on a torch module with a name computed at run time. The worker backs this up: forward
  leaving another stream current is `forbidden_construct` (see `timing.py`).
- threads and processes (`threading`, `_thread`, `multiprocessing`, `concurrent`, `subprocess`):
  work done after forward returns.
- reaching for the reference: importing `Model` or the task module, subclassing or naming a `Model`
  the candidate does not define, `sys.modules`, `__import__`, `importlib`, frame inspection, `gc`.
- patching: assignment to an attribute of an imported module (`torch.allclose = ...`),
  `setattr`/`delattr` on anything but `self`, `builtins`.
- leaving early or reading secrets: `os._exit`, `sys.exit`, `os.environ`, `os.getenv`.

The dynamic checks in the worker (see `guard.py`) back these up for what the source hides.
Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

BANNED_MODULES = (
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "gc",
    "builtins",
    "importlib",
)
STREAM_ATTRS = ("Stream", "stream", "set_stream", "ExternalStream", "StreamContext")
FRAME_ATTRS = ("_getframe", "currentframe", "stack", "getouterframes", "modules")
EXIT_ATTRS = {("os", "_exit"), ("sys", "exit"), ("os", "kill"), ("os", "abort")}
ENV_ATTRS = {("os", "environ"), ("os", "environb"), ("os", "getenv"), ("os", "getenvb"), ("os", "putenv")}


@dataclass(frozen=True)
class Finding:
    line: int
    construct: str
    message: str


def _launches(node: ast.AST) -> bool:
    """Whether `node` contains a kernel launch (`kernel[grid](...)`)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) for n in ast.walk(node))


def _dotted(node: ast.AST) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return []


def _const_str(node: ast.AST) -> str | None:
    """The value of a string expression built only from literals ('set_' + 'stream',
    f'{"Str"}eam', "".join(["Str", "eam"]) are folded), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const_str(node.left), _const_str(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            inner = v.value if isinstance(v, ast.FormattedValue) else v
            text = _const_str(inner)
            if text is None:
                return None
            parts.append(text)
        return "".join(parts)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
    ):
        sep = _const_str(node.func.value)
        items = [_const_str(e) for e in node.args[0].elts]
        if sep is not None and all(i is not None for i in items):
            return sep.join(i for i in items if i is not None)
    return None


def check_candidate_source(tree: ast.Module) -> list[Finding]:
    """All forbidden constructs in a parsed candidate, in source order."""
    findings: list[Finding] = []
    modules: dict[str, str] = {}  # local alias -> module it names
    defined_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}

    def add(node: ast.AST, construct: str, message: str) -> None:
        findings.append(Finding(getattr(node, "lineno", 1), construct, message))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if a.name.split(".")[0] in BANNED_MODULES:
                    add(
                        node,
                        f"import {a.name}",
                        f"imports {a.name}: threads, processes and introspection are not allowed",
                    )
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.split(".")[0] in BANNED_MODULES:
                add(
                    node,
                    f"from {mod} import",
                    f"imports from {mod}: threads, processes and introspection are not allowed",
                )
            for a in node.names:
                if a.name == "Model" or mod.split(".")[0] in ("task", "reference", "__main__"):
                    add(
                        node,
                        f"from {mod} import {a.name}",
                        "imports the reference module; write the kernel instead",
                    )
                if mod in ("os", "sys") and (mod, a.name) in EXIT_ATTRS | ENV_ATTRS | {("sys", "modules")}:
                    add(node, f"from {mod} import {a.name}", f"uses {mod}.{a.name}")
                modules.setdefault(a.asname or a.name, f"{mod}.{a.name}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id == "Model" and "Model" not in defined_classes:
                    add(node, "subclass of Model", "subclasses the reference Model; write the kernel instead")
            if node.name == "ModelNew":
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "forward":
                        for n in ast.walk(item):
                            if isinstance(n, ast.Try):
                                add(
                                    n,
                                    "try/except in forward",
                                    "try/except in forward can hide a fallback; let errors surface",
                                )
        elif isinstance(node, ast.Try) and any(_launches(s) for s in node.body):
            add(node, "try/except around a launch", "try/except around a kernel launch can hide a fallback")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id == "Model" and "Model" not in defined_classes:
                add(node, "Model", "uses the reference Model; write the kernel instead")
            elif node.id in (
                "__import__",
                "__builtins__",
                "exit",
                "quit",
                "exec",
                "eval",
                "compile",
                "globals",
            ):
                add(node, node.id, f"uses {node.id}")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if not dotted:
                continue
            root = modules.get(dotted[0], "")
            pair = (root.split(".")[-1] if root else dotted[0], node.attr)
            if root.startswith("torch") and node.attr in STREAM_ATTRS:
                add(node, ".".join(dotted), "uses a side stream; launch on the current stream")
            elif pair in EXIT_ATTRS:
                add(node, ".".join(dotted), "exits the process from the candidate")
            elif pair in ENV_ATTRS:
                add(node, ".".join(dotted), "reads the environment")
            elif root in ("sys", "inspect") and node.attr in FRAME_ATTRS:
                add(node, ".".join(dotted), "inspects the interpreter's frames or modules")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = (
                node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]  # type: ignore[union-attr]
            )
            for t in targets:
                dotted = _dotted(t) if isinstance(t, ast.Attribute) else []
                if dotted and dotted[0] in modules:
                    add(node, ".".join(dotted), f"patches {'.'.join(dotted)}; modules must not be modified")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and modules.get((_dotted(node.args[0]) or [""])[0], "").startswith("torch")
        ):
            # getattr(torch.cuda, 'Str' + 'eam'): a stream attribute by a folded name, or any
            # attribute of torch by a name the source computes at run time.
            name = _const_str(node.args[1])
            target = ".".join(_dotted(node.args[0]))
            if name is None:
                add(
                    node,
                    f"getattr({target}, ...)",
                    f"getattr on {target} with a computed name hides what it uses",
                )
            elif name in STREAM_ATTRS:
                add(node, f"{target}.{name}", "uses a side stream; launch on the current stream")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
        ):
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Name) and first.id == "self"):
                add(node, node.func.id, f"{node.func.id} on something other than self can patch modules")
    findings.sort(key=lambda f: f.line)
    return findings
