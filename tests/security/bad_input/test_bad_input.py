"""Bad input gets one clear line and an exit code, never a traceback or a hang: a FIFO, a device or
a directory given as a source file, a deadline that is not a number of seconds, a malformed or
non-UTF-8 run folder, and a task whose own code raises: its error says what failed in the client's
code and nothing of ours (docs/security.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelcraft.cli import main

CHEATS = Path(__file__).parents[2] / "cheats"
TASK, GOOD = CHEATS / "task_scale.py", CHEATS / "good.py"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    return int(e.value.code or 0), err


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_source_path_that_is_not_a_regular_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = {"fifo": tmp_path / "task.py", "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    for argv in ((str(path), str(GOOD)), (str(TASK), str(path))):
        code, err = cli(capsys, "verify", *argv, "--device", "cpu")
        assert code == 2 and "Traceback" not in err, err
        assert "give the path of a Python source file" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon"])
def test_a_deadline_that_is_not_a_number_of_seconds_is_refused(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, err = cli(capsys, "verify", str(TASK), str(GOOD), "--timeout", value)
    assert code == 2 and "--timeout" in err and "Traceback" not in err, err


@pytest.mark.parametrize("content", [b"\xff\xfe{{{", b'{"a": 1}', b"[]"])
def test_report_on_a_malformed_run_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    (tmp_path / "tree.json").write_bytes(content)
    code, err = cli(capsys, "report", str(tmp_path))
    assert code == 2 and "Traceback" not in err and "is not a run's report" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_task_error_names_the_clients_code_and_nothing_of_ours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "task.py"
    task.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\n"
        "def get_init_inputs():\n    raise ValueError('boom in init inputs')\n"
    )
    code, err = cli(capsys, "verify", str(task), str(GOOD), "--device", "cpu", "--trials", "1")
    assert code != 0 and "boom in init inputs" in err and 'File "task.py", line 15' in err, err
    assert "kernelcraft-eval" not in err and "worker-" not in err and "kernelcraft/engine" not in err, err
