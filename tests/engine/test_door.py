"""The engine's one door: `kernelcraft.engine` exports the evaluator and the intake, each loaded
when first asked for, so a worker importing its own room loads nothing of the host."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys

import pytest

import kernelcraft.engine as engine
from kernelcraft.base import knobs
from kernelcraft.base.errors import TaskError
from kernelcraft.schema.evaluation import EvalJob


def test_every_name_of_the_door_is_the_rooms_own_object() -> None:
    assert sorted(engine.__all__) == sorted(engine._DOOR)
    for name, (module, attribute) in engine._DOOR.items():
        room = importlib.import_module(module)
        assert getattr(engine, name) is (room if attribute is None else getattr(room, attribute)), name


def test_a_name_the_door_does_not_export_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Job'"):
        engine.Job  # noqa: B018


def test_importing_a_worker_room_loads_nothing_of_the_host() -> None:
    code = (
        "import sys, kernelcraft.engine, kernelcraft.engine.worker.sizing\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kernelcraft.engine.host', "
        "'kernelcraft.engine.cluster'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_evaluator_refuses_a_source_that_is_no_task_before_starting_workers() -> None:
    ev = engine.LocalEvaluator(settings=knobs.settings(), lazy=True)
    job = EvalJob(task_source="class Model:\n    pass\n", candidate_source="class ModelNew:\n    pass\n")
    with pytest.raises(TaskError, match="get_inputs"):
        asyncio.run(ev.submit(job))
    assert ev._devices is None  # no pool was made, no worker started
