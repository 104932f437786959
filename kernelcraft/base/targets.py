"""The targets kernelcraft compiles for, and the architecture families rules are scoped to.

One `Literal` names every target; the CLI's choices, the AOT compiler, the search tree and the
manuals all read it from here.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from kernelcraft.base.errors import UsageError

Target = Literal["sm_80", "sm_89", "sm_90a", "sm_100", "gfx942"]
# Targets the ahead-of-time compiler knows. "host" means the machine's own GPU, if any.
KNOWN_TARGETS: tuple[Target, ...] = get_args(Target)
DEFAULT_TARGETS: tuple[Target, ...] = ("sm_80", "sm_90a", "sm_100", "gfx942")
# The GPUs each target is for, as a prompt names them.
GPU_NAMES: dict[str, str] = {
    "sm_80": "NVIDIA A100 (Ampere, sm_80)",
    "sm_89": "NVIDIA L40S (Ada, sm_89)",
    "sm_90a": "NVIDIA H100/H200 (Hopper, sm_90a)",
    "sm_100": "NVIDIA B200 (Blackwell, sm_100)",
    "gfx942": "AMD MI300X (CDNA3, gfx942)",
}
# What a hardware-manual section may be about: a target, or every one.
KNOWN_ARCHES: tuple[str, ...] = (*KNOWN_TARGETS, "any")

_FAMILIES = {"nvidia": "nvidia", "cuda": "nvidia", "amd": "amd", "hip": "amd", "rocm": "amd"}
_NO_FAMILY = {"host", "cpu", "interpreter", "any", ""}


def arch_family(arch: str | None) -> str | None:
    """'sm_80', 'sm_89', 'sm_90a', 'sm_100', 'cuda' → 'nvidia'; 'gfx942', 'hip' → 'amd'.

    None, 'host', 'cpu' and 'interpreter' have no family (None). Anything else is a UsageError.
    """
    if arch is None:
        return None
    a = arch.strip().lower()
    if a in _NO_FAMILY:
        return None
    if a in _FAMILIES:
        return _FAMILIES[a]
    if re.fullmatch(r"sm_?\d+[a-z]?", a) or a.startswith("cuda:"):
        return "nvidia"
    if re.fullmatch(r"gfx[0-9a-f]+", a) or a.startswith("hip:"):
        return "amd"
    raise UsageError(
        f"unknown architecture {arch!r}; use an NVIDIA target such as sm_80, sm_89, sm_90a, sm_100, "
        "an AMD one such as gfx942, or a family name (nvidia, amd)"
    )
