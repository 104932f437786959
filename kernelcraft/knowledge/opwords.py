"""The words rules use for an operator's kernels: what an op name in a query also searches for.

Rules are written about constructs ("You cannot reduce with tl.sum or tl.max over an axis the
block does not have"), never about operators, so a query that names an op ("softmax",
"LayerNorm", "torch.bmm") matches no rule by its own words. `op_words` maps each op name a query
holds (case, underscores and a `torch.`/`nn.`/`F.` prefix aside; porter stemming in the index
does the rest) to the constructs its kernels are made of: softmax is a row reduction with
exponentials, a GEMM is `tl.dot` over tiles. `Rulebook.find_rules` searches with both and says
so in its answer.
"""

from __future__ import annotations

import re

# Each family: the op names that belong to it, and the words of the constructs its kernels use.
FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    "softmax": (
        ("softmax", "logsoftmax", "log_softmax", "softmin"),
        "reduce tl.max tl.sum axis exp log row",
    ),
    "norm": (
        (
            "layernorm",
            "layer_norm",
            "rmsnorm",
            "rms_norm",
            "groupnorm",
            "group_norm",
            "batchnorm",
            "batch_norm",
            "instancenorm",
            "instance_norm",
            "normalize",
            "norm",
        ),
        "reduce tl.sum axis mean var sqrt row",
    ),  # fmt: skip
    "gemm": (
        ("matmul", "gemm", "mm", "bmm", "addmm", "baddbmm", "linear", "dense", "einsum", "gemv", "mv"),
        "tl.dot K fp32 dtypes dimension operand",
    ),
    "conv": (
        ("conv", "conv1d", "conv2d", "conv3d", "convolution", "conv_transpose2d", "depthwise"),
        "tl.dot stride offsets contiguous mask",
    ),
    "attention": (
        ("attention", "sdpa", "scaled_dot_product_attention", "flash", "multihead"),
        "tl.dot tl.max exp reduce axis",
    ),
    "loss": (
        ("loss", "cross_entropy", "crossentropy", "nll", "mse", "mseloss", "kl_div", "huber", "smooth_l1"),
        "reduce tl.sum exp log mean",
    ),
    "reduce": (
        ("sum", "mean", "max", "min", "argmax", "argmin", "prod", "reduce", "reduction", "amax", "amin"),
        "reduce tl.sum tl.max axis block",
    ),
    "scan": (("cumsum", "cumprod", "scan", "cummax", "associative_scan"), "reduce axis block loop"),
    "activation": (
        (
            "relu",
            "gelu",
            "tanh",
            "sigmoid",
            "silu",
            "swish",
            "elu",
            "selu",
            "softplus",
            "hardtanh",
            "leaky_relu",
            "mish",
            "activation",
            "elementwise",
        ),
        "tl.tanh tl.math exp tl.pow dtype",
    ),  # fmt: skip
    "pool": (
        ("pool", "maxpool", "avgpool", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"),
        "stride mask offsets",
    ),
    "layout": (("transpose", "permute", "reshape", "view", "contiguous"), "stride contiguous tl.reshape"),
}

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_BY_NAME = {name: family for family, (names, _) in FAMILIES.items() for name in names}


def op_families(text: str) -> list[str]:
    """The families of the op names `text` holds, in first-seen order."""
    found: dict[str, None] = {}
    for match in _NAME.finditer(text):
        word = match.group(0).lower()
        family = _BY_NAME.get(word) or _BY_NAME.get(word.replace("_", ""))
        if family is not None:
            found[family] = None
    return list(found)


def op_words(text: str) -> str:
    """The construct words of every op family `text` names ('' when it names none)."""
    return " ".join(FAMILIES[f][1] for f in op_families(text))
