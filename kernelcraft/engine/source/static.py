"""Static (AST) anti-cheat rules on a candidate's source, run in the parent before any process.

Each rule is a named function whose docstring is its one-line rationale, registered in `RULES`
(read the list there); a finding is a `forbidden_construct` with the line, the construct and the
rule that found it. `check_candidate_source` reads the module once for what the rules need to know
(`Candidate`: the modules it imports, the classes it defines, the `try` statements in its forward),
then walks it twice, the import statements first and every other node after, in `ast.walk` order,
and sorts the findings by line.

The lists of what is forbidden are `forbidden.py`'s; the candidate's own modules that it imports
are found by `local_imports.py` and checked here as the candidate is.

The dynamic checks in the worker back these up for what the source hides: `guard.py` (patching,
threads, exits, the environment) and `timing.py` (forward leaving another stream current).
Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from kernelcraft.engine.source import escapes  # noqa: F401  (registers its rules first)
from kernelcraft.engine.source.forbidden import (
    BANNED_MODULES,
    DYNAMIC_BUILTINS,
    ENV_ATTRS,
    EXIT_ATTRS,
    FRAME_ATTRS,
    INTERNAL_MODULES,
    INTROSPECTION_ATTRS,
    REFERENCE_MODULES,
    STREAM_ATTRS,
)
from kernelcraft.engine.source.local_imports import local_imports, local_search_path
from kernelcraft.engine.source.rulebase import (
    RULES,
    TRY_NODES,
    Candidate,
    Finding,
    Hit,
    dotted,
    from_imports,
    getattr_call,
    launches,
    module_attr,
    rule,
    torch_getattr,
)

__all__ = ["RULES", "Finding", "check_candidate_source"]

# How deep the check follows a candidate's imports of its own (not installed) modules.
MAX_IMPORT_DEPTH = 4


@rule("banned-module")
def banned_module(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """Threads and processes work after forward returns; gc, builtins, importlib and the harness reach past the source."""
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] in BANNED_MODULES:
                yield Hit(node, f"import {a.name}", f"imports {a.name}: {_why_banned(a.name)}")
    elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in BANNED_MODULES:
        why = f"imports from {node.module}: {_why_banned(node.module or '')}"
        yield Hit(node, f"from {node.module} import", why)


def _why_banned(module: str) -> str:
    if module.split(".")[0] == "kernelcraft":
        return "the harness is off limits to a candidate"
    return "threads, processes and introspection are not allowed"


# The private last parts of INTERNAL_MODULES (`torch._C`'s `_C`): internal by their name alone,
# whatever the chain before them names.
PRIVATE_INTERNALS = {m.rsplit(".", 1)[1]: m for m in INTERNAL_MODULES if m.rsplit(".", 1)[1].startswith("_")}


def _internal(dotted: str) -> str | None:
    """The internal module `dotted` is (or is inside), if any."""
    return next((m for m in INTERNAL_MODULES if dotted == m or dotted.startswith(m + ".")), None)


@rule("internal-module")
def internal_module(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """torch._C, the dispatch-mode stacks and Triton's interpreter switch off or reach around the harness's recorders."""
    why = "reaches PyTorch's or Triton's internals ({}); use their public API"
    if isinstance(node, ast.Import):
        for i, a in enumerate(node.names):
            found = _internal(a.name)
            if found:
                yield Hit(node, f"import {a.name}", why.format(found), i + 1)
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        mod = node.module or ""
        for i, a in enumerate(node.names):
            found = _internal(mod) or _internal(f"{mod}.{a.name}")
            if found:
                yield Hit(node, f"from {mod} import {a.name}", why.format(found), i + 1)
    elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "ctx", None), ast.Del):
        names = dotted(node)
        root = cand.root_of(names)
        if root:
            full = ".".join([root, *names[1:]])
            found = _internal(full)
            # report the shortest chain only (torch._C, not also torch._C._DisableTorchDispatch)
            if found and not _internal(".".join([root, *names[1:-1]])):
                yield Hit(node, ".".join(names), why.format(found))
        elif node.attr in PRIVATE_INTERNALS:  # reached from no import by name (an alias, a call's result)
            yield Hit(node, f".{node.attr}", why.format(PRIVATE_INTERNALS[node.attr]))
    got = getattr_call(node)
    if got is not None:
        target, name = got
        root = cand.root_of(dotted(target))
        if root and name is not None:
            found = _internal(".".join([root, *dotted(target)[1:], name]))
            if found:
                yield Hit(node, f"getattr(..., {name!r})", why.format(found))


@rule("introspection-attribute")
def introspection_attribute(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """__globals__, closures, frames and class internals lead from a candidate's code to the harness's state."""
    if isinstance(node, ast.Attribute) and node.attr in INTROSPECTION_ATTRS:
        if node.attr == "__dict__" and isinstance(node.value, ast.Name) and node.value.id == "self":
            return
        yield Hit(
            node, f".{node.attr}", f"reads .{node.attr}: introspection reaches past the candidate's own code"
        )
    got = getattr_call(node)
    if got is not None and got[1] in INTROSPECTION_ATTRS:
        yield Hit(
            node,
            f"getattr(..., {got[1]!r})",
            f"reads .{got[1]}: introspection reaches past the candidate's own code",
        )


@rule("computed-getattr")
def computed_getattr(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """getattr with a name computed at run time, on anything but self, hides what it reaches."""
    got = getattr_call(node)
    if got is None or got[1] is not None:
        return
    target = got[0]
    if isinstance(target, ast.Name) and target.id == "self":
        return
    if cand.root_of(dotted(target)).startswith("torch"):
        return  # computed-torch-getattr says it
    fn = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else "getattr"
    yield Hit(
        node, f"{fn}(..., <computed>)", f"{fn} with a computed name hides what it reaches; name the attribute"
    )


@rule("reference-model")
def reference_model(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """A candidate that imports, subclasses or calls the reference `Model` runs the reference, not a kernel."""
    if isinstance(node, ast.ImportFrom):
        mod = node.module or ""
        for i, a in enumerate(node.names):
            if a.name == "Model" or mod.split(".")[0] in REFERENCE_MODULES:
                why = "imports the reference module; write the kernel instead"
                yield Hit(node, f"from {mod} import {a.name}", why, rank=i + 1)
    elif isinstance(node, ast.ClassDef) and "Model" not in cand.defined_classes:
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id == "Model":
                yield Hit(
                    node, "subclass of Model", "subclasses the reference Model; write the kernel instead"
                )
    elif (
        isinstance(node, ast.Name)
        and isinstance(node.ctx, ast.Load)
        and node.id == "Model"
        and "Model" not in cand.defined_classes
    ):
        yield Hit(node, "Model", "uses the reference Model; write the kernel instead")


@rule("try-in-forward")
def try_in_forward(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """A try/except in forward can fall back to PyTorch when the kernel fails (Kevin, arXiv 2507.11948)."""
    if isinstance(node, TRY_NODES) and id(node) in cand.forward_tries:
        yield Hit(
            node, "try/except in forward", "try/except in forward can hide a fallback; let errors surface"
        )


@rule("try-around-launch")
def try_around_launch(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """A try/except around a kernel launch, wherever it is, can hide the same fallback."""
    if isinstance(node, TRY_NODES) and any(launches(s) for s in getattr(node, "body", [])):
        yield Hit(node, "try/except around a launch", "try/except around a kernel launch can hide a fallback")


@rule("dynamic-builtin")
def dynamic_builtin(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """exec, eval, __import__, globals and exit run, import or leave by names the checker cannot read."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in DYNAMIC_BUILTINS:
        yield Hit(node, node.id, f"uses {node.id}")


