"""A filesystem sandbox for candidate processes: writes only where the worker may write.

Candidate code runs as the same user as the server, so without this it could open the shared
SQLite database (or any file of that user) and write to it. Linux Landlock (kernel 5.13+, no
privileges needed) lets a process give up rights for good: after `restrict_writes(dirs)` this
process and its children can create, write, truncate, rename or remove files only beneath `dirs`
(plus /dev/null and the GPU's device files). Reading is not restricted: the candidate still needs
Python, torch, Triton and the CUDA libraries wherever they are installed.

Called by the worker in the candidate role after the trusted task is loaded and before the
candidate is imported. Without Landlock it reports why, and the worker carries on unsandboxed
(the verdict's notes say so).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64 and arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_WRITE_FILE = 1 << 1
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_FILE_RIGHTS = _WRITE_FILE | _TRUNCATE

# Device files a GPU process opens for writing (CUDA may open more after start-up).
_DEVICE_FILES = (
    "/dev/null",
    "/dev/nvidia*",
    "/dev/nvidia-uvm*",
    "/dev/nvidia-caps/*",
    "/dev/kfd",
    "/dev/dri/*",
)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(
        _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(0, int(version))


def restrict_writes(writable_dirs: list[str]) -> str | None:
    """Allow file writes only beneath `writable_dirs` (and to GPU device files), for good.

    Returns None when the restriction is in force, or a sentence saying why it is not.
    """
    abi = landlock_abi()
    if abi < 1:
        return "Landlock is not available on this kernel, so candidates could write outside their directory"
    handled = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    if abi >= 2:
        handled |= _REFER
    if abi >= 3:
        handled |= _TRUNCATE
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr, handled_access_fs only
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock refused a ruleset ({os.strerror(ctypes.get_errno())})"
    try:
        targets = [(d, handled) for d in writable_dirs]
        targets += [(f, handled & _FILE_RIGHTS) for pattern in _DEVICE_FILES for f in glob.glob(pattern)]
        for path, rights in targets:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = _PathBeneath(rights if os.path.isdir(path) else rights & _FILE_RIGHTS, fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    return f"Landlock refused a rule for {path} ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS) failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) < 0:
            return f"Landlock could not restrict this process ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return None
