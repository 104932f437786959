"""Fresh parameter values for verify: the same in the reference `Model` and the candidate `ModelNew`.

KernelBench builds both models after seeding the RNG identically, so parameters created in the
same order start equal. That leaves a hole: a module's *initial* values can hide a wrong kernel.
`nn.LayerNorm` starts at weight 1 and bias 0, so a LayerNorm kernel that ignores both passes; an
RMSNorm scale of ones hides a missing multiply. So before the trials both workers overwrite every
floating-point parameter and buffer with values drawn from a seed the parent sends (the `perturb`
request, once both are built), the i-th tensor of one model getting exactly what the i-th tensor
of the other gets.

Values: parameters become `p * U(0.5, 1.5) + 0.1 * s * N(0, 1)` (s = mean |p|, or 1 when p is all
zeros), so a weight of ones is no longer ones and a bias of zeros no longer zeros, at the same
scale as before; buffers are only scaled by `U(0.5, 1.5)`, which keeps a running variance
positive and a zero buffer zero. Integer and boolean tensors (counters, indices) are left alone.

The two models are matched by order, kind, shape and dtype: the job compares `Model`'s tensors
(the reference worker's `task_ready`) with `ModelNew`'s (the candidate's `loaded`) by
`differences` before it asks for fresh values. When they differ (the candidate fused or reshaped
its parameters, or added one), the harness cannot give both the same fresh values, so nothing is
perturbed and the verdict's notes say so (`not_perturbed`): the candidate is then checked on the
seeded initial values, as KernelBench checks it, and a kernel that ignores a weight whose
initial value hides it is not caught. Names that differ while the rest agrees are matched by
order and named in the notes. A task opts out by defining `KERNELCRAFT_PERTURB_PARAMETERS = False`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a model is at hand: the evaluator's process never needs it
    import torch

OPT_OUT = "KERNELCRAFT_PERTURB_PARAMETERS"
# Mixed into the build seed, so that the fresh values are not the ones the build seed just drew.
SALT = 0x5EED_F0F0


def signature(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], str]]:
    """What must agree between the two models: kind, shape and dtype of each float tensor, in order."""
    return [(kind, tuple(t.shape), str(t.dtype)) for kind, t in _tensors(model)]


def _tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(kind, t) for kind, _name, t in _named(model)]


def _named(model: torch.nn.Module) -> list[tuple[str, str, torch.Tensor]]:
    out: list[tuple[str, str, torch.Tensor]] = [("parameter", n, p) for n, p in model.named_parameters()]
    out += [("buffer", n, b) for n, b in model.named_buffers()]
    return [(k, n, t) for k, n, t in out if t.is_floating_point()]


Tensors = list[list[Any]]
"""[kind, name, shape, dtype] of each float parameter and buffer, in the order `perturb` walks them."""


def named_signature(model: Any) -> Tensors:
    """What the job compares between the two models (`differences`); empty for a model that is
    not an `nn.Module`."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return []
    return [
        [kind, name, list(t.shape), str(t.dtype).removeprefix("torch.")] for kind, name, t in _named(model)
    ]


def _text(entry: list[Any]) -> str:
    kind, name, shape, dtype = entry
    return f"{kind} {name} {dtype}{list(shape)}"


def differences(model: Tensors, new: Tensors) -> tuple[str | None, str | None]:
    """(why the two models cannot get the same fresh values, or None; the names matched by order
    that differ, or None)."""
    for i, (a, b) in enumerate(zip(model, new, strict=False)):
        if (a[0], list(a[2]), a[3]) != (b[0], list(b[2]), b[3]):
            return (
                f"the float tensor at position {i + 1} is Model's {_text(a)} but ModelNew's {_text(b)}",
                None,
            )
    if len(model) != len(new):
        longer, which = (model, "Model") if len(model) > len(new) else (new, "ModelNew")
        extra = ", ".join(_text(e) for e in longer[min(len(model), len(new)) :][:3])
        return f"{which} has {abs(len(model) - len(new))} more float tensor(s) ({extra})", None
    renamed = [f"{a[1]} -> {b[1]}" for a, b in zip(model, new, strict=True) if a[1] != b[1]]
    return None, ", ".join(renamed[:6]) if renamed else None


def not_perturbed(why: str) -> str:
    """The verdict's note when the two models cannot get the same fresh values."""
    return (
        f"parameters not perturbed: ModelNew's differ from Model's ({why}), so the harness cannot give "
        "both the same fresh values; the verdict rests on the seeded initial values, as KernelBench's "
        "does, and a kernel that ignores a weight whose initial value hides it (LayerNorm's 1 and 0) "
        "is not caught; keep Model's parameters, in its order and shapes, to be checked on fresh ones"
    )


def renamed_note(renamed: str) -> str:
    return f"parameters perturbed by order: ModelNew names some differently from Model ({renamed})"


def perturb(model: torch.nn.Module, seed: int) -> int:
    """Overwrite the model's float parameters and buffers from `seed`; returns how many."""
    import torch

    tensors = _tensors(model)
    with torch.no_grad():
        for i, (kind, t) in enumerate(tensors):
            g = torch.Generator(device="cpu").manual_seed((seed + 7919 * i) % (2**63))
            scale = torch.empty(t.shape, dtype=torch.float32).uniform_(0.5, 1.5, generator=g)
            new = t.detach().float().cpu() * scale
            if kind == "parameter":
                mean_abs = float(t.detach().float().abs().mean()) if t.numel() else 0.0
                s = mean_abs if mean_abs > 0 else 1.0
                new = new + 0.1 * s * torch.randn(t.shape, generator=g)
            t.copy_(new.to(dtype=t.dtype, device=t.device))
    return len(tensors)


def task_allows(task_module: Any) -> bool:
    """False when the task defines `KERNELCRAFT_PERTURB_PARAMETERS = False`."""
    return bool(getattr(task_module, OPT_OUT, True))


def mode_sensitive(torch: Any, model: Any) -> list[str]:
    """The kinds of `model`'s modules that compute differently in training and eval mode:
    batch norms, instance norms that track running statistics, dropout, recurrent and attention
    layers with dropout."""
    nn = torch.nn
    if not isinstance(model, nn.Module):
        return []
    found = []
    for m in model.modules():
        kind = type(m).__name__
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            found.append(kind)
        elif isinstance(m, nn.modules.instancenorm._InstanceNorm) and m.track_running_stats:
            found.append(kind)
        elif isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            found.append(kind)
        elif isinstance(m, (nn.RNNBase, nn.MultiheadAttention)) and float(getattr(m, "dropout", 0) or 0) > 0:
            found.append(kind)
    return list(dict.fromkeys(found))
