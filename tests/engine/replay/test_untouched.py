"""The reference's memory during the fresh-input replay (`replay/untouched.py`): what the re-run's
kernels wrote of Model's or of the fresh inputs is named; what they were given is theirs."""

from __future__ import annotations

import torch

from kernelcraft.engine.replay import untouched


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.ones(3))
        self.table = {"shift": torch.zeros(3)}
        self.plain = torch.arange(3.0)


def test_a_write_into_models_weights_a_buffer_an_attribute_or_the_fresh_inputs_is_named() -> None:
    for name, write in [
        ("Model's lin.weight", lambda m, x: m.lin.weight.data.zero_()),
        ("Model's scale", lambda m, x: m.scale.add_(1)),
        ("Model's shift", lambda m, x: m.table["shift"].fill_(2)),
        ("Model's plain", lambda m, x: m.plain.neg_()),
        ("the fresh input 1", lambda m, x: x[1].mul_(0)),
    ]:
        model, inputs = _Model(), [torch.randn(2, 4), torch.randn(5), 3]
        watch = untouched.Watch(model, inputs)
        assert watch.changed() is None
        write(model, inputs)
        why = watch.changed()
        assert why is not None and name in why, (name, why)


def test_writes_into_the_kernels_own_buffers_are_not_the_references() -> None:
    model, inputs = _Model(), [torch.randn(2, 4)]
    watch = untouched.Watch(model, inputs)
    given = torch.empty_like(inputs[0]).copy_(inputs[0])  # what the re-run's kernels get
    given.mul_(3)
    assert watch.changed() is None
