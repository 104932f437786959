"""`kernelcraft tree start|submit|abandon|status|show`: step a search tree from a shell.

    kernelcraft tree start TASK [--seed-candidate F] [--target T] [--policy P]
                               [--preset kernelcraft|adaexplore] [--param K=V ...]
                               [--budget N] [--seed S] [--json]
    kernelcraft tree submit TREE_ID NODE_ID CANDIDATE [--json]
    kernelcraft tree abandon TREE_ID NODE_ID --reason TEXT [--json]
    kernelcraft tree status TREE_ID [--code] [--json]
    kernelcraft tree show TREE_ID [--json]

Each command opens the database (`--db`, else KERNELCRAFT_DB / KERNELCRAFT_HOME) as the server does
(`kernelcraft.server.state.open_app_state`), does one thing and closes it; candidates are evaluated
by a `LocalEvaluator` on this machine. `--json` prints the same pydantic models the MCP tool
`search_tree_step` returns. Exit codes: 0, except `submit` of a candidate that is not correct (1);
2 for unusable arguments. `abandon` (a step you could write no candidate for) exits 0: the step is
recorded as failed with your reason.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from kernelcraft.base.config import Settings
from kernelcraft.base.errors import UsageError
from kernelcraft.base.targets import DEFAULT_TARGET, KNOWN_TARGETS
from kernelcraft.cli.common import (
    EXIT_NEGATIVE,
    EXIT_OK,
    Subcommands,
    add_db,
    add_device,
    add_json,
    emit,
    knobs_of,
    print_json,
)
from kernelcraft.cli.progress import JobProgress
from kernelcraft.engine import Evaluator
from kernelcraft.schema.presets import DEFAULT_PRESET, PRESET_NAMES
from kernelcraft.schema.tree import NextStep, NodeInfo, StartResult, SubmitResult, TreeStatus, TreeView
from kernelcraft.search.policy import POLICIES
from kernelcraft.search.service import SearchService

T = TypeVar("T")
Device = Literal["auto", "cuda", "cpu"]


def register(sub: Subcommands) -> None:
    """Add the `tree` command group to the CLI's subparsers."""
    tree = sub.add_parser(
        "tree", help="search trees over kernels (AdaExplore): start, submit, abandon, status, show"
    )
    tsub = tree.add_subparsers(dest="tree_command", metavar="ACTION", required=True)

    p = tsub.add_parser("start", help="start a tree for a task and print its first step")
    p.add_argument(
        "task", metavar="TASK", help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"
    )
    p.add_argument("--seed-candidate", metavar="F", default=None, help="a kernel file to start from")
    p.add_argument("--target", default=DEFAULT_TARGET, choices=KNOWN_TARGETS, help="target arch")
    p.add_argument("--policy", default="adaexplore", choices=sorted(POLICIES), help="search policy")
    p.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        choices=PRESET_NAMES,
        help="the search's configuration: kernelcraft (AdaExplore with KernelEvolve's feedback) or "
        "adaexplore (AdaExplore exactly); --param overrides single values",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="a parameter over the preset's, e.g. p_large=0.3, level=3 (a KernelBench level 3 task) or "
        "lease_seconds=600; repeatable",
    )
    p.add_argument("--budget", type=int, default=50, metavar="N", help="candidates to evaluate")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the tree's random choices")
    _common(p)
    p.set_defaults(func=_start)

    p = tsub.add_parser("submit", help="evaluate a candidate written for a step and print the next step")
    p.add_argument("tree_id", type=int, metavar="TREE_ID")
    p.add_argument("node_id", type=int, metavar="NODE_ID", help="the node_id of the step")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate file defining ModelNew")
    _common(p)
    p.set_defaults(func=_submit)

    p = tsub.add_parser(
        "abandon", help="give up a step that produced no candidate (no evaluation) and print the next step"
    )
    p.add_argument("tree_id", type=int, metavar="TREE_ID")
    p.add_argument("node_id", type=int, metavar="NODE_ID", help="the node_id of the step")
    p.add_argument(
        "--reason", required=True, metavar="TEXT", help="why no candidate was written (kept on the node)"
    )
    _common(p)
    p.set_defaults(func=_abandon)

    p = tsub.add_parser("status", help="best kernel, counts, budget left, and your next step")
    p.add_argument("tree_id", type=int, metavar="TREE_ID")
    p.add_argument("--code", action="store_true", help="also print the best kernel's code")
    _common(p)
    p.set_defaults(func=_status)

    p = tsub.add_parser("show", help="every node of a tree")
    p.add_argument("tree_id", type=int, metavar="TREE_ID")
    add_json(p)
    add_db(p)
    p.set_defaults(func=_show)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--client", default="local", help="who is stepping the tree")
    add_json(p)
    add_device(p)
    add_db(p)


def _read(path: str) -> str:
    from kernelcraft.engine import read_source

    return read_source(path)


def _params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {pair!r} is not KEY=VALUE, e.g. --param p_large=0.3")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    continue
        out[key.strip()] = value
    return out


def _run(
    args: argparse.Namespace, body: Callable[[SearchService], Awaitable[T]], *, device: Device | None = None
) -> T:
    """Open the database's state as the server does (`open_app_state`), run `body` on its search
    service, close it. Candidates are evaluated by a `LocalEvaluator` for `--device` (or `device`)."""
    settings = Settings.from_knobs(knobs_of(args), args.db)

    def local_evaluator(given: Settings) -> Evaluator:
        from kernelcraft.engine import LocalEvaluator

        return LocalEvaluator(device=device or args.device, settings=given.knobs)

    async def go() -> T:
        from kernelcraft.server.state import open_app_state  # imports mcp: only for a tree command

        async with open_app_state(settings, local_evaluator) as state:
            return await body(state.search)

    return asyncio.run(go())


