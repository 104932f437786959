"""The rulebook: learning from failures, dedup, activation, retrieval, sharing, seeds."""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kernelcraft.base.errors import NotFoundError, UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.targets import arch_family
from kernelcraft.knowledge.rulebook import Rulebook, validate_rule
from kernelcraft.knowledge.text import is_near_duplicate, normalize_rule
from kernelcraft.store import Store

SEEDS = Path(__file__).resolve().parents[2] / "kernelcraft" / "knowledge" / "seed_rules.jsonl"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "errors"

FLOAT32 = "You cannot call tl.float32 as a function inside a Triton kernel."


@asynccontextmanager
async def rulebook(
    *, seed: bool = False, activation: int = 3, path: str = ":memory:"
) -> AsyncIterator[Rulebook]:
    store = await Store.open(path)
    try:
        rb = Rulebook(store, activation_count=activation)
        if seed:
            await rb.import_seed()
        yield rb
    finally:
        await store.aclose()


@pytest.fixture
async def rb() -> AsyncIterator[Rulebook]:
    """A rulebook on a fresh in-memory database."""
    async with rulebook() as book:
        yield book


@pytest.fixture
async def seeded() -> AsyncIterator[Rulebook]:
    """A rulebook on a fresh in-memory database holding the seed rules."""
    async with rulebook(seed=True) as book:
        yield book


# ----------------------------------------------------------------------------- rule form


@pytest.mark.parametrize(
    "bad",
    [
        "Always cast with .to(tl.float32).",
        "you cannot lowercase the start",
        "You cannot call tl.float32 as a function. Use .to() instead.",
        "You cannot do this\nand that",
        "You cannot " + "x" * 500,
    ],
)
@pytest.mark.anyio
async def test_a_rule_not_in_adaexplore_form_is_rejected_before_anything_is_written(
    rb: Rulebook, bad: str
) -> None:
    with pytest.raises(UsageError, match="You cannot|one sentence"):
        await rb.record_failure("code", "err", rule=bad)
    assert len(list(await rb.store.conn.execute_fetchall("SELECT 1 FROM failures"))) == 0


@pytest.mark.anyio
async def test_no_guidance_stores_the_failure_but_no_rule(rb: Rulebook) -> None:
    rec = await rb.record_failure("code", "weird", rule="No guidance.")
    assert rec.rule is None and rec.rule_action == "none" and rec.failure_id > 0
    assert await rb.list_rules() == []


def test_validate_rule_keeps_dotted_names_in_one_sentence() -> None:
    assert (
        validate_rule("You cannot  access tl.math.tanh in a kernel.")
        == "You cannot access tl.math.tanh in a kernel."
    )
    assert validate_rule("no guidance") is None


# ----------------------------------------------------------------------------- dedup and activation


@pytest.mark.anyio
async def test_near_duplicates_increment_and_the_rule_activates_once_a_second_client_vouches_for_its_words(
    rb: Rulebook,
) -> None:
    variants = [
        FLOAT32,
        "You cannot call `tl.float32()` as a function in a Triton kernel",
        "You cannot use tl.float32 as a function to cast values inside a Triton kernel.",
        FLOAT32,
    ]
    clients = ["alice", "bob", "alice", "bob"]
    recs = [
        await rb.record_failure(f"code {i}", "TypeError", rule=v, client=client)
        for i, (v, client) in enumerate(zip(variants, clients, strict=True))
    ]
    assert [r.rule_action for r in recs] == ["created", "incremented", "incremented", "incremented"]
    # bob's near-duplicate counts, but vouches for its own wording only: the stored text is
    # corroborated when bob proposes it in these words
    assert [r.activated for r in recs] == [False, False, False, True]
    assert [r.rule.count for r in recs] == [1, 2, 3, 4]
    assert [r.rule.status for r in recs] == ["candidate", "candidate", "candidate", "active"]
    assert len({r.rule.uid for r in recs}) == 1


