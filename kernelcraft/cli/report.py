"""`kernelcraft report RUN_DIR`: redraw the HTML report of a `kernelcraft optimize` run.

The page is built from the run directory alone (tree.json, steps.jsonl, summary.json), so it works
without the database or the server the run used; `optimize` writes the same page at its end.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelcraft.base.errors import UsageError
from kernelcraft.cli.common import EXIT_OK, Subcommands, add_json, print_json


def cmd_report(args: argparse.Namespace) -> int:
    from kernelcraft.report.build import from_run_dir
    from kernelcraft.report.html import render_html

    report = from_run_dir(args.run_dir)
    out: Path = args.out or args.run_dir / "report.html"
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


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report of an optimize run (tree, speedup, failures, tokens, diff)",
        description="Write one self-contained HTML page for the run in RUN_DIR (the --out of kernelcraft "
        "optimize): the search tree, the best speedup over the steps against PyTorch eager and "
        "torch.compile, failures by class, tokens and cost, and the best kernel beside the seed.",
    )
    p.add_argument(
        "run_dir", type=Path, help="the run directory (holds tree.json, steps.jsonl, summary.json)"
    )
    p.add_argument("--out", type=Path, help="where to write the page (default RUN_DIR/report.html)")
    add_json(p, "the report's data as JSON")
    p.set_defaults(func=cmd_report)
