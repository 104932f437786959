"""The box a candidate runs in: namespaces, Landlock, a process limit, nothing left behind.

A candidate is untrusted code run with the server's user, which on a team server is often root.
The kernel's own mechanisms box it, through two calls in the worker process:

`start()` runs first in every worker (forked by the zygote or spawned), while the process still
has one thread (a user namespace needs that) and before CUDA starts. Reference workers get the
same; they need nothing it takes away.
1. An unprivileged identity and a user namespace. Run by root, the worker becomes "nobody" (the
   overflow uid and gid), owner of its own directory, wherever nobody can reach Python, the
   package, that directory and the GPU's device files; then it enters a user namespace of its
   own, where RLIMIT_NPROC counts its processes alone (4). Every worker takes the same identity:
   the NVIDIA driver refuses CUDA IPC between processes of different uids
   (cudaErrorMapBufferObjectFailed, probed on the H200), and workers share tensors both ways, so
   a uid of the candidate's own cannot be what hides other processes from it (Landlock does, 5).
   Before that, as root, it enters a mount namespace of its own (`mounts.py`): a
   directory closed to other users on the way to Python or the package (a pyenv under /root) is
   covered by an empty tmpfs into which only the needed directories are bound back, read-only,
   nosuid, nodev (the rest of /root, the server's home and tokens among it, is not there at
   all), so nobody can run it; a CPU worker's /dev/shm is a tmpfs of its own (nosuid, nodev,
   `mounts.SHM_BYTES`), gone with it. Where nobody still cannot work (the GPU's device files closed to
   other users), root stays root in its user namespace, which has no capability outside it (no module loading, raw devices, ptrace of other users' or
   non-dumpable processes, raised limits); a CPU worker then takes nobody as its real uid only,
   which is what RLIMIT_NPROC counts (a GPU worker cannot: programs it runs, the compilers of
   Triton's JIT, would run in glibc's secure mode and ignore TMPDIR). A worker of another user
   enters its user namespace first: it gives the capabilities 2 and 3 need.
2. A network namespace: its only interface is a loopback that is down, so no TCP, UDP or raw
   packet reaches anything, 127.0.0.1 included.
3. On CPU workers, a PID namespace: the worker is its pid 2, an init its pid 1, and the original
   process stays outside as the *keeper* (the pid the pool and the zygote know: it relays the
   worker's exit status, signal included, and turns a signal sent to it into the worker's death
   and its own by that signal). When the worker exits or is killed, the keeper (or the pool's kill
   of the process group) ends init, and the kernel then kills everything in the namespace, setsid
   daemons included. Not on GPU workers: a tensor shared through CUDA IPC cannot be opened from a
   sibling PID namespace (cudaErrorDeviceUninitialized, probed on the H200), and a namespace for
   the worker's children only is impossible (a process whose children go to another PID
   namespace cannot start threads). There the zygote, their child subreaper, kills what a worker
   leaves behind before it reports the worker's exit (zygote.py). `KERNELCRAFT_SANDBOX_PIDNS`
   overrides the choice.

`confine()` runs in every worker, candidate and reference alike, before any code a client sent
is imported: the task (its module body, `Model`, `get_inputs`, `get_init_inputs`) is client code
too, and a task from an MCP or HTTP client is as untrusted as a candidate:
4. A process limit: RLIMIT_NPROC at its current threads plus CANDIDATE_TASKS, counted in its own
   user namespace (other processes of the user do not count). Where it cannot hold (root, a GPU
   worker), the pool's pids cgroup does (`cgroup.py`): CANDIDATE_TASKS for a candidate, and
   REFERENCE_TASKS for a reference worker (the task is client code; torch.compile runs there).
5. Landlock (sandbox.py): reads only beneath Python's prefixes, the importable packages and
   modules of every other sys.path entry (not the rest of a project checkout: a database or a
   .env beside the code stays unreadable), the directories of the shared libraries already
   loaded, the installations of the compiler, assembler and linker Triton runs (wherever they
   are: /opt/gcc on the H200), /usr, /lib*, /bin, /sbin, /sys (not its kernel, firmware and
   power parts), the parts of /etc that every user may read, the device files a GPU needs, its own directory (task,
   candidate, HOME, TMPDIR, Triton cache) and /proc's system files, but no /proc/<pid>: that is
   what keeps the environments of the server, the CLI and the shell above them (tokens, API keys)
   from it, as Landlock does not stop root, nor a same-user process, from reading a dumpable
   process's environ. Writes only in its own directory, /dev/shm and device files. No TCP. No
   signal and no abstract Unix socket beyond its own processes.
6. No sockets (seccomp.py): a filter on every thread refuses socket(), socketpair() and connect()
   once the worker's own channel is open; a path-named Unix socket is not a file Landlock guards.

Each part that is not available degrades with a note that the verdict carries; the evaluation goes
on. `KERNELCRAFT_SANDBOX=off` turns the whole box off. README's "What a verdict rests on" says what
the box does and does not stop.

The room: this module, `mounts.py`, `sandbox.py` (Landlock), `seccomp.py`, `cgroup.py` and
`shmsweep.py`. Imports nothing else of the engine. Called by `worker`, `startup` and `host`.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import resource
import select
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from kernelcraft.engine.box import cgroup, mounts, sandbox, seccomp
from kernelcraft.engine.wire import childenv

if TYPE_CHECKING:
    from kernelcraft.base.knobs import EngineSettings

# How the pool tells its workers to box themselves, their directory, their zygote's reaping: the
# worker wire (`wire/childenv.py` names and reads them).
BOX_ENV, DIR_ENV, REAPER_ENV = childenv.BOX, childenv.DIR, childenv.REAPER
FILE_BYTES = 256 * 1024**2
"""The largest file a worker may write (RLIMIT_FSIZE): its log, a cache entry, a scratch file."""
WORKER_UMASK = 0o022
"""Every worker's umask, whatever the server's (issue 39: 077 left the box partial)."""
CANDIDATE_TASKS = 128
"""Processes and threads a candidate may start (Triton's GPU compile runs a few: ptxas, cc)."""
REFERENCE_TASKS = 512
"""Processes and threads a reference worker may start (in its pids cgroup, where RLIMIT_NPROC
cannot hold): the task is client code, but the reference also runs torch.compile, whose
inductor starts a pool of compile workers (up to 32) with threads of their own."""

_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_PR_SET_PDEATHSIG, _PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 1, 3, 4
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


@dataclass
class _Box:
    on: bool = False
    root: bool = False
    missing: dict[str, str] = field(default_factory=dict)
    """Part ("identity", "userns", "netns", "pidns") -> why it is not in force."""
    nproc: bool = False
    """RLIMIT_NPROC holds here: a real uid other than 0, counted in a user namespace of its own."""
    pidns: bool = False
    host_pid: int | None = None
    reaped: bool = False
    """Forked by a zygote that kills the orphans a worker leaves (see zygote.py)."""
    gaps: list[tuple[str, str]] = field(default_factory=list)
    """What `confine` found missing, by part (`gaps()`)."""


_box = _Box()


def mode(device: str, settings: EngineSettings) -> str:
    """The box setting a pool gives its workers (`sandbox`, `sandbox_pidns`, `sandbox_identity` of
    the engine's settings, `base/knobs.py`). The PID namespace is on by default for CPU workers
    only: on a GPU it breaks CUDA IPC (see 3)."""
    if not settings.sandbox:
        return "off"
    # sandbox_identity root|nobody (KERNELCRAFT_SANDBOX_IDENTITY): run by root, stay root in a user namespace of its own
    # (no capability outside it) or become nobody (1), the default on the CPU and on a GPU (the
    # whole GPU suite passed as nobody on the H200: CUDA IPC between nobody workers, the JIT's
    # compiler, the reference's torch.compile in a cache of its own).
    keep_root = ",root" if settings.sandbox_identity == "root" else ""
    if settings.sandbox_pidns is not None:
        return ("on" if settings.sandbox_pidns else "on,nopidns") + keep_root
    return ("on" if device == "cpu" else "on,nopidns-gpu") + keep_root


def host_pid() -> int:
    """This process's pid as the pool sees it (outside the PID namespace)."""
    return _box.host_pid or os.getpid()


def start() -> None:
    """Enter the namespaces and take the identity (1-3 of the module docstring) as `BOX_ENV`
    says. Call it while this process has a single thread."""
    wire = childenv.mine()
    setting = wire.box
    if setting == "off" or _box.on:
        return
    _box.on = True
    # Whatever umask started the server (077 after the docs' tokens-file step): what this
    # process makes for itself (the mount points of its own view, its directory's files) must be
    # readable by the identity it takes next, so the box is the same whoever started it.
    os.umask(WORKER_UMASK)
    # No file it writes grows past this, its log on the server's disk included (its directory
    # is a tmpfs, mounts.py; the log is not): Python ignores SIGXFSZ, so a write past it fails.
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    _box.reaped = wire.reaper == "zygote"
    if not sys.platform.startswith("linux"):
        _box.missing.update(userns="not Linux", netns="not Linux", pidns="not Linux")
        return
    libc = ctypes.CDLL(None, use_errno=True)
    _box.root = os.geteuid() == 0
    if not _box.root:
        _user_namespace(libc)  # first: it gives the capabilities the next two need
        # (its own view of the files, its folder a tmpfs, is made by root: mounts.py)
        _box.missing["disk"] = "its user is not root: its folder is on the server's disk"
    if libc.unshare(_CLONE_NEWNET) != 0:
        _box.missing["netns"] = _errno()
    if "nopidns-gpu" in setting:
        _box.missing["pidns"] = "off on a GPU: CUDA IPC does not cross PID namespaces"
    elif "nopidns" in setting:
        _box.missing["pidns"] = "KERNELCRAFT_SANDBOX_PIDNS=off"
    else:
        _pid_namespace(libc)  # from here on, in the worker (the keeper and init stay behind)
    if _box.root:
        _leave_root(libc)


def _errno() -> str:
    return os.strerror(ctypes.get_errno())


def _leave_root(libc: Any) -> None:
    """Root becomes "nobody" (the overflow uid and gid), the owner of its own directory, then
    enters a user namespace of its own. Where nobody could not work (Python, the package or its
    directory out of its reach, the GPU's device files closed to other users) it stays root in a
    user namespace (no capability outside it); a CPU worker then still takes nobody as its real
    uid, which makes RLIMIT_NPROC hold (programs it runs would ignore TMPDIR and LD_LIBRARY_PATH,
    glibc's secure mode, which the GPU's compilers cannot live with)."""
    uid, gid = _overflow("uid"), _overflow("gid")
    wire = childenv.mine()
    mounts.private_mounts(libc, wire.workdir, wire.device == "cpu", _box.missing)
    why = _why_not_nobody()
    if why is None and "root" in wire.box_parts:
        why = "KERNELCRAFT_SANDBOX_IDENTITY=root keeps root (in a user namespace of its own)"
    if why is None:
        _own(wire.workdir or "", uid, gid)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if _box.pidns:  # a change of uid clears it; init's own watch (and death) holds regardless
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        _box.missing["identity"] = why
        if wire.device == "cpu":
            os.setresuid(uid, 0, 0)
    _user_namespace(libc)


def _own(workdir: str, uid: int, gid: int) -> None:
    """Give the worker its directory and what the pool put there (its log, Triton's helpers in
    its cache: prebuilt.py). Nothing of the job's is there yet."""
    os.chown(workdir, uid, gid)
    for root, dirs, files in os.walk(workdir):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _overflow(kind: str) -> int:
    try:
        with open(f"/proc/sys/kernel/overflow{kind}") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65534


def _why_not_nobody() -> str | None:
    """Why this worker could not run as nobody, or None."""
    workdir = childenv.mine().workdir
    if not workdir or not os.path.isdir(workdir):
        return "no worker directory was named"
    own = os.path.realpath(workdir)
    needed = [os.path.dirname(own), *sandbox.python_dirs()]
    # (its own directory, on sys.path where the worker was spawned with -m in it, becomes its own)
    needed += [p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) != own]
    for path in needed:
        closed = mounts.closed_to_others(os.path.realpath(path))
        if closed:
            return f"{closed} is closed to other users"
    for pattern in ("/dev/nvidia*", "/dev/dri/*", "/dev/kfd"):
        for device in glob.glob(pattern):
            mode = os.stat(device).st_mode
            if stat.S_ISCHR(mode) and mode & 0o006 != 0o006:
                return f"{device} is closed to other users"
    return None


