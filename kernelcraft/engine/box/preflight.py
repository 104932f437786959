"""Whether this machine gives a worker the whole box, asked once when a server starts.

A verdict's notes say what of the box its worker lacked, but a team server whose every candidate
runs as root should say so before the first client connects, not in each verdict (issue 39: a
server started under umask 077 ran every candidate as root without a word). `check()` starts one
throwaway process exactly as the pool starts a worker (the same environment, a directory of its
own in the evaluator's folder), which enters the box (`box.start`, `box.confine`) and reports the
parts it could not get (`box.gaps`); nothing of a client's is loaded. On a GPU, the missing PID
namespace is by design (CUDA IPC does not cross it; the zygote reaps instead) and is not a gap.

`python -m kernelcraft.engine.box.preflight DIR` is that process: it prints one JSON line.
Called by the `serve` command (`cli/server.py`); imports the box room only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelcraft.engine import box
from kernelcraft.engine.box import cgroup
from kernelcraft.engine.wire import childenv

PREFLIGHT_TIMEOUT_S = 60.0
PREFLIGHT_MEMORY_BYTES = 1024**3
_BY_DESIGN_ON_A_GPU = frozenset({"pidns"})


@dataclass
class BoxReport:
    """What of the box a worker on this machine would lack (empty: the whole box)."""

    device: str
    gaps: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the check itself could not run (the box is then taken as partial)."""

    @property
    def complete(self) -> bool:
        return not self.gaps and self.error is None

    def sentence(self) -> str:
        if self.error is not None:
            return f"the candidates' box could not be checked: {self.error}"
        if not self.gaps:
            return f"the candidates' box is whole ({self.device} workers)"
        return f"the candidates' box is PARTIAL ({self.device} workers): " + "; ".join(self.gaps)


def check(env: Mapping[str, str], base_dir: Path, device: str) -> BoxReport:
    """Start one process as a worker of `device` with `env` in a directory of `base_dir`; what of
    the box it could not get."""
    workdir = Path(tempfile.mkdtemp(prefix="preflight-", dir=base_dir))
    groups = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kernelcraft.engine.box.preflight", str(workdir)],
            env={**env, **childenv.own_dir(str(workdir)), "HOME": str(workdir), "TMPDIR": str(workdir)},
            cwd=workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        # As the pool does for a candidate (`host/pool.py`): its cgroups, then the go-ahead.
        groups = cgroup.confine(proc.pid, box.CANDIDATE_TASKS, PREFLIGHT_MEMORY_BYTES)
        out, err = proc.communicate(b"go\n", timeout=PREFLIGHT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return BoxReport(device, error=f"the check process did not finish within {PREFLIGHT_TIMEOUT_S:.0f} s")
    except OSError as e:
        return BoxReport(device, error=f"the check process failed: {e}")
    finally:
        cgroup.release(groups)
        _remove(workdir)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        found = json.loads(lines[-1])
        parts = [(str(p), str(t)) for p, t in found["gaps"]]
    except (IndexError, ValueError, KeyError, TypeError):
        tail = done.stderr.decode("utf-8", "replace").strip()[-500:]
        return BoxReport(
            device, error=f"the check process exited with {done.returncode}: {tail or '(no output)'}"
        )
    by_design = _BY_DESIGN_ON_A_GPU if device != "cpu" else frozenset()
    return BoxReport(device, gaps=[text for part, text in parts if part not in by_design])


def _remove(workdir: Path) -> None:
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str]) -> int:
    """The check process: enter the box as a worker does, print its gaps as one JSON line."""
    sys.stdin.readline()  # until the parent has put this process in its cgroups
    childenv.mark_reaped()  # as a forked worker: its zygote reaps
    box.start()
    box.confine(argv[0])
    print(json.dumps({"gaps": box.gaps()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
