"""The chaos run (issue 39 item 5): a level with `--jobs 4` while things go wrong, on the GPU.

Three phases over the same tasks and candidates, each into its own results folder:

1. `kill`: `kernelcraft level ... --jobs 4` while a worker process of the run is SIGKILLed every
   `--kill-every` seconds (a candidate's or a reference's, chosen at random);
2. `memory`: the same while another process holds `--hog` (default 85%) of the GPU's free memory;
3. `restart`: the level through the MCP tool `evaluate_level` of a stdio server, which is
   SIGKILLed after `--restart-after` seconds and started again with the same results folder.

After each phase the same command runs again (a rerun): it must evaluate nothing it already has.
What is checked, per phase: every task of the level has exactly one outcome in results.jsonl,
each a verdict (correct, incorrect with a failure class, task_error) or a named harness limit
(status harness_limit with its figures), never an infrastructure fault; and the rerun's
results.jsonl is the first run's (nothing lost, nothing evaluated twice). The figures go to
`--out`/chaos.json (docs/benchmarks.md records them).

    python bench/bench_chaos.py TASKS_DIR CANDIDATES_DIR --out /tmp/chaos [--problems 1-20]

On a machine without a GPU the `memory` phase is skipped (and said so); `--device cpu` runs the
rest in Triton's interpreter (a smoke test of the script itself on tiny tasks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VERDICTS = {"correct", "incorrect", "task_error", "missing", "timed", "untimed"}


def kernelcraft(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelcraft", *args]


def process_tree() -> dict[int, list[int]]:
    """Each process's children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (its workers, their zygote's forks)."""
    children, out, todo = process_tree(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def workers_of(pid: int) -> list[int]:
    """The worker processes under `pid`: everything below it but its zygotes (a forked worker
    shows its zygote's command line, so a zygote is told apart as a direct child)."""
    direct = set(process_tree().get(pid, []))
    return [p for p in descendants(pid) if not (p in direct and b"zygote" in cmdline(p))]


def outcomes(out: Path) -> list[dict[str, Any]]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check(out: Path, expected: int | None) -> dict[str, Any]:
    """What the phase left: one outcome a task, each a verdict or a named harness limit."""
    rows = outcomes(out)
    by_task: dict[int, int] = {}
    for r in rows:
        by_task[r["problem_id"]] = by_task.get(r["problem_id"], 0) + 1
    bad = [
        r
        for r in rows
        if r["status"] not in VERDICTS
        and not (r["status"] == "harness_limit" and r.get("message"))
        or r.get("failure_class") == "infrastructure"
    ]
    return {
        "tasks": len(by_task),
        "expected": expected,
        "outcomes": len(rows),
        "twice": sorted(p for p, n in by_task.items() if n > 1),
        "by_status": {
            s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})
        },
        "not_a_verdict": [(r["problem_id"], r["status"], (r.get("message") or "")[:200]) for r in bad],
        "ok": not bad
        and all(n == 1 for n in by_task.values())
        and (expected is None or len(by_task) == expected),
    }


def level_cmd(args: argparse.Namespace, out: Path) -> list[str]:
    cmd = kernelcraft(
        "level", str(args.tasks_dir), str(args.candidates_dir), "--out", str(out), "--jobs", "4"
    )
    if args.problems:
        cmd += ["--problems", args.problems]
    if args.device:
        cmd += ["--device", args.device]
    return cmd


