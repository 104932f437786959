"""Landlock for a candidate process: which files it may read and write, no TCP, and no signals
or abstract Unix sockets beyond its own processes.

Linux Landlock (kernel 5.13+, no privileges needed) lets a process give up rights for good, for
itself and every process it starts. `restrict()` asks for everything this kernel's Landlock ABI
knows of and reports what is in force:
- "fs" (ABI 1+): files and directories are read (and executed) only beneath the paths given as
  readable, and written, created, renamed or removed only beneath those given as writable (ABI 2
  adds renames across directories, ABI 3 truncation). Device ioctls are not restricted (the GPU
  needs them).
- "tcp" (ABI 4+): binding and connecting TCP sockets is refused (no rule allows any port).
  UDP, raw and pathname Unix sockets are not Landlock's to refuse: the network namespace is (box.py).
- "scopes" (ABI 6+): no signal to, and no connection to an abstract Unix socket of, a process
  outside this Landlock domain (the processes the candidate starts are inside it).
A Landlocked process can also no longer mount or unmount, nor ptrace-attach to (read the memory
of) a process outside its domain. It can still open /proc/<pid>/environ of any process its user
may read: box.py hides those.

Used by box.py only (the candidate's side of the worker).
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64 and arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, _WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
READ = EXECUTE | READ_FILE | READ_DIR
"""Read a file or list a directory, and execute (what a readable path is given)."""
WRITE = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE | _REFER | _TRUNCATE
_ON_A_FILE = EXECUTE | _WRITE_FILE | READ_FILE | _TRUNCATE
"""The rights a rule on a file (not a directory) may hold."""
_BIND_TCP, _CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
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


def restrict(rules: list[tuple[str, int]]) -> tuple[set[str], str | None]:
    """Confine this process for good: each (path, rights) rule allows `rights` (READ, WRITE or
    both) beneath `path` (a file or a directory; missing paths are skipped), and nothing else;
    TCP and the scopes are refused where the ABI knows them.

    Returns what is in force ({"fs", "tcp", "scopes"} or a part) and, when Landlock could not be
    applied, a sentence saying why (then nothing is in force).
    """
    abi = landlock_abi()
    if abi < 1:
        return set(), "Landlock is not available on this kernel"
    handled = READ | _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    handled |= (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr, size = _RulesetAttr(handled, 0, 0), 8
    if abi >= 4:
        attr.handled_access_net, size = _BIND_TCP | _CONNECT_TCP, 16
    if abi >= 6:
        attr.scoped, size = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL, 24
    libc = ctypes.CDLL(None, use_errno=True)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return set(), f"Landlock refused a ruleset ({os.strerror(ctypes.get_errno())})"
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                allowed = rights & handled
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= _ON_A_FILE
                rule = _PathBeneath(allowed, fd)
                if (
                    allowed
                    and libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0
                ):
                    return set(), f"Landlock refused a rule for {path} ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return set(), f"prctl(PR_SET_NO_NEW_PRIVS) failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) < 0:
            return set(), f"Landlock could not restrict this process ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return {"fs"} | ({"tcp"} if abi >= 4 else set()) | ({"scopes"} if abi >= 6 else set()), None
