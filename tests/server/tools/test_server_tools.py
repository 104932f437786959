"""Every MCP tool and every error path, through an in-process `Client(server)`: what a model sees."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from search_scripted import ScriptedEvaluator
from search_scripted import candidate as scripted_candidate
from server_support import CANDIDATE, REPO, TASK, LentEvaluator, NoEvaluations, failure_clients, settings_for

from kernelcraft.base import knobs
from kernelcraft.base.config import Settings
from kernelcraft.engine.host.local import LocalEvaluator
from kernelcraft.server.app import create_server

SNAPSHOT = REPO / "tests" / "snapshots" / "list_tools.json"

RULE = "You cannot format strings with f-strings inside a jitted function body."
SEED_RULE = "You cannot use tl.arange with a range whose length is not a power of two."
ARANGE_ERROR = "ValueError: arange's range must be a power of 2"


def error_text(result: Any) -> str:
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return "\n".join(block.text for block in result.content if block.type == "text")


# ---------------------------------------------------------------------------- the tool list


def tool_listing(tools: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "annotations": t.annotations.model_dump(mode="json", exclude_none=True),
            "input_schema": t.input_schema,
        }
        for t in sorted(tools, key=lambda t: t.name)
    ]


@pytest.mark.anyio
async def test_the_tool_list_matches_the_snapshot(client: Client) -> None:
    """Regenerate after a deliberate change: KERNELCRAFT_UPDATE_SNAPSHOTS=1 pytest tests/server/tools/test_server_tools.py"""
    listing = tool_listing((await client.list_tools()).tools)
    if os.environ.get("KERNELCRAFT_UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(listing, indent=2, sort_keys=True) + "\n")
    assert listing == json.loads(SNAPSHOT.read_text())


@pytest.mark.anyio
async def test_every_tool_is_annotated_closed_world_and_not_destructive_and_describes_every_parameter(
    client: Client,
) -> None:
    # A hint at the protocol's default is left unsent (issue 38: tools/list in 24 KB): read_only and
    # idempotent default to false; destructive is moot for a read-only tool.
    for tool in (await client.list_tools()).tools:
        a = tool.annotations
        assert a is not None, tool.name
        destructive = a.destructive_hint if not a.read_only_hint else False
        assert a.open_world_hint is False and destructive is False, tool.name
        assert a.read_only_hint in (True, None) and a.idempotent_hint in (True, None), tool.name
        assert tool.description and tool.output_schema, tool.name
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"


# ---------------------------------------------------------------------------- knowledge


@pytest.mark.anyio
async def test_a_rule_proposed_with_three_failing_candidates_verified_here_becomes_active(
    tmp_path: Path,
) -> None:
    async with Client(create_server(settings_for(tmp_path), lambda _: ScriptedEvaluator())) as client:
        for attempt in range(3):
            # a runtime error: a wrong result would count toward no rule
            bad = scripted_candidate("crash", f"attempt {attempt}")
            verdict = await client.call_tool(
                "verify_against_reference", {"reference_code": TASK, "candidate_code": bad}
            )
            assert verdict.structured_content is not None and verdict.structured_content["correct"] is False
            result = await client.call_tool(
                "record_failure",
                {"candidate_code": bad, "error": ARANGE_ERROR, "rule": RULE, "arch": "sm_90a"},
            )
            assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["activated"] is True
        # The class is the server's own verdict on that candidate, not what the error text suggests.
        assert result.structured_content["failure_class"] == "runtime_illegal_memory_access"

        found = await client.call_tool(
            "query_rules", {"context": "f-strings in my jitted function", "arch": "sm_90a"}
        )
        assert not found.is_error, found.content
        assert found.structured_content is not None
        assert found.structured_content["rules"][0]["text"] == RULE


@pytest.mark.anyio
async def test_the_seed_rulebook_is_imported_on_first_start(client: Client) -> None:
    found = await client.call_tool("query_rules", {"context": "tl.arange with 100 elements"})
    assert found.structured_content is not None
    assert SEED_RULE in [rule["text"] for rule in found.structured_content["rules"]]


@pytest.mark.anyio
async def test_record_failure_over_an_in_process_client_is_attributed_to_local(tmp_path: Path) -> None:
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        result = await client.call_tool("record_failure", {"candidate_code": "x = 1", "error": ARANGE_ERROR})
        assert not result.is_error, result.content
    assert failure_clients(tmp_path / "kernelcraft.db") == ["local"]


@pytest.mark.anyio
async def test_a_rule_not_in_you_cannot_form_is_a_tool_error_saying_how_to_rewrite_it(client: Client) -> None:
    result = await client.call_tool(
        "record_failure", {"candidate_code": "x", "error": ARANGE_ERROR, "rule": "Use powers of two."}
    )
    assert "You cannot" in error_text(result) and "Rewrite" in error_text(result)


@pytest.mark.anyio
async def test_an_unknown_arch_is_a_tool_error_naming_the_known_ones(client: Client) -> None:
    result = await client.call_tool("query_rules", {"context": "softmax", "arch": "pascal"})
    text = error_text(result)
    assert "unknown architecture 'pascal'" in text and "sm_90a" in text


@pytest.mark.anyio
async def test_code_over_one_megabyte_is_refused_with_what_to_do(client: Client) -> None:
    big = "# padding\n" * 100_001
    result = await client.call_tool("record_failure", {"candidate_code": big, "error": ARANGE_ERROR})
    text = error_text(result)
    assert "candidate_code is 1,000,010 bytes, over the 1,000,000-byte limit" in text and "retry" in text


@pytest.mark.anyio
async def test_the_code_limit_comes_from_the_settings(tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "k.db", max_code_bytes=100)
    async with Client(create_server(settings, NoEvaluations)) as client:
        result = await client.call_tool("query_rules", {"context": "x" * 101})
        assert "over the 100-byte limit" in error_text(result)


@pytest.mark.anyio
async def test_a_malformed_argument_is_a_tool_error_saying_what_to_fix(client: Client) -> None:
    result = await client.call_tool("query_rules", {"context": "softmax", "limit": "ten"})
    text = error_text(result)
    assert "invalid arguments (limit: Input should be a valid integer" in text
    assert "match the tool's input schema" in text


@pytest.mark.anyio
async def test_a_misspelt_argument_is_refused_naming_the_arguments_the_tool_takes(client: Client) -> None:
    result = await client.call_tool("query_rules", {"contxt": "softmax", "limit": 3})
    text = error_text(result)
    assert "unknown argument 'contxt'" in text and "query_rules takes: context, arch, dsl, limit" in text
    both = await client.call_tool("search_tree_step", {"action": "status", "tree": 1, "node": 2})
    assert "unknown arguments 'tree', 'node'" in error_text(both)


@pytest.mark.anyio
async def test_a_missing_argument_is_a_tool_error_naming_it(client: Client) -> None:
    result = await client.call_tool("record_failure", {"error": ARANGE_ERROR})
    assert "candidate_code: Field required" in error_text(result)


@pytest.mark.anyio
async def test_an_unknown_tool_is_a_tool_error_listing_the_tools(client: Client) -> None:
    result = await client.call_tool("write_kernel_for_me", {})
    text = error_text(result)
    assert "unknown tool 'write_kernel_for_me'" in text and "query_rules" in text


# ---------------------------------------------------------------------------- hardware manuals


@pytest.mark.anyio
async def test_search_hw_docs_finds_the_section_for_a_question_and_its_whole_text_by_id(
    client: Client,
) -> None:
    found = await client.call_tool(
        "search_hw_docs", {"query": "shared memory per SM", "arch": "sm_90a", "limit": 3}
    )
    assert not found.is_error, found.content
    assert found.structured_content is not None
    top = found.structured_content["sections"][0]
    assert top["arch"] == "sm_90a" and "Shared memory" in top["heading_path"]

    whole = await client.call_tool("search_hw_docs", {"section_id": top["id"]})
    assert whole.structured_content is not None
    assert len(whole.structured_content["sections"][0]["snippet"]) >= len(top["snippet"])


@pytest.mark.anyio
async def test_search_hw_docs_needs_a_query_or_a_section_id(client: Client) -> None:
    assert "pass either query" in error_text(await client.call_tool("search_hw_docs", {}))


@pytest.mark.anyio
async def test_an_unknown_section_id_is_a_tool_error_saying_to_search_first(client: Client) -> None:
    text = error_text(await client.call_tool("search_hw_docs", {"section_id": 999_999}))
    assert "no manual section with id 999999" in text and "search_hw_docs" in text


# ---------------------------------------------------------------------------- the evaluation engine
#
# These run the real LocalEvaluator in Triton's interpreter on a 4x100 elementwise task. One
# evaluator (two pre-started workers) serves the whole module, so its pool starts once.

SEGFAULT = """
import faulthandler
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale=0.5):
        super().__init__()

    def forward(self, x, y):
        faulthandler._sigsegv()
