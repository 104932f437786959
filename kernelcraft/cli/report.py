"""`kernelcraft report RUN_DIR` / `kernelcraft report --tree N`: the HTML report of an optimize run,
or of any search tree of the database (started over MCP, by `tree start` or by optimize).

The page is built from the run directory alone (tree.json, steps.jsonl, summary.json), so it works
without the database or the server the run used; `optimize` writes the same page at its end.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelcraft.base.errors import UsageError
from kernelcraft.cli.common import EXIT_OK, Subcommands, add_db, add_json, knobs_of, print_json, run
from kernelcraft.report.model import RunReport


def cmd_report(args: argparse.Namespace) -> int:
    from kernelcraft.report.build import from_run_dir
    from kernelcraft.report.html import render_html

    if (args.run_dir is None) == (args.tree is None):
        raise UsageError("give a run directory or --tree N (a search tree of the database), not both")
    if args.tree is not None:
        report = _tree_report(args)
        out: Path = args.out or Path(f"tree-{args.tree}-report.html")
    else:
        report = from_run_dir(args.run_dir)
        out = args.out or args.run_dir / "report.html"
    try:
        out.write_text(render_html(report), encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write the report to {out}: {e}; pick another --out") from e
    if args.json:
        print_json(report)
    else:
        print(f"Report of tree {report.tree_id} ({report.task_name}): {out} (open it in a browser)")
        if not report.speedup_measured and report.speed_note:
            print(report.speed_note)
    return EXIT_OK


def _tree_report(args: argparse.Namespace) -> RunReport:
    """The report of search tree `args.tree` of the database, however it was built (over MCP too)."""
    from kernelcraft.base.config import Settings
    from kernelcraft.knowledge.rulebook import Rulebook
    from kernelcraft.search import repository
    from kernelcraft.server.resources import tree_report
    from kernelcraft.store import Store, utcnow

    settings = Settings.from_knobs(knobs_of(args), args.db)

    async def go() -> RunReport:
        store = await Store.open(settings.db_path)
        try:
            view = await repository.tree_view(store.conn, args.tree, utcnow(), with_verdicts=True)
            return await tree_report(store, Rulebook(store, settings.rule_activation_count), view)
        finally:
            await store.aclose()

    return run(go)


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report of an optimize run (tree, speedup, failures, tokens, diff)",
        description="Write one self-contained HTML page for the run in RUN_DIR (the --out of kernelcraft "
        "optimize): the search tree, the best speedup over the steps against PyTorch eager and "
        "torch.compile, failures by class, tokens and cost, and the best kernel beside the seed.",
    )
    p.add_argument(
        "run_dir",
        type=Path,
        nargs="?",
        help="the run directory (holds tree.json, steps.jsonl, summary.json); or --tree",
    )
    p.add_argument(
        "--tree",
        type=int,
        metavar="N",
        help="instead: search tree N of the database, however it was built (MCP, `tree`, optimize)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="where to write the page (default RUN_DIR/report.html, or tree-N-report.html)",
    )
    add_db(p)
    add_json(p, "the report's data as JSON")
    p.set_defaults(func=cmd_report)
