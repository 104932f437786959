"""A zygote: one process that imports torch, Triton and the harness once, then forks workers.

A worker started with `python -m kernelcraft.engine.worker.main` spends seconds importing torch,
Triton, torch._dynamo and inductor before it can take a job; a batch of candidates spends most of
its CPU there. The zygote pays those imports once per pool and forks each worker from that state
(the way Android's zygote and Chrome's zygote start processes), so a worker is ready in the time
CUDA takes to initialise.

What keeps this as clean as a spawned process:
- The zygote is started with the same scrubbed environment as a spawned worker and never loads a
  task or a candidate: a forked worker inherits imported libraries and nothing else. Each fork
  gets its own session (process group), its own directory (HOME, TMPDIR, Triton cache), its log
  as stdout/stderr and the channel socket, both descriptors the pool opened and passed it
  (SCM_RIGHTS: the log is never opened by a path the worker could have replaced, `logfile.py`);
  it closes the zygote's control socket before anything else runs.
- CUDA is never initialised in the zygote, and it forks only while it has a single thread
  (checked before it says ready); otherwise it reports itself unavailable and the pool spawns
  workers as before.
- The zygote reaps its children and reports each exit status to the pool, so a crash verdict
  still names the signal. As their child subreaper it also kills whatever a worker leaves running
  when it exits (where the worker's box has no PID namespace to end it: box/__init__.py).

Pool side: `Zygote` (asyncio; no torch import). Zygote side: `main()`, run as
`python -m kernelcraft.engine.startup.zygote FD`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernelcraft.engine.startup import logfile

log = logging.getLogger(__name__)

MAX_MESSAGE = 1 << 16


_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class ZygoteUnavailable(Exception):
    """The zygote could not start or stopped; the pool spawns workers instead."""


class ForkedChild:
    """A worker forked by the zygote: its pid and, once the zygote reports it, its exit status
    (the `subprocess` convention: negative for a signal)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.orphaned = False
        """The zygote died first: nobody will report the status, so `wait` polls for the pid."""
        self._done = asyncio.Event()

    def poll(self) -> int | None:
        return self.returncode

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    async def wait(self) -> int:
        while not self._done.is_set():
            if self.orphaned:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:  # reaped by init; its status is lost with the zygote
                    self._exited(-signal.SIGKILL)
                    break
                except PermissionError:
                    pass
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._done.wait(), 0.1)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """The pool's handle on one zygote process (one per worker pool: device and interpreter mode
    are fixed at its start)."""

    def __init__(self, env: dict[str, str], log_path: Path, cuda: bool) -> None:
        # Math libraries start their thread pools when they load (OpenBLAS at numpy's import, on
        # the H200 machine 16 threads): one thread each, or the zygote could not fork safely.
        # Workers compute on the GPU; their CPU math is only building weights and inputs.
        self._env = env | _ONE_THREAD
        self._log_path = log_path
        self._log_fd: int | None = None
        """The zygote's log as this process opened it (read through it, never by path)."""
        self._cuda = cuda
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._started: dict[int, asyncio.Future[int]] = {}
        self._children: dict[int, ForkedChild] = {}
        self._early_exits: dict[int, int] = {}
        self._next_id = 0
        self._lock = asyncio.Lock()
        self.broken: str | None = None
        self.deferred: list[str] = []
        """Import stages the zygote left to each worker (they would have touched the GPU)."""

    def spawn(self) -> None:
        """Start the zygote process (no event loop needed: the CLI starts one before it has read
        its arguments, `prestart.py`); `start` then waits until it is ready. Raises
        ZygoteUnavailable if it could not be started."""
        if self._proc is not None or self.broken is not None:
            return
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._log_fd = logfile.create(self._log_path, fresh=False)
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kernelcraft.engine.startup.zygote",
                    str(child.fileno()),
                    "cuda" if self._cuda else "cpu",
                ],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=self._log_fd,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._log_path.parent,
                start_new_session=True,
            )
        except OSError as e:
            parent.close()
            raise ZygoteUnavailable(f"could not start: {e}") from e
        finally:
            child.close()
        parent.setblocking(False)
        self._sock = parent

    def started_for(self, env: dict[str, str]) -> bool:
        """Whether this zygote was (or will be) started for a pool whose workers get `env`."""
        return self._env == env | _ONE_THREAD

    async def start(self, timeout: float) -> None:
        """Start the zygote (unless `spawn` did) and wait until it has imported everything (or
        raise ZygoteUnavailable)."""
        if self._ready is not None:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
            return
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        try:
            self.spawn()
        except ZygoteUnavailable as e:
            self._fail(str(e))
            raise
        self._reader = asyncio.create_task(self._read())
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except asyncio.TimeoutError as e:
            self._fail(f"not ready within {timeout:.0f} s")
            raise ZygoteUnavailable(self.broken) from e

    def disable(self, reason: str) -> None:
        """Stop forking (the pool spawns from now on) and kill the zygote."""
        self._fail(reason)

    def _fail(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason
            log.warning("zygote unavailable (%s); workers will be spawned instead", reason)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(ZygoteUnavailable(reason))
            self._ready.exception()  # mark retrieved
        for fut in self._started.values():
            if not fut.done():
                fut.set_exception(ZygoteUnavailable(reason))
        self._started.clear()
        for child in self._children.values():
            child.orphaned = True
        self.kill()

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        try:
            while True:
                data = await loop.sock_recv(self._sock, MAX_MESSAGE)
                if not data:
                    raise ConnectionError("the zygote closed its socket")
                self._handle(json.loads(data))
        except (OSError, ValueError, ConnectionError) as e:
            self._fail(f"stopped: {e}; log: {self._tail()}")
        except asyncio.CancelledError:
            pass

    def _handle(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "ready":
            self.deferred = [str(x) for x in msg.get("deferred", [])]
            log.debug("zygote ready: imports by stage %s s, deferred %s", msg.get("seconds"), self.deferred)
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif kind == "unavailable":
            self._fail(str(msg.get("reason", "unavailable")))
        elif kind == "started":
            fut = self._started.pop(int(msg["id"]), None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["pid"]))
        elif kind == "exit":
            pid, code = int(msg["pid"]), int(msg["returncode"])
            child = self._children.pop(pid, None)
            if child is not None:
                child._exited(code)
            else:  # the exit overtook the "started" reply
                self._early_exits[pid] = code
        elif kind == "fork_failed":
            fut = self._started.pop(int(msg["id"]), None)
            if fut is not None and not fut.done():
                fut.set_exception(OSError(str(msg.get("error", "fork failed"))))

    async def fork(
        self, channel: socket.socket, workdir: Path, log_fd: int | None, env: dict[str, str]
    ) -> ForkedChild:
        """Fork a worker that serves `channel`, runs in `workdir`, logs to the descriptor
        `log_fd` (the pool opened it: `logfile.py`), and has `env` set on top of the zygote's
        environment."""
        if log_fd is None:
            raise ZygoteUnavailable("the worker's log is closed")
        if self.broken is not None or self._sock is None:
            raise ZygoteUnavailable(self.broken or "not started")
        loop = asyncio.get_running_loop()
        async with self._lock:
            self._next_id += 1
            req = self._next_id
            fut: asyncio.Future[int] = loop.create_future()
            self._started[req] = fut
            msg = json.dumps({"id": req, "workdir": str(workdir), "env": env}).encode()
            try:
                socket.send_fds(self._sock, [msg], [channel.fileno(), log_fd])
            except OSError as e:
                self._started.pop(req, None)
                self._fail(f"could not send a fork request: {e}")
                raise ZygoteUnavailable(self.broken) from e
        pid = await asyncio.wait_for(fut, 60)
        child = ForkedChild(pid)
        early = self._early_exits.pop(pid, None)
        if early is not None:
            child._exited(early)
        else:
            self._children[pid] = child
        return child

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    async def aclose(self) -> None:
        self.kill()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._proc is not None:
            proc = self._proc
            await asyncio.get_running_loop().run_in_executor(None, proc.wait)
        if self._sock is not None:
            self._sock.close()
        logfile.close(self._log_fd)
        self._log_fd = None
        for child in self._children.values():  # the zygote is gone: nobody will report these
            child.orphaned = True
        self._children.clear()

    def _tail(self) -> str:
        return logfile.tail(self._log_fd, 1500)


# ---- the zygote process ----


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.send(json.dumps(msg).encode())


def _child(ctrl: socket.socket, wake: tuple[int, int], req: dict[str, Any], fd: int, out: int) -> None:
    """In the forked worker: leave the zygote's session, files and signal handling behind, then
    serve the pool's channel exactly as a spawned worker would."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ctrl.close()
        for w in wake:
            os.close(w)
        os.setsid()
        os.dup2(out, 1)  # the log the pool opened (never a path the worker could have replaced)
        os.dup2(out, 2)
        os.close(out)
        os.chdir(req["workdir"])
        os.environ.update({str(k): str(v) for k, v in req["env"].items()})
        import tempfile

        tempfile.tempdir = None  # recomputed from TMPDIR (the worker's own directory)
        from kernelcraft.engine.worker import main as worker

        worker.serve(fd)
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(70)
    os._exit(0)


def _reap() -> list[tuple[int, int]]:
    """Every child that has exited, with its exit status (negative: the signal)."""
    exited = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        exited.append((pid, os.waitstatus_to_exitcode(status)))
    return exited


def _become_reaper() -> bool:
    """Make this zygote the child subreaper of its workers: what a worker leaves running when it
    exits (a setsid daemon, say) becomes the zygote's child, and `_end_orphans` kills it. Only
    matters where a worker has no PID namespace of its own (box/__init__.py), which ends all that anyway
    (and when a worker's keeper is killed, its namespace's init and worker come here too)."""
    import ctypes

    from kernelcraft.engine.wire import childenv

    pr_set_child_subreaper = 36
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
        return False
    os.environ[childenv.REAPER] = "zygote"  # the workers' box notes it
    return True


def _end_orphans(workers: set[int], timeout: float = 2.0) -> None:
    """Kill every child of this zygote that it did not fork (each was adopted when its parent, a
    worker or one of its processes, exited) and wait until they are gone, at most `timeout`: a
    worker's exit is reported after what it left behind. (In a PID namespace that is its init
    and worker, and init is gone only once everything in the namespace is.)"""
    deadline = time.monotonic() + timeout
    while True:
        orphans = [pid for pid in _children() if pid not in workers]
        if not orphans:
            return
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return
        time.sleep(0.005)
        for pid in orphans:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _children() -> list[int]:
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def main() -> None:
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    os.set_inheritable(ctrl.fileno(), False)
    cuda = sys.argv[2] == "cuda"
    # `python -m` put this process's directory (its log's, closed to other users) first on
    # sys.path; the package comes from PYTHONPATH. Left there, every forked worker would carry it,
    # and a worker that leaves root (box/__init__.py) would find a path it cannot reach and stay root.
    here = os.path.realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != here]
    from kernelcraft.engine.startup import forksafe
    from kernelcraft.engine.worker import main as worker

    # For a GPU pool, each import stage runs here only if a throwaway fork shows it leaves the GPU
    # driver alone and starts no thread; the others are left to each forked worker. A CPU pool
    # has no driver to touch: its stages run here at once (the probe would import each twice, on
    # the first job's path), and a stage that started a thread makes the zygote unavailable below.
    deferred: list[str] = []
    stage_seconds: dict[str, float] = {}
    for name, stage in worker.import_stages(cuda=cuda):
        started = time.perf_counter()
        # base, triton and dynamo were seen to leave the driver alone on the H200 (the check
        # after each stage still catches one that does): only inductor is worth a throwaway fork,
        # whose import the probe pays once more.
        if name not in ("base", "triton", "dynamo") and cuda and not forksafe.probe(stage):
            deferred.append(name)
            continue
        stage()
        stage_seconds[name] = round(time.perf_counter() - started, 3)
        if forksafe.driver_touched() or forksafe.threads() != 1:
            break
    import torch

    if torch.cuda.is_initialized() or forksafe.driver_touched():
        # A process that has called into the CUDA driver cannot fork children that use CUDA.
        _send(ctrl, {"type": "unavailable", "reason": "the GPU driver was initialised while importing"})
        return
    if forksafe.threads() != 1:
        names = sorted(
            open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")
        )
        _send(ctrl, {"type": "unavailable", "reason": f"{len(names)} threads after importing: {names}"})
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    reaper = _become_reaper()
    workers: set[int] = set()
    _send(ctrl, {"type": "ready", "pid": os.getpid(), "deferred": deferred, "seconds": stage_seconds})
    while True:
        readable, _, _ = select.select([ctrl.fileno(), wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        exited = _reap()
        if exited and reaper:
            _end_orphans(workers)  # before the pool hears that their worker is gone
        for pid, code in exited:
            if pid in workers:
                workers.discard(pid)
                _send(ctrl, {"type": "exit", "pid": pid, "returncode": code})
        if ctrl.fileno() not in readable:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctrl, MAX_MESSAGE, 2)
        except InterruptedError:
            continue
        if not data:
            return  # the pool is gone; its workers' channels close with it
        req = json.loads(data)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            _send(
                ctrl, {"type": "fork_failed", "id": req.get("id"), "error": "no channel and log were passed"}
            )
            continue
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            _send(ctrl, {"type": "fork_failed", "id": req.get("id"), "error": str(e)})
            continue
        if pid == 0:
            _child(ctrl, (wake_r, wake_w), req, fds[0], fds[1])
        workers.add(pid)
        for fd in fds:
            os.close(fd)
        _send(ctrl, {"type": "started", "id": req["id"], "pid": pid})


if __name__ == "__main__":
    main()