"""


def hanging_candidate() -> str:
    # A candidate hangs in forward. (It cannot report its pid through a file: the sandbox lets it
    # write only in its own directory; the test asks the evaluator for its workers instead.)
    return """
import time
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale=0.5):
        super().__init__()

    def forward(self, x, y):
        time.sleep(600)
        return x
"""


@pytest.fixture(scope="module")
async def local_evaluator() -> AsyncIterator[LocalEvaluator]:
    evaluator = LocalEvaluator(settings=knobs.settings(), workers=2, device="cpu")
    try:
        yield evaluator
    finally:
        await evaluator.aclose()


@pytest.fixture
async def engine(tmp_path: Path, local_evaluator: LocalEvaluator) -> AsyncIterator[Client]:
    server = create_server(settings_for(tmp_path), lambda settings: LentEvaluator(local_evaluator))
    async with Client(server) as c:
        yield c


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.anyio
async def test_verify_passes_a_correct_kernel_in_the_interpreter_and_reports_progress(engine: Client) -> None:
    messages: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append((progress, message))

    with anyio.fail_after(120):
        result = await engine.call_tool(
            "verify_against_reference",
            {"reference_code": TASK, "candidate_code": CANDIDATE, "trials": 2},
            progress_callback=on_progress,
        )
    assert not result.is_error, result.content
    verdict = result.structured_content
    assert verdict is not None
    assert verdict["correct"] is True and verdict["interpreter"] is True and verdict["trials_passed"] == 2
    assert any(m and m.startswith("trial 1 of 2") for _, m in messages), messages
    fractions = [p for p, _ in messages]
    assert fractions == sorted(fractions), "MCP progress must never decrease"


@pytest.mark.slow
@pytest.mark.anyio
async def test_verify_runs_at_the_cpu_sizes_a_task_sent_over_mcp_gives_itself(engine: Client) -> None:
    """An MCP client sends only source, so it had no way to give CPU sizes (the CLI has
    `--cpu-sizes` and sidecars): the task's own `KERNELCRAFT_CPU_SIZES` runs it at 2048 (the
    shrink itself now keeps the candidate's blocks: tests/engine/host/test_user_tasks.py), and a
    malformed one says what to write."""
    folder = REPO / "tests" / "fixtures" / "user_tasks" / "shrink"
    task = (folder / "unmasked_blocks.py").read_text()
    arguments = {
        "reference_code": task + '\nKERNELCRAFT_CPU_SIZES = {"batch_size": 4, "dim": 2048}\n',
        "candidate_code": (folder / "unmasked_blocks_triton.py").read_text(),
        "trials": 2,
    }
    with anyio.fail_after(120):
        result = await engine.call_tool("verify_against_reference", arguments)
    assert not result.is_error, result.content
    verdict = result.structured_content
    assert verdict is not None and verdict["correct"] is True, verdict
    assert any("sizes given for the CPU" in n for n in verdict["notes"]), verdict["notes"]
    bad = {**arguments, "reference_code": task + "\nKERNELCRAFT_CPU_SIZES = {'dim': 0}\n"}
    refused = await engine.call_tool("verify_against_reference", bad)
    assert refused.is_error and 'e.g. {"batch_size": 16, "dim": 1024}' in str(refused.content), refused


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_candidate_that_segfaults_is_a_crash_verdict_not_a_server_error(engine: Client) -> None:
    with anyio.fail_after(120):
        result = await engine.call_tool(
            "verify_against_reference", {"reference_code": TASK, "candidate_code": SEGFAULT, "trials": 1}
        )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["correct"] is False
    assert result.structured_content["failure_class"] == "runtime_crash"
    # The server is still serving.
    assert not (await engine.call_tool("query_rules", {"context": "segfault"})).is_error


@pytest.mark.slow
@pytest.mark.anyio
async def test_compile_kernel_reports_registers_per_target(engine: Client) -> None:
    with anyio.fail_after(120):
        result = await engine.call_tool(
            "compile_kernel",
            {"reference_code": TASK, "candidate_code": CANDIDATE, "targets": ["sm_90a", "gfx942"]},
        )
    assert not result.is_error, result.content
    compiled = result.structured_content
    assert compiled is not None and compiled["ok"] is True
    assert [t["target"] for t in compiled["targets"]] == ["sm_90a", "gfx942"]
    assert compiled["targets"][0]["kernels"][0]["name"] == "scaled_add_kernel"
    assert compiled["targets"][0]["kernels"][0]["registers"] > 0


@pytest.mark.anyio
async def test_an_unknown_target_is_a_tool_error_listing_the_known_ones(engine: Client) -> None:
    result = await engine.call_tool(
        "compile_kernel", {"reference_code": TASK, "candidate_code": CANDIDATE, "targets": ["sm_75"]}
    )
    text = error_text(result)
    assert "targets.0" in text and "'sm_90a'" in text and "gfx942" in text


@pytest.mark.slow
@pytest.mark.anyio
async def test_profile_without_a_gpu_says_timing_needs_one(engine: Client) -> None:
    with anyio.fail_after(120):
        result = await engine.call_tool(
            "profile_kernel", {"reference_code": TASK, "candidate_code": CANDIDATE}
        )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["available"] is False
    assert "needs a CUDA GPU" in result.structured_content["message"]
    # still, each kernel as compiled for the roofline's target, in words (issue 29: profiles say why)
    why = result.structured_content["why"]
    assert (
        len(why) == 1
        and why[0].startswith("kernel scaled_add_kernel on sm_90a: ")
        and "registers per thread" in why[0]
    )
    assert why[0] in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_task_without_model_is_a_tool_error_naming_what_is_missing(engine: Client) -> None:
    result = await engine.call_tool(
        "verify_against_reference",
        {"reference_code": "def get_inputs():\n    return []\n", "candidate_code": CANDIDATE},
    )
    assert "Model" in error_text(result)


@pytest.mark.anyio
async def test_candidate_code_over_one_megabyte_is_refused_before_any_evaluation(engine: Client) -> None:
    big = CANDIDATE + "#" * 1_000_000
    result = await engine.call_tool(
        "verify_against_reference", {"reference_code": TASK, "candidate_code": big}
    )
    assert "over the 1,000,000-byte limit" in error_text(result)


@pytest.mark.slow
@pytest.mark.anyio
async def test_other_calls_are_served_during_an_evaluation_and_a_cancelled_one_leaves_no_worker(
    engine: Client, local_evaluator: LocalEvaluator
) -> None:
    arguments = {"reference_code": TASK, "candidate_code": hanging_candidate(), "timeout_s": 300}
    in_forward = anyio.Event()

    async def progress(_done: float, _total: float | None, message: str | None) -> None:
        if message and "trial 1 of" in message:
            in_forward.set()

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:

            async def evaluate() -> None:
                await engine.call_tool("verify_against_reference", arguments, progress_callback=progress)

            tg.start_soon(evaluate)
            await in_forward.wait()
            pids = local_evaluator.active_worker_pids()
            assert pids, "the evaluation's workers should be running"

            start = time.perf_counter()
            rules = await engine.call_tool("query_rules", {"context": "softmax"})
            assert not rules.is_error and time.perf_counter() - start < 1.0

            tg.cancel_scope.cancel()  # the client gives up on the evaluation
        # The candidate's process dies; the reference's is parked for the next job on the task
        # (it was between requests), or dies too.
        kept = set(local_evaluator.idle_reference_pids())
        while any(process_alive(pid) and pid not in kept for pid in pids):
            await anyio.sleep(0.05)
        assert len(set(pids) - kept) >= 1


# ---------------------------------------------------------------------------- the search tree


@pytest.mark.slow
@pytest.mark.anyio
async def test_search_tree_step_starts_submits_and_reports_the_best_kernel(engine: Client) -> None:
    started = await engine.call_tool(
        "search_tree_step", {"action": "start", "reference_code": TASK, "target": "sm_90a", "budget": 3}
    )
    assert not started.is_error, started.content
    assert started.structured_content is not None
    step = started.structured_content["start"]["next_step"]
    assert step["kind"] == "large" and step["instructions"]

    with anyio.fail_after(180):
        submitted = await engine.call_tool(
            "search_tree_step",
            {
                "action": "submit",
                "tree_id": step["tree_id"],
                "node_id": step["node_id"],
                "candidate_code": CANDIDATE,
            },
        )
    assert not submitted.is_error, submitted.content
    assert submitted.structured_content is not None
    result = submitted.structured_content["submit"]
    assert result["node"]["outcome"] == "correct" and result["new_best"] is True
    assert result["node"]["client"] == "local"
    assert result["budget_left"] == 2 and result["next_step"] is not None

    status = await engine.call_tool("search_tree_step", {"action": "status", "tree_id": step["tree_id"]})
    assert status.structured_content is not None
    assert status.structured_content["status"]["best"]["id"] == step["node_id"]

    tree = await engine.read_resource(f"trees://{step['tree_id']}")
    document = json.loads(tree.contents[0].text)
    assert document["best"]["code"] == CANDIDATE


@pytest.mark.anyio
async def test_a_tree_is_named_by_the_clients_file_name_or_else_after_the_tasks_operator(
    client: Client,
) -> None:
    named = {}
    for extra in ({}, {"task_name": "scaled_add.py"}):
        started = await client.call_tool(
            "search_tree_step", {"action": "start", "reference_code": TASK, "budget": 1, **extra}
        )
        assert started.structured_content is not None, started.content
        named[extra.get("task_name")] = started.structured_content["start"]["tree"]["task_name"]
    assert named == {None: "A scaled residual add", "scaled_add.py": "scaled_add.py"}


@pytest.mark.anyio
async def test_an_unknown_tree_is_a_tool_error_saying_how_to_start_one(client: Client) -> None:
    text = error_text(await client.call_tool("search_tree_step", {"action": "status", "tree_id": 4242}))
    assert "no search tree 4242" in text and "start" in text


@pytest.mark.anyio
async def test_a_submit_without_its_node_is_a_tool_error_naming_what_is_missing(client: Client) -> None:
    result = await client.call_tool(
        "search_tree_step", {"action": "submit", "tree_id": 1, "candidate_code": "x"}
    )
    assert "action 'submit' needs node_id" in error_text(result)


@pytest.mark.anyio
async def test_an_unknown_action_is_a_tool_error_listing_the_actions(client: Client) -> None:
    text = error_text(await client.call_tool("search_tree_step", {"action": "undo"}))
    assert "'start', 'submit', 'status', 'abandon', 'next' or 'share'" in text


@pytest.mark.anyio
async def test_abandon_records_a_step_without_a_candidate_and_evaluates_nothing(client: Client) -> None:
    # `client` has no evaluator: any evaluation would fail the test
    started = await client.call_tool(
        "search_tree_step", {"action": "start", "reference_code": TASK, "budget": 2}
    )
    assert started.structured_content is not None
    step = started.structured_content["start"]["next_step"]
    where = {"tree_id": step["tree_id"], "node_id": step["node_id"]}
    missing = await client.call_tool("search_tree_step", {"action": "abandon", **where})
    assert "action 'abandon' needs reason" in error_text(missing)

    reason = "the model answered without a submit_kernel call"
    result = await client.call_tool("search_tree_step", {"action": "abandon", **where, "reason": reason})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    abandoned = result.structured_content["abandon"]
    assert abandoned["node"]["abandoned"] is True and abandoned["node"]["outcome"] == "not_compiled"
    assert abandoned["node"]["error"] == reason and abandoned["node"]["reward"] == 0.0
    assert abandoned["budget_left"] == 1 and abandoned["next_step"]["kind"] == "large"

    again = await client.call_tool("search_tree_step", {"action": "abandon", **where, "reason": reason})
    assert "already has a verdict" in error_text(again)


# ---------------------------------------------------------------------------- resources and prompts


@pytest.mark.anyio
async def test_active_rules_are_readable_as_resources_for_all_and_per_arch(client: Client) -> None:
    everything = json.loads((await client.read_resource("rules://active")).contents[0].text)
    assert SEED_RULE in [rule["text"] for rule in everything["rules"]]
    amd = json.loads((await client.read_resource("rules://active/gfx942")).contents[0].text)
    assert amd["arch"] == "gfx942"
    assert all(rule["scope"]["arch_family"] in (None, "amd") for rule in amd["rules"])


@pytest.mark.anyio
async def test_every_manual_section_is_listed_and_readable(client: Client) -> None:
    listing = json.loads((await client.read_resource("hwdocs://sections")).contents[0].text)
    assert len(listing["sections"]) >= 7
    first = listing["sections"][0]
    text = (await client.read_resource(first["uri"])).contents[0].text
    assert text.startswith(f"# {first['heading_path']}") and "Sources:" in text


@pytest.mark.anyio
async def test_prompts_walk_through_the_tools_this_server_has(client: Client) -> None:
    names = {tool.name for tool in (await client.list_tools()).tools}
    optimize = await client.get_prompt("optimize-kernel", {"reference_code": TASK, "target": "gfx942"})
    text = optimize.messages[0].content.text
    assert "search_tree_step" in text and '"start"' in text and '"submit"' in text and "gfx942" in text
    fix = await client.get_prompt("fix-failure", {"candidate_code": CANDIDATE, "error": ARANGE_ERROR})
    fix_text = fix.messages[0].content.text
    assert "record_failure" in fix_text and "query_rules" in fix_text and "You cannot" in fix_text
    for tool in (
        "search_tree_step",
        "query_rules",
        "search_hw_docs",
        "record_failure",
        "verify_against_reference",
    ):
        assert tool in names
