"""A search answer sized for a 50-step session: nothing the client already holds is sent again.

An assistant keeps every answer of a search in one context window. The search layer describes a
step whole (the task, the kernel to refine, the chain's and the pool's code, every rule, the
manual sections), as the command line prints it; over MCP, `economise` sends each piece to a
client once per tree and refers to it afterwards:

- the task's source: the client passed it to start (`task_source` null; the resource
  trees://{tree_id}/task gives it again);
- a kernel's code (`start_code`, a chain's or a pool's version, the best node's): never one the
  client sent (its seed, its submits) nor one an earlier answer sent it; nodes are named by id (the
  resource trees://{tree_id}/nodes/{node_id}/code gives a node's code again);
- rules: the `MAX_STEP_RULES` ranked most relevant to the step (the search layer ranks every
  active rule for the task and the kernel), in full those the client has not had in this tree;
  the instructions say how many there are, how many are in this answer and which came before;
- manual sections: their opening, once (search_hw_docs(section_id=ID) gives a whole section);
- the answer's format and the no-GPU note: in full in the tree's first step, in a line after;
- a submit's best node: only when it is neither the node just judged nor the best sent before
  (`best_id` always names it);
- a verdict's stage timings and its evidence's whole error text: left out (`error` holds the
  candidate's frames and the exceptions; the server's frames are not the client's); a verification
  note sent before (the interpreter's caveats repeat every verdict): left out;

What a client holds is `Sent`, per tree and MCP session, in this server process: a new session (a
new conversation, a restarted driver) and a restarted server are sent each piece once more. The driver agent is an MCP client like any other: its session keeps
what it sent and was sent and fills each step back in (`agent/session.py`).
"""

from __future__ import annotations

from typing import Any

from kernelcraft.schema.tree import ContextKernel, NextStep, NodeInfo, StartResult, SubmitResult, TreeStatus
from kernelcraft.search.instructions import ANSWER_FORMAT, rules_sentence
from kernelcraft.search.messages import NO_GPU_NOTE
from kernelcraft.server.state import AppState, Sent
from kernelcraft.server.tools.answers import clip
from kernelcraft.store import code_hash

MAX_STEP_RULES = 3
"""The rules a step names over MCP: the most relevant to it (the whole rulebook is a resource)."""

STEP_OPENING_CHARS = 100
"""How much of a manual section a step quotes (search_hw_docs(section_id=ID) gives all of it)."""
# Said in full in a tree's first step; later steps say it in a line.
ANSWER_FORMAT_AGAIN = (
    "Answer as before: one complete Python module whose class ModelNew launches your @triton.jit "
    "kernels (no PyTorch compute in forward)."
)
NO_GPU_AGAIN = "no GPU here: correctness is checked, speed is not (a correct kernel scores as parity)"

Holder = StartResult | SubmitResult | TreeStatus


def reader_of(state: AppState, session: Any, client: str) -> str:
    """Who holds an answer: one MCP session of `client` (what a session was sent, another session
    of the same client has not seen)."""
    try:
        return state.readers.setdefault(session, f"{client}#{len(state.readers) + 1}")
    except TypeError:  # not weakly referable: the session's identity alone
        return f"{client}#{id(session)}"


def sent_to(state: AppState, tree_id: int, client: str) -> Sent:
    return state.sent.setdefault((tree_id, client), Sent())


def client_sent(
    state: AppState, tree_id: int, client: str, *, code: str | None = None, task: bool = False
) -> None:
    """Note what the client itself sent for `tree_id`: a kernel's code, or the task (at start)."""
    sent = sent_to(state, tree_id, client)
    if code is not None:
        sent.codes.add(code_hash(code))
    sent.task = sent.task or task