@pytest.mark.anyio
async def test_rules_naming_different_identifiers_are_not_duplicates(rb: Rulebook) -> None:
    a = await rb.record_failure("c", "e", rule=FLOAT32)
    b = await rb.record_failure("c", "e", rule=FLOAT32.replace("float32", "float16"))
    c = await rb.record_failure("c", "e", rule="You cannot use break inside a loop in a Triton kernel.")
    assert [r.rule_action for r in (a, b, c)] == ["created", "created", "created"]


@pytest.mark.parametrize(
    ("a", "b", "dup"),
    [
        (FLOAT32, "You cannot call tl.float32() as a function in Triton kernels.", True),
        (FLOAT32, "You cannot call tl.float16 as a function inside a Triton kernel.", False),
        ("You cannot use break inside a loop.", "You cannot use a break statement inside loops.", True),
        ("You cannot use break inside a loop.", "You cannot use continue inside a loop.", False),
        ("You cannot access tl.math.tanh.", "You cannot call tl.math.tanh in a Triton kernel.", True),
        (
            "You cannot launch a kernel with a grid that is an integer.",
            "You cannot allocate outputs with torch.empty_like inside forward.",
            False,
        ),
    ],
)
def test_near_duplicate_threshold(a: str, b: str, dup: bool) -> None:
    assert is_near_duplicate(normalize_rule(a), normalize_rule(b)) is dup


@pytest.mark.anyio
async def test_the_activation_count_is_configurable() -> None:
    async with rulebook(activation=2) as rb:
        recs = [await rb.record_failure("c", "e", rule=FLOAT32, client=client) for client in ("alice", "bob")]
    assert recs[1].activated and recs[1].rule.status == "active"
    with pytest.raises(UsageError):
        Rulebook(None, activation_count=0)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_candidate_rule_is_not_returned_by_query_until_active(rb: Rulebook) -> None:
    sizes = []
    for client in ("alice", "bob", "carol"):
        await rb.record_failure("c", "e", rule=FLOAT32, client=client)
        sizes.append(len(await rb.query_rules("tl.float32(x)")))
    assert sizes == [0, 0, 1]


@pytest.mark.anyio
async def test_a_given_failure_class_is_used_and_otherwise_the_error_is_classified(rb: Rulebook) -> None:
    a = await rb.record_failure("c", "anything", failure_class=FailureClass.NAN_OR_INF)
    b = await rb.record_failure("c", "unsupported AST node type: Break")
    assert a.failure_class is FailureClass.NAN_OR_INF
    assert b.failure_class is FailureClass.COMPILE_UNSUPPORTED


@pytest.mark.anyio
async def test_without_a_rule_a_failure_is_recorded_and_counts_toward_no_rule(seeded: Rulebook) -> None:
    # AdaExplore counts a failure only through the rule distilled from it; the seed rule of the
    # failure's class (break in a loop) is not incremented by a failure that proposed none.
    text = (FIXTURES / "triton-3.9" / "break_in_loop.txt").read_text()
    before = {r.uid: r.count for r in await seeded.list_rules()}
    rec = await seeded.record_failure("code", text, arch="sm_90a")
    after = {r.uid: r.count for r in await seeded.list_rules()}
    assert rec.rule_action == "none" and rec.rule is None and rec.failure_class.value == "compile_unsupported"
    assert after == before


@pytest.mark.anyio
async def test_a_rule_seen_on_two_architecture_families_becomes_general(rb: Rulebook) -> None:
    recs = [
        await rb.record_failure("c", "e", rule=FLOAT32, arch=arch) for arch in ("sm_80", "sm_90a", "gfx942")
    ]
    assert [r.rule.scope.arch_family for r in recs] == ["nvidia", "nvidia", None]


@pytest.mark.parametrize(
    ("arch", "family"),
    [
        ("sm_80", "nvidia"),
        ("sm_89", "nvidia"),
        ("sm_90a", "nvidia"),
        ("sm_100", "nvidia"),
        ("gfx942", "amd"),
        ("nvidia", "nvidia"),
        ("amd", "amd"),
        (None, None),
        ("host", None),
    ],
)
def test_architectures_map_to_families(arch: str | None, family: str | None) -> None:
    assert arch_family(arch) == family


