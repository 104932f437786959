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
  UDP, raw and pathname Unix sockets are not Landlock's to refuse: the network namespace is (box/__init__.py).
- "scopes" (ABI 6+): no signal to, and no connection to an abstract Unix socket of, a process
  outside this Landlock domain (the processes the candidate starts are inside it).
A Landlocked process can also no longer mount or unmount, nor ptrace-attach to (read the memory
of) a process outside its domain. It can still open /proc/<pid>/environ of any process its user
may read: box/__init__.py hides those.

`candidate_rules()` lists what a candidate may read and write (box/__init__.py's point 5 says what and
why). Used by box/__init__.py only (the candidate's side of the worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import shutil
import stat
import sys
import sysconfig

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


# ---- what a candidate may read and write ----

_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/sys/kernel/mm")
_SYS_HIDDEN = ("kernel", "firmware", "power")
"""/sys's parts a candidate does not read (debugfs, tracing, firmware tables and variables)."""
_DEVICE_FILES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/nvidia*",
    "/dev/nvidia-caps/*",
    "/dev/kfd",
    "/dev/dri/*",
)
_PROC_SYSTEM_FILES = ("cpuinfo", "meminfo", "stat", "loadavg", "uptime", "version", "filesystems")
_PROC_SYSTEM_DIRS = ("sys", "driver")
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".abi3.so")
_ETC_WALK_LIMIT = 4000


def candidate_rules(workdir: str) -> list[tuple[str, int]]:
    """What the candidate may read (and write) under Landlock."""
    read, both = READ, READ | WRITE
    rules = [(workdir, both), ("/dev/shm", both)]
    rules += [(f, both) for pattern in _DEVICE_FILES for f in glob.glob(pattern)]
    rules += [(f"/proc/{name}", read) for name in _PROC_SYSTEM_FILES + _PROC_SYSTEM_DIRS]  # no /proc/<pid>
    found = [*_SYSTEM_DIRS, *_sys(), *python_dirs(), *_library_paths(workdir), *_toolchain(), *_etc()]
    rules += [(p, read) for p in found if not _too_broad(p, workdir)]
    rules += [(p, r) for p, r in _sys_path_rules() if not _too_broad(p, workdir)]
    return rules


def _sys() -> list[str]:
    with contextlib.suppress(OSError):
        return [f"/sys/{name}" for name in os.listdir("/sys") if name not in _SYS_HIDDEN]
    return []


def _too_broad(path: str, workdir: str) -> bool:
    """A path that would open the user's home or other workers' directories: "/", or an
    ancestor of (or) the home directory or of this worker's directory."""
    real = os.path.realpath(path)
    anchors = [workdir]
    with contextlib.suppress(KeyError):
        anchors.append(pwd.getpwuid(os.geteuid()).pw_dir)
    return real == "/" or any(a == real or a.startswith(real.rstrip("/") + "/") for a in anchors)


def python_dirs() -> list[str]:
    dirs = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    dirs |= {p for p in sysconfig.get_paths().values() if p}
    dirs.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted(dirs)


def _sys_path_rules() -> list[tuple[str, int]]:
    """sys.path entries outside Python's prefixes: listing the entry, reading its packages
    (directories with an __init__.py) and modules; not the rest (a project's data, its .env)."""
    prefixes = [os.path.realpath(p) + "/" for p in python_dirs()]
    rules: list[tuple[str, int]] = []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if any((real + "/").startswith(p) for p in prefixes):
            continue
        if os.path.isfile(real):  # a zip archive
            rules.append((real, READ))
            continue
        rules.append((real, READ_DIR))
        with contextlib.suppress(OSError), os.scandir(real) as children:
            for child in children:
                package = child.is_dir() and os.path.exists(os.path.join(child.path, "__init__.py"))
                if package or (child.is_file() and child.name.endswith(_MODULE_SUFFIXES)):
                    rules.append((child.path, READ))
    return rules


def _toolchain() -> list[str]:
    """Where the programs Triton runs are installed: the C compiler that builds its launchers
    (CC, or gcc or clang on PATH) and the assembler and linker it calls, each as its prefix (the
    directory above its bin/), the CUDA tools Triton may be pointed at, and LD_LIBRARY_PATH."""
    programs = [os.environ.get("CC"), os.environ.get("CXX")]
    programs += [shutil.which(name) for name in ("gcc", "clang", "cc", "g++", "as", "ld")]
    paths = set()
    for program in filter(None, programs):
        found = shutil.which(program) if os.sep not in program else program
        for path in {found, os.path.realpath(found)} if found else set():
            paths.add(os.path.dirname(os.path.dirname(path)))
    for name in (
        "CUDA_HOME",
        "CUDA_PATH",
        "TRITON_PTXAS_PATH",
        "TRITON_CUOBJDUMP_PATH",
        "TRITON_NVDISASM_PATH",
    ):
        if os.environ.get(name):
            paths.add(os.environ[name] if name.startswith("CUDA") else os.path.dirname(os.environ[name]))
    paths |= set(filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)))
    return sorted(p for p in paths if os.path.isabs(p))


def _library_paths(workdir: str) -> list[str]:
    """The directories of the shared libraries this process has mapped (wherever CUDA, the
    driver and their peers live: libraries they load later sit beside them); other mapped files
    one by one."""
    paths: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/") or parts[5].endswith("(deleted)\n"):
                continue
            path = parts[5].rstrip("\n")
            if path.startswith(("/dev/", workdir + "/")):
                continue
            paths.add(os.path.dirname(path) if ".so" in os.path.basename(path) else path)
    return sorted(paths)


def _etc() -> list[str]:
    """/etc's files that every user may read, and its directories in which every file is
    (the dynamic loader's cache and config, passwd, localtime; not shadow, not /etc/ssh's keys,
    which root could otherwise read)."""
    found = []
    with contextlib.suppress(OSError), os.scandir("/etc") as entries:
        for e in entries:
            try:
                st = os.stat(e.path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH:
                found.append(e.path)
            elif stat.S_ISDIR(st.st_mode) and _world_readable_tree(e.path):
                found.append(e.path)
    return found


def _world_readable_tree(top: str) -> bool:
    seen = 0
    unlistable: list[OSError] = []
    for root, dirs, files in os.walk(top, onerror=unlistable.append):
        for name in dirs + files:
            seen += 1
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                return False
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & need != need:
                return False
        if seen > _ETC_WALK_LIMIT or unlistable:
            return False
    if unlistable:
        return False
    st = os.stat(top)
    return st.st_mode & (stat.S_IROTH | stat.S_IXOTH) == stat.S_IROTH | stat.S_IXOTH
