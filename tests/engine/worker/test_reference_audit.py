"""The reference worker's check of a candidate's timed calls (`ReferenceWorker.audit_timed`,
`engine/measure/audit.py`): each kept output against Model on the inputs drawn again from its
seed; and a round's claim that it could not be audited, checked on two draws of its own."""

from __future__ import annotations

import socket
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelcraft.engine.wire import tensors  # noqa: E402
from kernelcraft.engine.wire.protocol import AuditTimed, Load  # noqa: E402
from kernelcraft.engine.worker.reference import ReferenceWorker  # noqa: E402

TASK = """
import random
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 3.0

def get_inputs():
    return [torch.randn({rows}, 16)]

def get_init_inputs():
    return []
"""


def _worker(tmp_path: Path, rows: str) -> Iterator[ReferenceWorker]:
    source = TASK.format(rows=rows)
    a, b = socket.socketpair()
    w = ReferenceWorker(a, device="cpu")
    w.job = Load(role="reference", workdir=str(tmp_path), task_source=source, seed0=0)
    task = types.ModuleType("audit_task")
    exec(compile(source, "task.py", "exec"), task.__dict__)  # noqa: S102 - the test's own task
    w.task, w.model = task, task.Model()
    yield w
    a.close()
    b.close()


@pytest.fixture
def fixed(tmp_path: Path) -> Iterator[ReferenceWorker]:
    yield from _worker(tmp_path, "8")


def _kept(w: ReferenceWorker, seeds: list[int], answer_for: list[int]) -> tuple[AuditTimed, list[bytes]]:
    """The candidate's side: for each seed, Model's answer on the draw of `answer_for`'s seed."""
    assert w.job is not None
    blobs: list[bytes] = []
    outs = [
        tensors.pack(w.model(*w.make_inputs(w.task, w.job, 0, s)), blobs, cuda_ipc=False) for s in answer_for
    ]
    return AuditTimed(seeds=seeds, outputs=outs), blobs


def test_kept_timed_calls_that_answer_their_own_draw_pass(fixed: ReferenceWorker) -> None:
    req, blobs = _kept(fixed, [11, 12], [11, 12])
    assert fixed.audit_timed(req, blobs).failure_class is None


def test_a_kept_timed_call_that_answers_another_draw_fails(fixed: ReferenceWorker) -> None:
    req, blobs = _kept(fixed, [11, 12], [11, 11])  # the second: an answer kept from the first
    compared = fixed.audit_timed(req, blobs)
    assert compared.failure_class == "numerical_mismatch", compared


def test_unreadable_timed_outputs_are_the_candidates_crash(fixed: ReferenceWorker) -> None:
    compared = fixed.audit_timed(AuditTimed(seeds=[1], outputs=[{"tensor": {"bad": 1}}]), [])
    assert compared.failure_class == "runtime_crash" and compared.error


def test_a_claim_that_the_draws_cannot_stand_in_is_refuted_where_they_can(fixed: ReferenceWorker) -> None:
    compared = fixed.audit_timed(AuditTimed(seeds=[], outputs=[], seeds_for_claim=[3, 4]), [])
    assert compared.failure_class == "forbidden_construct" and compared.evidence is not None
    assert "could not be audited" in compared.evidence["message"]


def test_a_claim_that_the_draws_cannot_stand_in_holds_where_their_shape_changes(tmp_path: Path) -> None:
    for w in _worker(tmp_path, "random.randint(4, 4096)"):
        compared = w.audit_timed(AuditTimed(seeds=[], outputs=[], seeds_for_claim=[3, 4]), [])
        assert compared.failure_class is None, compared
