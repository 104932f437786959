"""Every code snippet kernelcraft ships is true of the installed Triton (issue 26, item 5).

The snippets are the fenced blocks of the README, docs/, the hardware manuals `search_hw_docs`
serves, and the API names cited in the manuals' prose and the seed rules. Which blocks are checked
and how is stated once, in `tests/snippet_support.py`'s docstring. The cookbook's kernels are
checked elsewhere, more strictly: tests/knowledge/cookbook/test_cookbook.py runs each against its task in the
evaluator (the interpreter, and the compile for sm_90a).

Measured on the 2-core CPU machine (Triton 3.9): about 8 s for the file, most of it the one
interpreter process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # as every worker compiles (pool.base_env)
triton = pytest.importorskip("triton")
pytest.importorskip("torch")

from snippet_support import (  # noqa: E402
    LOOKS_LIKE_TRITON,
    REPO,
    Snippet,
    all_snippets,
    api_names_in_text,
    check_compiles,
    launched_in_block,
    parse_error,
    resolve,
)

from kernelcraft.knowledge.docs import HW_DOCS_DIR, SKIPPED_FILES, parse_doc  # noqa: E402
from kernelcraft.knowledge.rulebook import Rulebook  # noqa: E402
from kernelcraft.store import Store  # noqa: E402

SNIPPETS = all_snippets()
TRITON_SNIPPETS = [s for s in SNIPPETS if s.kind in ("kernel", "fragment")]
INSTALLED = tuple(int(x) for x in re.findall(r"\d+", triton.__version__)[:2])
SEEDS = REPO / "kernelcraft" / "knowledge" / "seed_rules.jsonl"
CAPTURES = REPO / "tests" / "fixtures" / "errors"

DOCUMENTED_ABSENT = {
    "tl.tanh": (0, 0), "tl.relu": (0, 0), "tl.gelu": (0, 0), "tl.pow": (0, 0), "tl.mean": (0, 0),
    "tl.var": (0, 0), "tl.libdevice": (0, 0), "tl.math.tanh": (0, 0), "tl.advance": (3, 9),
}  # fmt: skip
"""Names the manuals and rules cite in order to say they do not exist (from the Triton version
given; (0, 0): in every version kernelcraft supports): from that version on they must not."""


def _wrong_on_this_triton(snippet: Snippet) -> bool:
    since = snippet.fails_since
    return since is not None and INSTALLED >= since


@pytest.fixture(autouse=True)
def fresh_triton_cache(tmp_path: Path) -> Iterator[None]:
    from triton import knobs

    previous = knobs.cache.dir
    knobs.cache.dir = str(tmp_path / "triton-cache")
    try:
        yield
    finally:
        knobs.cache.dir = previous


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """Each Triton snippet that launches its kernel, run in one interpreter process."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the compile checks need Triton imported without TRITON_INTERPRET")
    runnable = [asdict(s) for s in TRITON_SNIPPETS if launched_in_block(s)]
    work = tmp_path_factory.mktemp("interp")
    src, dst = work / "in.json", work / "out.json"
    src.write_text(json.dumps(runnable))
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import snippet_support; snippet_support.interpret_main()",
            str(src),
            str(dst),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, str | None] = json.loads(dst.read_text())
    return results


@pytest.mark.parametrize("snippet", TRITON_SNIPPETS, ids=[s.where for s in TRITON_SNIPPETS])
def test_a_triton_snippet_we_ship_parses_uses_real_apis_compiles_and_runs(
    snippet: Snippet, interpreted: dict[str, str | None], tmp_path: Path
) -> None:
    problems = check_compiles(snippet, tmp_path)
    ran = interpreted.get(snippet.where)
    if ran is not None:
        problems.append(f"under the interpreter: {ran}")
    if _wrong_on_this_triton(snippet):
        assert problems, (
            f"{snippet.where} is marked 'fails' but passes every check on Triton {triton.__version__}"
        )
    else:
        assert problems == [], f"{snippet.where} on Triton {triton.__version__}"


def test_the_snippet_rule_finds_the_kernels_fragments_and_wrong_examples_we_ship() -> None:
    kinds = [s.kind for s in TRITON_SNIPPETS]
    assert kinds.count("kernel") >= 3 and kinds.count("fragment") >= 3
    assert any(s.fails_since == (0, 0) for s in TRITON_SNIPPETS)
    assert sum(launched_in_block(s) for s in TRITON_SNIPPETS) >= 2


def test_every_python_block_we_ship_parses_unless_marked_wrong() -> None:
    python = [s for s in SNIPPETS if s.kind != "other" and s.fails_since is None]
    bad = [f"{s.where}: {error}" for s in python if (error := parse_error(s.code))]
    assert any(s.kind == "python" for s in python) and bad == []