def test_an_unknown_architecture_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="sm_90a"):
        arch_family("pentium")


# ----------------------------------------------------------------------------- query


@pytest.mark.anyio
async def test_query_weights_scope_and_count(rb: Rulebook) -> None:
    nv = "You cannot use more than 228 KB of shared memory per block with wgmma tiles."
    amd = "You cannot use more than 64 KB of LDS shared memory per workgroup with MFMA tiles."
    for client in ("alice", "bob", "carol"):
        await rb.record_failure("c", "e", rule=nv, arch="sm_90a", client=client)
        await rb.record_failure("c", "e", rule=amd, arch="gfx942", client=client)
    on_amd = [r.text for r in await rb.query_rules("shared memory tiles", arch="gfx942")]
    on_nv = [r.text for r in await rb.query_rules("shared memory tiles", arch="sm_90a")]
    empty_amd = [r.text for r in await rb.query_rules("", arch="gfx942")]
    assert "LDS" in on_amd[0] and "wgmma" in on_nv[0]
    assert len(empty_amd) == 1 and "LDS" in empty_amd[0]  # the other family's rule is not "often broken here"


@pytest.mark.anyio
async def test_empty_context_returns_the_most_often_broken_rules(seeded: Rulebook) -> None:
    for _ in range(5):
        await seeded.record_failure("c", "e", rule=FLOAT32, arch="sm_90a")
    top = [r.text for r in await seeded.query_rules("   ", arch="sm_90a", limit=3)]
    # FLOAT32 is a near-duplicate of the seed rule about tl dtypes, whose count it raised to 6.
    assert "tl.float32" in top[0] and len(top) == 3


@pytest.mark.parametrize(
    "context",
    [
        'NEAR(" AND OR *',
        "tl.store(ptr + offs, x, mask=mask) -- ^ * : {}",
        '"',
        "col:value",
        "AND",
        "(((",
        "\x00\u2028",
    ],
)
@pytest.mark.anyio
async def test_any_text_is_a_safe_query(seeded: Rulebook, context: str) -> None:
    await seeded.query_rules(context)


# Retrieval quality: a context (an error text, code, a task) → the seed rule it should surface in
# the top 3. Error texts are the captured Triton 3.9 fixtures.
LABELLED: list[tuple[str, str]] = [
    ("fixture:dtype_called_as_function", "as a function to cast"),
    ("fixture:math_tanh_missing", "tl.math.tanh"),
    ("fixture:tl_pow_missing", "tl.pow"),
    ("fixture:tl_mean_missing", "tl.mean"),
    ("fixture:arange_not_power_of_two", "range whose length is not a power of two"),
    ("fixture:arange_runtime_bound", "runtime argument as the bounds of tl.arange"),
    ("fixture:break_in_loop", "use break inside a loop"),
    ("fixture:continue_in_loop", "use continue inside a loop"),
    ("fixture:return_in_loop", "return from inside a for or while loop"),
    ("fixture:dot_k_below_16", "smaller than 16"),
    ("fixture:dot_mixed_dtypes", "different dtypes"),
    ("fixture:tensor_item_assignment", "assign to an element"),
    ("fixture:non_constexpr_global", "module-level Python global"),
    ("fixture:broadcast_incompatible_blocks", "[:, None]"),
    ("fixture:exp_on_fp16", "tl.exp, tl.log or tl.sqrt"),
    ("fixture:load_other_without_mask", "other= to tl.load"),
    ("fixture:torch_call_in_kernel", "torch functions"),
    ("fixture:jit_function_called_from_host", "directly from host code"),
    ("fixture:block_pointer_removed", "make_block_ptr"),
    ("fixture:reshape_changes_numel", "tl.reshape"),
    ("y = tl.float32(x) * 2", "as a function to cast"),
    ("acc = tl.dot(a, b) fp32 inputs, max abs error 3e-3 on the GPU", "input_precision"),
    ("offs = pid * BLOCK + tl.arange(0, BLOCK) for a tensor with 3 billion elements overflow", "int32"),
    ("out = torch.relu(x @ w) in ModelNew.forward", "PyTorch ops"),
    ("m = tl.max(a, b) elementwise maximum of two blocks", "tl.max"),
    ("kernel[n_blocks](x, y) grid integer", "plain integer as the grid"),
]


