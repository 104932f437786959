"""Building a `RunReport`: from the search tree's models, and from a run directory.

`from_tree` is what the server's report resource calls (the tree as the database holds it);
`with_run` adds what only the driver knows (who wrote each step, tokens, why the run stopped);
`from_run_dir` does both from the files `kernelcraft optimize` leaves: `tree.json` (the server's
report of the tree, saved at the end of the run), `steps.jsonl` and `summary.json`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernelcraft.base.errors import UsageError
from kernelcraft.report.model import ReportNode, RunReport, TokenUsage, TunerAxis, Verdict
from kernelcraft.schema.evaluation import ProfileResult
from kernelcraft.schema.kernelwords import compiled_words, roofline_words
from kernelcraft.schema.tree import NodeInfo, TreeView

TREE_FILE = "tree.json"
STEPS_FILE = "steps.jsonl"
SUMMARY_FILE = "summary.json"
ERROR_CHARS = 300

NO_GPU_NOTE = (
    "No GPU: every candidate was verified in Triton's CPU interpreter, so correctness is real but "
    "speed was not measured. The tree scores every correct kernel as parity (the same reward), so "
    "no speedup curve is drawn and every node is drawn at the same size."
)
NOT_TIMED_NOTE = (
    "No candidate of this tree was timed (none was correct on a GPU), so there is no speedup to draw."
)


def verdict_of(node: NodeInfo) -> Verdict:
    if node.kind == "root":
        return "root"
    if node.abandoned:
        return "abandoned"
    if node.status != "evaluated" or node.outcome is None:
        return "pending"
    return node.outcome


def telling_line(text: str | None) -> str | None:
    """The line of an error that says what went wrong: a traceback's last line, else the first."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


def _timed(profile: ProfileResult | None) -> ProfileResult | None:
    """A profile whose speedups count: timed, and not rejected (see ProfileResult)."""
    if profile is None or not profile.available or profile.failure_class is not None:
        return None
    return profile if profile.candidate is not None else None


def report_node(node: NodeInfo) -> ReportNode:
    profile = _timed(node.verdict.profile if node.verdict is not None else None)
    return ReportNode(
        id=node.id,
        parent_id=node.parent_id,
        kind=node.kind,
        verdict=verdict_of(node),
        seed=node.seed,
        status=node.status,
        step_index=node.step_index,
        outcome=node.outcome,
        failure_class=node.failure_class,
        error=telling_line(node.error),
        speedup=node.speedup,
        speedup_vs_eager=profile.speedup_vs_eager if profile else None,
        speedup_vs_compiled=profile.speedup_vs_compiled if profile else None,
        candidate_us=node.candidate_us,
        roofline=roofline_words(profile),
        reward=node.reward,
        eval_seconds=node.verdict.seconds if node.verdict is not None else None,
    )