def _user_namespace(libc: Any) -> None:
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER) != 0:
        _box.missing["userns"] = _errno()
    else:
        # A change of uid left the process non-dumpable, its /proc files root's: writable again
        # for as long as it takes to write its id maps.
        dumpable = libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:
            for name, text in (
                ("setgroups", "deny"),
                ("uid_map", f"{uid} {uid} 1"),
                ("gid_map", f"{gid} {gid} 1"),
            ):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError as e:
            _box.missing["userns"] = f"no id map: {e.strerror}"
        finally:
            libc.prctl(_PR_SET_DUMPABLE, dumpable, 0, 0, 0)
    # RLIMIT_NPROC is never enforced for uid 0, and counts all of a user's processes outside
    # a user namespace of its own.
    _box.nproc = os.getuid() != 0 and "userns" not in _box.missing


def _pid_namespace(libc: Any) -> None:
    """Become the keeper of a new PID namespace whose init and worker are forked here; only the
    worker returns."""
    if libc.unshare(_CLONE_NEWPID) != 0:
        _box.missing["pidns"] = _errno()
        return
    life_r, life_w = os.pipe()  # never written: it reads as closed once the keeper is gone
    pid_r, pid_w = os.pipe()
    init = os.fork()
    if init == 0:
        for fd in (life_w, pid_r, pid_w):
            os.close(fd)
        _init(libc, life_r)
    worker = os.fork()
    if worker == 0:
        for fd in (life_w, pid_w):
            os.close(fd)
        _follow_keeper(libc, life_r)
        os.close(life_r)
        outer = os.read(pid_r, 32)
        os.close(pid_r)
        if not outer:
            os._exit(70)
        _box.host_pid, _box.pidns = int(outer), True
        return
    os.close(life_r)
    os.close(pid_r)
    os.write(pid_w, str(worker).encode())
    os.close(pid_w)
    _keep(worker, init, life_w)


