"""The target registry is the one home of a target's facts: every entry complete and sourced, its
manual present, aliases unambiguous, and no target name written anywhere else in the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest

from kernelcraft.base import targets
from kernelcraft.base.errors import UsageError
from kernelcraft.base.targets import REGISTRY, Target, arch_family, facts, for_device

PACKAGE = Path(targets.__file__).resolve().parents[1]
HW_DOCS = PACKAGE / "hw_docs"


def test_the_registry_holds_exactly_the_target_literal() -> None:
    assert tuple(REGISTRY) == get_args(Target)
    assert all(name == t.name for name, t in REGISTRY.items())


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_target_has_its_facts_sources_and_manual(name: str) -> None:
    t = REGISTRY[name]
    assert t.gpu and t.sources and t.devices and t.warp_size in (32, 64)
    assert t.max_shared_per_block > 0 and t.hbm_gbps > 0
    assert t.tflops["fp32"] > 0 and t.tflops["bf16"] > t.tflops["fp32"]
    manual = HW_DOCS / t.manual
    assert manual.is_file(), f"{name}: its manual {t.manual} is not in hw_docs/"
    front = manual.read_text(encoding="utf-8").split("---")[1]
    arch_line = re.search(r"^arch:\s*(.+)$", front, re.MULTILINE)
    assert arch_line is not None and name in [a.strip() for a in arch_line.group(1).split(",")]


def test_aliases_resolve_to_one_target_and_unknown_names_are_usage_errors() -> None:
    spellings = [s for t in REGISTRY.values() for s in (t.name, *t.aliases)]
    assert len(spellings) == len(set(spellings)), "an alias names two targets"
    assert facts("H200").name == facts("sm_90").name == "sm_90a"
    assert facts(" MI300X ").backend == "hip"
    with pytest.raises(UsageError, match="sm_75.*sm_80"):
        facts("sm_75")


def test_a_device_name_finds_its_target_and_an_unknown_gpu_finds_none() -> None:
    assert for_device("cuda:0 (NVIDIA H200)") is REGISTRY["sm_90a"]
    assert for_device("NVIDIA A100-SXM4-80GB") is REGISTRY["sm_80"]
    assert for_device("NVIDIA GeForce RTX 4090") is None


def test_every_target_has_the_family_of_its_backend() -> None:
    for t in REGISTRY.values():
        assert arch_family(t.name) == {"cuda": "nvidia", "hip": "amd"}[t.backend]
        assert all(arch_family(a) == arch_family(t.name) for a in t.aliases)


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are not docstrings (a docstring may name a target as an example)."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    docstrings.add(id(stmt.value))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_no_module_but_the_registry_writes_a_target_name() -> None:
    # The compiler's spellings (sm_NN, gfxNNN); GPU names such as "H200" may appear in prose.
    spellings = {s for t in REGISTRY.values() for s in (t.name, *t.aliases)}
    names = sorted((s for s in spellings if re.match(r"sm_|gfx", s)), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])", re.IGNORECASE)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(targets.__file__).resolve():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _code_strings(tree):
            m = pattern.search(node.value)
            if m:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {m.group(0)!r}")
    assert not found, "target names outside base/targets.py (read them from the registry):\n" + "\n".join(
        found
    )
