"""The rulebook: one-line rules distilled from failed candidates, shared by every client.

AdaExplore's Adapt stage, kept in SQLite. Every failed candidate is recorded with its failure
class and the client that reported it. A proposed rule — one sentence starting "You cannot …", or
"no guidance" — is compared with the existing rules: by a model when the rulebook has a `judge`
(AdaExplore's prompt, a duplicate above confidence 0.5; `dedup.py`), else by text (FTS5
candidates, then `text.is_near_duplicate`). A duplicate gets its count incremented and the
failure linked as evidence; otherwise a new rule starts at count 1 as a candidate.

What counts, as in AdaExplore: a failure counts once, and only through the rule proposed for it
(a failure recorded without one counts toward no rule). A wrong result (a numerical mismatch, NaNs,
a wrong shape or dtype, mutated inputs, nondeterminism: `WRONG_RESULT_CLASSES`) is recorded but
counts toward no rule, whatever is proposed: AdaExplore distils rules from compile and runtime
errors only, and a mismatch names no construct to avoid. The rulebook is shared by every tree and
client, so these rules are the same whatever preset a tree runs.

Activation, and why it needs corroboration: an active rule is served to every client, quoted in
the prompts of every later step, so one client must not be able to make any text a rule by
repeating it. A rule becomes active when its count reaches `activation_count` (3, as in
AdaExplore) *and* its text is corroborated: proposed, in these very words (normalised; a
near-duplicate counts but vouches only for its own wording), with failures of at least two distinct
clients (over HTTP a client is its token's name; over stdio everything is "local"), or with at
least `activation_count` distinct failing candidates that this server's own evaluator judged (a
search-tree node, or a candidate a tool verified here and `witness()` noted; `failures.evaluated`).
The second way is for a server one client writes to (stdio, or HTTP with one token): on a team
server (several tokens, `evaluated_corroborates=False`) one token holder could pay for three failing
evaluations and so make any text a rule that every teammate is served, so there only a second
client's failures corroborate.
A rule attaches only to its proposer's own failures, and never counts one failure twice. Imports and seeds are operator actions and skip this (see `rule_import.py`).

`query_rules` ranks active rules for a context (a task, a kernel, an error text) by BM25 over
FTS5, weighted by count and by scope (dsl and architecture family).

Scopes: a rule learnt from a failure on one architecture family is scoped to it; when the same rule
is proposed from another family it becomes general (arch_family NULL). Retired rules are never
returned or reactivated; they still absorb near-duplicates so a retired mistake is not relearnt.

Who writes: the server's (or the CLI's) Rulebook, through `Store.transaction()`. Seeds
(`seed_rules.jsonl`) are imported by `import_seed()`, which the server calls at start-up.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from kernelcraft.base.errors import KernelcraftError, NotFoundError, UsageError
from kernelcraft.base.errortext import pointed_names
from kernelcraft.base.failures import NOT_THE_CANDIDATES, WRONG_RESULT_CLASSES, FailureClass, classify
from kernelcraft.base.targets import arch_family
from kernelcraft.knowledge import dedup, retrieval, rule_import
from kernelcraft.knowledge.dedup import RuleJudge
from kernelcraft.knowledge.text import (
    fts_query,
    is_near_duplicate,
    normalize_rule,
    rule_similarity,
    rule_uid,
    same_signature,
    validate_rule,
)
from kernelcraft.schema.rules import (
    FailureRecorded,
    ImportResult,
    RuleAction,
    RuleOut,
    RuleStatus,
)
from kernelcraft.store import Store, code_hash, utcnow

__all__ = ["RuleJudge", "Rulebook", "rule_uid", "validate_rule"]

logger = logging.getLogger(__name__)
MERGED_NOTE = (
    "counted toward a pending rule of near wording (shown as you wrote it: a pending rule's wording is "
    "its proposer's until the rule is active)"
)
WRONG_RESULT_NOTE = (
    "recorded; a wrong result counts toward no rule (rules are learnt from compile and runtime errors, "
    "which name a construct to avoid)"
)
HARNESS_LIMIT_NOTE = (
    "recorded; a harness limit (a cap kernelcraft set was reached) says nothing about the candidate "
    "and counts toward no rule"
)

# Distinct reporting clients that corroborate a rule learnt from clients' word alone.
MIN_CLIENTS = 2
# Failing verdicts of this server's evaluator remembered until a record_failure claims them.
WITNESS_MEMORY = 1024


_RULE_COLUMNS = retrieval.RULE_COLUMNS


async def _rows(conn: aiosqlite.Connection, sql: str, params: Any = ()) -> list[Any]:
    return list(await conn.execute_fetchall(sql, params))


@dataclass(frozen=True)
class Judged:
    """What the judge said of a proposed rule: whether it answered, and the rule it duplicates."""

    answered: bool
    rule_id: int | None


class Rulebook:
    """The rulebook over one open Store. Cheap to construct; besides the store it holds only the
    failing verdicts this process's evaluator gave that no failure has claimed yet (`witness`).
    `judge`: the model that decides whether a proposed rule duplicates an existing one (None: text
    similarity decides)."""

    def __init__(
        self,
        store: Store,
        activation_count: int = 3,
        *,
        judge: RuleJudge | None = None,
        evaluated_corroborates: bool = True,
    ) -> None:
        if activation_count < 1:
            raise UsageError(f"activation_count must be at least 1, got {activation_count}")
        self.store = store
        self.activation_count = activation_count
        self.judge = judge
        self.evaluated_corroborates = evaluated_corroborates
        """Whether failing candidates this server evaluated corroborate a rule's text (one writer),
        or only a second client does (a team server; see the module docstring)."""
        self._witnessed: OrderedDict[str, FailureClass] = OrderedDict()

    # ------------------------------------------------------------------ writing

    def witness(self, candidate_code: str, failure_class: FailureClass) -> None:
        """Note that this server's evaluator found `candidate_code` failing with `failure_class`.

        The next `record_failure` of exactly this code (from any client) is then recorded as
        evaluated, with this class: the server's own verdict, not the client's word. Each verdict
        backs one failure; the oldest of more than WITNESS_MEMORY unclaimed verdicts are forgotten.
        """
        digest = code_hash(candidate_code)
        self._witnessed[digest] = failure_class
        self._witnessed.move_to_end(digest)
        while len(self._witnessed) > WITNESS_MEMORY:
            self._witnessed.popitem(last=False)

    async def record_failure(
        self,
        candidate_code: str,
        error: str,
        *,
        reference_code: str | None = None,
        arch: str | None = None,
        rule: str | None = None,
        failure_class: FailureClass | None = None,
        task_hash: str | None = None,
        client: str = "local",
        stage: str | None = None,
        op_category: str | None = None,
        failure_id: int | None = None,
        evaluated: bool = False,
    ) -> FailureRecorded:
        """Store a failed candidate with its class and learn from it (see the module docstring).

        `failure_class` given is used as is; otherwise `classify(error, stage)` decides. `rule` is
        a proposed "You cannot …" sentence or "no guidance"; anything else raises UsageError before
        anything is written. `evaluated` says this server's evaluator gave the verdict (the search
        service sets it); a candidate `witness()` noted is evaluated too, with the witnessed class.

        `failure_id` names a failure `client` already recorded (the search tree gives it on the
        node): the rule attaches to it, and a rule never counts one failure twice. Without a rule,
        or for a wrong result, the failure is recorded and counts toward no rule.
        """
        proposed = validate_rule(rule) if rule is not None else None
        # The model is asked before the write transaction, which it must not hold for seconds.
        judged = None
        if (
            proposed is not None
            and self.judge is not None
            and failure_class not in WRONG_RESULT_CLASSES | NOT_THE_CANDIDATES
        ):
            judged = await self._judge_duplicate(proposed)
        async with self.store.transaction() as conn:
            if failure_id is not None:
                cls = await self._own_failure(conn, failure_id, client)
            else:
                witnessed = None if evaluated else self._witnessed.pop(code_hash(candidate_code), None)
                if witnessed is not None:
                    cls = witnessed
                else:
                    cls = failure_class if failure_class is not None else classify(error, stage)
                failure_id = await self._insert_failure(
                    conn,
                    cls,
                    candidate_code,
                    error,
                    reference_code=reference_code,
                    task_hash=task_hash,
                    arch=arch,
                    client=client,
                    evaluated=evaluated or witnessed is not None,
                )
            if proposed is None or cls in WRONG_RESULT_CLASSES | NOT_THE_CANDIDATES:
                note = None
                if proposed is not None:
                    note = HARNESS_LIMIT_NOTE if cls in NOT_THE_CANDIDATES else WRONG_RESULT_NOTE
                return FailureRecorded(
                    failure_id=failure_id, failure_class=cls, rule_action="none", activated=False, note=note
                )
            rule_id, action = await self._add_or_increment(
                conn,
                proposed,
                family=arch_family(arch),
                cls=cls,
                client=client,
                failure_id=failure_id,
                op_category=op_category,
                judged=judged,
                pointed=frozenset(n.lower() for n in pointed_names(error)),
            )
            # The failure corroborates the rule's *text* only when its reporter proposed that very
            # text (normalised): a near-duplicate counts (AdaExplore's count) but does not vouch for
            # wording it never wrote. Else one client could front-run a common rule with an
            # injected tail and let other clients' honest proposals activate it.
            stored = await _rows(conn, "SELECT norm_text FROM rules WHERE id = ?", (rule_id,))
            same = int(bool(stored) and stored[0]["norm_text"] == normalize_rule(proposed))
            await conn.execute(
                "INSERT INTO rule_evidence (rule_id, failure_id, proposed) VALUES (?, ?, ?)"
                " ON CONFLICT(rule_id, failure_id) DO UPDATE SET proposed = max(proposed, excluded.proposed)",
                (rule_id, failure_id, same),
            )
            activated = await self._activate_if_corroborated(conn, rule_id)
            out = await self._get(conn, rule_id)
        note = None
        if out.status != "active" and not same:
            # A pending rule's wording is its proposer's until the rule is vouched for (active):
            # a client whose proposal merged into another's sees its own words, never theirs.
            out = out.model_copy(update={"text": proposed, "reason": None})
            note = MERGED_NOTE
        return FailureRecorded(
            failure_id=failure_id,
            failure_class=cls,
            rule=out,
            rule_action=action,
            activated=activated,
            note=note,
        )

    async def _own_failure(self, conn: aiosqlite.Connection, failure_id: int, client: str) -> FailureClass:
        """The class of failure `failure_id`, which `client` must have reported: a rule attaches
        only to its proposer's own failures, so no client borrows another's evidence."""
        rows = await _rows(conn, "SELECT class, client FROM failures WHERE id = ?", (failure_id,))
        if not rows:
            raise NotFoundError(
                f"no failure {failure_id} in the rulebook; omit failure_id to record the failure itself"
            )
        if rows[0]["client"] != client:
            raise UsageError(
                f"failure {failure_id} was reported by another client; a rule attaches only to a failure "
                "you reported: omit failure_id to record your own failure with the rule"
            )
        return FailureClass(rows[0]["class"])

    async def _insert_failure(
        self,
        conn: aiosqlite.Connection,
        cls: FailureClass,
        candidate_code: str,
        error: str,
        *,
        reference_code: str | None,
        task_hash: str | None,
        arch: str | None,
        client: str,
        evaluated: bool,
    ) -> int:
        code_digest = await self.store.put_code(candidate_code)
        ref_digest = await self.store.put_code(reference_code) if reference_code is not None else None
        cur = await conn.execute(
            "INSERT INTO failures (class, error_text, code_hash, reference_hash, task_hash, arch, client,"
            " evaluated, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cls.value, error, code_digest, ref_digest, task_hash, arch, client, int(evaluated), utcnow()),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    async def _add_or_increment(
        self,
        conn: aiosqlite.Connection,
        text: str,
        *,
        family: str | None,
        cls: FailureClass,
        client: str,
        failure_id: int | None,
        op_category: str | None,
        judged: Judged | None,
        pointed: frozenset[str] = frozenset(),
    ) -> tuple[int, RuleAction]:
        norm = normalize_rule(text)
        match = await self._find_duplicate(conn, norm, judged, (cls.value, pointed))
        now = utcnow()
        if match is not None:
            rule_id, rule_family = match
            if failure_id is not None and await _rows(
                conn,
                "SELECT 1 FROM rule_evidence WHERE rule_id = ? AND failure_id = ?",
                (rule_id, failure_id),
            ):
                return rule_id, "linked"  # this failure already counts for this rule
            # The same rule from another family is a general one.
            new_family = rule_family if rule_family == family else None
            await conn.execute(
                "UPDATE rules SET count = count + 1, arch_family = ?, updated_at = ? WHERE id = ?",
                (new_family, now, rule_id),
            )
            return rule_id, "incremented"
        cur = await conn.execute(
            "INSERT INTO rules (uid, text, norm_text, count, status, dsl, arch_family, op_category, failure_class,"
            " seed, created_by, created_at, updated_at, source_failure_id)"
            " VALUES (?, ?, ?, 1, 'candidate', 'triton', ?, ?, ?, 0, ?, ?, ?, ?)",
            (rule_uid(norm), text, norm, family, op_category, cls.value, client, now, now, failure_id),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid, "created"

    async def _find_duplicate(
        self,
        conn: aiosqlite.Connection,
        norm: str,
        judged: Judged | None,
        signature: tuple[str, frozenset[str]] = ("", frozenset()),
    ) -> tuple[int, str | None] | None:
        """The rule `norm` duplicates: the same normalised text; else the judge's pick when the
        judge answered; else the most similar near-duplicate by text; else one of the same failure
        signature (`text.same_signature`: the failure's class, and the names its error points at
        among the code both rules name)."""
        rows = await _rows(conn, "SELECT id, arch_family FROM rules WHERE norm_text = ?", (norm,))
        if rows:
            return rows[0][0], rows[0][1]
        if judged is not None and judged.answered:
            if judged.rule_id is None:
                return None
            rows = await _rows(conn, "SELECT id, arch_family FROM rules WHERE id = ?", (judged.rule_id,))
            return (rows[0][0], rows[0][1]) if rows else None
        best: tuple[float, int, str | None] | None = None
        similar = await self._similar(conn, norm, 20)
        for rid, fam, other, _cls in similar:
            if is_near_duplicate(norm, other):
                sim = rule_similarity(norm, other)
                if best is None or sim > best[0]:
                    best = (sim, rid, fam)
        if best is None:
            cls, pointed = signature
            same = [
                (rid, fam) for rid, fam, other, c in similar if same_signature(norm, other, pointed, c == cls)
            ]
            return same[0] if same else None
        return (best[1], best[2])

    async def _similar(self, conn: aiosqlite.Connection, norm: str, limit: int) -> list[Any]:
        """(id, arch_family, norm_text, failure_class) of the rules FTS5 ranks closest to `norm`, best
        first."""
        q = fts_query(norm)
        if q is None:
            return []
        return await _rows(
            conn,
            "SELECT r.id, r.arch_family, r.norm_text, r.failure_class FROM"
            " (SELECT rowid, rank FROM rules_fts WHERE rules_fts MATCH ? ORDER BY rank LIMIT ?) f"
            " JOIN rules r ON r.id = f.rowid ORDER BY f.rank",
            (q, limit),
        )

    async def _judge_duplicate(self, text: str) -> Judged:
        """The rule the judge says `text` duplicates (confidence > 0.5), if any. Every rule is shown,
        as AdaExplore shows its whole memory; past MAX_JUDGED, the closest by text. A judge that
        fails has not answered: the rule is then compared by text."""
        assert self.judge is not None
        conn = self.store.conn
        total = (await _rows(conn, "SELECT count(*) FROM rules"))[0][0]
        if total <= dedup.MAX_JUDGED:
            rows = await _rows(conn, "SELECT id, text FROM rules ORDER BY id")
        else:
            ids = [r[0] for r in await self._similar(conn, normalize_rule(text), dedup.MAX_JUDGED)]
            marks = ",".join("?" * len(ids))
            rows = await _rows(conn, f"SELECT id, text FROM rules WHERE id IN ({marks}) ORDER BY id", ids)
        if not rows:
            return Judged(answered=True, rule_id=None)
        try:
            answer = await self.judge(dedup.judge_prompt(text, [r["text"] for r in rows]))
        except KernelcraftError as e:
            logger.warning("the rule judge failed (%s); the proposed rule is compared by text instead", e)
            return Judged(answered=False, rule_id=None)
        judgement = dedup.read_judgement(answer, len(rows))
        if judgement is None or not dedup.is_duplicate(judgement):
            return Judged(answered=True, rule_id=None)
        return Judged(answered=True, rule_id=int(rows[judgement[0]]["id"]))

    async def _activate_if_corroborated(self, conn: aiosqlite.Connection, rule_id: int) -> bool:
        """Activate a candidate rule whose count reached the activation count and whose text is
        corroborated: proposed with failures of MIN_CLIENTS distinct clients, or (one writer) with
        as many distinct failing candidates as the activation count that this server evaluated."""
        rows = await _rows(
            conn,
            "SELECT count(DISTINCT f.client) AS clients,"
            " count(DISTINCT CASE WHEN f.evaluated = 1 THEN f.code_hash END) AS evaluated"
            " FROM rule_evidence e JOIN failures f ON f.id = e.failure_id WHERE e.rule_id = ? AND e.proposed = 1",
            (rule_id,),
        )
        clients, evaluated = (rows[0]["clients"], rows[0]["evaluated"]) if rows else (0, 0)
        by_evaluation = self.evaluated_corroborates and evaluated >= self.activation_count
        if clients < MIN_CLIENTS and not by_evaluation:
            return False
        cur = await conn.execute(
            "UPDATE rules SET status = 'active' WHERE id = ? AND status = 'candidate' AND count >= ?",
            (rule_id, self.activation_count),
        )
        return cur.rowcount > 0

    async def _get(self, conn: aiosqlite.Connection, rule_id: int) -> RuleOut:
        rows = await _rows(conn, f"SELECT {_RULE_COLUMNS} FROM rules r WHERE r.id = ?", (rule_id,))
        return retrieval.rule_out(rows[0])

    async def set_status(self, uid: str, status: RuleStatus) -> RuleOut:
        """Retire a rule (or restore one). NotFoundError-like UsageError when the uid is unknown."""
        async with self.store.transaction() as conn:
            cur = await conn.execute(
                "UPDATE rules SET status = ?, updated_at = ? WHERE uid = ?", (status, utcnow(), uid)
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"no rule with uid {uid!r}; list them with `kernelcraft rules list`")
            rows = await _rows(conn, f"SELECT {_RULE_COLUMNS} FROM rules r WHERE r.uid = ?", (uid,))
        return retrieval.rule_out(rows[0])

    # ------------------------------------------------------------------ reading

    async def query_rules(
        self, context: str, *, arch: str | None = None, dsl: str = "triton", limit: int = 10
    ) -> list[RuleOut]:
        """Active rules ranked for `context` (any text: a task, a kernel, an error message); see
        `retrieval.ranked`."""
        return await retrieval.ranked(self.store.conn, context, arch=arch, dsl=dsl, limit=limit)

    async def find_rules(
        self, context: str, *, arch: str | None = None, dsl: str = "triton", limit: int = 10
    ) -> tuple[list[RuleOut], str | None]:
        """`query_rules`, and what was searched when worth saying (`retrieval.found`)."""
        return await retrieval.found(self.store.conn, context, arch=arch, dsl=dsl, limit=limit)

    async def list_rules(self, status: RuleStatus | None = None, arch: str | None = None) -> list[RuleOut]:
        """Every rule (of `status`, scoped to `arch`'s family or general), most counted first."""
        return await retrieval.listed(self.store.conn, status, arch)

    async def evidence(self, uid: str, limit: int = 20) -> list[int]:
        """Ids of the failures linked to a rule, newest first."""
        rows = await _rows(
            self.store.conn,
            "SELECT e.failure_id FROM rule_evidence e JOIN rules r ON r.id = e.rule_id WHERE r.uid = ?"
            " ORDER BY e.failure_id DESC LIMIT ?",
            (uid, limit),
        )
        return [int(r[0]) for r in rows]

    # ------------------------------------------------------------------ sharing (rule_import.py)

    async def database_id(self) -> str:
        """This database's own id, written into exported lines as their origin."""
        return await rule_import.database_id(self.store)

    async def export_jsonl(self, path: str | Path) -> int:
        """Write every rule to a JSON Lines file; returns the count (see `rule_import`)."""
        return await rule_import.export_jsonl(self.store, path)

    async def import_jsonl(self, path: str | Path, *, client: str = "import") -> ImportResult:
        """Merge rules from a JSON Lines file by normalised text (see `rule_import`)."""
        return await rule_import.import_jsonl(
            self.store, path, activation_count=self.activation_count, client=client
        )

    async def export_adaexplore(self, path: str | Path) -> int:
        """Write AdaExplore's memory file (`rule text||count` lines); returns the count."""
        return await rule_import.export_adaexplore(self.store, path)

    async def import_adaexplore(self, path: str | Path, *, client: str = "import") -> ImportResult:
        """Merge an AdaExplore memory file (`rule text||count` lines; see `rule_import`)."""
        return await rule_import.import_adaexplore(
            self.store, path, activation_count=self.activation_count, client=client
        )

    async def import_seed(self) -> int:
        """Import the shipped seed rules not yet present; returns how many were added."""
        return await rule_import.import_seed(self.store)
