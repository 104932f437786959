"""Threat: the parent reads a file the worker could have written (docs/security.md, class "the
parent reads what the worker writes"). A candidate, or a task, replaces its own log with a
symlink to a file of the server's (its tokens file) and dies; a parent that reads the log by path
would put that file in the verdict. The parent reads a worker's log only through the descriptor
it opened before the worker started (`startup/logfile.py`), bounded, so the link is never followed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelcraft.base.errors import TaskError
from kernelcraft.engine.startup import logfile

TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"
SECRET = "planted-tokens-6e1f0c"

SWAP_LOG_AND_DIE = """
import os
import sys
print("the log's own words", flush=True)
if os.path.lexists("output.log"):  # (a box whose folder is a tmpfs shows the worker no log at all)
    os.remove("output.log")
os.symlink({target!r}, "output.log")
sys.stderr.flush()
os._exit(3)
"""


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"client-a": SECRET}) + "\n")
    path.chmod(0o600)
    return path


def _candidate(target: Path, where: str) -> str:
    body = SWAP_LOG_AND_DIE.format(target=str(target))
    indented = "\n".join("        " + line for line in body.strip().splitlines())
    src = TASK.parent.joinpath("good.py").read_text()
    if where == "import":
        return body + "\n" + src
    return src.replace("        y = torch.empty_like(x)\n", indented + "\n        y = torch.empty_like(x)\n")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["import", "forward"])
def test_a_candidate_that_links_its_log_to_a_server_file_gets_none_of_it(
    evaluator, job_for, static_checks_off, tokens_file: Path, where: str
) -> None:
    result = evaluator.submit(job_for(TASK, _candidate(tokens_file, where), trials=1, gpu_check=None))
    assert result.verify is not None and not result.verify.correct, result
    assert SECRET not in result.model_dump_json(), result.verify.evidence


@pytest.mark.slow
def test_a_task_that_links_its_log_to_a_server_file_gets_none_of_it(
    evaluator, job_for, tokens_file: Path
) -> None:
    task = SWAP_LOG_AND_DIE.format(target=str(tokens_file)) + "\n" + TASK.read_text()
    job = job_for(TASK, TASK.parent / "good.py", trials=1, gpu_check=None)
    job = job.model_copy(update={"task_source": task})
    with pytest.raises(TaskError) as e:
        evaluator.submit(job)
    assert SECRET not in str(e.value), e.value
    assert "the log's own words" in str(e.value), e.value  # the log itself is still read, by descriptor


def test_the_log_tail_is_read_through_the_descriptor_and_bounded(tmp_path: Path, tokens_file: Path) -> None:
    path = tmp_path / "output.log"
    fd = logfile.create(path)
    try:
        os.write(fd, b"x" * 10_000 + b"the end")
        path.unlink()
        path.symlink_to(tokens_file)
        assert logfile.tail(fd, 100) == ("x" * 93) + "the end"
    finally:
        logfile.close(fd)
    with pytest.raises(OSError):  # a log that is a link is never opened
        logfile.create(path, fresh=False)
