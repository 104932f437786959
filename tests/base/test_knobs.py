"""Every KERNELCRAFT_* setting is one knob with one parser (base/knobs.py), read the same way by
every part that uses it: the prestart, a worker pool, the box, a Ray actor (issue 39 item 2, issue
40 item 1). KERNELCRAFT_ZYGOTE=false started the zygote while =off did not: two parsers disagreed."""

from __future__ import annotations

import ast
import functools
import inspect
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
# A task module's own attributes (opt-outs, its CPU sizes): it defines them, never the environment.
TASK_ATTRIBUTES = {"KERNELCRAFT_PERTURB_PARAMETERS", "KERNELCRAFT_SCALED_TRIAL", "KERNELCRAFT_CPU_SIZES"}


def spellings(words: tuple[str, ...]) -> list[str]:
    return sorted({s for w in words for s in (w, w.upper(), w.capitalize(), f"  {w} ")})


@functools.cache
def tree_of(path: Path) -> ast.Module:
    """`path` parsed once for every check here (the package's 230 modules, three checks)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def variable_names(path: Path) -> set[str]:
    tree = tree_of(path)
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and VARIABLE.match(n.value)
    }


def reads_the_environment(path: Path) -> bool:
    """Whether `path`'s code touches the process's environment (`os.environ`, `getenv`)."""
    names = ("environ", "environb", "getenv", "getenvb")
    return any(
        (isinstance(n, ast.Attribute) and n.attr in names) or (isinstance(n, ast.Name) and n.id in names)
        for n in ast.walk(tree_of(path))
    )


# What names a variable of ours without spelling it: knobs.py's names of them.
VARIABLE_HOLDERS = {"PREFIX", "TOKENS_ENV", "SERVE_SECRETS", "KNOBS", "BY_ENV"}


def names_a_variable_through_knobs(path: Path) -> bool:
    tree = tree_of(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "kernelcraft.base.knobs":
            if {a.name for a in node.names} & VARIABLE_HOLDERS:
                return True
        if isinstance(node, ast.Attribute) and node.attr in VARIABLE_HOLDERS:
            return True
    return False


def test_at_most_three_modules_read_a_kernelcraft_variable_from_the_environment() -> None:
    # the parser, the worker's wire, and the server's hardening (which drops the secrets)
    readers = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if reads_the_environment(p)
        and (variable_names(p) - TASK_ATTRIBUTES or names_a_variable_through_knobs(p))
    }
    assert readers <= {"base/knobs.py", "engine/wire/childenv.py", "server/hardening.py"}, sorted(readers)


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


SERVER = [k for k in KNOBS if k.group == "server"]


@pytest.mark.parametrize("knob", SERVER, ids=lambda k: k.env)
def test_each_server_setting_in_every_spelling_is_one_value_in_the_servers_settings(
    tmp_path: Path, knob: knobs.Knob
) -> None:
    from kernelcraft.base.config import Settings

    spelt = (
        {c: sorted({c, c.upper(), f" {c.capitalize()} "}) for c in knob.choices}
        if knob.kind == "choice"
        else {n: [str(n), f" {n} ", f"0{n}", f"+{n}"] for n in (knob.low, knob.low + 4)}
    )
    field = {"rule_activation": "rule_activation_count"}.get(knob.field, knob.field)
    for value, texts in spelt.items():
        for text in texts:
            read = load({knob.env: text})
            server = Settings.from_knobs(read, tmp_path / "kc.db")  # what the server is handed
            assert getattr(read.server, knob.field) == value == getattr(server, field), text


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


def parts_see(given: knobs.Knobs, tmp_path: Path) -> dict[str, object]:
    """What each part below the entry point makes of the settings it is handed."""
    from kernelcraft.engine import box
    from kernelcraft.engine.machine import prestart
    from kernelcraft.engine.machine.pool import WorkerPool, base_env
    from kernelcraft.engine.startup import prebuilt
    from kernelcraft.engine.wire import childenv

    pool = WorkerPool(1, "cpu", tmp_path, interpret=True, lazy=True, settings=given)
    return {
        "prestart_zygote": prestart.wanted(["verify", "t.py", "c.py"], given),
        "pool_zygote": pool.start_mode() == "fork",
        "box_cpu": box.mode("cpu", given.engine),
        "box_cuda": box.mode("cuda", given.engine),
        # what a worker (or the zygote) reads of its pool's environment, on the child's side
        "worker_box_cpu": childenv.mine(base_env("cpu", None, True, settings=given)).box,
        "worker_box_cuda": childenv.mine(base_env("cuda", 0, False, settings=given)).box,
        "prebuilt": prebuilt.folder(given) is not None,
        # what RayEvaluator hands each actor (tests/engine/cluster/: the actor runs with it)
        "actor": given.engine,
    }


def expected(engine: EngineSettings) -> dict[str, object]:
    """What each part must make of `engine`, from the settings' meaning alone."""
    pidns = {None: ("on", "on,nopidns-gpu"), True: ("on", "on"), False: ("on,nopidns", "on,nopidns")}
    cpu, cuda = pidns[engine.sandbox_pidns]
    root = ",root" if engine.sandbox_identity == "root" else ""
    boxes = ("off", "off") if not engine.sandbox else (cpu + root, cuda + root)
    return {
        "prestart_zygote": engine.zygote,
        "pool_zygote": engine.zygote,
        "box_cpu": boxes[0],
        "box_cuda": boxes[1],
        "worker_box_cpu": boxes[0],
        "worker_box_cuda": boxes[1],
        "actor": engine,
    }


