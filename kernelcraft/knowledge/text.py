"""Text helpers shared by the rulebook and the manual search: FTS5 query building, a rule's form
(`validate_rule`, `rule_uid`), rule normalisation and the near-duplicate test.

FTS5 has its own query language (quotes, `AND`, `NEAR`, `*`, column filters), so a raw context
(kernel source, an error message with parentheses and colons) must never reach `MATCH`. Every
query goes through `fts_query`, which keeps only word tokens, quotes each, and OR-joins them.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from difflib import SequenceMatcher

from kernelcraft.base.errors import UsageError
from kernelcraft.schema.rules import MAX_RULE_CHARS, NO_GUIDANCE

# Words that appear in nearly every rule ("You cannot … in a Triton kernel") or any English text.
# Dropping them keeps the match set small (speed) and BM25 focused on what distinguishes rules.
STOPWORDS = frozenset(
    """
    a an the and or but if then else of to in into inside within on at by for from with without as is are
    was were be been being it its this that these those there here you your we our they their can cannot
    cant not no do does did done use used using when where which who what how than so such may might must
    should would will shall triton kernel kernels jit def return self none true false
    compiler compilationerror interpretererror errors error exception traceback language
    """.split()
)

# Matches FTS5's unicode61 tokenizer: runs of letters and digits; '_' and '.' separate.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

MAX_QUERY_TERMS = 24


def fts_terms(text: str, *, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """Distinct lower-case word tokens of `text` worth searching for, in first-seen order.

    Stopwords, one-character tokens and one-digit numbers are dropped (16 in "K >= 16" matters); at most `max_terms` are kept,
    so a whole kernel as context costs about as much as a sentence.
    """
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text.lower()):
        tok = match.group(0)
        if len(tok) < 2 or tok in STOPWORDS or tok in seen:
            continue
        seen[tok] = None
        if len(seen) >= max_terms:
            break
    return list(seen)


def fts_query(text: str, *, max_terms: int = MAX_QUERY_TERMS) -> str | None:
    """A safe FTS5 MATCH expression (quoted tokens, OR-joined), or None when nothing is left."""
    terms = fts_terms(text, max_terms=max_terms)
    if not terms:
        return None
    return " OR ".join(f'"{t}"' for t in terms)


def fts_phrases(names: Iterable[str]) -> str | None:
    """A safe FTS5 MATCH expression for any of `names` as a phrase, or None when none is left.

    A dotted name is its words in order ('tl.tanh' is "tl tanh": the rule saying tl.tanh matches,
    the one saying tl.math.tanh does not). A one-word name that is a stopword or one character (a
    variable `x`) says nothing and is left out.
    """
    phrases: dict[str, None] = {}
    for name in names:
        words = _WORD.findall(name.lower())
        if not words or (len(words) == 1 and (len(words[0]) < 2 or words[0] in STOPWORDS)):
            continue
        phrases['"' + " ".join(words) + '"'] = None
    return " OR ".join(phrases) or None


def normalize_rule(text: str) -> str:
    """The form rules are compared and stored unique by: lower case, no quotes or backticks,
    `f()` written `f`, single spaces, no trailing punctuation."""
    t = text.strip().lower()
    t = re.sub(r"[`'\"“”‘’]", "", t)
    t = re.sub(r"\(\s*\)", "", t)
    t = re.sub(r"\s+", " ", t)
    return t.rstrip(" .!;:")


def rule_uid(norm_text: str) -> str:
    """Stable across databases: the same normalised text gets the same uid everywhere."""
    return "r-" + hashlib.sha256(norm_text.encode("utf-8")).hexdigest()[:16]


def validate_rule(rule: str) -> str | None:
    """The rule as stored (stripped, one line), or None for "no guidance". UsageError otherwise.

    Rule text comes from clients and is later shown to models, so it is held to AdaExplore's form:
    one plain-text sentence starting "You cannot", at most MAX_RULE_CHARS characters, no control or
    invisible formatting characters.
    """
    text = " ".join(rule.split())
    if normalize_rule(text) == NO_GUIDANCE:
        return None
    if not text.startswith("You cannot "):
        raise UsageError(
            f"a rule must be one sentence starting 'You cannot …' (AdaExplore's form), or 'no guidance'; "
            f"got {text[:80]!r}. Rewrite it as the one thing the kernel must not do"
        )
    if len(text) > MAX_RULE_CHARS:
        raise UsageError(f"a rule is one sentence of at most {MAX_RULE_CHARS} characters; got {len(text)}")
    # A sentence end followed by a capital letter inside the text means two sentences.
    if re.search(r"[.!?;]\s+[A-Z]", text) or "\n" in rule.strip():
        raise UsageError(
            f"a rule must be exactly one sentence (no fixes, no explanation); got {text[:80]!r}. "
            "Keep only the 'You cannot …' sentence"
        )
    hidden = next((c for c in text if unicodedata.category(c).startswith("C")), None)
    if hidden is not None:
        raise UsageError(
            f"a rule is plain text; it holds the control or formatting character U+{ord(hidden):04X}. "
            "Remove it and send the sentence again"
        )
    return text


_RULE_TOKEN = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")


def _content_tokens(norm: str) -> list[str]:
    out = []
    for tok in _RULE_TOKEN.findall(norm):
        if tok in STOPWORDS:
            continue
        # A light stemmer: "functions" ~ "function", "indexes" ~ "index".
        if len(tok) > 4 and "." not in tok and "_" not in tok:
            tok = re.sub(r"(es|s)$", "", tok)
        out.append(tok)
    return out


def _identifiers(tokens: list[str]) -> frozenset[str]:
    """Tokens that name code: dotted (`tl.float32`), snake_case, or containing a digit."""
    return frozenset(t for t in tokens if "." in t or "_" in t or any(c.isdigit() for c in t))


# Near-duplicate thresholds on SequenceMatcher's ratio over content tokens (stopwords removed).
# Two rules naming the same code identifiers (`tl.float32`, `tl.math.tanh`) are duplicates at a
# lower ratio than two rules in plain words, and rules naming different identifiers never are:
# "You cannot call tl.float32 as a function" and "… tl.float16 …" are different mistakes.
SIMILARITY_WITH_IDENTIFIERS = 0.5
SIMILARITY_PLAIN = 0.8


def rule_similarity(a_norm: str, b_norm: str) -> float:
    """0..1: how alike two normalised rules are; 0 when they name different code identifiers."""
    ta, tb = _content_tokens(a_norm), _content_tokens(b_norm)
    if not ta or not tb:
        return 1.0 if a_norm == b_norm else 0.0
    if _identifiers(ta) != _identifiers(tb):
        return 0.0
    return SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def same_signature(a_norm: str, b_norm: str, pointed: frozenset[str], same_class: bool) -> bool:
    """Whether two rules are one rule by the failure behind them, where their words differ too much
    for `is_near_duplicate`: the failures are of one class, the code one rule names is all named by
    the other too ("You cannot call tl.tanh in a kernel" and the seed's "You cannot call tl.tanh,
    tl.relu or tl.gelu ..."), and the new failure's error points at a name both say (`pointed`:
    `errortext.pointed_names`, lower case). A rule naming no code never merges this way."""
    ids_a, ids_b = _identifiers(_content_tokens(a_norm)), _identifiers(_content_tokens(b_norm))
    if not same_class or not ids_a or not ids_b or not (ids_a <= ids_b or ids_b <= ids_a):
        return False
    return bool(ids_a & ids_b & pointed)


def is_near_duplicate(a_norm: str, b_norm: str) -> bool:
    """Whether two normalised rules say the same thing (see the thresholds above)."""
    if a_norm == b_norm:
        return True
    ratio = rule_similarity(a_norm, b_norm)
    has_ids = bool(_identifiers(_content_tokens(a_norm)))
    return ratio >= (SIMILARITY_WITH_IDENTIFIERS if has_ids else SIMILARITY_PLAIN)
