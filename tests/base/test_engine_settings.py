"""The engine's settings are one object (base/engine_settings.py, pydantic-settings), and whatever
passes them on passes all of them: a Ray actor ran with the defaults of five settings because its
list of names was written by hand (issue 28)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelcraft.base.engine_settings import EngineSettings

PACKAGE = Path(__file__).resolve().parents[2] / "kernelcraft"
# KERNELCRAFT_* names that are not engine settings: the server's and the CLI's (Settings), a task's
# own opt-outs (attributes of the task module, not variables), and what a pool sets for its own
# children to find their role (never a user's setting).
NOT_ENGINE = {
    "KERNELCRAFT_HOME",
    "KERNELCRAFT_DB",
    "KERNELCRAFT_TOKENS",
    "KERNELCRAFT_TEXT_CONTENT",
    "KERNELCRAFT_RULE_ACTIVATION",
    "KERNELCRAFT_PERTURB_PARAMETERS",
    "KERNELCRAFT_SCALED_TRIAL",
    "KERNELCRAFT_WORKER_BOX",
    "KERNELCRAFT_WORKER_DEVICE",
    "KERNELCRAFT_WORKER_DIR",
    "KERNELCRAFT_WORKER_IMPORTS",
    "KERNELCRAFT_WORKER_REAPER",
}
# Flipped from its default, each setting's variable and value.
FLIPPED = {
    "KERNELCRAFT_SANDBOX": "off",
    "KERNELCRAFT_SANDBOX_PIDNS": "off",
    "KERNELCRAFT_SANDBOX_IDENTITY": "root",
    "KERNELCRAFT_ZYGOTE": "off",
    "KERNELCRAFT_SHRINK": "off",
    "KERNELCRAFT_PREBUILT": "off",
    "KERNELCRAFT_BYTECODE_CACHE": "off",
}


def test_every_variable_the_engine_reads_is_a_field_of_the_settings() -> None:
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(r'"(KERNELCRAFT_[A-Z][A-Z_]*)"', path.read_text(encoding="utf-8")))
    fields = set(EngineSettings.env_names())
    assert named - NOT_ENGINE <= fields, sorted(named - NOT_ENGINE - fields)
    assert set(FLIPPED) == fields, "a new setting needs its flipped value here"


@pytest.mark.parametrize("name", sorted(FLIPPED))
def test_each_setting_changed_reaches_a_ray_actors_environment(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from kernelcraft.engine.cluster.ray_evaluator import ENGINE_SETTINGS, actor_env

    for other in FLIPPED:
        monkeypatch.delenv(other, raising=False)
    default = actor_env()
    monkeypatch.setenv(name, FLIPPED[name])
    env = actor_env()
    assert env.get(name) == FLIPPED[name] and env.get(name) != default.get(name), env
    assert name in ENGINE_SETTINGS  # kept when the actor scrubs its node's environment


def test_the_box_mode_a_pool_gives_its_workers_follows_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcraft.engine import box

    for other in FLIPPED:
        monkeypatch.delenv(other, raising=False)
    assert box.mode("cpu") == "on" and box.mode("cuda") == "on,nopidns-gpu"
    monkeypatch.setenv("KERNELCRAFT_SANDBOX_IDENTITY", "ROOT")
    monkeypatch.setenv("KERNELCRAFT_SANDBOX_PIDNS", "off")
    assert box.mode("cpu") == "on,nopidns,root"
    monkeypatch.setenv("KERNELCRAFT_SANDBOX", "0")
    assert box.mode("cpu") == "off"


def test_a_bad_value_is_refused_with_the_variables_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("KERNELCRAFT_SANDBOX_IDENTITY", "admin")
    with pytest.raises(ValidationError, match="sandbox_identity"):
        EngineSettings()