def economise(holder: Holder, state: AppState, client: str) -> None:
    """`holder` (a start, submit, abandon or status result) as sent to `client`, in place."""
    if isinstance(holder, SubmitResult):
        _best_once(holder, sent_to(state, holder.node.tree_id, client))
        holder.node = _slim(holder.node, sent_to(state, holder.node.tree_id, client))
    if isinstance(holder, StartResult) and holder.seed_node is not None:
        holder.seed_node = _slim(holder.seed_node, sent_to(state, holder.tree.id, client))
    if isinstance(holder, TreeStatus) and holder.best is not None:
        sent = sent_to(state, holder.tree.id, client)
        holder.best = _slim(holder.best, sent)
        if holder.best.code is not None:
            holder.best.code = _code_once(holder.best.code, sent)
    if holder.next_step is not None:
        holder.next_step = _step(holder.next_step, sent_to(state, holder.next_step.tree_id, client))


def _best_once(result: SubmitResult, sent: Sent) -> None:
    best = result.best
    if best is None:
        return
    if best.id == result.node.id or sent.best == best.id:
        result.best = None
    sent.best = best.id


def _slim(node: NodeInfo, sent: Sent) -> NodeInfo:
    """The node without its verdict's stage timings, without the evidence's whole error text
    (the server's frames and all: `error` holds the candidate's frames and the exceptions), and
    without a verification note this reader was sent before (the interpreter's caveats, the same
    every trial)."""
    node = node.model_copy(update={"code_hash": None})  # nodes are named by id
    if node.verdict is None:
        return node
    verdict = node.verdict.model_copy(update={"stage_seconds": {}})
    for stage in ("compile", "verify", "profile"):
        part = getattr(verdict, stage, None)
        if part is None:
            continue
        update: dict[str, object] = {}
        if "stage_seconds" in type(part).model_fields:
            update["stage_seconds"] = {}
        evidence = getattr(part, "evidence", None)
        if evidence is not None and evidence.error_text:
            update["evidence"] = evidence.model_copy(update={"error_text": None})
        notes = getattr(part, "notes", None)
        if isinstance(notes, list) and notes:
            update["notes"] = [n for n in notes if n not in sent.notes]
            sent.notes.update(notes)
        setattr(verdict, stage, part.model_copy(update=update))
    return node.model_copy(update={"verdict": verdict})


def _code_once(code: str, sent: Sent) -> str | None:
    digest = code_hash(code)
    if digest in sent.codes:
        return None
    sent.codes.add(digest)
    return code


def _kernel(kernel: ContextKernel, sent: Sent) -> ContextKernel:
    if kernel.code is None or kernel.code.startswith("# code of node"):  # a note, not code
        return kernel
    return kernel.model_copy(update={"code": _code_once(kernel.code, sent)})


def _step(step: NextStep, sent: Sent) -> NextStep:
    ranked = step.rules[:MAX_STEP_RULES]
    rules = [r for r in ranked if r.id not in sent.rules]
    earlier = [r.id for r in ranked if r.id in sent.rules]
    sent.rules.update(r.id for r in rules)
    sections = [
        m.model_copy(update={"snippet": clip(m.snippet, STEP_OPENING_CHARS, sentences=False), "sources": []})
        if m.id not in sent.sections
        else m.model_copy(update={"snippet": "", "sources": []})
        for m in step.manual_sections
    ]
    sent.sections.update(m.id for m in step.manual_sections)
    task = None if sent.task else step.task_source
    sent.task = True
    said = rules_sentence(len(step.rules), len(step.rules), step.target)
    says = rules_sentence(len(rules), len(ranked), step.target, earlier=earlier)
    text = step.instructions.replace(said, says) if said else step.instructions
    if sent.format:
        text = text.replace(ANSWER_FORMAT, ANSWER_FORMAT_AGAIN).replace(NO_GPU_NOTE, NO_GPU_AGAIN)
    sent.format = True
    return step.model_copy(
        update={
            "task_source": task,
            "start_code": _code_once(step.start_code, sent) if step.start_code is not None else None,
            "chain": [_kernel(k, sent) for k in step.chain],
            "pool": [_kernel(k, sent) for k in step.pool],
            "rules": rules,
            "manual_sections": sections,
            "instructions": text,
        }
    )