def run_with_kills(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The level while a worker is killed every `kill_every` seconds."""
    rng = random.Random(39)
    started = time.monotonic()
    proc = subprocess.Popen(level_cmd(args, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed = []
    while proc.poll() is None:
        time.sleep(args.kill_every)
        victims = workers_of(proc.pid)
        if victims and proc.poll() is None:
            victim = rng.choice(victims)
            try:
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
            except ProcessLookupError:
                pass
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    return {
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "killed": len(killed),
        "stderr_tail": err[-1500:],
    }


def rerun(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    before = outcomes(out)
    started = time.monotonic()
    done = subprocess.run(level_cmd(args, out), capture_output=True, text=True)
    after = outcomes(out)
    return {
        "exit": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "evaluated_again": len(after) - len(before),
        "same": after[: len(before)] == before,
    }


def hog_memory(fraction: float) -> subprocess.Popen[bytes] | None:
    """A process that holds `fraction` of the GPU's free memory until it is killed (None: no GPU)."""
    code = (
        "import sys, time, torch\n"
        "free, _ = torch.cuda.mem_get_info()\n"
        f"x = torch.empty(int(free * {fraction}), dtype=torch.uint8, device='cuda')\n"
        "print(x.numel(), flush=True)\n"
        "time.sleep(86400)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = proc.stdout.readline() if proc.stdout else b""
    if not line.strip():
        proc.kill()
        return None
    return proc


async def level_over_mcp(args: argparse.Namespace, out: Path, kill_after: float | None) -> dict[str, Any]:
    """evaluate_level through a stdio server; with `kill_after`, the server is SIGKILLed then."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "kernelcraft", "serve"], env=dict(os.environ)
    )
    arguments = {
        "tasks_dir": str(args.tasks_dir.resolve()),
        "out_dir": str(out.resolve()),
        "candidates_dir": str(args.candidates_dir.resolve()),
    }
    if args.problems:
        arguments["problems"] = args.problems
    started = time.monotonic()
    try:
        async with Client(stdio_client(params)) as client:
            call = client.call_tool("evaluate_level", arguments)
            if kill_after is None:
                result = await call
                return {"error": result.is_error, "seconds": round(time.monotonic() - started, 1)}
            task = asyncio.ensure_future(call)
            await asyncio.sleep(kill_after)
            for pid in servers():
                os.kill(pid, signal.SIGKILL)
            try:
                await asyncio.wait_for(task, 60)
            except BaseException as e:  # the server is gone: the call fails, as it should
                return {"killed_after": kill_after, "call": type(e).__name__}
            return {"killed_after": kill_after, "call": "finished before the kill"}
    except BaseException as e:
        return {"killed_after": kill_after, "client": type(e).__name__}


def servers() -> list[int]:
    """Our `kernelcraft serve` processes (children of this one)."""
    return [p for p in descendants(os.getpid()) if b" serve" in cmdline(p)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tasks_dir", type=Path)
    p.add_argument("candidates_dir", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--problems")
    p.add_argument("--device", choices=("cuda", "cpu"))
    p.add_argument("--kill-every", type=float, default=20.0, help="seconds between worker kills")
    p.add_argument("--hog", type=float, default=0.85, help="fraction of the GPU's free memory held")
    p.add_argument("--restart-after", type=float, default=60.0, help="seconds before the server is killed")
    p.add_argument("--expected", type=int, help="how many tasks the level has (checked when given)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"argv": sys.argv, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    out = args.out / "kill"
    report["kill"] = {
        "run": run_with_kills(args, out),
        "rerun": rerun(args, out),
        "check": check(out, args.expected),
    }

    out = args.out / "memory"
    hog = None if args.device == "cpu" else hog_memory(args.hog)
    if hog is None:
        report["memory"] = {"skipped": "no GPU (or torch could not allocate on it)"}
    else:
        try:
            started = time.monotonic()
            done = subprocess.run(level_cmd(args, out), capture_output=True, text=True)
            report["memory"] = {
                "run": {
                    "exit": done.returncode,
                    "seconds": round(time.monotonic() - started, 1),
                    "stderr_tail": done.stderr[-1500:],
                }
            }
        finally:
            hog.kill()
            hog.wait()
        report["memory"] |= {"rerun": rerun(args, out), "check": check(out, args.expected)}

    out = args.out / "restart"
    first = asyncio.run(level_over_mcp(args, out, args.restart_after))
    partial = len(outcomes(out))
    second = asyncio.run(level_over_mcp(args, out, None))
    report["restart"] = {
        "first": first,
        "outcomes_before_restart": partial,
        "second": second,
        "rerun": rerun(args, out),
        "check": check(out, args.expected),
    }

    report["ok"] = all(report[k].get("check", {"ok": True})["ok"] for k in ("kill", "memory", "restart"))
    (args.out / "chaos.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k].get("check", report[k]) for k in ("kill", "memory", "restart")}, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
