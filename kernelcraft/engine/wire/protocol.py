"""The messages between a job (`job/run.py`, in the evaluator's process) and its worker processes.

Each message is one frame of `channel.py`, its JSON header a model here whose fields are the
header's keys in wire order. A worker first gets its job (`Load`, untagged), then requests tagged
`"op"` (`Op`, one model each); it answers with messages tagged `"type"` (`Msg`, one model each).

    await w.send(MakeInputs(input_set=0, seed=7).to_header())         # the job
    req = parse_request(frame.header)                                  # the worker
    TaskReady.from_header(frame.header).input_sets                     # the job, reading an answer

`to_header()` writes the tag, then the fields that were given (set at construction, or read from
a header), so an optional key is on the wire exactly when its sender gave it: the JSON is the one
both sides built by hand before this module (`tests/engine/wire/test_protocol.py` pins it). `from_header()`
checks the tag and the fields' types; it raises `ValueError` (pydantic's `ValidationError` or
`ProtocolError`). The reference worker and the job are trusted; a candidate worker is not, so the
job turns a candidate message that does not parse into a `runtime_crash` verdict, never into an
exception of ours.

Light on purpose: pydantic only (every worker imports it before its job). The models live by
direction: `tagged.py` (the tags and the base), `requests.py` (the job's), `answers.py` (a
worker's); this module is their one door.
"""

from __future__ import annotations

from kernelcraft.engine.wire.answers import (
    REPLIES,
    Compared,
    Compiled,
    CompiledFiles,
    GpuWanted,
    InputsMade,
    KnockedOut,
    Loaded,
    Ok,
    Outputs,
    Progress,
    Ready,
    Replayed,
    RooflineCounted,
    Samples,
    Sized,
    TaskFailed,
    TaskReady,
    Timed,
    Verdict,
    Warm,
)
from kernelcraft.engine.wire.requests import (
    REQUESTS,
    AuditTimed,
    Compare,
    Compile,
    CompileRecorded,
    ComputeRoofline,
    FreshReplay,
    Knockout,
    Load,
    MakeInputs,
    NextJob,
    Perturb,
    Run,
    RunCompiled,
    SendCompiled,
    TimeCandidate,
    TimeReference,
    UseInputs,
    Warmup,
    WarmupReference,
    parse_request,
)
from kernelcraft.engine.wire.tagged import (
    FOUND_LAUNCHES,
    IMPORTING_CANDIDATE,
    Msg,
    Op,
    ProtocolError,
    Reply,
    Request,
    TimingMethod,
)

__all__ = [
    "FOUND_LAUNCHES",
    "IMPORTING_CANDIDATE",
    "REPLIES",
    "REQUESTS",
    "AuditTimed",
    "Compare",
    "Compared",
    "Compile",
    "CompileRecorded",
    "Compiled",
    "CompiledFiles",
    "ComputeRoofline",
    "FreshReplay",
    "GpuWanted",
    "InputsMade",
    "KnockedOut",
    "Knockout",
    "Load",
    "Loaded",
    "MakeInputs",
    "Msg",
    "NextJob",
    "Ok",
    "Op",
    "Outputs",
    "Perturb",
    "Progress",
    "ProtocolError",
    "Ready",
    "Replayed",
    "Reply",
    "Request",
    "RooflineCounted",
    "Run",
    "RunCompiled",
    "Samples",
    "SendCompiled",
    "Sized",
    "TaskFailed",
    "TaskReady",
    "TimeCandidate",
    "TimeReference",
    "Timed",
    "TimingMethod",
    "UseInputs",
    "Verdict",
    "Warm",
    "Warmup",
    "WarmupReference",
    "parse_request",
]
