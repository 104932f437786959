"""The parent/worker protocol: every message model writes the JSON the two sides exchanged when
they built headers by hand, and a hostile candidate's malformed message does not parse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernelcraft.engine.wire import protocol as p

REC = {"tensor": {"dtype": "float32", "shape": [4], "blob": 0}}
SAMPLES = {"times_us": [1.5, 2.0], "method": "cuda_graph", "sets": 8}

# (the model, the header the job or the worker wrote by hand before protocol.py)
WIRE: list[tuple[Any, dict[str, Any]]] = [
    (p.Knockout(inputs=[{"t": 1}]), {"op": "knockout", "inputs": [{"t": 1}]}),
    (p.SendCompiled(known=["K" * 52]), {"op": "send_compiled", "known": ["K" * 52]}),
    (
        p.CompiledFiles(names=["K" * 52 + "/k.cubin"]),
        {"type": "compiled_files", "names": ["K" * 52 + "/k.cubin"]},
    ),
    (
        p.KnockedOut(outputs={"t": 1}, inputs_after=[{"t": 2}], skipped=3),
        {"type": "knocked_out", "outputs": {"t": 1}, "inputs_after": [{"t": 2}], "skipped": 3},
    ),
    (p.KnockedOut(skipped=1, error="E"), {"type": "knocked_out", "skipped": 1, "error": "E"}),
    (
        p.Load(role="reference", workdir="/w", task_source="t", seed0=42, interpret=True),
        {"role": "reference", "workdir": "/w", "task_source": "t", "seed0": 42, "interpret": True},
    ),
    (
        p.Load(
            role="candidate",
            workdir="/w",
            task_source="t",
            seed0=42,
            interpret=False,
            candidate_source="c",
            sandbox=True,
            allowed_ops=["aten.add"],
            memory_limit_bytes=None,
        ),
        {
            "role": "candidate",
            "workdir": "/w",
            "task_source": "t",
            "seed0": 42,
            "interpret": False,
            "candidate_source": "c",
            "sandbox": True,
            "allowed_ops": ["aten.add"],
            "memory_limit_bytes": None,
        },
    ),
    (p.NextJob(), {"op": "next"}),
    (p.MakeInputs(input_set=1, seed=123), {"op": "inputs", "set": 1, "seed": 123}),
    (p.Perturb(seed=7), {"op": "perturb", "seed": 7}),
    (
        p.Compare(outputs=[REC], inputs_after=[REC]),
        {"op": "compare", "outputs": [REC], "inputs_after": [REC]},
    ),
    (p.Compare(outputs=None, inputs_after=None), {"op": "compare", "outputs": None, "inputs_after": None}),
    (
        p.ComputeRoofline(target="h100-sxm", full_size=True),
        {"op": "roofline", "target": "h100-sxm", "full_size": True},
    ),
    (p.WarmupReference(), {"op": "warmup_reference"}),
    (p.WarmupReference(gated=True), {"op": "warmup_reference", "gated": True}),
    (p.RunCompiled(), {"op": "run_compiled"}),
    (
        p.TimeReference(budget_ms=60.0, compiled=True, estimates={"eager": 20.5, "compiled": 15.0}),
        {
            "op": "time_reference",
            "budget_ms": 60.0,
            "compiled": True,
            "estimates": {"eager": 20.5, "compiled": 15.0},
        },
    ),
    (
        p.TimeReference(budget_ms=60.0, methods={"eager": "cuda_graph"}, compiled=False),
        {"op": "time_reference", "budget_ms": 60.0, "methods": {"eager": "cuda_graph"}, "compiled": False},
    ),
    (p.Run(inputs=[REC], determinism=True), {"op": "run", "inputs": [REC], "determinism": True}),
    (
        p.Run(inputs=[REC], determinism=True, program=True),
        {"op": "run", "inputs": [REC], "determinism": True, "program": True},
    ),
    (
        p.FreshReplay(program={"steps": []}, kept=[REC], seed=9, allowed_ops=["add"]),
        {"op": "fresh_replay", "program": {"steps": []}, "kept": [REC], "seed": 9, "allowed_ops": ["add"]},
    ),
    (p.Replayed(note="n"), {"type": "replayed", "note": "n"}),
    (
        p.AuditTimed(seeds=[3, 4], outputs=[REC, REC]),
        {"op": "audit_timed", "seeds": [3, 4], "outputs": [REC, REC]},
    ),
    (
        p.CompileRecorded(program={"steps": []}, targets=["sm_90a"]),
        {"op": "compile_recorded", "program": {"steps": []}, "targets": ["sm_90a"]},
    ),
    (
        p.Replayed(failure_class="forbidden_construct", evidence={"message": "m", "op": "fresh replay"}),
        {
            "type": "replayed",
            "failure_class": "forbidden_construct",
            "evidence": {"message": "m", "op": "fresh replay"},
        },
    ),
    (p.Compile(targets=["sm_90"], inputs=[REC]), {"op": "compile", "targets": ["sm_90"], "inputs": [REC]}),
    (p.Warmup(inputs=[REC]), {"op": "warmup", "inputs": [REC]}),
    (
        p.TimeCandidate(budget_ms=60.0, method="auto"),
        {"op": "time_candidate", "budget_ms": 60.0, "method": "auto"},
    ),
    (p.UseInputs(inputs=[REC]), {"op": "use_inputs", "inputs": [REC]}),
    (
        p.Ready(pid=7, device="cuda:0 (NVIDIA H200)"),
        {"type": "ready", "pid": 7, "device": "cuda:0 (NVIDIA H200)"},
    ),
    (p.TaskReady(input_sets=3), {"type": "task_ready", "input_sets": 3}),
    (
        p.Sized(inputs_bytes=64, elements=16, shrunk={"dim": [8192, 64]}, shrunk_source="dim = 64"),
        {
            "type": "sized",
            "inputs_bytes": 64,
            "elements": 16,
            "shrunk": {"dim": [8192, 64]},
            "shrunk_source": "dim = 64",
        },
    ),
    (p.TaskFailed(error="tb", summary="E()"), {"type": "task_error", "error": "tb", "summary": "E()"}),
    (p.Progress(message="importing"), {"type": "progress", "message": "importing"}),
    (p.InputsMade(inputs=[REC]), {"type": "inputs", "inputs": [REC]}),
    (p.Compared(failure_class=None), {"type": "compared", "failure_class": None}),
    (
        p.Compared(failure_class="runtime_crash", evidence={"message": "m"}, error="E: x"),
        {"type": "compared", "failure_class": "runtime_crash", "evidence": {"message": "m"}, "error": "E: x"},
    ),
    (
        p.RooflineCounted(roofline={"flops": 1.0}, shapes="get_inputs()"),
        {"type": "roofline", "roofline": {"flops": 1.0}, "shapes": "get_inputs()"},
    ),
    (
        p.RooflineCounted(roofline={"flops": 1.0}, shapes="trial inputs", errors=[]),
        {"type": "roofline", "roofline": {"flops": 1.0}, "shapes": "trial inputs", "errors": []},
    ),
    (p.RooflineCounted(roofline=None, error="E: x"), {"type": "roofline", "roofline": None, "error": "E: x"}),
    (p.Warm(), {"type": "warm"}),
    (p.Warm(compiled=2), {"type": "warm", "compiled": 2}),
    (p.Warm(compiled=0, error="E: x"), {"type": "warm", "compiled": 0, "error": "E: x"}),
    (p.Warm(ungated=True), {"type": "warm", "ungated": True}),
    (p.GpuWanted(compile_s=2.5), {"type": "gpu_wanted", "compile_s": 2.5}),
    (
        p.Timed(eager=p.Samples(times_us=[20.0], method="cuda_events", estimate_us=20.1)),
        {"type": "timed", "eager": {"times_us": [20.0], "method": "cuda_events", "estimate_us": 20.1}},
    ),
    (
        p.Timed(candidate=p.Samples(times_us=[1.5, 2.0], method="cuda_graph", sets=8)),
        {"type": "timed", "candidate": SAMPLES},
    ),
    (
        p.Timed(eager=p.Samples(**SAMPLES), compiled=p.Samples(**SAMPLES)),
        {"type": "timed", "eager": SAMPLES, "compiled": SAMPLES},
    ),
    (p.Timed(error="tb", summary="E()"), {"type": "timed", "error": "tb", "summary": "E()"}),
    (p.Loaded(sandbox_unavailable=None), {"type": "loaded", "sandbox_unavailable": None}),
    (
        p.Verdict(failure_class="pytorch_fallback", evidence={"message": "m", "op": "aten.mm"}),
        {
            "type": "verdict",
            "failure_class": "pytorch_fallback",
            "evidence": {"message": "m", "op": "aten.mm"},
        },
    ),
    (
        p.Outputs(outputs=[REC, REC], inputs_after=[REC], kernels=["k"]),
        {"type": "outputs", "outputs": [REC, REC], "inputs_after": [REC], "kernels": ["k"]},
    ),
    (
        p.Compiled(launches=[{"name": "k"}], targets=[{"target": "sm_90"}], seconds=0.5),
        {"type": "compiled", "launches": [{"name": "k"}], "targets": [{"target": "sm_90"}], "seconds": 0.5},
    ),
    (p.Compiled(error="tb", summary="E: x"), {"type": "compiled", "error": "tb", "summary": "E: x"}),
    (p.Ok(), {"type": "ok"}),
]


@pytest.mark.parametrize(
    ("model", "by_hand"), WIRE, ids=lambda x: type(x).__name__ if hasattr(x, "to_header") else ""
)
def test_a_message_writes_the_json_both_sides_wrote_by_hand(model: Any, by_hand: dict[str, Any]) -> None:
    assert json.dumps(model.to_header()) == json.dumps(by_hand)
    # and reads back as itself (the channel adds "blobs", which is not a field)
    again = type(model).from_header({**by_hand, "blobs": []})
    assert again == model and json.dumps(again.to_header()) == json.dumps(by_hand)


def test_every_op_and_message_type_has_one_model() -> None:
    assert set(p.REQUESTS) == {op.value for op in p.Op} and len(p.Op) == 18
    assert set(p.REPLIES) == {t.value for t in p.Msg} and len(p.Msg) == 19
    models = {type(m) for m, _ in WIRE}
    assert set(p.REQUESTS.values()) | set(p.REPLIES.values()) <= models  # each is pinned above


def test_a_worker_reads_requests_by_op_and_stops_on_an_unknown_one() -> None:
    assert p.parse_request({"op": "inputs", "set": 2, "seed": 5, "blobs": []}) == p.MakeInputs(
        input_set=2, seed=5
    )
    assert p.parse_request({"op": "exit"}) is None
    assert p.parse_request({}) is None


@pytest.mark.parametrize(
    ("cls", "header"),
    [
        (p.Timed, {"type": "timed", "candidate": {"times_us": "fast", "method": "x"}}),
        (p.Timed, {"type": "verdict", "candidate": SAMPLES}),
        (p.Timed, {"type": "timed", "candidate": {**SAMPLES, "method": "a stopwatch"}}),
        (p.Outputs, {"type": "outputs", "outputs": 5, "inputs_after": None}),
        (p.Loaded, {"type": "loaded", "sandbox_unavailable": {"not": "a string"}}),
        (p.TaskReady, {"type": ["task_ready"]}),
    ],
)
def test_a_malformed_message_does_not_parse(cls: type[p.Reply], header: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        cls.from_header(header)


def test_a_timing_without_the_asked_samples_is_a_protocol_error() -> None:
    timed = p.Timed.from_header({"type": "timed", "eager": SAMPLES})
    assert timed.samples("eager").sets == 8
    with pytest.raises(p.ProtocolError, match="compiled"):
        timed.samples("compiled")
