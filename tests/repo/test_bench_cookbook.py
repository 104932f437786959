"""bench/bench_cookbook.py's pairs: at least 24 KernelBench level-1/2 tasks over every cookbook family,
each candidate one self-contained module that the evaluator's static checks accept. (The pairs
pass the real evaluator on the KernelBench files themselves: `python bench/bench_cookbook.py
.kb/KernelBench --device cpu`, docs/cookbook.md.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kernelcraft.engine.source.static import check_candidate_source
from kernelcraft.knowledge.cookbook import load_cookbook
from kernelcraft.schema.cookbook import FAMILIES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_cookbook  # noqa: E402

PAIRS = bench_cookbook.BENCH


def test_the_benchmark_spans_every_family_with_at_least_24_kernelbench_tasks() -> None:
    book = load_cookbook()
    assert len({t.key for t in PAIRS}) == len(PAIRS) >= 24
    assert {t.level for t in PAIRS} == {"level1", "level2"}
    assert {book.get(t.entry).family for t in PAIRS} == set(FAMILIES)
    for t in PAIRS:
        assert t.key in book.get(t.entry).kernelbench, (
            f"{t.key}: not among {t.entry}'s problems in index.json"
        )


@pytest.mark.parametrize("pair", PAIRS, ids=[t.name for t in PAIRS])
def test_each_candidate_is_one_module_with_one_model_new_that_passes_the_static_checks(pair) -> None:
    source = bench_cookbook.candidate_source(pair)
    tree = ast.parse(source)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes.count("ModelNew") == 1, classes
    assert check_candidate_source(tree) == []


def test_select_picks_by_entry_name_or_problem_id_and_refuses_what_matches_nothing() -> None:
    assert [t.name for t in bench_cookbook.select(["scan"])] == ["89_cumsum", "90_cumprod"]
    assert [t.name for t in bench_cookbook.select(["23"])] == ["23_Softmax"]
    with pytest.raises(SystemExit, match="matches no task"):
        bench_cookbook.select(["no_such_thing"])
