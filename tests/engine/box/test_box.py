"""The box a candidate runs in (kernelcraft/engine/box/__init__.py): hostile candidates in tests/cheats/
try to read other processes' secrets and files outside their directory, reach the network, leave
a daemon behind and fork without limit; each gets nothing, and an honest candidate still passes.

A part of the box this machine cannot give is named in the verdict's notes; its test is skipped
then (the first test asserts that a machine with user namespaces gives the whole box).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from kernelcraft.base import knobs
from kernelcraft.engine.box.sandbox import landlock_abi

CHEATS = Path(__file__).parents[2] / "cheats"
TASK = CHEATS / "task_scale.py"
ROOT = Path(__file__).resolve().parents[3]


def _namespaces_work() -> bool:
    """Whether a child process here can enter user, network, mount and PID namespaces."""
    code = textwrap.dedent(
        """
        import ctypes, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        uid, gid = os.geteuid(), os.getegid()
        assert libc.unshare(0x10000000) == 0
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            open(f"/proc/self/{name}", "w").write(text)
        assert libc.unshare(0x40000000 | 0x20000000 | 0x20000) == 0
        """
    )
    return sys.platform.startswith("linux") and subprocess.run([sys.executable, "-c", code]).returncode == 0


def _cheat(name: str, **values: object) -> str:
    source = (CHEATS / name).read_text()
    for key, value in values.items():
        source = source.replace(f"\n{key} = ", f"\n{key} = {value!r}  # was: ", 1)
    return source


@pytest.fixture(scope="module")
def box_notes(evaluator) -> str:  # type: ignore[no-untyped-def]
    """The notes an honest candidate's verdict carries: what of the box this machine lacks."""
    from kernelcraft.schema.evaluation import EvalJob

    job = EvalJob(task_source=TASK.read_text(), candidate_source=(CHEATS / "good.py").read_text(), trials=1)
    v = evaluator.submit(job).verify
    assert v is not None and v.correct, v
    return " ".join(n for n in v.notes if "box" in n)


def _skip_unless_in_force(notes: str, *missing: str) -> None:
    for words in missing:
        if words in notes:
            pytest.skip(f"this machine does not give that part of the box: {notes}")


# ---- the namespaces and the keeper, without torch ----


def test_a_boxed_worker_has_its_own_pid_namespace_that_ends_with_it_and_its_death_is_relayed() -> None:
    if not _namespaces_work():
        pytest.skip("no user namespaces here")
    workdir = Path(tempfile.mkdtemp(dir="/dev/shm"))  # a directory other users can reach
    # The daemon's sign of life goes to a descriptor it inherits: its directory is a tmpfs of its
    # own (box/mounts.py), which this process does not see.
    marker = Path(tempfile.mkdtemp()) / "daemon.log"
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    script = textwrap.dedent(
        f"""
        import os, sys, threading, time
        sys.path.insert(0, {str(ROOT)!r})
        os.environ.update(
            KERNELCRAFT_WORKER_BOX="on", KERNELCRAFT_WORKER_DIR={str(workdir)!r}, KERNELCRAFT_WORKER_DEVICE="cpu"
        )
        from kernelcraft.engine import box
        box.start()
        threading.Thread(target=time.sleep, args=(0,)).start()  # threads work
        print(os.getpid(), box.host_pid() != os.getpid(), os.getuid() != 0, set(box._box.missing) - {{"identity"}})
        if os.fork() == 0:  # a daemon: double fork, setsid
            os.setsid()
            if os.fork() == 0:
                while True:
                    os.write({fd}, b"alive\\n")
                    time.sleep(0.02)
            os._exit(0)
        while os.fstat({fd}).st_size == 0:
            time.sleep(0.01)
        os.abort()
        """
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, pass_fds=(fd,)
        )
        assert proc.returncode == -signal.SIGABRT, proc.stderr  # the worker's own signal, relayed
        # pid 1 is the namespace's init; root took nobody as its (real) uid
        assert proc.stdout == "2 True True set()\n", proc.stdout
        size = marker.stat().st_size
        time.sleep(0.3)
        assert marker.stat().st_size == size  # the daemon died with the namespace
    finally:
        os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(marker.parent, ignore_errors=True)


