"""Find the code snippets kernelcraft ships and check them against the installed Triton.

Where snippets come from: the fenced code blocks of README.md, docs/*.md, examples/README.md,
bench/README.md and the hardware manuals that `search_hw_docs` serves (kernelcraft/hw_docs/*.md).
The prose of the manuals and the seed rules' text is checked for the API names it cites
(`api_names_in_text`).

Which blocks are checked, by one rule:

- A block tagged `python` (or `py`) that mentions Triton (`triton` or `tl.`) is a Triton snippet.
  It must parse; every `tl.*` / `triton.*` name it uses must exist in the installed Triton.
- A Triton snippet with a `@triton.jit` function is a kernel snippet: each kernel is compiled
  ahead of time for sm_90a. Its parameters named `*_ptr` are fp32 pointers, those annotated
  `tl.constexpr` take their values from the snippet's own launch (`kernel[grid](..., NAME=v)`) or
  its `@triton.autotune` configs (every config is compiled), the others are i32. A kernel snippet
  whose launch line is in the block also runs under the interpreter (`interpret_main`, one
  process for all): the launch's free names are bound by the parameter they are passed to (a
  pointer gets `SIZE` random fp32 values, an integer `SIZE`).
- Any other Triton snippet is a fragment (lines of a kernel body, a grid): parse and names only.
- Blocks in another language (bash, json, text, no tag) are not checked, and must not look like
  Triton code (`@triton.jit`, a `tl.xxx(` call): such a block is tagged `python`, so the rule
  cannot hide one.
- A python block that does not mention Triton (an MCP client) is not a Triton claim; the tests
  that run such files (tests/repo/test_readme.py) cover them.

A "don't do this" snippet says so on its fence line: ```` ```python fails ```` (or
```` ```python fails>=3.9 ````, wrong from that Triton version on and right before it). Such a
snippet must fail one of the checks above; one that passes is a falsehood too.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SIZE = 1000  # elements of each tensor an interpreted launch gets: not a multiple of any block
TARGET = ("cuda", 90, 32)  # sm_90a, the H200's target

FENCE = re.compile(r"^\s*(```+|~~~+)\s*(?P<info>.*)$")
FAILS = re.compile(r"^fails(?:>=(?P<since>\d+\.\d+))?$")
LOOKS_LIKE_TRITON = re.compile(r"@triton\.jit|\btl\.\w+\(")


def markdown_files() -> list[Path]:
    """Every markdown file whose code blocks kernelcraft ships."""
    files = [REPO / "README.md", REPO / "examples" / "README.md", REPO / "bench" / "README.md"]
    files += sorted((REPO / "docs").glob("*.md"))
    files += sorted((REPO / "kernelcraft" / "hw_docs").glob("*.md"))
    return [f for f in files if f.exists()]


@dataclass
class Snippet:
    where: str  # path:line of the fence
    lang: str
    words: list[str]  # what follows the language on the fence line
    code: str

    @property
    def fails_since(self) -> tuple[int, int] | None:
        """The Triton version from which this snippet is marked wrong; (0, 0): always; None: never."""
        for word in self.words:
            m = FAILS.match(word)
            if m:
                since = m.group("since")
                return (0, 0) if since is None else tuple(int(x) for x in since.split("."))  # type: ignore[return-value]
        return None

    @property
    def kind(self) -> str:
        """'other' (not python), 'python' (no Triton in it), 'kernel' or 'fragment'."""
        if self.lang not in ("python", "py"):
            return "other"
        if "triton" not in self.code and "tl." not in self.code:
            return "python"
        return "kernel" if re.search(r"^\s*@triton\.jit", self.code, re.MULTILINE) else "fragment"


def fenced_blocks(path: Path) -> list[Snippet]:
    out: list[Snippet] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence = m.group(1)
        info = m.group("info").split()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        out.append(
            Snippet(
                where=f"{path.relative_to(REPO)}:{start + 1}",
                lang=info[0].lower() if info else "",
                words=info[1:],
                code=textwrap.dedent("\n".join(body)) + "\n",  # a block inside a list item
            )
        )
    return out


def all_snippets() -> list[Snippet]:
    return [s for f in markdown_files() for s in fenced_blocks(f)]


# ----------------------------------------------------------------------------- API names


def resolve(dotted: str) -> bool:
    """Whether `tl.x.y` / `triton.x.y` names something in the installed Triton (importing
    submodules such as `triton.language.extra.libdevice` or `triton.testing` as needed)."""
    parts = dotted.split(".")
    root = "triton.language" if parts[0] == "tl" else "triton"
    obj: Any = importlib.import_module(root)
    for part in parts[1:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if isinstance(obj, types.ModuleType):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
                continue
            except ImportError:
                return False
        return False
    return True


def api_names_in_code(tree: ast.AST) -> set[str]:
    """The longest `tl.a.b` / `triton.a.b` attribute chains a parsed snippet uses."""
    names: set[str] = set()
    inner: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        chain, cur = [], node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            inner.add(id(cur.value))
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in ("tl", "triton"):
            names.add(".".join([cur.id, *reversed(chain)]))
    return names


TEXT_NAME = re.compile(r"(?<![\w.])(?:tl|triton)(?:\.[A-Za-z_]\w*)+")


def api_names_in_text(text: str) -> set[str]:
    """`tl.*` / `triton.*` names cited in prose (inline code or not)."""
    return set(TEXT_NAME.findall(text))


# ----------------------------------------------------------------------------- kernels


@dataclass
class Kernel:
    name: str
    params: list[str]
    constexprs: list[str]
    configs: list[dict[str, Any]] = field(default_factory=list)  # constexprs (+ num_warps, num_stages)
    launches: list[ast.Call] = field(default_factory=list)


def _is_constexpr(annotation: ast.expr | None) -> bool:
    return annotation is not None and ast.unparse(annotation) in ("tl.constexpr", "triton.language.constexpr")


def kernels_in(tree: ast.Module) -> list[Kernel]:
    """The `@triton.jit` functions of a snippet, with the launches of them the snippet makes."""
    found: dict[str, Kernel] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(d) == "triton.jit" for d in node.decorator_list
        ):
            args = node.args.args
            found[node.name] = Kernel(
                node.name,
                [a.arg for a in args],
                [a.arg for a in args if _is_constexpr(a.annotation)],
            )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in found
        ):
            found[node.func.value.id].launches.append(node)
    return list(found.values())


def launch_configs(kernel: Kernel, module: types.ModuleType) -> list[dict[str, Any]]:
    """The constexpr values (and num_warps / num_stages) each compile of `kernel` uses."""
    obj = getattr(module, kernel.name)
    configs = getattr(obj, "configs", None)  # an Autotuner
    if configs:
        return [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} for c in configs]
    out = []
    for call in kernel.launches:
        values: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is not None:
                try:
                    values[kw.arg] = ast.literal_eval(kw.value)
                except ValueError:
                    continue
        out.append(values)
    return out or [{}]


def load_defs(snippet: Snippet, tree: ast.Module, workdir: Path) -> types.ModuleType:
    """A module of the snippet's imports and functions only (other top-level lines blanked, so
    line numbers stay those of the block), with torch, triton and tl already imported."""
    keep = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom | ast.FunctionDef)]
    lines = snippet.code.splitlines()
    kept = [""] * len(lines)
    for n in keep:
        first = min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))])
        for i in range(first - 1, n.end_lineno or n.lineno):
            kept[i] = lines[i]
    name = "kc_snippet_" + re.sub(r"\W", "_", snippet.where)
    path = workdir / f"{name}.py"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    import importlib.util

    import torch
    import triton
    import triton.language as tl

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(torch=torch, triton=triton, tl=tl)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compile_kernel(kernel: Kernel, module: types.ModuleType, config: dict[str, Any]) -> None:
    """Compile one kernel of a snippet for sm_90a with `config`; raises what the compiler raises."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    fn = getattr(module, kernel.name)
    while not isinstance(fn, JITFunction):  # an Autotuner (or a Heuristics) wraps the JITFunction
        fn = fn.fn
    missing = [c for c in kernel.constexprs if c not in config]
    if missing:
        raise LookupError(
            f"{kernel.name}: no value for constexpr {', '.join(missing)} in the snippet "
            "(launch it with NAME=value or autotune it)"
        )
    signature = {
        p: "constexpr" if p in kernel.constexprs else ("*fp32" if p.endswith("_ptr") else "i32")
        for p in kernel.params
    }
    constexprs = {c: config[c] for c in kernel.constexprs}
    options = {k: config[k] for k in ("num_warps", "num_stages") if k in config}
    source = triton.compiler.ASTSource(fn, signature=signature, constexprs=constexprs)
    triton.compile(source, target=GPUTarget(*TARGET), options=options or None)