def _follow_keeper(libc: Any, life_r: int) -> None:
    """Die with the keeper (PR_SET_PDEATHSIG), and at once if it is gone already."""
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([life_r], [], [], 0)[0]:
        os._exit(0)


def _close_fds_but(keep: int) -> None:
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def _init(libc: Any, life_r: int) -> NoReturn:
    """The namespace's init: reap the orphans the candidate leaves, until the keeper kills it
    (and with it everything else in the namespace)."""
    try:
        _follow_keeper(libc, life_r)
        _close_fds_but(life_r)  # the job's channel among them
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        while True:
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            signal.sigwaitinfo({signal.SIGCHLD})
    finally:
        os._exit(0)


def _keep(worker: int, init: int, life_w: int) -> NoReturn:
    """The original process: wait for the worker, end the namespace, exit as the worker did (a
    signal sent to the keeper kills the worker, then the keeper by the same signal)."""
    try:
        _close_fds_but(life_w)  # the job's channel among them: the worker alone holds it

        def forward(signum: int, _frame: Any) -> None:
            for pid in (worker, init):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            _die(signum)

        for sig in _FORWARDED:
            signal.signal(sig, forward)
        _, status = os.waitpid(worker, 0)
        with contextlib.suppress(OSError):
            os.kill(init, signal.SIGKILL)  # the kernel kills the rest of the namespace
            os.waitpid(init, 0)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            _die(-code)
        os._exit(code)
    finally:
        os._exit(70)


