"""What a serving process does about the secrets it was started with.

`kernelcraft serve` is started with the team's tokens in `KERNELCRAFT_TOKENS` (and often with an
LLM API key it never uses). Once the tokens are read (the verifier keeps only their SHA-256
digests, see `auth.py`), the serving process needs none of them, and other processes of the
same user — a candidate kernel among them — must not find them:

- `drop_secrets` removes them from `os.environ` (and so from the C environment the process's
  children inherit) and blanks their values in the process's initial environment block, the
  memory `/proc/<pid>/environ` shows (unsetenv alone leaves them there);
- `make_undumpable` sets PR_SET_DUMPABLE 0: same-user processes can no longer read this
  process's `/proc/<pid>/environ` or memory, or attach a debugger. It does not stop root (a
  process with CAP_SYS_PTRACE): the evaluator's box keeps candidates from seeing other processes.

Linux only, best effort elsewhere: each says what it did, and never raises for a missing feature.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from kernelcraft.base import knobs

logger = logging.getLogger(__name__)

# What `serve` holds and never needs once started: the tokens after they are read, and the
# driver agent's LLM keys (the server makes no LLM calls).
SERVE_SECRETS = knobs.SERVE_SECRETS

PR_SET_DUMPABLE = 4
# /proc/self/stat fields 50 and 51 (env_start, env_end), counted from 1, as indices after "comm)".
_ENV_START_FIELD, _ENV_END_FIELD = 50 - 3, 51 - 3


def drop_secrets(names: Iterable[str] = SERVE_SECRETS) -> list[str]:
    """Remove `names` from this process's environment, and blank their values in its initial
    environment block where the platform allows. Returns the names that were set."""
    dropped = [name for name in names if name in os.environ]
    for name in dropped:
        del os.environ[name]  # also unsetenv(): children no longer inherit it
        # os.environ was copied from posix.environ at start-up, which still holds the value.
        _posix_environ().pop(os.fsencode(name), None)
    if dropped and sys.platform.startswith("linux"):
        blank_initial_environ(dropped)
    return dropped


def _posix_environ() -> dict[bytes, bytes]:
    posix = sys.modules.get("posix")
    environ = getattr(posix, "environ", None)
    return environ if isinstance(environ, dict) else {}


def blank_initial_environ(names: Iterable[str]) -> int:
    """Overwrite with NUL bytes the values of `names` in the environment block the kernel set up at
    exec (what `/proc/<pid>/environ` reads). Call it after the variables are unset: nothing points
    into those bytes any more. Returns how many values were blanked (0 where /proc is missing)."""
    wanted = {name.encode() for name in names}
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[_ENV_START_FIELD]), int(fields[_ENV_END_FIELD])
    except (OSError, ValueError, IndexError) as e:
        logger.warning("could not find this process's environment block: %s", e)
        return 0
    if not 0 < start < end:
        return 0
    block = ctypes.string_at(start, end - start)
    blanked, offset = 0, 0
    for entry in block.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and name in wanted and value:
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
            blanked += 1
        offset += len(entry) + 1
    return blanked


def make_undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): same-user processes cannot read this process's environment or
    memory through /proc or ptrace. True when set; False (with a warning) where it cannot be."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as e:
        logger.warning("could not make the server non-dumpable: %s", e)
        return False
    return True