@pytest.mark.parametrize("knob", ENGINE, ids=lambda k: k.env)
def test_each_engine_setting_in_every_spelling_is_one_value_everywhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, knob: knobs.Knob
) -> None:
    for other in ENGINE:
        monkeypatch.delenv(other.env, raising=False)
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    words = (
        {True: spellings(ON_WORDS), False: spellings(OFF_WORDS)}
        if knob.kind != "choice"
        else {c: sorted({c, c.upper(), f" {c.capitalize()} "}) for c in knob.choices}
    )
    for value, texts in words.items():
        seen = []
        for text in texts:
            monkeypatch.setenv(knob.env, text)
            read = settings()  # as an entry point reads them, then hands them down
            assert getattr(read.engine, knob.field) == value, text
            parts = parts_see(read, tmp_path)
            want = expected(read.engine)
            assert {k: parts[k] for k in want} == want, (text, parts)
            if knob.field == "prebuilt" and not value:
                assert parts["prebuilt"] is False, text
            seen.append(parts)
        assert all(s == seen[0] for s in seen), (knob.env, value, seen)  # one value, however spelt


def test_the_box_mode_a_pool_gives_its_workers_follows_the_settings() -> None:
    from kernelcraft.engine import box

    assert (
        box.mode("cpu", EngineSettings()) == "on" and box.mode("cuda", EngineSettings()) == "on,nopidns-gpu"
    )
    read = load({"KERNELCRAFT_SANDBOX_IDENTITY": "ROOT", "KERNELCRAFT_SANDBOX_PIDNS": "False"}).engine
    assert box.mode("cpu", read) == "on,nopidns,root"
    assert box.mode("cpu", load({"KERNELCRAFT_SANDBOX": "no"}).engine) == "off"


def test_a_ray_actor_gets_its_settings_as_an_argument_not_through_its_environment() -> None:
    from kernelcraft.engine.cluster import ray_evaluator

    assert not any(ray_evaluator._kept_for_ray(name) for name in EngineSettings.env_names())
    assert "engine" in inspect.signature(ray_evaluator.EvalActor).parameters


# Who may read this process's settings: the entry points. Every other module is handed them.
ENTRY_POINTS = {"entry.py", "cli/__init__.py", "agent/loop/session.py"}


def settings_calls(path: Path, tree: ast.Module | None = None) -> list[int]:
    """The lines where `path` calls `knobs.settings()` or `knobs.load()` (however imported)."""
    tree = tree or ast.parse(path.read_text(encoding="utf-8"))
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "kernelcraft.base.knobs":
            functions |= {a.asname or a.name for a in node.names if a.name in ("settings", "load")}
        elif isinstance(node, ast.ImportFrom) and node.module == "kernelcraft.base":
            modules |= {a.asname or a.name for a in node.names if a.name == "knobs"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "kernelcraft.base.knobs" and a.asname}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in functions:
            lines.append(node.lineno)
        elif (
            isinstance(f, ast.Attribute)
            and f.attr in ("settings", "load")
            and (
                (isinstance(f.value, ast.Name) and f.value.id in modules)
                or ast.unparse(f.value) == "kernelcraft.base.knobs"
            )
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_entry_points_read_the_settings_every_other_module_is_handed_them() -> None:
    readers = {
        str(p.relative_to(PACKAGE)): lines
        for p in PACKAGE.rglob("*.py")
        if p.name != "knobs.py" and (lines := settings_calls(p, tree_of(p)))
    }
    assert set(readers) <= ENTRY_POINTS, {k: v for k, v in readers.items() if k not in ENTRY_POINTS}
    assert set(readers) == ENTRY_POINTS, "an entry point no longer reads them: update ENTRY_POINTS"
    assert not hasattr(knobs, "engine_settings")


def test_the_readers_check_sees_every_way_of_calling_the_settings(tmp_path: Path) -> None:
    for text in (
        "from kernelcraft.base.knobs import settings\nsettings()\n",
        "from kernelcraft.base.knobs import settings as s\ns().engine\n",
        "from kernelcraft.base import knobs\nknobs.settings()\n",
        "from kernelcraft.base import knobs as k\nk.load()\n",
        "import kernelcraft.base.knobs as kb\nkb.settings()\n",
        "import kernelcraft.base.knobs\nkernelcraft.base.knobs.settings()\n",
    ):
        (tmp_path / "m.py").write_text(text)
        assert settings_calls(tmp_path / "m.py") == [2], text
    (tmp_path / "m.py").write_text("from kernelcraft.base.knobs import Knobs\nKnobs()\n")
    assert settings_calls(tmp_path / "m.py") == []


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