def _start(args: argparse.Namespace) -> int:
    task = _read(args.task)
    seed_code = _read(args.seed_candidate) if args.seed_candidate else None
    params = _params(args.param)

    async def body(svc: SearchService) -> StartResult:
        with JobProgress() as bar:
            return await svc.start(
                task,
                task_name=args.task,
                seed_candidate=seed_code,
                target=args.target,
                policy=args.policy,
                preset=args.preset,
                params=params or None,
                budget=args.budget,
                seed=args.seed,
                client=args.client,
                progress=bar,
            )

    result = _run(args, body)
    emit(result, args.json, lambda: _print_result(result))
    return EXIT_OK


def _submit(args: argparse.Namespace) -> int:
    code = _read(args.candidate)

    async def body(svc: SearchService) -> SubmitResult:
        with JobProgress() as bar:
            return await svc.submit(args.tree_id, args.node_id, code, client=args.client, progress=bar)

    result = _run(args, body)
    emit(result, args.json, lambda: _print_result(result))
    return EXIT_OK if result.node.outcome == "correct" else EXIT_NEGATIVE


def _abandon(args: argparse.Namespace) -> int:
    async def body(svc: SearchService) -> SubmitResult:
        return await svc.abandon(args.tree_id, args.node_id, args.reason, client=args.client)

    result = _run(args, body)
    emit(result, args.json, lambda: _print_result(result))
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    async def body(svc: SearchService) -> TreeStatus:
        return await svc.status(args.tree_id, client=args.client)

    st = _run(args, body)
    if args.json:
        print_json(st)
        return EXIT_OK
    t = st.tree
    c = st.counts
    print(
        f"Tree {t.id}: {t.task_name} on {t.target}, policy {t.policy} (preset {_preset(t.params)}), {t.status}."
    )
    print(f"Budget: {st.budget_used} of {t.budget} evaluated, {st.budget_left} left.")
    print(
        f"Outcomes: {c.correct} correct, {c.wrong} wrong, {c.not_compiled} not compiled, "
        f"{c.pending} in progress, {c.lapsed} lapsed."
    )
    print(f"Best: {_node_line(st.best)}" if st.best else "Best: none yet.")
    if args.code and st.best is not None and st.best.code:
        print(st.best.code)
    _print_step(st.next_step, st.next_step_note)
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    async def body(svc: SearchService) -> TreeView:
        return await svc.show(args.tree_id)

    # `show` evaluates nothing: a CPU evaluator neither imports torch nor starts a worker.
    view = _run(args, body, device="cpu")
    if args.json:
        print_json(view)
        return EXIT_OK
    t = view.tree
    print(
        f"Tree {t.id}: {t.task_name} on {t.target}, policy {t.policy} (preset {_preset(t.params)}), "
        f"budget {t.budget}, seed {t.seed}, {t.status}."
    )
    children: dict[int | None, list[NodeInfo]] = {}
    for n in view.nodes:
        children.setdefault(n.parent_id, []).append(n)
    stack = [(n, 0) for n in reversed(children.get(None, []))]
    while stack:  # depth first, children in creation order
        n, depth = stack.pop()
        best = "  ← best" if n.id == view.best_node_id else ""
        print(f"{'  ' * depth}{_node_line(n)}{best}")
        stack.extend((c, depth + 1) for c in reversed(children.get(n.id, [])))
    return EXIT_OK


def _preset(params: dict[str, Any]) -> str:
    # Trees started before presets existed record none; they ran kernelcraft's defaults of the time.
    return str(params.get("preset", "none recorded"))


def _node_line(n: NodeInfo) -> str:
    if n.kind == "root":
        return f"[{n.id}] root (visits {n.visits}, mean {n.mean_value:.3f})"
    head = f"[{n.id}] {n.kind}{' seed' if n.seed else ''}"
    if n.status != "evaluated":
        return f"{head}: {n.status} (client {n.client})"
    if n.abandoned:
        what = f"abandoned ({(n.error or 'no reason given').splitlines()[0][:80]})"
    elif n.outcome == "correct":
        what = f"correct, {n.speedup:.2f}×" if n.speedup is not None else "correct (speed not measured)"
    else:
        what = f"{n.outcome} ({n.failure_class.value if n.failure_class else '?'})"
    return f"{head}: {what}, reward {n.reward:.3f}, visits {n.visits}, mean {n.mean_value:.3f}"


def _print_result(result: StartResult | SubmitResult) -> None:
    print(result.message)
    if isinstance(result, StartResult):
        _print_step(result.next_step, None)
        return
    print(f"Budget left: {result.budget_left}.")
    _print_step(result.next_step, result.next_step_note)


def _print_step(step: NextStep | None, note: str | None) -> None:
    if step is None:
        print(f"No next step: {note}" if note else "No next step.")
        return
    print(
        f"\nNext step: {step.kind} step from node {step.parent_id}; write the candidate and run\n"
        f"  kernelcraft tree submit {step.tree_id} {step.node_id} CANDIDATE.py\n"
        f"(or, if you cannot write one: kernelcraft tree abandon {step.tree_id} {step.node_id} --reason TEXT)\n"
        f"(lease until {step.lease_expires_at}; {step.reason})\n"
    )
    print(step.instructions)
    if step.start_code:
        print(f"\n--- start_code (node {step.parent_id}) ---\n{step.start_code}")
    for k in step.pool:
        print(f"\n--- pool: node {k.node_id} ---\n{k.code}")