@rule("side-stream")
def side_stream(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """Work on a side stream is hidden from the timer, which records its events on the current one."""
    why = "uses a side stream; launch on the current stream"
    found = module_attr(node, cand)
    if found is not None:
        names, root, _ = found
        if root.startswith("torch") and names[-1] in STREAM_ATTRS and not _current_made_current(node, cand):
            yield Hit(node, ".".join(names), why)


def _current_made_current(node: ast.AST, cand: Candidate) -> bool:
    """`torch.cuda.stream(torch.cuda.current_stream())`: the current stream made current, a no-op
    that users write around launches (the worker's stream check still runs after every call)."""
    call = cand.parents.get(id(node))
    if not (isinstance(call, ast.Call) and call.func is node and len(call.args) == 1 and not call.keywords):
        return False
    arg = call.args[0]
    if not (isinstance(arg, ast.Call) and not arg.args and not arg.keywords):
        return False
    inner = module_attr(arg.func, cand)
    return inner is not None and inner[1].startswith("torch") and inner[0][-1] == "current_stream"


@rule("computed-torch-getattr")
def computed_torch_getattr(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """getattr on a torch module with a name computed at run time hides what it uses (a stream, say)."""
    got = torch_getattr(node, cand)
    if got is not None and got[1] is None:
        yield Hit(
            node, f"getattr({got[0]}, ...)", f"getattr on {got[0]} with a computed name hides what it uses"
        )


@rule("process-exit")
def process_exit(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """Leaving the process from the candidate can leave a fake verdict behind it."""
    yield from from_imports(node, EXIT_ATTRS)
    found = module_attr(node, cand)
    if found is not None and found[2] in EXIT_ATTRS:
        yield Hit(node, ".".join(found[0]), "exits the process from the candidate")


@rule("environment")
def environment(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """The environment holds the evaluator's settings and secrets, which a kernel has no use for."""
    yield from from_imports(node, ENV_ATTRS)
    found = module_attr(node, cand)
    if found is not None and found[2] in ENV_ATTRS:
        yield Hit(node, ".".join(found[0]), "reads the environment")


@rule("interpreter-introspection")
def interpreter_introspection(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """sys.modules and the interpreter's frames reach the reference and the checker's own state."""
    yield from from_imports(node, {(m, a) for m in ("sys", "inspect") for a in FRAME_ATTRS})
    found = module_attr(node, cand)
    if found is not None and found[1] in ("sys", "inspect") and found[0][-1] in FRAME_ATTRS:
        yield Hit(node, ".".join(found[0]), "inspects the interpreter's frames or modules")


@rule("module-patch")
def module_patch(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """Assigning to an imported module's attribute (torch.allclose = ...) can rig the comparison."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return
    for t in targets:
        names = dotted(t) if isinstance(t, ast.Attribute) else []
        if names and names[0] in cand.modules:
            yield Hit(node, ".".join(names), f"patches {'.'.join(names)}; modules must not be modified")


@rule("setattr-delattr")
def setattr_delattr(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """setattr/delattr on anything but self patches modules by a name the checker cannot read."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("setattr", "delattr")
    ):
        first = node.args[0] if node.args else None
        if not (isinstance(first, ast.Name) and first.id == "self"):
            why = f"{node.func.id} on something other than self can patch modules"
            yield Hit(node, node.func.id, why)


def check_candidate_source(tree: ast.Module, search_path: list[str] | None = None) -> list[Finding]:
    """All forbidden constructs in a parsed candidate, in source order (by line; on one line,
    those of import statements first, then in `ast.walk` order), then those of the modules of its
    own that it imports (found on `search_path`, default `local_search_path()`), reported at the
    import that brings them in."""
    path = local_search_path() if search_path is None else search_path
    return _check_module(tree, path, depth=0, seen=set())


def _check_module(tree: ast.Module, search_path: list[str], depth: int, seen: set[Path]) -> list[Finding]:
    findings = _check_nodes(tree)
    if depth >= MAX_IMPORT_DEPTH:
        return findings
    for line, name, file in local_imports(tree, search_path):
        if file in seen:
            continue
        seen.add(file)
        try:
            inner_tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        except (OSError, SyntaxError, ValueError) as e:
            findings.append(
                Finding(
                    line,
                    f"import {name}",
                    f"imports {name} ({file}), which cannot be read: {e}",
                    "local-import",
                )
            )
            continue
        for f in _check_module(inner_tree, search_path, depth + 1, seen)[:1]:
            message = f"imports {name} ({file}), whose line {f.line} {f.message}"
            findings.append(Finding(line, f.construct, message, f.rule))
    findings.sort(key=lambda f: f.line)
    return findings


def _check_nodes(tree: ast.Module) -> list[Finding]:
    cand = Candidate.of(tree)
    findings: list[Finding] = []
    for imports in (True, False):
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) != imports:
                continue
            hits = [(h, r) for r in RULES for h in r.check(node, cand)]
            hits.sort(key=lambda hr: hr[0].rank)
            findings += [
                Finding(getattr(h.node, "lineno", 1), h.construct, h.message, r.name) for h, r in hits
            ]
    findings.sort(key=lambda f: f.line)
    return findings