def test_a_project_checkout_on_sys_path_shows_its_packages_but_not_its_data(tmp_path: Path) -> None:
    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    project, work = tmp_path / "project", tmp_path / "work"
    (project / "pkg").mkdir(parents=True)
    work.mkdir()
    (project / "pkg" / "__init__.py").write_text("X = 1\n")
    (project / "helper.py").write_text("Y = 2\n")
    (project / ".env").write_text("API_KEY=secret\n")
    (project / "kernelcraft.db").write_text("rules\n")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(project)!r}]
        from kernelcraft.engine import box
        box.confine({str(work)!r})
        out = {{}}
        for path in ("pkg/__init__.py", "helper.py", ".env", "kernelcraft.db"):
            try:
                open({str(project)!r} + "/" + path).read()
                out[path] = "read"
            except OSError as e:
                out[path] = e.strerror
        import pkg, helper
        open({str(work / "out.txt")!r}, "w").write("written")
        try:
            open({str(tmp_path / "outside.txt")!r}, "w")
        except OSError as e:
            out["outside"] = e.strerror
        print(json.dumps(out))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "pkg/__init__.py": "read",
        "helper.py": "read",
        ".env": "Permission denied",
        "kernelcraft.db": "Permission denied",
        "outside": "Permission denied",
    }
    assert (work / "out.txt").read_text() == "written"


# ---- hostile candidates through the evaluator ----


@pytest.mark.slow
def test_a_machine_with_user_namespaces_gives_the_whole_box_and_an_honest_candidate_passes(
    box_notes: str,
) -> None:
    if not _namespaces_work() or landlock_abi() < 6:
        pytest.skip("this machine lacks user namespaces or Landlock ABI 6")
    # Root stays root (in its user namespace) only where "nobody" could not reach Python (a
    # pyenv under /root, say): the one part a machine's layout may take away.
    assert re.fullmatch(
        r"(the candidate's box is partial: it runs as root \(\S+ is closed to other users\))?", box_notes
    )


