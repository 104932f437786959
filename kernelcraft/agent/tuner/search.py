"""The offline tuner: launch-configuration search over a kernel's source, with no LLM.

1. `find_params(source)` (`params.py`, one named function per decision; `source.py` reads
   the source, `axes.py` adds precisions and persistent grids) reads the module with
   `ast` and finds the integer literals that set a launch configuration: `num_warps=`/`num_stages=`
   and UPPERCASE (or `tl.constexpr`) meta-parameters at launch sites `kernel[grid](..., BLOCK_SIZE=128, num_warps=4)`, constexpr arguments passed by
   position, `tl.constexpr` defaults of `@triton.jit` functions that no launch overrides, integer
   constants (module-level or local to the launching function) that a launch passes by name, and,
   in a kernel under `@triton.autotune(configs=...)`, each `triton.Config({"BLOCK_M": 128, ...},
   num_warps=8, num_stages=3)`'s constexpr entries and options (key `kernel.configs[i].BLOCK_M`), from
   a list written in the decorator or assigned once to a module-level name (a list built by a
   comprehension or a call is left alone). Only powers of two are tuned: a non-power-of-two
   constexpr is a shape, not a tile.
2. `Space` gives each parameter its candidate values: num_warps in {1, 2, 4, 8, 16}, num_stages in
   1..5, meta-parameters the powers of two within a factor 8 of the current value (2 .. 65536), the
   product of a launch's meta-parameters (of each autotune config on its own) at most 2**20 elements
   (Triton's tensor limit), or the kernel's own product where that is larger; in a kernel that calls
   `tl.dot`, none below 16 (the least dot dimension Triton compiles) unless the kernel already uses
   a smaller one.
3. `Observation`s (a configuration, its time or its failure, the compile results' shared-memory use)
   bound the space: a failed configuration prunes the values at and beyond it in the direction it
   moved away from a working one (out of shared memory at BLOCK=256 → nothing ≥ 256), and a config
   whose estimated shared memory exceeds the target's is never proposed.
4. `next_config` is a deterministic pattern search (coordinate descent in log2 space): one step up or
   down in one parameter from the start (the parent kernel) and then from the best configuration
   seen, then pairs of parameters moved together (tiles and warps interact), then seeded random
   points of the space. Parameters are tried by their axis's rank for the kernel's family
   (`family.py`: a GEMM's tiles first, a reduction's block), the seed shuffling those of one rank. `tune()` runs it against an objective for a budget of evaluations.
5. `apply_config` rewrites exactly the literals' text spans; every other byte stays as it was.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kernelcraft.agent.tuner.axes import PROGRAMS_PER_SM
from kernelcraft.agent.tuner.params import find_params
from kernelcraft.agent.tuner.source import NUM_STAGES, NUM_WARPS, PRECISIONS, SPLIT_PRECISIONS, Param
from kernelcraft.base.targets import REGISTRY

Config = dict[str, int]

META_FACTOR = 8
META_MAX = 1 << 16
MAX_TENSOR_NUMEL = 1 << 20

# Shared memory (LDS) per block a kernel may use, in bytes, per compile target (the registry's).
SHARED_LIMIT_BYTES: dict[str, int] = {t.name: t.max_shared_per_block for t in REGISTRY.values()}


def current_config(params: list[Param]) -> Config:
    return {p.key: p.value for p in params}


def apply_config(source: str, params: list[Param], config: Config) -> str:
    """Rewrite the literals named in `config`; every other character is kept."""
    out, pos = [], 0
    for p in sorted(params, key=lambda p: p.start):
        if p.key in config and config[p.key] != p.value:
            out.append(source[pos : p.start])
            out.append(p.text(config[p.key]))
            pos = p.end
    out.append(source[pos:])
    return "".join(out)


def family_of(source: str, params: list[Param]) -> str:
    """The source with its tunable literals masked, hashed: kernels that differ only in their
    configuration share a family, and so share what the tuner has learnt."""
    masked = apply_config(source, params, {p.key: -1 for p in params})
    return hashlib.sha256(masked.encode()).hexdigest()[:16]


def config_key(config: Config) -> str:
    return json.dumps(config, sort_keys=True)


@dataclass
class Observation:
    """What one evaluated configuration gave. `time_us` None: failed, or no GPU to time it."""

    config: Config
    ok: bool
    time_us: float | None = None
    failure_class: str | None = None
    shared_fraction: float | None = None  # max over targets of shared bytes / the target's limit


@dataclass
class Space:
    params: list[Param]
    values: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, params: list[Param]) -> Space:
        values: dict[str, list[int]] = {}
        for p in params:
            if p.kind == "num_warps":
                values[p.key] = list(NUM_WARPS)
            elif p.kind == "num_stages":
                values[p.key] = list(NUM_STAGES)
            elif p.kind == "precision":
                values[p.key] = list(range(len(PRECISIONS)))
            elif p.kind == "split":
                values[p.key] = list(range(len(SPLIT_PRECISIONS)))
            elif p.kind == "persistent":
                values[p.key] = list(PROGRAMS_PER_SM)
            else:
                lo = max(p.floor, p.value // META_FACTOR)
                hi = min(META_MAX, p.value * META_FACTOR)
                values[p.key] = [1 << e for e in range(lo.bit_length() - 1, hi.bit_length())]
        return cls(params, values)

    def size(self) -> int:
        return math.prod(len(v) for v in self.values.values()) if self.values else 0

    def grid(self) -> list[Config]:
        keys = list(self.values)
        configs: list[Config] = [{}]
        for k in keys:
            configs = [{**c, k: v} for c in configs for v in self.values[k]]
        return [c for c in configs if self.structurally_valid(c)]

    def structurally_valid(self, config: Config) -> bool:
        """Each launch's tile, the product of its meta-parameters taken per autotune config (config
        0's tile and config 1's are never live together), stays within Triton's tensor limit, or
        within the product the kernel already has where that is larger: a GEMM config's
        BLOCK_M*BLOCK_N*BLOCK_K*GROUP_M is no one tensor, and the kernel the params were read from
        stays a configuration the tuner may propose around. A branch's value or an expression's cap
        (`alone`) is no dimension of the tile and is left out of it."""
        product: dict[tuple[str, int | None], int] = {}
        start: dict[tuple[str, int | None], int] = {}
        for p in self.params:
            if p.kind == "meta" and p.launch and not p.alone:
                tile = (p.launch, p.config)
                product[tile] = product.get(tile, 1) * config.get(p.key, p.value)
                start[tile] = start.get(tile, 1) * p.value
        return all(n <= max(MAX_TENSOR_NUMEL, start[tile]) for tile, n in product.items())


def _step(values: list[int], current: int, delta: int) -> int | None:
    if current in values:
        i = values.index(current) + delta
        return values[i] if 0 <= i < len(values) else None
    return None


@dataclass
class Bounds:
    """Limits learnt from observations: per parameter, values allowed strictly inside (lo, hi)."""

    lo: dict[str, int] = field(default_factory=dict)
    hi: dict[str, int] = field(default_factory=dict)
    base: Config | None = None
    base_shared: float | None = None

    @classmethod
    def learn(cls, space: Space, observations: list[Observation]) -> Bounds:
        b = cls()
        good = [o for o in observations if o.ok]
        for o in observations:
            if o.ok:
                continue
            for g in good:
                diff = [k for k in o.config if o.config.get(k) != g.config.get(k)]
                if len(diff) != 1:
                    continue
                k = diff[0]
                bad, fine = o.config[k], g.config[k]
                if bad > fine:
                    b.hi[k] = min(b.hi.get(k, bad), bad)
                else:
                    b.lo[k] = max(b.lo.get(k, bad), bad)
        with_shared = [o for o in good if o.shared_fraction]
        if with_shared:
            b.base = with_shared[-1].config
            b.base_shared = with_shared[-1].shared_fraction
        return b

    def allows(self, space: Space, config: Config) -> bool:
        for k, v in config.items():
            if k in self.hi and v >= self.hi[k]:
                return False
            if k in self.lo and v <= self.lo[k]:
                return False
        if self.base is not None and self.base_shared:
            scale = 1.0
            for p in space.params:
                if p.kind in ("meta", "num_stages") and p.key in config and p.key in self.base:
                    scale *= config[p.key] / self.base[p.key]
            if self.base_shared * scale > 1.0:
                return False
        return space.structurally_valid(config)


def best_observation(observations: list[Observation]) -> Observation | None:
    timed = [o for o in observations if o.ok and o.time_us is not None]
    return min(timed, key=lambda o: o.time_us or math.inf) if timed else None


def next_config(
    space: Space,
    start: Config,
    observations: list[Observation],
    seed: int = 0,
    *,
    jump: bool = False,
    wander: bool = True,
) -> Config | None:
    """The next configuration to evaluate, or None when there is none left to try.

    Deterministic in its arguments. `jump=True` (a large step) skips the local moves and proposes a
    seeded random point of the space: a different region, not a neighbour. `wander=False` stops at a
    local optimum (every neighbour and pair move of the start and the best tried) instead of
    sampling the rest of the space.
    """
    tried = {config_key(o.config) for o in observations}
    bounds = Bounds.learn(space, observations)
    keys = [p.key for p in space.params]
    order = list(keys)
    random.Random(seed).shuffle(order)
    # the axes that matter for the kernel's family first (`family.FAMILY_AXES`); the seed orders
    # the parameters of one axis (a stable sort keeps the shuffle within a rank)
    rank = {p.key: p.rank for p in space.params}
    order.sort(key=lambda k: rank[k])

    def fresh(c: Config) -> bool:
        return config_key(c) not in tried and bounds.allows(space, c)

    def neighbours(center: Config) -> Iterable[Config]:
        for k in order:
            for delta in (1, -1):
                v = _step(space.values[k], center[k], delta)
                if v is not None:
                    yield {**center, k: v}

    def pairs(center: Config) -> Iterable[Config]:
        for i, a in enumerate(order):
            for b in order[i + 1 :]:
                for da in (1, -1):
                    for db in (1, -1):
                        va, vb = _step(space.values[a], center[a], da), _step(space.values[b], center[b], db)
                        if va is not None and vb is not None:
                            yield {**center, a: va, b: vb}

    if not keys:
        return None
    best = best_observation(observations)
    centers = (
        [start] if best is None or config_key(best.config) == config_key(start) else [best.config, start]
    )
    if not jump:
        for center in centers:
            for c in neighbours(center):
                if fresh(c):
                    return c
        for center in centers:
            for c in pairs(center):
                if fresh(c):
                    return c
        if not wander:
            return None
    rng = random.Random(f"{seed}:{len(observations)}")
    grid_size = space.size()
    if grid_size <= 4096:
        remaining = [c for c in space.grid() if fresh(c)]
        return rng.choice(remaining) if remaining else None
    for _ in range(2000):
        c = {k: rng.choice(space.values[k]) for k in keys}
        if fresh(c):
            return c
    return None


Objective = Callable[[str, Config], Awaitable[Observation]]


@dataclass
class TuneResult:
    best: Observation | None
    observations: list[Observation]
    evaluations: int


async def tune(source: str, objective: Objective, *, budget: int, seed: int = 0) -> TuneResult:
    """Search the launch configurations of `source` for the fastest, using at most `budget`
    evaluations of `objective` (which compiles, checks and times one rewritten source). Stops
    early at a local optimum: no untried neighbour or pair move of the best configuration."""
    params = find_params(source)
    space = Space.of(params)
    start = current_config(params)
    observations: list[Observation] = []
    if not params:
        return TuneResult(None, observations, 0)
    observations.append(await objective(source, start))
    while len(observations) < budget:
        best = best_observation(observations)
        center = best.config if best is not None else start
        config = next_config(space, center, observations, seed, wander=False)
        if config is None:
            break
        observations.append(await objective(apply_config(source, params, config), config))
    return TuneResult(best_observation(observations), observations, len(observations))


def describe(params: list[Param]) -> list[dict[str, Any]]:
    return [{"key": p.key, "kind": p.kind, "value": p.value, "line": p.line} for p in params]
