"""Every KERNELCRAFT_* setting is one knob with one parser (base/knobs.py), read the same way by
every part that uses it: the prestart, a worker pool, the box, a Ray actor (issue 39 item 2, issue
40 item 1). KERNELCRAFT_ZYGOTE=false started the zygote while =off did not: two parsers disagreed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kernelcraft.base import knobs
from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import KNOBS, OFF_WORDS, ON_WORDS, EngineSettings, load, settings

PACKAGE = Path(__file__).resolve().parents[2] / "kernelcraft"
DOCS = Path(__file__).resolve().parents[2] / "docs"
ENGINE = [k for k in KNOBS if k.group == "engine"]
SWITCHES = [k for k in KNOBS if k.kind in ("switch", "optional_switch")]
VARIABLE = re.compile(r"^KERNELCRAFT_[A-Z][A-Z_]*$")
# A task module's own opt-outs: attributes it defines, never variables of the environment.
TASK_ATTRIBUTES = {"KERNELCRAFT_PERTURB_PARAMETERS", "KERNELCRAFT_SCALED_TRIAL"}


def spellings(words: tuple[str, ...]) -> list[str]:
    return sorted({s for w in words for s in (w, w.upper(), w.capitalize(), f"  {w} ")})


def variable_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and VARIABLE.match(n.value)
    }


def reads_the_environment(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return "environ" in text or "getenv" in text


def test_at_most_three_modules_name_a_kernelcraft_variable_beside_the_environment() -> None:
    readers = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if reads_the_environment(p) and variable_names(p) - TASK_ATTRIBUTES
    }
    assert readers <= {"base/knobs.py", "engine/wire/childenv.py"}, sorted(readers)


def test_every_kernelcraft_variable_named_in_the_package_is_a_knob_or_the_worker_wire() -> None:
    from kernelcraft.engine.wire import childenv

    named: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        named |= variable_names(path)
    known = {k.env for k in KNOBS} | set(childenv.NAMES) | TASK_ATTRIBUTES
    assert named <= known, sorted(named - known)


@pytest.mark.parametrize("knob", SWITCHES, ids=lambda k: k.env)
def test_each_switch_reads_the_same_in_every_spelling_and_refuses_any_other(knob: knobs.Knob) -> None:
    for word in spellings(ON_WORDS):
        assert knob.parse(word) is True, word
    for word in spellings(OFF_WORDS):
        assert knob.parse(word) is False, word
    for bad in ("maybe", "of", "2", "enabled", "nein"):
        with pytest.raises(UsageError, match=knob.env) as refused:
            knob.parse(bad)
        assert "on/true/1/yes" in str(refused.value)


@pytest.mark.parametrize(
    "bad",
    [
        "KERNELCRAFT_SANDBOX_IDENTITY=admin",
        "KERNELCRAFT_RULE_ACTIVATION=three",
        "KERNELCRAFT_RULE_ACTIVATION=0",
        "KERNELCRAFT_TEXT_CONTENT=xml",
    ],
)
def test_an_unknown_value_is_refused_with_the_variables_name(bad: str) -> None:
    name, value = bad.split("=")
    with pytest.raises(UsageError, match=name):
        load({name: value})


def parts_see(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, object]:
    """What each part that reads the engine's settings makes of the environment now."""
    from kernelcraft.engine import box
    from kernelcraft.engine.cluster.ray_evaluator import actor_env
    from kernelcraft.engine.machine import prestart
    from kernelcraft.engine.machine.pool import WorkerPool

    pool = WorkerPool(1, "cpu", tmp_path, interpret=True, lazy=True)
    return {
        "prestart_zygote": prestart.wanted(["verify", "t.py", "c.py"]),
        "pool_zygote": pool.start_mode() == "fork",
        "box_cpu": box.mode("cpu"),
        "box_cuda": box.mode("cuda"),
        "actor": load(actor_env()).engine,
        "here": settings().engine,
    }


@pytest.mark.parametrize("knob", ENGINE, ids=lambda k: k.env)
def test_each_engine_setting_in_every_spelling_is_one_value_everywhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, knob: knobs.Knob
) -> None:
    for other in ENGINE:
        monkeypatch.delenv(other.env, raising=False)
    words = (
        {True: spellings(ON_WORDS), False: spellings(OFF_WORDS)}
        if knob.kind != "choice"
        else {c: sorted({c, c.upper(), f" {c.capitalize()} "}) for c in knob.choices}
    )
    for value, texts in words.items():
        seen = []
        for text in texts:
            monkeypatch.setenv(knob.env, text)
            parts = parts_see(monkeypatch, tmp_path)
            assert getattr(parts["here"], knob.field) == value, (text, parts)
            assert parts["actor"] == parts["here"], (text, parts)  # a Ray actor gets every setting
            if knob.field == "zygote":
                assert parts["prestart_zygote"] is value and parts["pool_zygote"] is value, (text, parts)
            seen.append({k: v for k, v in parts.items() if k != "here"})
        assert all(s == seen[0] for s in seen), (knob.env, value, seen)  # one value, however spelt


def test_the_box_mode_a_pool_gives_its_workers_follows_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcraft.engine import box

    for other in ENGINE:
        monkeypatch.delenv(other.env, raising=False)
    assert box.mode("cpu") == "on" and box.mode("cuda") == "on,nopidns-gpu"
    monkeypatch.setenv("KERNELCRAFT_SANDBOX_IDENTITY", "ROOT")
    monkeypatch.setenv("KERNELCRAFT_SANDBOX_PIDNS", "False")
    assert box.mode("cpu") == "on,nopidns,root"
    monkeypatch.setenv("KERNELCRAFT_SANDBOX", "no")
    assert box.mode("cpu") == "off"


def test_a_ray_actor_gets_every_engine_setting_and_keeps_them_through_its_scrub() -> None:
    from kernelcraft.engine.cluster.ray_evaluator import ENGINE_SETTINGS

    assert set(ENGINE_SETTINGS) == set(EngineSettings.env_names()) == {k.env for k in ENGINE}


def test_a_bad_setting_is_one_line_and_exit_2_before_any_command_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kernelcraft.cli import main

    monkeypatch.setenv("KERNELCRAFT_ZYGOTE", "sometimes")
    with pytest.raises(SystemExit) as done:
        main(["rules", "list", "--db", ":memory:"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.strip().splitlines() == [
        "kernelcraft: error: KERNELCRAFT_ZYGOTE='sometimes' is not a switch; give one of "
        "on/true/1/yes or off/false/0/no (any case), or unset it"
    ]


def test_the_settings_table_in_docs_cli_is_the_knobs_own() -> None:
    assert knobs.table() in (DOCS / "cli.md").read_text(encoding="utf-8")
