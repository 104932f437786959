"""`kernelcraft rules …` and `kernelcraft docs …`: the rulebook and the manuals from a shell.

Each command opens the database (`--db`, else KERNELCRAFT_DB / KERNELCRAFT_HOME), imports the seed
rules if they are missing (as the server does at start), does one thing and closes it. `--json`
prints the same pydantic models the MCP tools return.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from kernelcraft.base.config import Settings
from kernelcraft.base.files import check_regular
from kernelcraft.base.targets import TARGET_LIST
from kernelcraft.cli.common import EXIT_OK, Subcommands, add_db, add_json, emit, knobs_of, print_json, run
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.schema.docs import DocSection, section_markdown
from kernelcraft.schema.rules import RuleOut
from kernelcraft.store import Store

T = TypeVar("T")
RULES_JSON = "the rules as a JSON array"


def register(sub: Subcommands) -> None:
    """Add the `rules` and `docs` command groups to the CLI's subparsers."""
    rules = sub.add_parser("rules", help="the shared rulebook: query, list, export, import")
    rsub = rules.add_subparsers(dest="rules_command", metavar="ACTION", required=True)

    p = rsub.add_parser("query", help="rank active rules for a context (a task, a kernel, an error text)")
    p.add_argument("text", help="the context; '-' reads it from stdin")
    p.add_argument("--arch", default=None, help=f"target or family: {TARGET_LIST}, nvidia, amd")
    p.add_argument("--limit", type=int, default=10, help="most rules to print")
    add_json(p, RULES_JSON)
    add_db(p)
    p.set_defaults(func=_rules_query)

    p = rsub.add_parser("list", help="list rules, most counted first")
    p.add_argument(
        "--status",
        choices=["candidate", "active", "retired"],
        default=None,
        help="only rules with this status",
    )
    p.add_argument("--arch", default=None, help=f"target or family: {TARGET_LIST}, nvidia, amd")
    add_json(p, RULES_JSON)
    add_db(p)
    p.set_defaults(func=_rules_list)

    formats = ("jsonl", "adaexplore")
    p = rsub.add_parser("export", help="write every rule to a JSON Lines file (stable ids)")
    p.add_argument("file", type=Path)
    p.add_argument(
        "--format",
        choices=formats,
        default="jsonl",
        help="jsonl (every field) or adaexplore (AdaExplore's memory file: 'rule text||count' lines)",
    )
    add_json(p, "the count as a JSON object")
    add_db(p)
    p.set_defaults(func=_rules_export)

    p = rsub.add_parser("import", help="merge rules from a JSON Lines file (counts add; re-import is safe)")
    p.add_argument("file", type=Path)
    p.add_argument(
        "--format",
        choices=formats,
        default="jsonl",
        help="jsonl, or adaexplore: AdaExplore's memory file ('rule text||count' lines; a count of 3 or "
        "more makes the rule active, as there)",
    )
    p.add_argument("--client", default="import", help="recorded as created_by for new rules without one")
    add_json(p, "the counts as a JSON object")
    add_db(p)
    p.set_defaults(func=_rules_import)

    docs = sub.add_parser("docs", help="the hardware manuals: search, show")
    dsub = docs.add_subparsers(dest="docs_command", metavar="ACTION", required=True)
    p = dsub.add_parser("search", help="search the manuals' sections")
    p.add_argument("text")
    p.add_argument("--arch", default=None, help=f"{TARGET_LIST}, nvidia or amd")
    p.add_argument("--limit", type=int, default=5, help="most sections to print")
    add_json(p, "the sections as a JSON array")
    add_db(p)
    p.set_defaults(func=_docs_search)
    p = dsub.add_parser("show", help="print one whole section by its id (as search prints it: [ID])")
    p.add_argument("section_id", type=int, metavar="ID")
    add_json(p, "the section as a JSON object")
    add_db(p)
    p.set_defaults(func=_docs_show)


def _run(args: argparse.Namespace, body: Callable[[Store, Rulebook], Awaitable[T]]) -> T:
    settings = Settings.from_knobs(knobs_of(args), args.db)

    async def go() -> T:
        store = await Store.open(settings.db_path)
        try:
            rulebook = Rulebook(store, settings.rule_activation_count)
            await rulebook.import_seed()
            return await body(store, rulebook)
        finally:
            await store.aclose()

    return run(go)


def _print_rules(rules: list[RuleOut]) -> None:
    if not rules:
        print("no rules match")
    for r in rules:
        scope = r.scope.arch_family or "any arch"
        score = f" score {r.score:.2f}" if r.score else ""
        print(f"[{r.uid}] ({r.status}, count {r.count}, {scope}{score})\n  {r.text}")
        if r.reason:
            print(f"  why: {r.reason}")


def _rules_query(args: argparse.Namespace) -> int:
    text = _stdin_or(args.text)
    rules = _run(args, lambda _s, rb: rb.query_rules(text, arch=args.arch, limit=args.limit))
    emit(rules, args.json, lambda: _print_rules(rules))
    return EXIT_OK


def _rules_list(args: argparse.Namespace) -> int:
    rules = _run(args, lambda _s, rb: rb.list_rules(status=args.status, arch=args.arch))
    emit(rules, args.json, lambda: _print_rules(rules))
    return EXIT_OK


def _rules_export(args: argparse.Namespace) -> int:
    check_regular(args.file, "the rules file", may_be_missing=True)
    if args.format == "adaexplore":
        n = _run(args, lambda _s, rb: rb.export_adaexplore(args.file))
    else:
        n = _run(args, lambda _s, rb: rb.export_jsonl(args.file))
    if args.json:
        print_json({"file": str(args.file), "rules": n})
    else:
        print(f"wrote {n} rules to {args.file}")
    return EXIT_OK


def _rules_import(args: argparse.Namespace) -> int:
    check_regular(
        args.file, "the rules file"
    )  # before the database opens; the import reads it (base/files.py)
    if args.format == "adaexplore":
        res = _run(args, lambda _s, rb: rb.import_adaexplore(args.file, client=args.client))
    else:
        res = _run(args, lambda _s, rb: rb.import_jsonl(args.file, client=args.client))
    emit(
        res,
        args.json,
        f"{res.lines} lines: {res.created} new rules, {res.merged} merged, {res.unchanged} unchanged",
    )
    return EXIT_OK


def _docs_search(args: argparse.Namespace) -> int:
    async def body(store: Store, _rb: Rulebook) -> list[DocSection]:
        docs = HwDocs(store)
        await docs.index()
        return await docs.search_hw_docs(args.text, arch=args.arch, limit=args.limit)

    sections = _run(args, body)
    emit(sections, args.json, lambda: _print_sections(sections))
    return EXIT_OK


def _docs_show(args: argparse.Namespace) -> int:
    async def body(store: Store, _rb: Rulebook) -> DocSection:
        docs = HwDocs(store)
        await docs.index()
        return await docs.get_section(args.section_id)

    section = _run(args, body)
    emit(section, args.json, lambda: print(section_markdown(section), end=""))
    return EXIT_OK


def _print_sections(sections: list[DocSection]) -> None:
    if not sections:
        print("no sections match")
    for s in sections:
        print(f"[{s.id}] {s.heading_path}  ({s.file}, {s.arch}, score {s.score:.2f})")
        print("  " + s.snippet[:300].replace("\n", "\n  "))


def _stdin_or(text: str) -> str:
    if text == "-":
        import sys

        return sys.stdin.read()
    return text
