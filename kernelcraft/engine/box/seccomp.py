"""No sockets from the box: a seccomp filter (box/__init__.py's point 6).

A path-named Unix socket is not a file Landlock guards (connect is not an access it knows), so a
world-writable daemon socket was reachable by path from the box; an abstract socket or a fresh
socketpair needs no path at all. `deny_sockets()`, called by `box.confine()` once the worker's own
channel is open, installs a filter on every thread (TSYNC, after no-new-privileges) that refuses
`socket`, `socketpair` and `connect` with EACCES, and every syscall of a foreign architecture or
the x32 ABI. Hand-written BPF through ctypes: libseccomp's Python binding is not on every machine
kernelcraft runs on, and the program is ten instructions.
"""

from __future__ import annotations

import ctypes
import os
import sys

# (AUDIT_ARCH, socket, socketpair, connect, seccomp) per machine: the syscalls that make or reach
# a socket, refused once the worker's own channel is open. A path-named Unix socket is not a file
# Landlock guards (connect is not an access it knows), and a world-writable one (a daemon's
# control socket) would otherwise be reachable by path.
_SOCKET_SYSCALLS = {
    "x86_64": (0xC000003E, 41, 53, 42, 317),
    "aarch64": (0xC00000B7, 198, 199, 203, 277),
}
_EACCES = 13


def deny_sockets() -> str | None:
    """Refuse new sockets and connects to every thread of this process for good (seccomp, with
    no-new-privileges). None when in force, else one line for the notes saying why not."""
    machine = os.uname().machine
    numbers = _SOCKET_SYSCALLS.get(machine)
    if numbers is None or not sys.platform.startswith("linux"):
        return f"no socket filter on {machine}: it can open sockets its user may reach"
    arch, sock, pair, connect, seccomp_nr = numbers
    # BPF: wrong arch or an x32 number -> refuse; socket, socketpair, connect -> EACCES; else allow.
    refuse = 0x00050000 | _EACCES  # SECCOMP_RET_ERRNO | EACCES
    prog = [
        (0x20, 0, 0, 4),  # ld arch
        (0x15, 1, 0, arch),  # jeq arch -> +1
        (0x06, 0, 0, refuse),
        (0x20, 0, 0, 0),  # ld nr
        (0x35, 4, 0, 0x40000000),  # jge x32 -> refuse
        (0x15, 3, 0, sock),
        (0x15, 2, 0, pair),
        (0x15, 1, 0, connect),
        (0x06, 0, 0, 0x7FFF0000),  # allow
        (0x06, 0, 0, refuse),
    ]

    class Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(prog))(*[Filter(*f) for f in prog])
    program = Program(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return f"no socket filter (no_new_privs: {os.strerror(ctypes.get_errno())}): it can open sockets its user may reach"
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program): every thread
    if libc.syscall(seccomp_nr, 1, 1, ctypes.byref(program)) != 0:
        return f"no socket filter (seccomp: {os.strerror(ctypes.get_errno())}): it can open sockets its user may reach"
    return None
