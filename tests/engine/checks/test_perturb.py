"""Verify's fresh parameters: equal in both models, different from their initial values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelcraft.engine.checks.perturb import (
    differences,
    named_signature,
    not_perturbed,
    perturb,
    signature,
    task_allows,
)

PARAMS = Path(__file__).resolve().parents[2] / "fixtures" / "params"


class Ref(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.bn = torch.nn.BatchNorm1d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class IgnoresAffine(torch.nn.Module):
    """A candidate that keeps LayerNorm's parameters but never reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(16))
        self.bias = torch.nn.Parameter(torch.zeros(16))
        self.bn = torch.nn.BatchNorm1d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (16,))


def test_both_models_get_the_same_fresh_values_by_order_and_shape():
    ref, cand = Ref(), IgnoresAffine()
    assert signature(ref) == signature(cand)
    assert perturb(ref, 1234) == perturb(cand, 1234) == 6  # 2 + 2 parameters, 2 float buffers
    for a, b in zip(ref.parameters(), cand.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ref.norm.weight, torch.ones(16))
    assert not torch.equal(ref.norm.bias, torch.zeros(16))


def test_a_layernorm_that_ignores_its_weight_and_bias_no_longer_matches():
    ref, cand = Ref(), IgnoresAffine()
    x = torch.randn(4, 16)
    assert torch.allclose(ref(x), cand(x))  # the hole: initial values hide the bug
    perturb(ref, 99)
    perturb(cand, 99)
    assert not torch.allclose(ref(x), cand(x))


def test_buffers_keep_their_sign_and_integer_buffers_are_left_alone():
    m = torch.nn.BatchNorm1d(8)
    perturb(m, 5)
    assert bool((m.running_var > 0).all())
    assert torch.equal(m.running_mean, torch.zeros(8))
    assert int(m.num_batches_tracked) == 0


def test_another_seed_gives_other_values():
    a, b = Ref(), Ref()
    perturb(a, 1)
    perturb(b, 2)
    assert not torch.equal(a.norm.weight, b.norm.weight)


def test_a_task_can_opt_out():
    class Task:
        KERNELCRAFT_PERTURB_PARAMETERS = False

    assert task_allows(object()) and not task_allows(Task())


def test_the_job_compares_kind_shape_and_dtype_by_order_and_names_what_differs():
    ref = named_signature(Ref())
    assert differences(ref, named_signature(Ref())) == (None, None)
    renamed = named_signature(IgnoresAffine())  # norm.weight -> weight, norm.bias -> bias
    assert differences(ref, renamed) == (None, "norm.weight -> weight, norm.bias -> bias")
    transposed = [list(e) for e in ref]
    transposed[0] = ["parameter", "w", [1, 16], "float32"]
    why, _ = differences(ref, transposed)
    assert (
        why is not None
        and "position 1" in why
        and "norm.weight float32[16]" in why
        and "w float32[1, 16]" in why
    )
    why, _ = differences(ref, ref[:-1])
    assert why is not None and why.startswith("Model has 1 more float tensor(s) (buffer bn.running_var")
    assert "not perturbed" in not_perturbed("x") and "initial values" in not_perturbed("x")


@pytest.mark.slow
def test_a_model_new_whose_parameters_differ_from_models_is_checked_on_initial_values_and_says_so(
    evaluator, job_for
) -> None:
    # Its weight is Model's transposed: given fresh values by position, the two would differ
    # (it failed before), and no other values can be the same in both.
    v = evaluator.submit(job_for(PARAMS / "linear_task.py", PARAMS / "linear_transposed_triton.py")).verify
    assert v is not None and v.correct, v
    note = next(n for n in v.notes if n.startswith("parameters not perturbed"))
    assert "linear.weight float32[16, 32]" in note and "weight_t float32[32, 16]" in note, note


@pytest.mark.slow
def test_a_model_new_drawing_in_another_order_is_told_why_its_outputs_differ(evaluator, job_for) -> None:
    """Issue 26: VanillaRNN's ModelNew drew its hidden state first and got an unexplained '65515
    of 65536 differ'. A mismatch where a tensor ModelNew holds as built differs from the same-named
    Model's names the tensor; the same kernel drawing in Model's order passes, without the note."""
    from kernelcraft.engine.host.job.run import RNG_ORDER_NOTE

    source = (PARAMS / "drawn_state_triton.py").read_text()
    swapped = evaluator.submit(
        job_for(
            PARAMS / "drawn_state_task.py", source.replace('ORDER = "same"', 'ORDER = "swapped"'), trials=1
        )
    ).verify
    assert swapped is not None and swapped.status == "numerical_mismatch", swapped
    assert RNG_ORDER_NOTE.format(names="h") in swapped.notes, swapped.notes
    same = evaluator.submit(job_for(PARAMS / "drawn_state_task.py", source, trials=1)).verify
    assert same is not None and same.correct, same
    assert not [n for n in same.notes if "other initial values" in n]
