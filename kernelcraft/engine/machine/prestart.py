"""The CLI's head start: the evaluator's zygote started before the command line is read.

A one-off `kernelcraft verify|profile|compile` spent its first 0.3 s importing its command line
(argparse, pydantic, anyio, rich) before its evaluator started the zygote, which then imports
torch for two seconds more. `start(argv)`, the first thing the command does (`kernelcraft/entry.py`),
starts that zygote at once, in the folder and with the environment the evaluator would give it;
the evaluator's first pool takes it (`take`) when it was started for the same device, and
otherwise (and at exit, if nothing took it) it is killed and its folder removed.

Also here, since the head start needs it first: how many GPUs torch would see, without importing
torch (`gpu_count`). Nothing here imports torch or pydantic.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelcraft.base.knobs import Knobs
from kernelcraft.engine.startup.zygote import Zygote, ZygoteUnavailable

if TYPE_CHECKING:
    from kernelcraft.engine.box.preflight import BoxReport

COMMANDS = ("verify", "profile", "compile")
"""The one-off commands that evaluate (each starts a lazy evaluator, `cli/engine.py`)."""


@dataclass
class HeadStart:
    """A zygote started early, its pool's settings, and the evaluator's folder it lives in."""

    kind: str
    gpu: int | None
    interpret: bool
    scratch: tempfile.TemporaryDirectory[str]
    zygote: Zygote


_waiting: list[HeadStart] = []


def wanted(argv: Sequence[str], settings: Knobs) -> bool:
    """Whether the command in `argv` gets a zygote at once: one of `COMMANDS`, not asking for help,
    and the `zygote` setting on (the `Knobs` the command's evaluator will be given too)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS or {"-h", "--help"} & set(argv):
        return False
    return settings.engine.zygote


def start(argv: Sequence[str], settings: Knobs) -> None:
    """Start the zygote that the evaluator of the command in `argv` will want, if it is one of
    `COMMANDS` (anything unusable in `argv` is left for the command line to report); `settings`:
    what the entry point read, as the command's evaluator gets them."""
    if not wanted(argv, settings):
        return
    device = _option(argv, "--device") or "auto"
    if device not in ("auto", "cuda", "cpu"):
        return
    gpus = gpu_count(device)
    if device == "cuda" and not gpus:
        return
    from kernelcraft.engine.machine.pool import base_env, reachable

    kind, gpu, interpret = ("cuda", 0, False) if gpus else ("cpu", None, True)
    scratch = tempfile.TemporaryDirectory(prefix="kernelcraft-eval-")
    base = Path(scratch.name)
    reachable(base)
    zygote = Zygote(
        base_env(kind, gpu, interpret, lazy=True, settings=settings),
        Path(tempfile.mkdtemp(prefix="zygote-", dir=base)) / "output.log",
        cuda=kind == "cuda",
    )
    try:
        zygote.spawn()
    except ZygoteUnavailable:
        scratch.cleanup()
        return
    if not _waiting:
        atexit.register(_end_waiting)
    _waiting.append(HeadStart(kind, gpu, interpret, scratch, zygote))


def take(kind: str, gpu: int | None, interpret: bool) -> HeadStart | None:
    """The zygote started early for a pool of these settings, or None (one started for other
    settings is ended)."""
    while _waiting:
        head = _waiting.pop()
        if (head.kind, head.gpu, head.interpret) == (kind, gpu, interpret):
            return head
        _end(head)
    return None


def _end(head: HeadStart) -> None:
    head.zygote.kill()
    with contextlib.suppress(OSError):
        head.scratch.cleanup()


def _end_waiting() -> None:
    while _waiting:
        _end(_waiting.pop())


def _option(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _torch_has_gpu_support() -> bool:
    """Whether the installed torch was built for CUDA or ROCm, read from its version file
    without importing it (importing torch costs the CLI a second)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return True  # unknown: let torch say
    built = re.findall(r"^(cuda|hip)\b[^=]*=\s*(.+)$", text, re.MULTILINE)
    return not built or any(v.strip() != "None" for _k, v in built)


def gpu_count(device: str, dev: str = "/dev") -> int:
    """CUDA GPUs torch will see. Without torch's import where the answer is plain: a torch built
    without GPU support, or a Linux machine without an NVIDIA or AMD driver, has none; a Linux
    machine with NVIDIA's device files and no CUDA_VISIBLE_DEVICES has one GPU a file
    (`/dev/nvidia0`, …). Importing torch to ask took a fresh `kernelcraft verify` 2.8 s of its
    first verdict on the H200; a GPU the driver cannot start then fails its worker, loudly."""
    if device == "cpu" or not _torch_has_gpu_support():
        return 0
    linux = sys.platform.startswith("linux")
    if linux and not any(
        os.path.exists(p) for p in ("/proc/driver/nvidia", f"{dev}/kfd", f"{dev}/nvidiactl")
    ):
        return 0
    if linux and "CUDA_VISIBLE_DEVICES" not in os.environ and not os.path.exists(f"{dev}/kfd"):
        with contextlib.suppress(OSError):
            nodes = [n for n in os.listdir(dev) if re.fullmatch(r"nvidia\d+", n)]
            if nodes:
                return len(nodes)
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def box_preflight(settings: Knobs) -> BoxReport:
    """What of the box a worker started on this machine would get (`box/preflight.py`): checked
    in a scratch directory with the environment the pool gives a worker of this machine's kind
    (a GPU's when there is one) under `settings`."""
    from kernelcraft.engine.box import preflight
    from kernelcraft.engine.machine.pool import base_env, reachable

    kind, gpu, interpret = ("cuda", 0, False) if gpu_count("auto") else ("cpu", None, True)
    with tempfile.TemporaryDirectory(prefix="kernelcraft-eval-") as scratch:
        reachable(Path(scratch))
        return preflight.check(
            base_env(kind, gpu, interpret, lazy=True, settings=settings), Path(scratch), kind
        )
