"""A job's knobs are defined once (base/knobs.py) and every door reads the same default and bounds:
the CLI's flags, the MCP tools' inputs, the evaluation job and a search tree's configuration
(issue 40 item 4: the timeout's default was written 5 times with two values, its bound 4 times)."""

from __future__ import annotations

import argparse

import pytest
from mcp import Client

from kernelcraft.base.knobs import LEVEL_TIMEOUT_S, TIMEOUT_S, TRIALS
from kernelcraft.cli import build_parser
from kernelcraft.schema.evaluation import EvalJob
from kernelcraft.schema.presets import SearchConfig


def flag(argv: list[str], dest: str) -> argparse.Action:
    parser = build_parser(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next(a for a in sub.choices[argv[0]]._actions if a.dest == dest)


def schema_bounds(prop: dict) -> tuple[float | None, float | None, float | None, float | None]:
    return prop.get("exclusiveMinimum"), prop.get("minimum"), prop.get("maximum"), prop.get("default")


@pytest.mark.anyio
async def test_the_timeout_and_trials_agree_in_the_cli_the_tools_the_job_and_the_tree(tmp_path) -> None:
    from kernelcraft.base.config import Settings
    from kernelcraft.server.app import create_server

    async with Client(create_server(Settings(db_path=tmp_path / "kc.db"))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("verify_against_reference", "profile_kernel", "compile_kernel"):
        timeout = tools[name].input_schema["properties"]["timeout_s"]
        assert schema_bounds(timeout) == (TIMEOUT_S.low, None, TIMEOUT_S.high, TIMEOUT_S.default), name
    trials = tools["verify_against_reference"].input_schema["properties"]["trials"]
    assert schema_bounds(trials) == (None, TRIALS.low, TRIALS.high, TRIALS.default)

    job = EvalJob.model_json_schema()["properties"]
    assert schema_bounds(job["timeout_s"]) == (TIMEOUT_S.low, None, TIMEOUT_S.high, TIMEOUT_S.default)
    assert schema_bounds(job["trials"]) == (None, TRIALS.low, TRIALS.high, TRIALS.default)
    tree = SearchConfig.model_json_schema()["properties"]["timeout_s"]
    assert schema_bounds(tree) == (TIMEOUT_S.low, None, TIMEOUT_S.high, TIMEOUT_S.default)

    for command in ("verify", "profile", "compile"):
        action = flag([command, "t.py", "c.py"], "timeout")
        assert action.default == TIMEOUT_S.default, command
        assert action.type("3600") == TIMEOUT_S.high
        for outside in ("0", "3600.5", "nan", "inf", "-1"):
            with pytest.raises(argparse.ArgumentTypeError, match=r"\(0, 3600\] s"):
                action.type(outside)
    assert flag(["verify", "t.py", "c.py"], "trials").default == TRIALS.default
    level = flag(["level", "tasks", "--out", "o"], "timeout")
    assert level.default == LEVEL_TIMEOUT_S and TIMEOUT_S.check(LEVEL_TIMEOUT_S)
    assert level.type is action.type


def test_a_trees_timeout_reaches_each_of_its_jobs() -> None:
    from kernelcraft.search.verdicts import eval_job

    config = SearchConfig.model_validate({"timeout_s": 42.5})
    job = eval_job("t", "t.py", "c", "sm_90a", trials=2, has_gpu=False, timeout_s=config.timeout_s)
    assert job.timeout_s == 42.5
    with pytest.raises(ValueError, match="timeout_s"):
        SearchConfig.model_validate({"timeout_s": 3601})
