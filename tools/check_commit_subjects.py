"""Commit subjects of at most 72 characters, the detail in the body (issue 28).

As a commit-msg hook (pre-commit, `.pre-commit-config.yaml`): `check_commit_subjects.py FILE`
checks the message being written. In CI: `check_commit_subjects.py --since BASE` checks every
commit after BASE (history before it is not rewritten). Exit 1 names each offending subject.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT = 72
BASE = "919b2ba"
"""The last commit not held to the rule: older subjects are history, not rewritten. (82fa9a2 until
919b2ba landed on main with a 74-character subject; every commit between them passed.)"""
LANDED_LONG = frozenset({"994b8a3", "1463796", "16140bd", "73c322d", "11b8085", "24218d4", "8a78413"})
"""Commits on main after BASE that landed over the limit (73, 77 and 73 characters, 2026-12-04; 74,
73, 76 and 76 on 2026-12-05): main is never rewritten, so they are named here one by one and every other commit is still held to the rule."""


def too_long(subject: str) -> bool:
    return len(subject) > LIMIT


def landed_long(commit: str | None) -> bool:
    """Whether COMMIT (an abbreviation of any length git chose) is one of `LANDED_LONG`."""
    return commit is not None and any(commit.startswith(h) or h.startswith(commit) for h in LANDED_LONG)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("message_file", nargs="?", help="the commit message being written (commit-msg hook)")
    parser.add_argument("--since", metavar="BASE", help=f"check the commits after BASE (CI; e.g. {BASE})")
    args = parser.parse_args(argv)
    if args.message_file:
        lines = [
            line for line in Path(args.message_file).read_text().splitlines() if not line.startswith("#")
        ]
        subjects = [(None, lines[0] if lines else "")]
    else:
        since = args.since or BASE
        if subprocess.run(["git", "cat-file", "-e", since], capture_output=True).returncode != 0:
            print(f"commit subjects: {since} is not in this clone's history; nothing to check")
            return 0
        out = subprocess.run(
            ["git", "log", "--format=%h%x00%s", f"{since}..HEAD"], capture_output=True, text=True, check=True
        ).stdout
        subjects = [tuple(line.split("\0", 1)) for line in out.splitlines() if line]  # type: ignore[misc]
    bad = [(h, s) for h, s in subjects if too_long(s) and not landed_long(h)]
    for h, s in bad:
        where = f"{h}: " if h else ""
        print(
            f"{where}subject of {len(s)} characters (at most {LIMIT}; put the detail in the body): {s[:90]}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
