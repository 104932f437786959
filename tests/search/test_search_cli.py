"""`kernelcraft tree start|submit|abandon|status|show` through a real subprocess and the real LocalEvaluator
(Triton's interpreter on a CPU-only machine); the usage errors through the CLI's `main` in this process."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcraft.schema.tree import StartResult, SubmitResult, TreeStatus, TreeView

pytestmark = pytest.mark.slow  # every test runs the CLI in a subprocess

ROOT = Path(__file__).resolve().parents[2]

TASKS = ROOT / "tests" / "fixtures" / "tasks"
TASK = (TASKS / "vector_add.py").read_text()
GOOD = (TASKS / "vector_add_triton.py").read_text()

WRONG = GOOD.replace("x + y, mask=mask", "x - y, mask=mask")


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelcraft", "tree", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_tree_commands_step_a_search_with_real_verdicts(tmp_path: Path) -> None:
    db = str(tmp_path / "kc.db")
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "wrong.py").write_text(WRONG)

    p = cli("start", str(tmp_path / "task.py"), "--budget", "4", "--seed", "3", "--db", db, "--json")
    assert p.returncode == 0, p.stderr
    started = StartResult.model_validate_json(p.stdout)
    step = started.next_step
    assert step is not None and step.kind == "large" and "speedup unknown: no GPU" in step.instructions
    tree = str(started.tree.id)

    p = cli(
        "submit", tree, str(step.node_id), str(tmp_path / "good.py"), "--device", "cpu", "--db", db, "--json"
    )
    assert p.returncode == 0, p.stderr
    good = SubmitResult.model_validate_json(p.stdout)
    assert good.node.outcome == "correct" and good.node.speedup is None and good.new_best
    assert good.node.verdict is not None and good.node.verdict.verify is not None
    assert good.node.verdict.verify.interpreter and good.budget_left == 3
    assert good.next_step is not None

    p = cli(
        "submit", tree, str(good.next_step.node_id), str(tmp_path / "wrong.py"), "--device", "cpu", "--db", db
    )
    assert p.returncode == 1, p.stderr  # a candidate that is not correct
    assert "compiled but wrong (numerical mismatch)" in p.stdout and "Next step:" in p.stdout

    with sqlite3.connect(db) as conn:
        failures = conn.execute("SELECT class, arch FROM failures").fetchall()
    assert failures == [("numerical_mismatch", "sm_90a")]

    p = cli("status", tree, "--db", db, "--json")
    assert p.returncode == 0, p.stderr
    st = TreeStatus.model_validate_json(p.stdout)
    assert st.best is not None and st.best.id == good.node.id and st.best.code == GOOD
    assert (st.counts.correct, st.counts.wrong, st.counts.pending) == (1, 1, 1) and st.budget_left == 2

    p = cli("show", tree, "--db", db, "--json")
    view = TreeView.model_validate_json(p.stdout)
    assert [n.kind for n in view.nodes][0] == "root" and view.best_node_id == good.node.id
    p = cli("show", tree, "--db", db)
    assert p.returncode == 0 and "← best" in p.stdout and "wrong (numerical_mismatch)" in p.stdout


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """`kernelcraft tree ARGS` through the CLI's own `main`, in this process: for the error paths,
    which start no evaluator (the subprocess's start-up is the other tests')."""
    from kernelcraft.cli import main

    with pytest.raises(SystemExit) as done:
        main(["tree", *args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["kernelcraft", "tree", *args], int(done.value.code or 0), out, err)


def test_tree_commands_exit_2_with_a_message_for_unusable_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "kc.db")
    (tmp_path / "task.py").write_text(TASK)
    p = in_process(capsys, "status", "42", "--db", db)
    assert p.returncode == 2 and "no search tree 42" in p.stderr
    p = in_process(capsys, "start", str(tmp_path / "task.py"), "--param", "p_larg=0.3", "--db", db)
    assert p.returncode == 2 and "allowed keys" in p.stderr
    p = in_process(capsys, "start", str(tmp_path / "task.py"), "--param", "oops", "--db", db)
    assert p.returncode == 2 and "KEY=VALUE" in p.stderr
    p = in_process(capsys, "start", str(tmp_path / "missing.py"), "--db", db)
    assert p.returncode == 2 and "no such file" in p.stderr
    p = in_process(capsys, "start", str(tmp_path / "task.py"), "--db", db, "--json", "--budget", "2")
    started = json.loads(p.stdout)
    p = in_process(capsys, "submit", str(started["tree"]["id"]), "999", str(tmp_path / "task.py"), "--db", db)
    assert p.returncode == 2 and "no node 999" in p.stderr
    # a step you can write nothing for is abandoned with a reason (nothing is evaluated): exit 0
    node = str(started["next_step"]["node_id"])
    p = in_process(
        capsys,
        "abandon",
        str(started["tree"]["id"]),
        node,
        "--reason",
        "no idea how to fuse this",
        "--db",
        db,
    )
    assert p.returncode == 0, p.stderr
    assert (
        "abandoned without a candidate: no idea how to fuse this" in p.stdout and "Budget left: 1" in p.stdout
    )


def test_tree_start_takes_a_preset_and_the_tree_records_it(tmp_path: Path) -> None:
    db = str(tmp_path / "kc.db")
    (tmp_path / "task.py").write_text(TASK)
    p = cli(
        "start",
        str(tmp_path / "task.py"),
        "--preset",
        "adaexplore",
        "--param",
        "level=3",
        "--db",
        db,
        "--json",
    )
    assert p.returncode == 0, p.stderr
    started = StartResult.model_validate_json(p.stdout)
    params = started.tree.params
    assert (params["preset"], params["level"], params["c_exp"], params["warm_start"]) == (
        "adaexplore",
        3,
        0.15,
        False,
    )
    assert started.next_step is not None and started.next_step.manual_sections == []
    p = cli("show", str(started.tree.id), "--db", db)
    assert p.returncode == 0 and "policy adaexplore (preset adaexplore)" in p.stdout
    p = cli("start", str(tmp_path / "task.py"), "--preset", "paper", "--db", db)
    assert p.returncode == 2 and "invalid choice: 'paper'" in p.stderr
