"""Retrieval over the hardware manuals (kernelcraft/hw_docs/)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kernelcraft.base.errors import NotFoundError, UsageError
from kernelcraft.knowledge.docs import HW_DOCS_DIR, HwDocs, parse_doc
from kernelcraft.store import Store

DOC = """---
title: Test GPU
arch: sm_90a
sources:
  - https://example.org/whitepaper  (table 1)
---

# Test GPU

Intro text about the part.

## Memory

Memory overview.

### L2

The L2 is shared.

```python
# not a heading inside a fence
x = 1
```

## Clusters
arch: sm_100

Only on the newer part.
"""


@asynccontextmanager
async def indexed_docs(folder: Path | None = None) -> AsyncIterator[HwDocs]:
    """The manuals in `folder` (default: the shipped ones), indexed into a fresh in-memory database."""
    store = await Store.open(":memory:")
    try:
        docs = HwDocs(store, folder)
        await docs.index()
        yield docs
    finally:
        await store.aclose()


@pytest.fixture
async def docs() -> AsyncIterator[HwDocs]:
    """The shipped manuals, indexed."""
    async with indexed_docs() as indexed:
        yield indexed


def test_a_manual_is_split_into_sections_with_heading_paths() -> None:
    doc = parse_doc(DOC, "test.md")
    assert doc.title == "Test GPU" and doc.arch == "sm_90a"
    assert doc.sources == ["https://example.org/whitepaper  (table 1)"]
    paths = [s.heading_path for s in doc.sections]
    assert paths == ["Test GPU", "Test GPU > Memory", "Test GPU > Memory > L2", "Test GPU > Clusters"]
    l2 = doc.sections[2]
    assert "# not a heading inside a fence" in l2.body and l2.arch == "sm_90a"
    assert doc.sections[3].arch == "sm_100" and not doc.sections[3].body.startswith("arch:")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("# no front matter\n", r"x.md:1: a manual starts with"),
        ("---\ntitle: T\narch: sm_90a\n", r"no closing"),
        ("---\ntitle: T\narch: sm_90a\n---\n", r"sources"),
        ("---\ntitle: T\narch: sm_70\nsources:\n  - u\n---\n", r"unknown arch 'sm_70'"),
        ("---\narch: sm_90a\nsources:\n  - u\n---\n", r"needs 'title:'"),
    ],
)
def test_a_manual_in_the_wrong_format_is_refused_with_the_file_and_the_fix(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_doc(text, "x.md")


def test_every_shipped_manual_parses_and_cites_sources() -> None:
    files = [p for p in HW_DOCS_DIR.glob("*.md") if p.name != "FORMAT.md"]
    assert files
    for p in files:
        doc = parse_doc(p.read_text(encoding="utf-8"), p.name)
        assert doc.sources and doc.sections


@pytest.mark.anyio
async def test_indexing_is_skipped_for_unchanged_files_and_redone_for_changed_or_removed_ones(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.md").write_text(DOC)
    (tmp_path / "FORMAT.md").write_text("not a manual")
    store = await Store.open(":memory:")
    docs = HwDocs(store, tmp_path)
    first = await docs.index()
    second = await docs.index()
    (tmp_path / "a.md").write_text(DOC.replace("The L2 is shared.", "The L2 holds 50 MB of victims."))
    third = await docs.index()
    hit = await docs.search_hw_docs("victims")
    (tmp_path / "a.md").unlink()
    fourth = await docs.index()
    gone = await docs.search_hw_docs("victims")
    await store.aclose()
    assert first.indexed == ["a.md"] and first.sections == 4
    assert second.indexed == [] and second.unchanged == ["a.md"]
    assert third.indexed == ["a.md"]
    assert hit[0].heading_path == "Test GPU > Memory > L2"
    assert fourth.removed == ["a.md"] and gone == []


@pytest.mark.anyio
async def test_arch_filter_leaves_out_other_architectures_and_keeps_arch_independent_guides(
    tmp_path: Path,
) -> None:
    shutil.copy(HW_DOCS_DIR / "triton-guide.md", tmp_path / "triton-guide.md")
    (tmp_path / "a.md").write_text(DOC)
    async with indexed_docs(tmp_path) as docs:
        h = [s.arch for s in await docs.search_hw_docs("shared memory L2 clusters", arch="sm_90a", limit=20)]
        a = [s.arch for s in await docs.search_hw_docs("shared memory L2 clusters", arch="gfx942", limit=20)]
        n = [s.arch for s in await docs.search_hw_docs("newer part", arch="nvidia", limit=20)]
    assert "sm_90a" in h and "sm_100" not in h
    assert set(a) <= {"any", "gfx942"} and "any" in a
    assert "sm_100" in n


@pytest.mark.anyio
async def test_get_section_returns_the_whole_body_and_an_unknown_id_is_not_found(docs: HwDocs) -> None:
    hit = (await docs.search_hw_docs("wgmma warpgroup", arch="sm_90a"))[0]
    full = await docs.get_section(hit.id)
    with pytest.raises(NotFoundError, match="search_hw_docs"):
        await docs.get_section(10**9)
    assert full.heading_path == hit.heading_path and len(full.snippet) >= len(hit.snippet.rstrip(" …"))
    assert full.sources and full.file.endswith(".md")


@pytest.mark.anyio
async def test_an_unknown_arch_is_a_usage_error(docs: HwDocs) -> None:
    with pytest.raises(UsageError, match="sm_90a"):
        await docs.search_hw_docs("L2", arch="sm_70")


@pytest.mark.anyio
@pytest.mark.parametrize("query", ['NEAR("', "AND OR NOT", "*", "tl.load(ptr + offs, mask=m)", ""])
async def test_any_text_is_a_safe_search(docs: HwDocs, query: str) -> None:
    await docs.search_hw_docs(query)


# query, arch, the file and a heading fragment expected among the top 3.
LABELLED = [
    ("wgmma warpgroup matrix multiply", "sm_90a", "nvidia-hopper-h100-h200.md", "wgmma"),
    ("TMA tensor descriptors", "sm_90a", "nvidia-hopper-h100-h200.md", "TMA"),
    ("thread block clusters distributed shared memory", "sm_90a", "nvidia-hopper-h100-h200.md", "cluster"),
    ("shared memory per SM", "sm_90a", "nvidia-hopper-h100-h200.md", "Shared memory"),
    ("HBM bandwidth", "sm_90a", "nvidia-hopper-h100-h200.md", "HBM"),
    ("L2 cache size", "sm_80", "nvidia-ampere-a100.md", "L2"),
    ("cp.async pipelining", "sm_80", "nvidia-ampere-a100.md", "cp.async"),
    ("LDS per CU", "gfx942", "amd-cdna3-mi300x.md", "LDS"),
    ("64-wide wavefronts", "gfx942", "amd-cdna3-mi300x.md", ""),
    ("MFMA matrix cores", "gfx942", "amd-cdna3-mi300x.md", ""),
    ("int64 offsets for large tensors", None, "triton-guide.md", "int64"),
    ("tl.arange power of two block shapes", None, "triton-guide.md", "arange"),
    ("split-K", None, "performance-playbook.md", "Split-K"),
    ("persistent kernels", None, "performance-playbook.md", "Persistent"),
    ("roofline arithmetic intensity", None, "performance-playbook.md", "Roofline"),
    ("memory coalescing", None, "performance-playbook.md", "coalescing"),
    ("do_bench median L2 flush", None, "performance-playbook.md", "do_bench"),
]


@pytest.mark.anyio
async def test_retrieval_finds_the_expected_section_in_the_top_3_for_labelled_queries(docs: HwDocs) -> None:
    present = {p.name for p in HW_DOCS_DIR.glob("*.md")}
    labelled = [x for x in LABELLED if x[2] in present]
    assert len(labelled) >= 12
    misses = []
    for query, arch, file, fragment in labelled:
        top = await docs.search_hw_docs(query, arch=arch, limit=3)
        if not any(s.file == file and fragment.lower() in s.heading_path.lower() for s in top):
            misses.append(f"{query!r} -> {[(s.file, s.heading_path) for s in top]}")
    assert misses == []


@pytest.mark.anyio
async def test_list_sections_names_every_indexed_section_with_its_file_and_arch() -> None:
    store = await Store.open(":memory:")
    try:
        docs = HwDocs(store)
        n = (await docs.index()).sections
        refs = await docs.list_sections()
    finally:
        await store.aclose()
    assert len(refs) == n > 0
    assert {r.file for r in refs} >= {"nvidia-hopper-h100-h200.md", "triton-guide.md"}
    assert any(r.arch == "sm_90a" for r in refs) and all(r.arch for r in refs)
