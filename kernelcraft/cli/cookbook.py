"""`kernelcraft cookbook list|search|show`: the cookbook's verified kernels from a shell.

    kernelcraft cookbook list [--family norm] [--json]     id, family, task, H200 figures
    kernelcraft cookbook search TEXT|- [--family F] [--limit N] [--json]
    kernelcraft cookbook show ID [--task] [--json]         the kernel's code (or its task's)

`search` takes words, an op, a KernelBench problem, or a task's source (`-` reads stdin), as the
`search_examples` MCP tool does. Nothing here touches the database or evaluates anything.
"""

from __future__ import annotations

import argparse
import sys

from kernelcraft.base.errors import UsageError
from kernelcraft.cli.common import EXIT_OK, Subcommands, add_json, emit, print_json
from kernelcraft.knowledge.cookbook import load_cookbook
from kernelcraft.schema.cookbook import FAMILIES, CookbookListing, figure_line


def register(sub: Subcommands) -> None:
    """Add the `cookbook` command group to the CLI's subparsers."""
    book = sub.add_parser("cookbook", help="the cookbook of verified kernels: list, search, show")
    csub = book.add_subparsers(dest="cookbook_command", metavar="ACTION", required=True)

    p = csub.add_parser("list", help="every entry: id, family, task and H200 figures")
    p.add_argument("--family", choices=FAMILIES, help="only this family")
    add_json(p, "the entries as a JSON array (id, family, task, kernelbench, figures)")
    p.set_defaults(func=_list)

    p = csub.add_parser("search", help="entries for words, an op, a KernelBench problem or a task's source")
    p.add_argument("text", help="what to look for; '-' reads it from stdin (a task's source, say)")
    p.add_argument("--family", choices=FAMILIES, help="only this family")
    p.add_argument("--limit", type=int, default=3, help="most entries to print")
    add_json(p, "the entries as a JSON array, without their code")
    p.set_defaults(func=_search)

    p = csub.add_parser("show", help="print one entry's kernel (class ModelNew), or its task with --task")
    p.add_argument("entry_id", metavar="ID")
    p.add_argument("--task", action="store_true", help="print the task it was verified on instead")
    add_json(p, "the entry with its kernel and task code as one JSON object")
    p.set_defaults(func=_show)


def _list(args: argparse.Namespace) -> int:
    entries = load_cookbook().listed(args.family)
    if args.json:
        print_json(
            [
                CookbookListing(
                    id=e.id, family=e.family, task=e.task, kernelbench=e.kernelbench, figures=e.figures
                )
                for e in entries
            ]
        )
        return EXIT_OK
    for e in entries:
        print(f"{e.id:<18} {e.family:<14} {e.title}")
        for f in e.figures:
            print(f"{'':<33} {figure_line(f)}")
        if not e.figures:
            print(f"{'':<33} H200: not measured")
    return EXIT_OK


def _search(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    if not 1 <= args.limit <= 50:
        raise UsageError(f"--limit must be between 1 and 50, not {args.limit}")
    found = load_cookbook().search(text, family=args.family, limit=args.limit, with_code=False)

    def show() -> None:
        if not found:
            print("no entry matches; `kernelcraft cookbook list` shows them all")
        for x in found:
            print(f"[{x.id}] ({x.family}, score {x.score:.2f})\n  {x.summary}")
            for line in x.figures:
                print(f"  {line}")

    emit(found, args.json, show)
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    book = load_cookbook()
    example = book.example(args.entry_id)
    emit(example, args.json, lambda: print(example.task_code if args.task else example.kernel_code, end=""))
    return EXIT_OK