def test_a_block_in_another_language_holds_no_triton_code() -> None:
    hidden = [s.where for s in SNIPPETS if s.kind == "other" and LOOKS_LIKE_TRITON.search(s.code)]
    assert hidden == [], "tag these blocks python so that their Triton code is checked"


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("x = tl.tanh(y)\n", "no such API: tl.tanh"),
        ("grid = (triton.cdiv(n, BLOCK),\n", "does not parse"),
        (
            "@triton.jit\ndef k(x_ptr, n):\n    for i in range(n):\n        if i > 3:\n"
            "            break\n        tl.store(x_ptr + i, 1.0)\n",
            "does not compile for sm_90a",
        ),
        (
            "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n",
            "no value for constexpr BLOCK",
        ),
    ],
)
def test_the_checks_find_a_wrong_snippet(code: str, problem: str, tmp_path: Path) -> None:
    problems = check_compiles(Snippet("test", "python", [], code), tmp_path)
    assert any(problem in p for p in problems), problems


def test_a_fails_marker_may_name_the_triton_version_it_starts_at() -> None:
    assert Snippet("t", "python", ["fails"], "").fails_since == (0, 0)
    assert Snippet("t", "python", ["fails>=3.9"], "").fails_since == (3, 9)
    assert Snippet("t", "python", [], "").fails_since is None


def _manual_text() -> list[tuple[str, str]]:
    out = []
    for path in sorted(HW_DOCS_DIR.glob("*.md")):
        if path.name in SKIPPED_FILES or path.name.startswith("_"):
            continue
        doc = parse_doc(path.read_text(encoding="utf-8"), path.name)
        out += [(f"{path.name} > {s.heading_path}", s.body) for s in doc.sections]
    return out


def _seed_rules() -> list[dict[str, str]]:
    return [json.loads(x) for x in SEEDS.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_every_api_name_the_manuals_and_rules_cite_exists_unless_they_say_it_does_not() -> None:
    cited: dict[str, str] = {}
    for where, text in _manual_text():
        for name in api_names_in_text(text):
            cited.setdefault(name, where)
    for rule in _seed_rules():
        for name in api_names_in_text(f"{rule['text']} {rule['reason']}"):
            cited.setdefault(name, f"rule {rule['text']!r}")
    absent = {n for n, since in DOCUMENTED_ABSENT.items() if INSTALLED >= since}
    missing = {n: w for n, w in cited.items() if n not in absent and not resolve(n)}
    assert missing == {}
    assert set(DOCUMENTED_ABSENT) <= set(cited)
    assert [n for n in sorted(absent) if resolve(n)] == []


def test_every_seed_rule_claim_fails_in_its_capture_on_the_installed_triton() -> None:
    """A rule's `capture:` case (tests/fixtures/errors/capture.py) is its code: a compile case must
    have failed to compile on the installed Triton's captures, unless the rule names another Triton
    version. (Interpreter cases may show that the interpreter lets a fault pass.)"""
    version = ".".join(map(str, INSTALLED))
    index = CAPTURES / f"triton-{version}" / "index.tsv"
    if not index.exists():
        pytest.skip(f"no captures for Triton {version}: run tests/fixtures/errors/capture.py")
    rows = [row.split("\t") for row in index.read_text().splitlines() if row]
    status = {r[0]: r[3] for r in rows if r[1] == "compile"}
    wrong = []
    for rule in _seed_rules():
        versions = re.findall(r"Triton (\d+\.\d+)", rule["text"])
        if versions and version not in versions:
            continue
        cases = re.findall(r"capture:(\w+)", rule["verified_by"])
        wrong += [c for c in cases if c in status and status[c] != "error"]
    assert wrong == []


@pytest.fixture
async def seeded() -> AsyncIterator[Rulebook]:
    store = await Store.open(":memory:")
    try:
        book = Rulebook(store)
        await book.import_seed()
        yield book
    finally:
        await store.aclose()


INTERPRETER_EXACT = re.compile(r"interpreter[^.;]*\bexact", re.IGNORECASE)


@pytest.mark.anyio
async def test_the_tf32_rule_served_first_says_the_interpreter_rounds_fp32_dots_to_tf32(
    seeded: Rulebook,
) -> None:
    first = (await seeded.query_rules("TF32 fp32 tl.dot mismatch", arch="sm_90a", limit=1))[0]
    words = f"{first.text} {first.reason}"
    assert "TF32" in words
    assert re.search(r"interpreter rounds fp32 (tl\.)?dots to TF32", words), words
    assert not INTERPRETER_EXACT.search(words), words


def test_no_manual_says_the_interpreter_computes_fp32_dots_exactly_without_naming_whose() -> None:
    """Triton's own interpreter multiplies fp32 exactly; kernelcraft's rounds to TF32. A manual
    that says "exact" of the interpreter must say it is Triton's unpatched one."""
    said = [
        where
        for where, text in _manual_text()
        for sentence in re.split(r"(?<=[.;])\s", text)
        if INTERPRETER_EXACT.search(sentence) and "TRITON_INTERPRET=1 alone" not in sentence
    ]
    assert said == []
