"""Errors on the command line: one line on stderr, a JSON error object on stdout under `--json`, the
same exit code either way, every pre-flight check before any work, and a closed pipe is no error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcraft.base.errors import UsageError
from kernelcraft.cli import EXIT_USAGE, main
from kernelcraft.cli.__init__ import _the_error
from kernelcraft.cli.common import EXIT_BROKEN_PIPE, EXIT_NEGATIVE

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # anyio's dependency on Python 3.10
    from exceptiongroup import BaseExceptionGroup

ROOT = Path(__file__).resolve().parents[2]
LAYERNORM = ROOT / "examples" / "layernorm" / "task.py"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def json_error(out: str) -> dict[str, object]:
    err = json.loads(out)["error"]
    assert set(err) == {"kind", "message", "exit_code"}
    return dict(err)


def test_a_bad_argument_under_json_is_a_json_error_with_argparses_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "verify", "t.py", "c.py", "--trials", "many", "--json")
    assert code == EXIT_USAGE == 2
    e = json_error(out)
    assert e["kind"] == "usage" and e["exit_code"] == 2 and "--trials" in str(e["message"])
    assert (
        err.startswith("usage: kernelcraft verify") and "kernelcraft verify: error: argument --trials" in err
    )
    # without --json: the same code, nothing on stdout
    code, out, _ = cli(capsys, "verify", "t.py", "c.py", "--trials", "many")
    assert code == 2 and out == ""


def test_an_unusable_file_under_json_is_a_json_error_and_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "verify", str(tmp_path / "missing.py"), str(LAYERNORM), "--json")
    assert code == 2 and json_error(out)["message"] == f"{tmp_path / 'missing.py'}: no such file"
    assert err.count("\n") == 1 and err.startswith("kernelcraft: error:")


def test_a_fault_of_ours_under_json_is_a_json_error_then_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kernelcraft.cli.knowledge as knowledge

    def broken(_args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(knowledge, "_rules_list", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["rules", "list", "--json"])
    e = json_error(capsys.readouterr().out)
    assert e == {"kind": "internal", "message": "RuntimeError: a bug", "exit_code": EXIT_NEGATIVE}


def test_an_error_inside_a_task_group_is_reported_as_itself() -> None:
    inner = UsageError("tree 9 does not exist")
    group = BaseExceptionGroup("unhandled errors in a TaskGroup", [BaseExceptionGroup("g", [inner])])
    assert _the_error(group) is inner
    other = ValueError("x")
    assert _the_error(BaseExceptionGroup("g", [other])) is not other  # not ours: the group, whole


def test_optimize_checks_the_task_before_making_the_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "task.py"
    task.write_text("import torch\nclass Model(:\n")
    out_dir = tmp_path / "run"
    code, out, err = cli(capsys, "optimize", str(task), "--llm", "none", "--out", str(out_dir), "--json")
    assert code == 2 and f"{task}:2: syntax error" in json_error(out)["message"]
    assert err.count("\n") == 1 and "Traceback" not in err and "ExceptionGroup" not in err
    assert not out_dir.exists()


def test_optimize_says_a_seed_without_model_new_lacks_model_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = tmp_path / "seed.py"
    seed.write_text("import triton\nBLOCK = 128\n")
    code, _, err = cli(capsys, "optimize", str(LAYERNORM), "--seed", str(seed), "--llm", "none")
    assert code == 2 and "does not define ModelNew" in err and "launch parameters" not in err


def test_a_missing_api_key_exits_2_like_any_unusable_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./.env to find a key in
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code, out, err = cli(capsys, "optimize", str(LAYERNORM), "--out", str(tmp_path / "r"), "--json")
    assert code == 2 and "$ANTHROPIC_API_KEY" in str(json_error(out)["message"])
    assert not (tmp_path / "r").exists()
    code, _, _ = cli(capsys, "optimize", str(LAYERNORM), "--steps", "0", "--llm", "none")
    assert code == 2
    code, _, err = cli(capsys, "adapt", str(ROOT / "examples"), "--llm", "openai")
    assert code == 2 and "--model" in err


def test_the_key_in_a_dotenv_file_passes_the_pre_flight_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from kernelcraft.cli.agent import preflight_optimize

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KC_TEST_KEY", raising=False)
    args = argparse.Namespace(
        task=LAYERNORM,
        seed=None,
        steps=1,
        llm="anthropic",
        model=None,
        base_url=None,
        api_key_env="KC_TEST_KEY",
        max_output_tokens=16_384,
        thinking_budget=None,
    )
    with pytest.raises(UsageError, match="KC_TEST_KEY"):
        preflight_optimize(args)
    (tmp_path / ".env").write_text("KC_TEST_KEY=sk-from-dotenv\n")
    preflight_optimize(args)


@pytest.mark.slow
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "kernelcraft", "rules", "list", "--db", str(tmp_path / "k.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # as `| head` does once it has its lines; here before the first one
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_the_cli_page_has_one_exit_code_table_for_every_command_and_code() -> None:
    import argparse

    from kernelcraft.cli import build_parser, common

    text = (ROOT / "docs" / "cli.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| exit |"))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert [c for c in sub.choices if f"`{c}" not in header] == []
    codes = {v for k, v in vars(common).items() if k.startswith("EXIT_")}
    rows = {int(line.split("|")[1]) for line in text.splitlines() if re.match(r"\| \d+ \|", line)}
    assert rows == codes