def compile_problem(kernel: Kernel, module: types.ModuleType, config: dict[str, Any]) -> str | None:
    try:
        compile_kernel(kernel, module, config)
    except Exception as e:  # noqa: BLE001 - a snippet's failure is what we report
        last = [x for x in str(e).splitlines() if x.strip()][-1:] or [""]
        return f"{kernel.name} {config} does not compile for sm_90a: {type(e).__name__}: {last[0]}"
    return None


def parse_error(code: str) -> str | None:
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"does not parse: {e.msg} (line {e.lineno} of the block)"
    return None


def check_compiles(snippet: Snippet, workdir: Path) -> list[str]:
    """Problems found parsing the snippet, resolving its names and compiling its kernels."""
    try:
        tree = ast.parse(snippet.code)
    except SyntaxError as e:
        return [f"does not parse: {e.msg} (line {e.lineno} of the block)"]
    problems = [f"no such API: {n}" for n in sorted(api_names_in_code(tree)) if not resolve(n)]
    if snippet.kind != "kernel" or problems:
        return problems
    try:
        module = load_defs(snippet, tree, workdir)
    except Exception as e:  # noqa: BLE001 - a snippet's failure is what we report
        return [f"its definitions do not run: {type(e).__name__}: {e}"]
    for kernel in kernels_in(tree):
        problems += [
            p for config in launch_configs(kernel, module) if (p := compile_problem(kernel, module, config))
        ]
    return problems


