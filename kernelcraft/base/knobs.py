"""Every `KERNELCRAFT_*` setting, defined once, with one parser (Triton's `knobs.py` is the model).

Each setting is a `Knob`: its variable, its kind (a switch, a choice, a whole number, a path),
its default and its words, grouped by who reads it: `engine` (the evaluator and its workers),
`server` (the MCP server), `paths` (the home and the database) and `secrets` (read by `serve`
alone, then dropped from its environment). One parser reads them all: a switch is on for
on/true/1/yes and off for off/false/0/no, in any case and with spaces around; anything else is
refused with a `UsageError` naming the variable and the accepted words, as is an unknown choice
or a number that is not one.

Read once, at an entry point, and passed down. `settings()` parses this process's environment
(kept for as long as the variables stay as they were) and is called by the entry points alone:
the command line (`kernelcraft/entry.py`, `cli/__init__.py`, which hands the `Knobs` to every
command) and the driver's session for a caller that gave none (`agent/loop/session.py`);
`tests/base/test_knobs.py` fails when any other module calls it. Everything below takes the
object: the server's `Settings.knobs` (`base/config.py`), `LocalEvaluator(settings=...)` and from
it the worker pools, the zygote's head start, the box's mode, the bytecode cache and Triton's
prebuilt helpers; `RayEvaluator(settings=...)` hands its `EngineSettings` to each actor as an
argument. A worker reads none of them: its pool writes what it needs into its environment
(`engine/wire/childenv.py`, the one module that writes and reads a child's environment).
A test builds the object it wants (`Knobs(engine=EngineSettings(zygote=False))`).

The second half of the module is a job's knobs (`JobKnob`: a deadline, trials), each defined
once with its default and bounds, and the bounds on every wait that nothing else ends.

Only this module reads `KERNELCRAFT_*` settings from the environment (`tests/base/test_knobs.py`
checks it). Pure standard library: workers and the CLI's fast start import it.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from kernelcraft.base.errors import UsageError

PREFIX = "KERNELCRAFT_"
TOKENS_ENV = "KERNELCRAFT_TOKENS"
SERVE_SECRETS = (TOKENS_ENV, "ANTHROPIC_API_KEY", "OPENAI_API_KEY")
"""What a serving process holds and never needs once started (the tokens after they are read, the
driver agent's LLM keys): `serve` drops them, a Ray actor refuses to run with any of them."""


def secrets_held(environ: Mapping[str, str] | None = None) -> list[str]:
    """Which of `SERVE_SECRETS` `environ` (this process's environment when None) holds."""
    env = os.environ if environ is None else environ
    return [name for name in SERVE_SECRETS if name in env]


ON_WORDS = ("on", "true", "1", "yes")
OFF_WORDS = ("off", "false", "0", "no")
SWITCH_WORDS = f"{'/'.join(ON_WORDS)} or {'/'.join(OFF_WORDS)}"


def parse_switch(name: str, raw: str) -> bool:
    """The one reading of a switch's text; a `UsageError` for any other word."""
    word = raw.strip().lower()
    if word in ON_WORDS:
        return True
    if word in OFF_WORDS:
        return False
    raise UsageError(f"{name}={raw!r} is not a switch; give one of {SWITCH_WORDS} (any case), or unset it")


def parse_choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    word = raw.strip().lower()
    if word not in choices:
        raise UsageError(f"{name}={raw!r} is not one of {', '.join(choices)}; give one of them, or unset it")
    return word


def parse_count(name: str, raw: str, low: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise UsageError(
            f"{name}={raw!r} is not a whole number; give one (at least {low}), or unset it"
        ) from None
    if value < low:
        raise UsageError(f"{name}={raw!r} is below {low}; give a whole number of at least {low}, or unset it")
    return value


@dataclass(frozen=True)
class Knob:
    """One setting: its field, kind and default, and its words for docs/cli.md's table."""

    field: str
    group: str
    kind: Literal["switch", "optional_switch", "choice", "count", "path", "optional_path", "secret"]
    default: Any
    description: str
    choices: tuple[str, ...] = ()
    low: int = 0

    @property
    def env(self) -> str:
        return PREFIX + self.field.upper()

    def parse(self, raw: str | None) -> Any:
        """The value `raw` (the variable's text, None when unset or empty) gives."""
        if raw is None or (raw.strip() == "" and self.kind != "secret"):
            return self.default
        if self.kind in ("switch", "optional_switch"):
            return parse_switch(self.env, raw)
        if self.kind == "choice":
            return parse_choice(self.env, raw, self.choices)
        if self.kind == "count":
            return parse_count(self.env, raw, self.low)
        if self.kind in ("path", "optional_path"):
            return Path(raw.strip()).expanduser()
        return raw

    def text(self, value: Any) -> str | None:
        """The variable's text that gives `value` (None: leave it unset)."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "on" if value else "off"
        return str(value)


KNOBS: tuple[Knob, ...] = (
    Knob("sandbox", "engine", "switch", True, "The candidates' box (engine/box/); off only for debugging."),
    Knob(
        "sandbox_pidns",
        "engine",
        "optional_switch",
        None,
        "A PID namespace per worker; unset: on for CPU workers, off on a GPU (CUDA IPC).",
    ),
    Knob(
        "sandbox_identity",
        "engine",
        "choice",
        "nobody",
        "Run by root, workers become nobody, or stay root in a user namespace of their own.",
        choices=("nobody", "root"),
    ),
    Knob(
        "zygote", "engine", "switch", True, "Fork workers from a zygote that has imported torch and Triton."
    ),
    Knob(
        "shrink",
        "engine",
        "switch",
        True,
        "Shrink a large KernelBench task's sizes in the interpreter (engine/source/shrink.py).",
    ),
    Knob("prebuilt", "engine", "switch", True, "Build Triton's C helpers once per machine."),
    Knob("bytecode_cache", "engine", "switch", True, "Keep kernelcraft's bytecode where Python keeps none."),
    Knob(
        "rule_activation",
        "server",
        "count",
        3,
        "Corroborated failures before a proposed rule is injected into prompts.",
        low=1,
    ),
    Knob(
        "text_content",
        "server",
        "choice",
        "summary",
        "What a tool answer's text content holds: a summary for people, or the compact JSON.",
        choices=("summary", "json"),
    ),
    Knob(
        "home",
        "paths",
        "path",
        Path("~/.kernelcraft").expanduser(),
        "The database, caches and run directories.",
    ),
    Knob("db", "paths", "optional_path", None, "The database file; unset: kernelcraft.db in the home."),
    Knob("tokens", "secrets", "secret", None, "serve's bearer tokens, token=name pairs; dropped once read."),
)
BY_ENV = {k.env: k for k in KNOBS}


@dataclass(frozen=True)
class EngineSettings:
    """The evaluation engine's settings (`KNOBS` of group "engine")."""

    sandbox: bool = True
    sandbox_pidns: bool | None = None
    sandbox_identity: Literal["nobody", "root"] = "nobody"
    zygote: bool = True
    shrink: bool = True
    prebuilt: bool = True
    bytecode_cache: bool = True

    @classmethod
    def env_names(cls) -> list[str]:
        """The variable of every engine setting."""
        return [PREFIX + f.name.upper() for f in fields(cls)]

    def to_env(self) -> dict[str, str]:
        """Every setting as the variable that gives it this value (a None is left out)."""
        out = {}
        for f in fields(self):
            text = BY_ENV[PREFIX + f.name.upper()].text(getattr(self, f.name))
            if text is not None:
                out[PREFIX + f.name.upper()] = text
        return out


@dataclass(frozen=True)
class ServerSettings:
    rule_activation: int = 3
    text_content: Literal["summary", "json"] = "summary"


@dataclass(frozen=True)
class PathSettings:
    home: Path = Path("~/.kernelcraft").expanduser()
    db: Path | None = None


@dataclass(frozen=True)
class SecretSettings:
    tokens: str | None = None

    def __repr__(self) -> str:  # never in a log
        return f"SecretSettings(tokens={'<set>' if self.tokens else None})"


@dataclass(frozen=True)
class Knobs:
    """Every setting, by group (`Knobs()`: every default, whatever the environment holds)."""

    engine: EngineSettings = field(default_factory=EngineSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    paths: PathSettings = field(default_factory=PathSettings)
    secrets: SecretSettings = field(default_factory=SecretSettings)

    def without_secrets(self) -> Knobs:
        """These settings with no secret (what a server keeps once it has read its tokens)."""
        return Knobs(self.engine, self.server, self.paths)


_GROUPS: dict[str, type] = {
    "engine": EngineSettings,
    "server": ServerSettings,
    "paths": PathSettings,
    "secrets": SecretSettings,
}


def load(environ: Mapping[str, str] | None = None) -> Knobs:
    """Every setting as `environ` (this process's environment when None) gives it; a `UsageError`
    for the first value that is not one of its kind's."""
    env = os.environ if environ is None else environ
    values: dict[str, dict[str, Any]] = {g: {} for g in _GROUPS}
    for knob in KNOBS:
        values[knob.group][knob.field] = knob.parse(env.get(knob.env))
    return Knobs(**{g: cls(**values[g]) for g, cls in _GROUPS.items()})


_cache: tuple[tuple[str | None, ...], Knobs] | None = None


def settings() -> Knobs:
    """This process's settings, for an entry point to pass down (see the module docstring):
    parsed once, and again only when a variable changed."""
    global _cache
    key = tuple(os.environ.get(k.env) for k in KNOBS)
    if _cache is None or _cache[0] != key:
        _cache = (key, load())
    return _cache[1]


def table() -> str:
    """docs/cli.md's table of settings (`tests/base/test_knobs.py` keeps the docs equal to it)."""
    rows = ["| variable | kind | default | what it sets |", "|---|---|---|---|"]
    for k in KNOBS:
        kind = {
            "switch": f"switch ({SWITCH_WORDS})",
            "optional_switch": "switch, or unset",
            "choice": " or ".join(k.choices),
            "count": f"whole number ≥ {k.low}",
            "path": "path",
            "optional_path": "path",
            "secret": "secret",
        }[k.kind]
        default = (
            "`~/.kernelcraft`"
            if k.field == "home"
            else (f"`{k.text(k.default)}`" if k.default is not None else "unset")
        )
        rows.append(f"| `{k.env}` | {kind} | {default} | {k.description} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------- a job's knobs
# A job's knobs, each defined once: its default, its bounds and its words.
#
# Every place that takes a knob reads it from here: the CLI's flags (`arg_type`, `default`), the MCP
# tools' inputs (`field`), the evaluation job (`EvalJob`), a search tree's configuration
# (`SearchConfig.timeout_s`, so a tree's steps set their own deadline) and the level runner.
# `tests/base/test_job_knobs.py` checks that they agree.
#
# The wait bounds below are what ends a wait that nothing else would: the search service gives an
# evaluation `eval_wait_s(timeout)` before it calls the evaluator stuck (its deadline counts from
# the moment its workers are assigned, so a job queued behind others on one GPU may take longer than
# its timeout), and the driver gives each tool call `CALL_WAIT_S` (an evaluating call
# `EVALUATING_CALL_WAIT_S`) before it stops the run saying which call did not answer.


@dataclass(frozen=True)
class JobKnob:
    """A number a job takes: `default`, in (`low`, `high`] (`low_open`) or [`low`, `high`]."""

    name: str
    default: float
    low: float
    high: float
    unit: str
    description: str
    low_open: bool = True
    integer: bool = False

    def bounds_words(self) -> str:
        left = "(" if self.low_open else "["
        return f"{left}{self.low:g}, {self.high:g}] {self.unit}".rstrip()

    def check(self, value: float) -> float:
        """`value` when it is within bounds; ValueError saying the range otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{self.name} must be a finite number in {self.bounds_words()}, not {value!r}")
        low_ok = value > self.low if self.low_open else value >= self.low
        if not low_ok or value > self.high:
            raise ValueError(f"{self.name} must be in {self.bounds_words()}, not {value:g}")
        if self.integer and value != int(value):
            raise ValueError(f"{self.name} must be a whole number in {self.bounds_words()}, not {value:g}")
        return value

    def arg_type(self, text: str) -> float:
        """An argparse `type=`: the flag's text as a number within bounds, or a one-line refusal."""
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {self.unit or 'units'}") from None
        try:
            self.check(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be in {self.bounds_words()}, not {text}") from None
        return int(value) if self.integer else value

    def constraint(self, description: str | None = None) -> Any:
        """A pydantic `Field` with this knob's bounds and no default (for `Annotated`)."""
        from pydantic import Field

        words = description or self.description
        if self.low_open:
            return Field(description=words, gt=self.low, le=self.high)
        return Field(description=words, ge=self.low, le=self.high)

    def field(self, default: Any = None, description: str | None = None) -> Any:
        """A pydantic `Field` with this knob's bounds (and default, unless one is given)."""
        from pydantic import Field  # not at import: workers and the CLI's fast start read this module

        words = description or self.description
        value = self.default if default is None else default
        if self.low_open:
            return Field(default=value, description=words, gt=self.low, le=self.high)
        return Field(default=value, description=words, ge=self.low, le=self.high)


TIMEOUT_S = JobKnob(
    "timeout_s",
    default=120.0,
    low=0,
    high=3600,
    unit="s",
    description="Seconds the whole evaluation may take; then its worker is killed.",
)
LEVEL_TIMEOUT_S = 300.0
"""A level's per-task deadline (the same knob, bounds and all): a KernelBench task's baseline
and candidate share it, and level 3's models take longer to load than one kernel."""

TRIALS = JobKnob(
    "trials",
    default=5,
    low=1,
    high=100,
    unit="",
    description="Correctness trials, each on fresh random inputs.",
    low_open=False,
    integer=True,
)

EVAL_GRACE_S = 600.0
"""Beyond a job's own deadline, what its evaluation may wait for workers, memory and the GPU
(other jobs' turns) before the search service calls the evaluator stuck."""
CALL_WAIT_S = 600.0
"""What the driver waits for a tool call that evaluates nothing (a step, a status, a rule)."""
EVALUATING_CALL_WAIT_S = 4 * 3600.0
"""What the driver waits for a submit or a start, which evaluate: past the server's own bound
(`eval_wait_s` of the largest deadline with jobs queued ahead), so the server's sentence comes first."""


def eval_wait_s(timeout_s: float, queued: int, grace_s: float = EVAL_GRACE_S) -> float:
    """How long an evaluation with deadline `timeout_s` may take in all when `queued` other jobs
    of this service are in flight (each may take the GPU alone for its own deadline first)."""
    return timeout_s * (1 + max(queued, 0)) + grace_s