def failures_by_class(nodes: Sequence[ReportNode]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for n in nodes:
        if n.verdict == "abandoned":
            counts["abandoned"] += 1
        elif n.verdict in ("wrong", "not_compiled"):
            counts[n.failure_class.value if n.failure_class else "unclassified"] += 1
    return dict(counts.most_common())


def from_tree(view: TreeView, *, seed_code: str | None, best_code: str | None) -> RunReport:
    """The tree's part of a report. Nodes carrying their verdicts give the speedups against eager
    and torch.compile; without verdicts only the speedup against the tree's baseline is known."""
    nodes = [report_node(n) for n in view.nodes]
    measured = any(n.candidate_us is not None or n.speedup is not None for n in nodes)
    interpreted = any(
        n.verdict is not None and n.verdict.verify is not None and n.verdict.verify.interpreter
        for n in view.nodes
    )
    note = None
    if not measured:
        note = (
            NO_GPU_NOTE if interpreted or not any(n.outcome == "correct" for n in nodes) else NOT_TIMED_NOTE
        )
    return RunReport(
        tree_id=view.tree.id,
        task_name=view.tree.task_name,
        target=view.tree.target,
        policy=view.tree.policy,
        baseline=str(view.tree.params.get("baseline", "eager")),
        budget=view.tree.budget,
        speedup_measured=measured,
        speed_note=note,
        best_node_id=view.best_node_id,
        nodes=nodes,
        failures_by_class=failures_by_class(nodes),
        seed_code=seed_code,
        best_code=best_code,
        best_why=_why(next((n for n in view.nodes if n.id == view.best_node_id), None), view.tree.target),
    )


def _why(best: NodeInfo | None, target: str) -> list[str]:
    """The best kernel's compiled kernels in words: its profile's (`ProfileResult.why`), or made
    from its compile result where an older verdict has none."""
    verdict = best.verdict if best is not None else None
    if verdict is None:
        return []
    if verdict.profile is not None and verdict.profile.why:
        return list(verdict.profile.why)
    return compiled_words(verdict.compile, target)


def _usage(data: Any) -> TokenUsage | None:
    if not isinstance(data, Mapping):
        return None
    try:
        return TokenUsage.model_validate({k: v for k, v in data.items() if k in TokenUsage.model_fields})
    except ValidationError:
        return None


def with_run(
    report: RunReport, steps: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None
) -> RunReport:
    """The report with the driver's part: each step's proposer and tokens (`steps.jsonl`), the
    run's totals and why it stopped (`summary.json`)."""
    by_node = {s.get("node_id"): s for s in steps}
    nodes = []
    for n in report.nodes:
        step = by_node.get(n.id)
        if step is None:
            nodes.append(n)
            continue
        proposer = step.get("proposer", step.get("mode"))
        nodes.append(
            n.model_copy(
                update={
                    "proposer": proposer if proposer in ("llm", "tuner") else None,
                    "usage": _usage(step.get("usage")),
                    "tuner_axes": ["cookbook"]
                    if step.get("cookbook")
                    else list((step.get("tuner") or {}).get("axes") or []),
                    "step_seconds": step.get("seconds"),
                }
            )
        )
    summary = summary or {}
    total = _usage(summary.get("usage")) or (_usage(steps[-1].get("usage_total")) if steps else None)
    note = report.speed_note
    if not report.speedup_measured and summary.get("gpu_note"):
        note = str(summary["gpu_note"])
    return report.model_copy(
        update={
            "nodes": nodes,
            "llm": summary.get("llm", report.llm),
            "model": summary.get("model", report.model),
            "usage": total,
            "stopped_because": summary.get("stopped_because", report.stopped_because),
            "run_dir": summary.get("run_dir", report.run_dir),
            "speed_note": note,
            "tuner_axes": tuner_axes(summary.get("tuner_axis_seconds")),
        }
    )


def tuner_axes(by_axis: Any) -> list[TunerAxis]:
    """summary.json's `tuner_axis_seconds` as the report's rows; a run from before it has none."""
    if not isinstance(by_axis, Mapping):
        return []
    return [
        TunerAxis(
            axis=str(axis),
            steps=v["steps"],
            seconds=v["total"],
            median_seconds=v["median"],
            new_best=v.get("new_best", 0),
            best_gain=v.get("best_gain"),
        )
        for axis, v in by_axis.items()
    ]


def read_steps(path: Path) -> list[dict[str, Any]]:
    """The records of `steps.jsonl`; a last line cut short by a kill is left out."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:  # noqa: PERF203 -- one cut line must not hide the others
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def from_run_dir(run_dir: Path) -> RunReport:
    """The whole report of a `kernelcraft optimize` run directory.

    Raises:
        UsageError: the directory has no readable `tree.json` (a run that ended before writing it).
    """
    if not run_dir.is_dir():
        raise UsageError(
            f"{run_dir} is not a directory; pass the --out directory of a kernelcraft optimize run"
        )
    tree_file = run_dir / TREE_FILE
    if not tree_file.is_file():
        raise UsageError(
            f"{run_dir} has no {TREE_FILE}: the run ended before writing it (interrupted, or an older "
            f"kernelcraft). Rerun `kernelcraft optimize TASK --out {run_dir}`: it resumes the tree and, "
            "once its budget is spent, writes tree.json and report.html"
        )
    try:
        report = RunReport.model_validate_json(tree_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValidationError and UnicodeDecodeError are ValueErrors
        raise UsageError(
            f"{tree_file} is not a run's report ({_first_line(e)}); rerun kernelcraft optimize "
            f"with --out {run_dir}"
        ) from e
    summary_file = run_dir / SUMMARY_FILE
    summary: dict[str, Any] | None = None
    if summary_file.is_file():
        try:
            summary = dict(json.loads(summary_file.read_text(encoding="utf-8")))
        except (OSError, TypeError, ValueError) as e:
            raise UsageError(
                f"{summary_file} is unreadable ({_first_line(e)}); remove it to report without it"
            ) from e
    return with_run(report, read_steps(run_dir / STEPS_FILE), summary)


def _first_line(e: BaseException) -> str:
    """One line of an error: a pydantic error's first complaint, a decode error's position."""
    if isinstance(e, ValidationError) and e.errors():
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "the top level"
        return f"{e.error_count()} problem(s), first at {where}: {err.get('msg', '')}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