def _context(label: str) -> str:
    if label.startswith("fixture:"):
        return (FIXTURES / "triton-3.9" / f"{label.split(':', 1)[1]}.txt").read_text(encoding="utf-8")
    return label


@pytest.mark.anyio
async def test_retrieval_finds_the_expected_seed_rule_in_the_top_3_for_labelled_contexts(
    seeded: Rulebook,
) -> None:
    assert len(LABELLED) >= 20
    misses = []
    for label, expected in LABELLED:
        top = [r.text for r in await seeded.query_rules(_context(label), arch="sm_90a", limit=3)]
        if not any(expected in t for t in top):
            misses.append(f"{label!r} -> {top}")
    assert misses == []


# ----------------------------------------------------------------------------- seeds


def test_the_seed_rulebook_has_at_least_40_rules_each_scoped_classed_reasoned_and_verified() -> None:
    lines = [json.loads(x) for x in SEEDS.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert len(lines) >= 40
    index = (FIXTURES / "triton-3.9" / "index.tsv").read_text(encoding="utf-8")
    for line in lines:
        assert validate_rule(line["text"]) == line["text"]
        assert line["reason"] and "\n" not in line["reason"]
        FailureClass(line["failure_class"])
        assert line["scope"]["dsl"] == "triton"
        for case in re.findall(r"capture:(\w+)", line["verified_by"]):
            assert f"\n{case}\t" in index, f"{case} is not a captured case"
    assert len({normalize_rule(x["text"]) for x in lines}) == len(lines)


@pytest.mark.anyio
async def test_import_seed_is_idempotent_and_marks_seeds_active(rb: Rulebook) -> None:
    a = await rb.import_seed()
    b = await rb.import_seed()
    rules = await rb.list_rules()
    assert a >= 40 and b == 0 and len(rules) == a
    assert all(r.seed and r.status == "active" for r in rules)


@pytest.mark.anyio
async def test_a_retired_seed_stays_retired_after_import_seed(rb: Rulebook) -> None:
    await rb.import_seed()
    uid = (await rb.list_rules())[0].uid
    await rb.set_status(uid, "retired")
    await rb.import_seed()
    assert [r.uid for r in await rb.list_rules(status="retired")] == [uid]


# ----------------------------------------------------------------------------- export / import


@pytest.mark.anyio
async def test_export_then_import_moves_rules_with_stable_ids_and_adds_counts(tmp_path: Path) -> None:
    f = tmp_path / "rules.jsonl"
    async with rulebook() as a:
        await a.record_failure("c", "e", rule="You cannot use break inside a loop in a Triton kernel.")
        for _ in range(3):
            await a.record_failure("c", "e", rule=FLOAT32, arch="sm_90a", client="alice")
        await a.record_failure("c", "e", rule="You cannot use a while loop with a block condition.")
        n = await a.export_jsonl(f)
        exported = await a.list_rules()
    async with rulebook() as b:
        await b.record_failure("c", "e", rule=FLOAT32, client="bob")  # count 1, candidate
        first = await b.import_jsonl(f)
        again = await b.import_jsonl(f)  # same origin: nothing grows
        imported = await b.list_rules()
    assert n == len(exported) and first.lines == n
    assert first.merged == 1 and first.created == n - 1
    assert again.created == 0 and again.merged == 0 and again.unchanged == n
    by_text = {r.text: r for r in imported}
    assert by_text[FLOAT32].count == 4 and by_text[FLOAT32].status == "active"
    assert {r.uid for r in exported} <= {r.uid for r in imported}
    cand = by_text["You cannot use a while loop with a block condition."]
    assert cand.status == "candidate" and cand.count == 1
    assert all(r.seed for r in imported if r.text in {e.text for e in exported if e.seed})


@pytest.mark.anyio
async def test_importing_a_grown_export_adds_only_the_growth(tmp_path: Path) -> None:
    f = tmp_path / "rules.jsonl"
    async with rulebook() as a, rulebook() as b:
        await a.record_failure("c", "e", rule=FLOAT32)
        await a.export_jsonl(f)
        await b.import_jsonl(f)
        await a.record_failure("c", "e", rule=FLOAT32)
        await a.export_jsonl(f)
        await b.import_jsonl(f)
        assert (await b.list_rules())[0].count == 2


@pytest.mark.anyio
async def test_import_keeps_provenance(rb: Rulebook, tmp_path: Path) -> None:
    f = tmp_path / "rules.jsonl"
    f.write_text(
        json.dumps(
            {"text": FLOAT32, "count": 7, "created_by": "team-a", "created_at": "2026-01-01T00:00:00+00:00"}
        )
        + "\n"
    )
    await rb.import_jsonl(f)
    rows = list(
        await rb.store.conn.execute_fetchall("SELECT created_by, created_at, count, status FROM rules")
    )
    assert tuple(rows[0]) == ("team-a", "2026-01-01T00:00:00+00:00", 7, "active")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json\n", r"rules.jsonl:1: not a rule line"),
        ('{"text": "' + FLOAT32 + '"}\n{"count": 3}\n', r"rules.jsonl:2"),
        ('{"text": "Do not do that."}\n', r"rules.jsonl:1: a rule must be"),
    ],
)
@pytest.mark.anyio
async def test_a_bad_import_file_changes_nothing_and_names_the_line(
    rb: Rulebook, tmp_path: Path, content: str, match: str
) -> None:
    f = tmp_path / "rules.jsonl"
    f.write_text(content)
    with pytest.raises(UsageError, match=match):
        await rb.import_jsonl(f)
    assert await rb.list_rules() == []