@pytest.mark.slow
def test_a_candidate_cannot_read_the_environment_of_the_server_or_the_shell_above_it(tmp_path: Path) -> None:
    # The CLI is the server here; `sh` is the shell above it. Both were started with the secret
    # in their environment (what /proc/<pid>/environ shows). Without the box the same candidate
    # hands the secret back in its error text: that run shows the attack works.
    secret = f"kcbox-{secrets.token_hex(8)}"
    (tmp_path / "task.py").write_text(TASK.read_text())
    (tmp_path / "cand.py").write_text((CHEATS / "reads_environs.py").read_text())

    def verify(box: str) -> str:
        env = dict(
            os.environ, KC_BOX_TEST_API_KEY=secret, KERNELCRAFT_SANDBOX=box, KERNELCRAFT_HOME=str(tmp_path)
        )
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        cli = "from kernelcraft.cli import main; main()"
        shell = f'"$0" -c "{cli}" verify task.py cand.py --json --device cpu --trials 1; exit $?'
        proc = subprocess.run(
            ["sh", "-c", shell, sys.executable],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert '"status":"runtime_error"' in proc.stdout, proc.stdout + proc.stderr
        return proc.stdout

    assert secret in verify("off")
    boxed = verify("on")
    assert "read " in boxed and "environments; loot" in boxed
    assert secret not in boxed


@pytest.mark.slow
def test_a_candidate_cannot_read_files_outside_its_directory(evaluator, job_for, tmp_path: Path) -> None:
    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    secret = f"kcbox-{secrets.token_hex(8)}"
    (tmp_path / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY----- {secret}\n")
    (tmp_path / "kernelcraft.db").write_text(f"SQLite format 3 {secret}\n")
    paths = [str(tmp_path / "id_ed25519"), str(tmp_path / "kernelcraft.db"), str(tmp_path)]
    result = evaluator.submit(job_for(TASK, _cheat("reads_files.py", PATHS=paths), trials=1))
    assert result.verify is not None and result.verify.correct, result.verify  # every read was refused
    assert secret not in result.model_dump_json()


@pytest.mark.slow
def test_a_candidate_cannot_reach_a_listener_on_localhost(evaluator, job_for, box_notes: str) -> None:
    _skip_unless_in_force(box_notes, "it can reach the network")
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        port = tcp.getsockname()[1]
        udp.bind(("127.0.0.1", port))
        result = evaluator.submit(job_for(TASK, _cheat("connects_out.py", PORT=port), trials=1))
        assert result.verify is not None and result.verify.correct, result.verify
        tcp.setblocking(False)
        with pytest.raises(BlockingIOError):
            tcp.accept()
        if "no network namespace" not in box_notes:  # Landlock refuses TCP only
            udp.setblocking(False)
            with pytest.raises(BlockingIOError):
                udp.recvfrom(100)


@pytest.mark.slow
def test_a_daemon_the_candidate_leaves_is_gone_after_the_verdict(
    evaluator, job_for, box_notes: str, static_checks_off
) -> None:
    _skip_unless_in_force(box_notes, "no PID namespace")
    # The daemon's heartbeat goes to the worker's own directory (a CPU worker's /dev/shm is its
    # own too); the forward returns only once it beats, and the test looks for it by name.
    name = f"kcd{secrets.token_hex(5)}"
    result = evaluator.submit(job_for(TASK, _daemon_source(Path("daemon-heartbeat"), name), trials=1))
    assert result.verify is not None and result.verify.correct, result.verify
    assert not _alive(name), "the daemon outlived the verdict"


def _daemon_source(marker: Path, name: str = "") -> str:
    return _cheat("leaves_a_daemon.py", MARKER=str(marker), NAME=name).replace(
        "        return y\n",
        "        while not _o.path.exists(MARKER):  # the daemon has run\n"
        "            _t.sleep(0.01)\n"
        "        return y\n",
    )


def _comm(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:  # the process is gone
        return ""


def _alive(name: str) -> bool:
    """Whether a process named `name` is alive on this machine (after a moment's grace)."""
    deadline = time.monotonic() + 2.0
    while True:
        found = any(_comm(p) == name for p in Path("/proc").glob("[0-9]*/comm"))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.mark.slow
def test_without_a_pid_namespace_the_zygote_kills_the_daemon(
    job_for, monkeypatch: pytest.MonkeyPatch, static_checks_off
) -> None:
    # How a GPU pool runs (CUDA IPC does not cross PID namespaces): the zygote, child subreaper of
    # its workers, kills what a worker leaves behind before it reports the worker's exit.
    from tests.conftest import EvalRunner

    monkeypatch.setenv("KERNELCRAFT_SANDBOX_PIDNS", "off")
    name = f"kcd{secrets.token_hex(5)}"
    runner = EvalRunner()
    try:
        result = runner.submit(job_for(TASK, _daemon_source(Path("daemon-heartbeat"), name), trials=1))
        assert result.verify is not None and result.verify.correct, result.verify
        notes = " ".join(result.verify.notes)
        assert "no PID namespace (KERNELCRAFT_SANDBOX_PIDNS=off)" in notes and "outlive" not in notes
        assert not _alive(name), "the daemon outlived the verdict"
    finally:
        runner.close()


@pytest.mark.slow
def test_a_candidate_cannot_fork_200_processes(evaluator, job_for, box_notes: str, static_checks_off) -> None:
    # The static rules refuse os.fork before the box is reached; the box must hold on its own.
    _skip_unless_in_force(box_notes, "no process limit", "about 300")
    result = evaluator.submit(job_for(TASK, CHEATS / "forks_many.py", trials=1))
    # It passes only when a fork was refused (EAGAIN) after at least 10 succeeded.
    assert result.verify is not None and result.verify.correct, result.verify


@pytest.mark.slow
def test_a_crashing_candidate_in_the_box_is_a_crash_that_names_its_signal(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "segfault.py", trials=1)).verify
    assert v is not None and v.status == "runtime_crash" and v.evidence is not None
    assert "SIGSEGV" in v.evidence.message, v.evidence.message


# ---- on a GPU (the H200; skipped without CUDA): CUDA IPC, the JIT and its compilers in the box ----


@pytest.fixture(scope="module")
def gpu_eval():  # type: ignore[no-untyped-def]
    import asyncio

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernelcraft.engine.host.local import LocalEvaluator

    loop = asyncio.new_event_loop()
    ev = LocalEvaluator(settings=knobs.settings(), workers=2, device="cuda", protect_environ=False)
    loop.run_until_complete(ev.start())
    yield lambda job: loop.run_until_complete(ev.submit(job))
    loop.run_until_complete(ev.aclose())
    loop.close()


@pytest.mark.gpu
def test_on_a_gpu_an_honest_candidate_passes_and_is_timed_in_the_whole_box(gpu_eval, job_for) -> None:
    r = gpu_eval(job_for(TASK, CHEATS / "good.py", stages=["verify", "profile"], trials=2))
    assert r.verify is not None and r.verify.correct, r.verify
    # The whole box but a PID namespace (off on a GPU: CUDA IPC does not cross them) and, where the
    # worker stays root in its own user namespace (KERNELCRAFT_SANDBOX_IDENTITY=root, or where nobody
    # cannot reach Python), the nobody identity and the process limit that rests on it. Nothing else
    # may be missing.
    box = [n for n in r.verify.notes if "box" in n]
    assert len(box) == 1 and box[0].startswith("the candidate's box is partial: "), box
    missing = box[0].removeprefix("the candidate's box is partial: ").split("; ")
    assert "no PID namespace (off on a GPU: CUDA IPC does not cross PID namespaces)" in missing, missing
    allowed = ("no PID namespace", "it runs as root", "no process limit (it runs as root)")
    assert all(m.startswith(allowed) for m in missing), missing
    if os.environ.get("KERNELCRAFT_SANDBOX_IDENTITY", "nobody") == "nobody":
        assert not any(m.startswith("it runs as root") for m in missing), missing
    assert r.profile is not None and r.profile.available and r.profile.candidate is not None, r.profile
    assert r.profile.candidate.median_us > 0 and r.profile.failure_class is None, r.profile


@pytest.mark.gpu
def test_on_a_gpu_hostile_candidates_get_nothing(
    gpu_eval, job_for, tmp_path: Path, static_checks_off
) -> None:
    secret = f"kcbox-{secrets.token_hex(8)}"
    (tmp_path / "id_ed25519").write_text(secret)
    marker = Path(f"/dev/shm/kernelcraft-test-daemon-{secrets.token_hex(6)}")
    daemon = _daemon_source(marker)
    try:
        got = {}  # every cheat is tried, so one GPU run tells which of them the box stops
        for name, source in (
            ("reads_files", _cheat("reads_files.py", PATHS=[str(tmp_path / "id_ed25519")])),
            ("forks_many", CHEATS / "forks_many.py"),
            ("daemon", daemon),
        ):
            r = gpu_eval(job_for(TASK, source, trials=1))
            assert secret not in r.model_dump_json(), name
            if r.verify is None or not r.verify.correct:
                got[name] = r.verify.evidence.message if r.verify and r.verify.evidence else r
        assert not got, got
        # The daemon was killed, and its heartbeat file swept out of /dev/shm (shmsweep.py): nothing
        # writes it any more, and nothing of it is left.
        time.sleep(0.5)
        assert not marker.exists()
    finally:
        marker.unlink(missing_ok=True)


def test_workers_become_nobody_unless_told_to_stay_root_in_their_namespace() -> None:
    from kernelcraft.base.knobs import EngineSettings
    from kernelcraft.engine import box

    assert box.mode("cpu", EngineSettings()) == "on"
    assert box.mode("cuda", EngineSettings()) == "on,nopidns-gpu"
    root = EngineSettings(sandbox_identity="root")
    assert box.mode("cuda", root) == "on,nopidns-gpu,root"
    assert box.mode("cpu", root) == "on,root"
    assert box.mode("cuda", EngineSettings(sandbox=False, sandbox_identity="root")) == "off"