def _die(signum: int) -> NoReturn:
    """Exit by signal `signum` (without a core file), as the worker did."""
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
    os._exit(128 + signum)


# ---- the candidate's side ----


def confine(workdir: str | Path) -> str | None:
    """Limit processes and apply Landlock (4-5 of the module docstring) for good, before the
    worker imports a client's code (task or candidate). Returns None when the whole box is in
    force, else one line for the verdict's notes saying what is not (`gaps()` lists them by part)."""
    notes = _box.gaps
    notes.clear()
    m = _box.missing
    if not _box.on:
        notes.append(("namespaces", "no namespaces (the worker was started without the box)"))
    if "identity" in m:
        notes.append(("identity", f"it runs as root ({m['identity']})"))
    if "userns" in m:
        notes.append(
            (
                "userns",
                f"no user namespace ({m['userns']})"
                + (": it keeps root's capabilities" if os.geteuid() == 0 else ""),
            )
        )
    limit = _limit_processes()
    if limit:
        notes.append(("nproc", limit))
    if _box.on and "memory" not in cgroup.in_force():
        notes.append(
            (
                "memory",
                "no memory cgroup: its memory limit is per process (a forked child, shared memory and "
                "the files it writes are not counted)",
            )
        )
    if "disk" in m:
        notes.append(("disk", f"no disk limit on its directory ({m['disk']})"))
    in_force, problem = sandbox.restrict(sandbox.candidate_rules(str(workdir)))
    if problem:
        notes.append(
            (
                "landlock",
                f"{problem}: it can read and write every file its user can, and other processes' environments",
            )
        )
    if "netns" in m or not _box.on:
        net = "only TCP is refused" if "tcp" in in_force else "it can reach the network"
        notes.append(("netns", f"no network namespace ({m.get('netns', 'off')}): {net}"))
    if "pidns" in m:
        outlive = "" if _box.reaped else ": processes it starts can outlive the job"
        notes.append(("pidns", f"no PID namespace ({m['pidns']}){outlive}"))
    if "scopes" not in in_force:
        notes.append(("scopes", "it can signal its user's processes"))
    sockets = seccomp.deny_sockets()
    if sockets:
        notes.append(("seccomp", sockets))
    if not notes:
        return None
    return ("the candidate's box is partial: " + "; ".join(text for _part, text in notes))[:1000]


def gaps() -> list[tuple[str, str]]:
    """What of the box the last `confine` could not give: (part, sentence) each; the parts are
    "namespaces", "identity", "userns", "nproc", "landlock", "netns", "pidns", "scopes", "seccomp"."""
    return list(_box.gaps)


def _limit_processes() -> str | None:
    """Set the process limit (a note when there is none). Where RLIMIT_NPROC cannot hold (root),
    the pool's pids cgroup may (`cgroup.py`)."""
    if not _box.nproc:
        if "pids" in cgroup.in_force():
            return None
        return "no process limit" + (" (it runs as root)" if os.getuid() == 0 else " (no user namespace)")
    try:
        tasks = len(os.listdir("/proc/self/task"))  # its own threads count too
    except OSError:
        tasks = 32
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks + CANDIDATE_TASKS, tasks + CANDIDATE_TASKS))
    return None