@pytest.mark.anyio
async def test_importing_a_missing_file_is_a_usage_error(rb: Rulebook, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        await rb.import_jsonl(tmp_path / "nope.jsonl")


@pytest.mark.anyio
async def test_an_import_of_a_fifo_or_a_directory_says_what_it_is_and_does_not_hang(
    rb: Rulebook, tmp_path: Path
) -> None:
    """Both importers read through base/files.py, as every file a user names is read."""
    fifo = tmp_path / "rules.fifo"
    os.mkfifo(fifo)
    for named, kind in ((fifo, "a FIFO"), (tmp_path, "a directory")):
        with pytest.raises(UsageError, match=f"is {kind}"):
            await rb.import_jsonl(named)
        with pytest.raises(UsageError, match=f"is {kind}"):
            await rb.import_adaexplore(named)
    assert await rb.list_rules() == []


@pytest.mark.anyio
async def test_a_rule_proposed_for_a_recorded_failure_attaches_to_it_and_counts_it_once(rb: Rulebook) -> None:
    # The search tree records every failed candidate; a driver then proposes a rule for that same
    # failure by its id. One failure row; the rule counts the failure once, however often it is sent.
    text = (FIXTURES / "triton-3.9" / "break_in_loop.txt").read_text()
    first = await rb.record_failure("kernel A", text, arch="sm_90a")
    with_rule = await rb.record_failure("kernel A", text, rule=FLOAT32, failure_id=first.failure_id)
    again = await rb.record_failure("kernel A", text, rule=FLOAT32, failure_id=first.failure_id)
    other = await rb.record_failure("kernel B", text, arch="sm_90a", rule=FLOAT32)
    n_failures = (await rb.store.conn.execute_fetchall("SELECT count(*) FROM failures"))[0][0]  # type: ignore[index]
    with pytest.raises(NotFoundError):
        await rb.record_failure("kernel A", text, rule=FLOAT32, failure_id=999)
    assert with_rule.failure_id == first.failure_id and with_rule.failure_class == first.failure_class
    assert with_rule.rule is not None and with_rule.rule.count == 1 and with_rule.rule_action == "created"
    assert again.rule is not None and again.rule.count == 1 and again.rule_action == "linked"
    assert other.rule is not None and other.rule.count == 2
    assert n_failures == 2
