"""The fresh-input replay's re-run apart from the reference (`replay/untouched.py`): on the CPU the
record's kernels run in a child forked for them, whose outputs come back as bytes; what the child
writes of the reference's memory stays the child's, and its refusals, errors and death come back
as words."""

from __future__ import annotations

import os

import pytest
import torch

from kernelcraft.engine.replay import untouched


class _Refused(Exception):
    pass


def test_the_childs_outputs_come_back_and_its_writes_stay_its_own() -> None:
    weight = torch.ones(4)
    torch.zeros(1 << 22).add_(1)  # this process's OpenMP pool has run (a child once deadlocked then)

    def run() -> list[torch.Tensor]:
        weight.zero_()  # what a kernel writing beyond its buffers does to the reference's Model
        big = torch.zeros(1 << 20).add_(1)  # a loop ATen would run in parallel
        return [torch.arange(6.0).reshape(2, 3), torch.tensor([True, False]), torch.zeros(0), big]

    out = untouched.run_apart(run, (_Refused,), 1 << 23)
    assert torch.equal(out[0], torch.arange(6.0).reshape(2, 3)) and out[1].tolist() == [True, False]
    assert out[2].numel() == 0 and torch.equal(weight, torch.ones(4)) and out[3].sum() == 1 << 20


def test_a_refusal_an_error_and_a_death_in_the_child_come_back_as_words() -> None:
    def refuse() -> list[torch.Tensor]:
        raise _Refused("the record names a storage it does not list")

    def fail() -> list[torch.Tensor]:
        raise ZeroDivisionError("in a kernel")

    def die() -> list[torch.Tensor]:
        os.kill(os.getpid(), 9)
        return []

    for run, kind, words in [
        (refuse, "refused", "does not list"),
        (fail, "raised", "ZeroDivisionError: in a kernel"),
        (die, "died", "killed by signal SIGKILL"),
    ]:
        with pytest.raises(untouched.Apart, match=words) as caught:
            untouched.run_apart(run, (_Refused,), 1 << 20)
        assert caught.value.kind == kind


def test_outputs_past_the_cap_are_refused() -> None:
    with pytest.raises(untouched.Apart, match="more than 1024 bytes"):
        untouched.run_apart(lambda: [torch.zeros(1 << 16)], (_Refused,), 1024)
