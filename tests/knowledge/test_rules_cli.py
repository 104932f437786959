"""`kernelcraft rules …` and `kernelcraft docs search` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcraft.cli import EXIT_USAGE, main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_rules_query_prints_the_matching_seed_rule_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "k.db")
    code, out, _ = cli(
        capsys, "rules", "query", "y = tl.float32(x)", "--arch", "sm_90a", "--json", "--db", db
    )
    assert code == 0
    rules = json.loads(out)
    assert "tl.float32" in rules[0]["text"] and rules[0]["seed"] and rules[0]["score"] > 0


def test_rules_list_filters_by_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "k.db")
    code, out, _ = cli(capsys, "rules", "list", "--status", "candidate", "--json", "--db", db)
    assert code == 0 and json.loads(out) == []
    code, out, _ = cli(capsys, "rules", "list", "--db", db)
    assert code == 0 and "You cannot" in out and "(active, count 1" in out


def test_rules_export_and_import_round_trip_between_databases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "team.jsonl"
    code, out, _ = cli(capsys, "rules", "export", str(f), "--db", str(tmp_path / "a.db"))
    assert code == 0 and out.startswith("wrote ")
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    assert len(lines) >= 40 and all(x["uid"].startswith("r-") for x in lines)
    code, out, _ = cli(capsys, "rules", "import", str(f), "--db", str(tmp_path / "b.db"))
    assert code == 0 and "merged" in out
    code, out, _ = cli(capsys, "rules", "export", str(tmp_path / "b.jsonl"), "--db", str(tmp_path / "b.db"))
    uids_b = {json.loads(x)["uid"] for x in (tmp_path / "b.jsonl").read_text().splitlines()}
    assert uids_b == {x["uid"] for x in lines}
    # --json: the counts for a program to read
    code, out, _ = cli(capsys, "rules", "export", str(f), "--json", "--db", str(tmp_path / "a.db"))
    assert code == 0 and json.loads(out) == {"file": str(f), "rules": len(lines)}
    code, out, _ = cli(capsys, "rules", "import", str(f), "--json", "--db", str(tmp_path / "b.db"))
    assert code == 0 and json.loads(out)["lines"] == len(lines)


def test_docs_search_prints_sections_with_their_heading_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(
        capsys, "docs", "search", "wgmma", "--arch", "sm_90a", "--json", "--db", str(tmp_path / "k.db")
    )
    assert code == 0
    hits = json.loads(out)
    assert hits and "wgmma" in hits[0]["heading_path"] and hits[0]["arch"] == "sm_90a"


@pytest.mark.parametrize(
    "argv",
    [
        ("rules", "query", "x", "--arch", "pentium"),
        ("rules", "import", "/nonexistent/rules.jsonl"),
        ("docs", "search", "L2", "--arch", "sm_70"),
    ],
)
def test_unusable_arguments_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, _, err = cli(capsys, *argv, "--db", str(tmp_path / "k.db"))
    assert code == EXIT_USAGE and err.startswith("kernelcraft: error:")


def test_a_corrupt_database_is_reported_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "k.db"
    db.write_bytes(b"garbage" * 1000)
    code, _, err = cli(capsys, "rules", "list", "--db", str(db))
    assert "not a SQLite database or is corrupt" in err and "Traceback" not in err
    assert code == EXIT_USAGE  # an unusable file, as `serve` reports the same database


def test_adaexplores_memory_file_imports_with_its_counts_and_exports_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """AdaExplore keeps its rules as 'rule text||count' lines and uses a rule once its count
    reaches 3 (issue 27, D4): an operator's import keeps the counts, activates at 3, is safe to
    repeat, and an export writes the same format back."""
    memory = tmp_path / "memory.txt"
    memory.write_text(
        "You cannot use tl.arange with a non-constexpr size in Triton.||5\n"
        "You cannot index a Triton block with a Python list of offsets.||2\n\n"
    )
    db = str(tmp_path / "k.db")
    code, out, _ = cli(capsys, "rules", "import", str(memory), "--format", "adaexplore", "--json", "--db", db)
    assert code == 0 and json.loads(out) == {"created": 2, "merged": 0, "unchanged": 0, "lines": 2}
    code, out, _ = cli(capsys, "rules", "list", "--json", "--db", db)
    by_text = {r["text"]: r for r in json.loads(out)}
    arange = by_text["You cannot use tl.arange with a non-constexpr size in Triton."]
    index = by_text["You cannot index a Triton block with a Python list of offsets."]
    assert (arange["count"], arange["status"]) == (5, "active")
    assert (index["count"], index["status"]) == (2, "candidate")
    code, out, _ = cli(capsys, "rules", "import", str(memory), "--format", "adaexplore", "--json", "--db", db)
    assert json.loads(out)["unchanged"] == 2  # the same file again adds nothing
    back = tmp_path / "back.txt"
    code, _, _ = cli(capsys, "rules", "export", str(back), "--format", "adaexplore", "--db", db)
    lines = back.read_text().splitlines()
    assert code == 0 and "You cannot use tl.arange with a non-constexpr size in Triton.||5" in lines
    assert all(line.rpartition("||")[2].isdigit() for line in lines) and len(lines) >= 50


def test_a_malformed_memory_file_changes_nothing_and_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = tmp_path / "memory.txt"
    memory.write_text("You cannot use tl.arange with a non-constexpr size.||4\nuse bigger blocks||3\n")
    db = str(tmp_path / "k.db")
    code, _, err = cli(capsys, "rules", "import", str(memory), "--format", "adaexplore", "--db", db)
    assert code == EXIT_USAGE and "memory.txt:2" in err and "You cannot" in err
    code, out, _ = cli(capsys, "rules", "list", "--json", "--db", db)
    assert not any("tl.arange with a non-constexpr size." in r["text"] for r in json.loads(out))


def test_adaexplores_released_memory_file_with_float_counts_imports_as_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """AdaExplore's released memory keeps counts as floats (`rule||34.0`) and writes `no guidance`
    for a failure that teaches nothing general (issue 38)."""
    memory = tmp_path / "memory.txt"
    memory.write_text(
        "You cannot use tl.arange with a non-constexpr size in Triton.||34.0\n"
        "no guidance||12.0\n"
        "You cannot index a Triton block with a Python list of offsets.||2.0\n"
    )
    db = str(tmp_path / "k.db")
    code, out, err = cli(
        capsys, "rules", "import", str(memory), "--format", "adaexplore", "--json", "--db", db
    )
    assert code == 0, err
    assert json.loads(out)["created"] == 2
    code, out, _ = cli(capsys, "rules", "list", "--json", "--db", db)
    by_text = {r["text"]: r for r in json.loads(out)}
    arange = by_text["You cannot use tl.arange with a non-constexpr size in Triton."]
    assert (arange["count"], arange["status"]) == (34, "active")
    assert by_text["You cannot index a Triton block with a Python list of offsets."]["count"] == 2
    assert not any(t.lower() == "no guidance" for t in by_text)


@pytest.mark.parametrize("count", ["-1.0", "nan", "inf", "many"])
def test_a_memory_line_whose_count_is_not_a_number_of_zero_or_more_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    memory = tmp_path / "memory.txt"
    memory.write_text(f"You cannot use tl.arange with a non-constexpr size.||{count}\n")
    code, _, err = cli(
        capsys, "rules", "import", str(memory), "--format", "adaexplore", "--db", str(tmp_path / "k.db")
    )
    assert code == EXIT_USAGE and "memory.txt:1" in err and "34.0" in err