# ----------------------------------------------------------------------------- the interpreter


def launched_in_block(snippet: Snippet) -> bool:
    """Whether the block launches one of its own kernels (then it runs under the interpreter)."""
    try:
        tree = ast.parse(snippet.code)
    except SyntaxError:
        return False
    return any(k.launches for k in kernels_in(tree))


def _free_bindings(tree: ast.Module) -> dict[str, str]:
    """Each undefined name a launch passes, bound by its parameter: 'ptr' or 'int'."""
    assigned = {  # at the top level: a kernel's own locals do not define the host's names
        t.id
        for n in tree.body
        if not isinstance(n, ast.FunctionDef)
        for t in ast.walk(n)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }
    binds: dict[str, str] = {}
    for kernel in kernels_in(tree):
        for call in kernel.launches:
            pairs = list(zip(kernel.params, call.args, strict=False))
            pairs += [(kw.arg, kw.value) for kw in call.keywords if kw.arg]
            for param, value in pairs:
                if isinstance(value, ast.Name) and value.id not in assigned:
                    binds[value.id] = "ptr" if param.endswith("_ptr") else "int"
    return binds


def interpret(snippet: Snippet, workdir: Path) -> str | None:
    """Run the whole block under the interpreter (this process has TRITON_INTERPRET=1): None,
    or what it raised."""
    import torch
    import triton
    import triton.language as tl

    tree = ast.parse(snippet.code)
    env: dict[str, Any] = {"torch": torch, "triton": triton, "tl": tl, "__name__": "kc_snippet"}
    gen = torch.Generator().manual_seed(0)
    for name, kind in _free_bindings(tree).items():
        env[name] = torch.rand(SIZE, generator=gen) if kind == "ptr" else SIZE
    path = workdir / ("interp_" + re.sub(r"\W", "_", snippet.where) + ".py")
    path.write_text(snippet.code, encoding="utf-8")
    try:
        exec(compile(snippet.code, str(path), "exec"), env)  # noqa: S102 - the snippet is ours
    except Exception as e:  # noqa: BLE001
        last = [x for x in str(e).splitlines() if x.strip()][-1:] or [""]
        return f"{type(e).__name__}: {last[0]}"
    return None


def interpret_main() -> None:
    """`python -c 'import snippet_support; snippet_support.interpret_main()' IN OUT`: interpret the
    snippets listed in IN (JSON), write {where: error or null} to OUT."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    src, dst = sys.argv[1], sys.argv[2]
    snippets = [Snippet(**s) for s in json.loads(Path(src).read_text())]
    with tempfile.TemporaryDirectory() as tmp:
        results = {s.where: interpret(s, Path(tmp)) for s in snippets}
    Path(dst).write_text(json.dumps(results))
