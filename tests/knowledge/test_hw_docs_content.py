"""Content checks for the hardware manuals in kernelcraft/hw_docs/.

The manuals are data, not code: these tests hold them to the format agreed in
kernelcraft/hw_docs/FORMAT.md (front matter with title, arch and sources; sections
that stand alone as search results) and to the topics issue 3 says they must cover.
They parse the files directly, so they do not depend on the indexer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelcraft.base.targets import REGISTRY

DOCS_DIR = Path(__file__).resolve().parents[2] / "kernelcraft" / "hw_docs"
KNOWN_ARCHES = {*REGISTRY, "any"}
MAX_SECTION_WORDS = 400
MIN_SECTION_WORDS = 40

EXPECTED_FILES = {
    "nvidia-ampere-a100.md": "sm_80",
    "nvidia-ada-l40s.md": "sm_89",
    "nvidia-hopper-h100-h200.md": "sm_90a",
    "nvidia-blackwell-b200.md": "sm_100",
    "amd-cdna3-mi300x.md": "gfx942",
    "triton-guide.md": "any",
    "performance-playbook.md": "any",
}

# Terms each manual must mention (case-insensitive regular expressions), from issue 3, item 5.
REQUIRED_TOPICS: dict[str, list[str]] = {
    "nvidia-ampere-a100.md": [
        r"\b108 SMs\b",
        r"warp",
        r"register",
        r"164 KB",
        r"163 KB",
        r"\bL2\b",
        r"HBM2e?",
        r"TF32",
        r"bf16",
        r"int8",
        r"cp\.async",
        r"occupancy",
    ],
    "nvidia-ada-l40s.md": [r"fp8", r"GDDR6", r"864 GB/s", r"96 MB", r"100 KB", r"\bL2\b", r"TFLOP"],
    "nvidia-hopper-h100-h200.md": [
        r"wgmma",
        r"\bTMA\b",
        r"tensor descriptor",
        r"cluster",
        r"distributed shared memory",
        r"shared memory",
        r"228 KB",
        r"227 KB",
        r"\bL2\b",
        r"50 MB",
        r"HBM3e?",
        r"4\.8 TB/s",
        r"3\.35 TB/s",
        r"132 SMs",
        r"sm_90a",
        r"fp8",
        r"measured on a kernelcraft H200",
    ],
    "nvidia-blackwell-b200.md": [
        r"tcgen05",
        r"tensor memory",
        r"TMEM",
        r"2-CTA|two-CTA|cta_group::2",
        r"fp4",
        r"fp6",
        r"fp8",
        r"HBM3e",
        r"8 TB/s",
        r"Triton",
    ],
    "amd-cdna3-mi300x.md": [
        r"wavefront",
        r"\b64\b",
        r"\bLDS\b",
        r"64 KB",
        r"MFMA",
        r"304",
        r"5\.3 TB/s",
        r"Infinity Cache",
        r"VGPR",
        r"waves_per_eu",
        r"matrix_instr_nonkdim",
        r"kpack",
        r"num_stages",
        r"1,?307",
    ],
    "triton-guide.md": [
        r"tl\.program_id",
        r"tl\.arange",
        r"power of (?:two|2)",
        r"constexpr",
        r"mask",
        r"other=",
        r"stride",
        r"tl\.float32\(",
        r"\.to\(tl\.float32\)",
        r"tanh",
        r"libdevice",
        r"break",
        r"int64",
        r"tl\.dot",
        r"input_precision",
        r"tf32x3",
        r"ieee",
        r"autotune",
        r"prune_configs_by",
        r"num_warps",
        r"num_stages",
        r"triton\.cdiv",
        r"atomic",
        r"tl\.where",
        r"static_range",
        r"make_block_ptr|make_tensor_descriptor",
        r"TRITON_INTERPRET",
        r"3\.9",
    ],
    "performance-playbook.md": [
        r"roofline",
        r"arithmetic intensity",
        r"ridge",
        r"coalesc",
        r"16-byte|16 bytes",
        r"occupancy",
        r"fusion|fuse",
        r"online softmax",
        r"Welford",
        r"persistent",
        r"split-K",
        r"stream-K",
        r"swizzl|grouped ordering|GROUP_SIZE_M",
        r"num_stages",
        r"CUDA graph",
        r"TF32",
        r"do_bench",
        r"median",
        r"L2",
    ],
}

_HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_URL = re.compile(r"https?://\S+")


@dataclass
class Doc:
    path: Path
    front: dict[str, str]
    sources: list[str]
    body: str


@dataclass
class Section:
    path: str
    text: str

    @property
    def words(self) -> int:
        return len(self.text.split())


def _parse(path: Path) -> Doc:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines and lines[0].strip() == "---", f"{path.name}: must start with a '---' front-matter line"
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:  # pragma: no cover - reported as a failure below
        pytest.fail(f"{path.name}: front matter is not closed with '---'")
    front: dict[str, str] = {}
    sources: list[str] = []
    in_sources = False
    for n, line in enumerate(lines[1:end], start=2):
        if not line.strip():
            continue
        if in_sources and line.startswith("  - "):
            sources.append(line[4:].strip())
            continue
        m = re.match(r"^([a-z_]+):\s*(.*)$", line)
        assert m, f"{path.name}:{n}: front matter line is neither 'key: value' nor a '  - ' source item"
        key, value = m.group(1), m.group(2).strip()
        front[key] = value
        in_sources = key == "sources"
    return Doc(path, front, sources, "\n".join(lines[end + 1 :]))


def _sections(doc: Doc) -> list[Section]:
    title = doc.front.get("title", doc.path.stem)
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    current_path = title
    buf: list[str] = []
    in_fence = False

    def flush() -> None:
        text = "\n".join(buf).strip()
        if text or sections or current_path != title:
            sections.append(Section(current_path, text))

    for line in doc.body.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(line)
        if m is None:
            buf.append(line)
            continue
        flush()
        buf = []
        level, heading = len(m.group(1)), m.group(2)
        if level == 1:
            stack = []
            current_path = title
            continue  # the document's '# Title' line is not a section of its own
        stack = [(lv, h) for lv, h in stack if lv < level] + [(level, heading)]
        current_path = " > ".join([title] + [h for _, h in stack])
    flush()
    # drop an empty preamble (nothing before the first heading)
    return [s for s in sections if not (s.path == title and not s.text)]


def _all_docs() -> list[Path]:
    return sorted(p for p in DOCS_DIR.glob("*.md") if p.name != "FORMAT.md" and not p.name.startswith("_"))


def test_every_expected_manual_exists() -> None:
    present = {p.name for p in _all_docs()}
    missing = sorted(set(EXPECTED_FILES) - present)
    assert not missing, f"missing manuals: {missing}"


@pytest.mark.parametrize("path", _all_docs(), ids=lambda p: p.name)
def test_manual_front_matter_has_title_arch_and_url_sources(path: Path) -> None:
    doc = _parse(path)
    assert doc.front.get("title"), f"{path.name}: no title"
    arches = [a.strip() for a in doc.front.get("arch", "").split(",") if a.strip()]
    assert arches, f"{path.name}: no arch"
    assert set(arches) <= KNOWN_ARCHES, f"{path.name}: unknown arch {arches}"
    if path.name in EXPECTED_FILES:
        assert EXPECTED_FILES[path.name] in arches, f"{path.name}: arch should be {EXPECTED_FILES[path.name]}"
    assert doc.sources, f"{path.name}: no sources listed"
    assert any(_URL.match(s) for s in doc.sources), f"{path.name}: no source starts with a URL"


@pytest.mark.parametrize("path", _all_docs(), ids=lambda p: p.name)
def test_manual_sections_are_non_empty_and_within_the_size_limit(path: Path) -> None:
    sections = _sections(_parse(path))
    assert len(sections) >= 5, f"{path.name}: only {len(sections)} sections"
    problems = [
        f"{s.path}: {s.words} words"
        for s in sections
        if s.words < MIN_SECTION_WORDS or s.words > MAX_SECTION_WORDS
    ]
    assert not problems, (
        f"{path.name}: sections outside {MIN_SECTION_WORDS}-{MAX_SECTION_WORDS} words: {problems}"
    )


@pytest.mark.parametrize("path", _all_docs(), ids=lambda p: p.name)
def test_manual_section_headings_are_unique_paths(path: Path) -> None:
    paths = [s.path for s in _sections(_parse(path))]
    dupes = sorted({p for p in paths if paths.count(p) > 1})
    assert not dupes, f"{path.name}: duplicate heading paths {dupes}"


@pytest.mark.parametrize("name", sorted(REQUIRED_TOPICS))
def test_manual_covers_the_topics_issue_3_requires(name: str) -> None:
    path = DOCS_DIR / name
    if not path.exists():
        pytest.fail(f"{name} is missing")
    body = _parse(path).body
    missing = [t for t in REQUIRED_TOPICS[name] if not re.search(t, body, re.IGNORECASE)]
    assert not missing, f"{name}: does not mention {missing}"


@pytest.mark.parametrize("path", _all_docs(), ids=lambda p: p.name)
def test_manual_code_fences_are_balanced(path: Path) -> None:
    fences = sum(1 for line in _parse(path).body.splitlines() if _FENCE.match(line))
    assert fences % 2 == 0, f"{path.name}: unbalanced code fences"
