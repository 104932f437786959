"""Benchmark the rulebook: query_rules p50 at 10,000 and 100,000 rules, record_failure p50.

    python bench/bench_knowledge.py [--sizes 10000 100000] [--queries 200]

Synthetic rules are "You cannot …" sentences built from the seed rules' vocabulary plus random
identifiers, so the FTS5 index has realistic term overlap; 90% are active. Contexts are the
captured Triton error texts (tests/fixtures/errors/triton-3.9/) and kernel snippets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

from kernelcraft.knowledge.rulebook import Rulebook, rule_uid
from kernelcraft.knowledge.text import normalize_rule
from kernelcraft.store import Store, utcnow

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "kernelcraft" / "knowledge" / "seed_rules.jsonl"
FIXTURES = ROOT / "tests" / "fixtures" / "errors" / "triton-3.9"
SNIPPETS = [
    "y = tl.float32(x)",
    "offs = pid * BLOCK + tl.arange(0, BLOCK)\nx = tl.load(x_ptr + offs, mask=offs < n)",
    "acc += tl.dot(a, b)",
    "for k in range(0, K, BLOCK_K):\n    if k > limit:\n        break",
    "",
    "def forward(self, x): return torch.relu(x @ self.w)",
]


def synthetic_rules(n: int, rng: random.Random) -> list[str]:
    words = set()
    for line in SEEDS.read_text().splitlines():
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", json.loads(line)["text"]))
    vocab = sorted(words) + [f"tl.op{i}" for i in range(2000)] + [f"param_{i}" for i in range(2000)]
    out = set()
    while len(out) < n:
        k = rng.randint(5, 14)
        out.add("You cannot " + " ".join(rng.choice(vocab) for _ in range(k)) + f" case{len(out)}.")
    return sorted(out)


async def build(path: Path, n: int, rng: random.Random) -> None:
    store = await Store.open(path)
    now = utcnow()
    rows = []
    for text in synthetic_rules(n, rng):
        norm = normalize_rule(text)
        status = "active" if rng.random() < 0.9 else "candidate"
        fam = rng.choice([None, None, "nvidia", "amd"])
        rows.append((rule_uid(norm), text, norm, rng.randint(1, 50), status, fam, now, now))
    async with store.transaction() as conn:
        await conn.executemany(
            "INSERT INTO rules (uid, text, norm_text, count, status, arch_family, created_by, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'bench', ?, ?)",
            rows,
        )
    await Rulebook(store).import_seed()
    await store.conn.execute("PRAGMA optimize")
    await store.aclose()


def p50(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


async def bench(path: Path, queries: int, rng: random.Random) -> dict[str, float]:
    store = await Store.open(path)
    rb = Rulebook(store)
    contexts = [p.read_text() for p in sorted(FIXTURES.glob("*.txt"))] + SNIPPETS
    for c in contexts[:10]:
        await rb.query_rules(c, arch="sm_90a")  # warm the page cache
    times = []
    for i in range(queries):
        c = contexts[i % len(contexts)]
        t = time.perf_counter()
        await rb.query_rules(c, arch=rng.choice(["sm_90a", "gfx942", None]))
        times.append(time.perf_counter() - t)
    rec_rule, rec_plain = [], []
    for i in range(queries):
        c = contexts[i % len(contexts)]
        t = time.perf_counter()
        await rb.record_failure(
            f"# candidate {i}\n{c}", c, arch="sm_90a", rule=f"You cannot repeat bench mistake m{i}."
        )
        rec_rule.append(time.perf_counter() - t)
        t = time.perf_counter()
        await rb.record_failure(f"# candidate b{i}\n{c}", c, arch="sm_90a")
        rec_plain.append(time.perf_counter() - t)
    await store.aclose()
    return {
        "query_p50_ms": p50(times),
        "query_p90_ms": statistics.quantiles(times, n=10)[-1] * 1000,
        "record_with_rule_p50_ms": p50(rec_rule),
        "record_without_rule_p50_ms": p50(rec_plain),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as d:
        for n in args.sizes:
            path = Path(d) / f"rules-{n}.db"
            t = time.perf_counter()
            await build(path, n, rng)
            built = time.perf_counter() - t
            res = await bench(path, args.queries, rng)
            print(
                f"{n:>7} rules (built in {built:.1f} s): "
                + ", ".join(f"{k} {v:.2f}" for k, v in res.items()),
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
