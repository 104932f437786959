"""The candidate's part of an error text, and the one line that says where a candidate failed.

A verdict's error text is Python's whole traceback (the worker reports `format_exception`): frames
of the harness (`kernelcraft/engine/worker/main.py`), of torch's module machinery and of Triton's
runtime, and somewhere among them the candidate's own. Only the candidate's frames and the
exception lines say what went wrong; the other frames are the same for every failure and, read as
words, point at the wrong rule (a `tl.tanh` failure, wrapped in `torch/nn/modules/module.py`
frames, was credited to the rule about `torch.exp`).

- `parse` splits a text into its chained tracebacks: each one's frames and exception lines.
- `exception_text` keeps the exception lines alone: what the classifier and the rulebook read;
  `looks_like_error` tells an error text from source code or prose.
- `candidate_part` keeps the frames in the candidate's file and the exception lines.
- `error_line` is one line for a summary: the exception, and the line of the candidate's code
  it came from (or, for a Triton CompilationError, the kernel line its caret points at).
- `pointed_names` are the dotted names the error is about: the expression a caret points at in
  the candidate's code (`tl.tanh`, `x_ptr`), and an API a message names (`module
  'triton.language' has no attribute 'tanh'` is `tl.tanh`). The rulebook matches them as phrases.

A text that is not a traceback (an exception alone, a verifier's sentence) passes through whole.
The engine loads every candidate as the module `CANDIDATE_MODULE`, so its frames are the ones in
that file; the task is `kernelcraft_task`, whose frames count as the framework's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CANDIDATE_MODULE = "kernelcraft_candidate"
CANDIDATE_FILE = f"{CANDIDATE_MODULE}.py"

_HEADER = re.compile(r"^Traceback \(most recent call last\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?$')
_CHAIN = re.compile(
    r"^(The above exception was the direct cause of the following exception:|"
    r"During handling of the above exception, another exception occurred:)\s*$"
)
# Caret and tilde lines under a frame's code (Python 3.11+) point at columns, not words.
_MARKS = re.compile(r"^\s*[\^~\s]+$")
# A Triton CompilationError quotes its kernel: "at 4:27:", the source from the def, a caret line.
_EXCERPT_AT = re.compile(r"\bat (?P<line>\d+):(?P<col>\d+):\s*$")
_DEF = re.compile(r"^\s*def (?P<name>\w+)\s*\(")

MAX_CODE_CHARS = 120
MAX_LINE_CHARS = 300


@dataclass
class Frame:
    file: str
    line: int
    func: str
    code: str = ""
    # The code line and the caret line under it as printed (same indentation), for the marked span.
    raw_code: str = ""
    raw_marks: str = ""

    @property
    def in_candidate(self) -> bool:
        return self.file.replace("\\", "/").rsplit("/", 1)[-1] == CANDIDATE_FILE


@dataclass
class Block:
    """One traceback of a chain (or text outside any): its frames, then its exception lines."""

    frames: list[Frame] = field(default_factory=list)
    exception: list[str] = field(default_factory=list)
    # The chain line printed before it ("The above exception was the direct cause of ..."), if any.
    separator: str = ""


def parse(text: str) -> list[Block]:
    """The chained tracebacks of `text`, in the order Python prints them (the first cause first).

    Lines starting with '…' mark text cut out by a trim and are skipped; a `File "…"` line after
    a cut still opens a frame, so a trimmed traceback keeps its frames apart from its exception.
    """
    blocks = [Block()]
    in_frames = False
    after_cut = False
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        if line.lstrip().startswith("…"):
            after_cut = True
            continue
        if after_cut and not (_HEADER.match(line) or _CHAIN.match(line) or _FRAME.match(line)):
            continue  # the rest of a line a trim cut into; whole lines follow
        after_cut = False
        if _CHAIN.match(line):
            if blocks[-1].frames or blocks[-1].exception:
                blocks.append(Block())
            blocks[-1].separator, in_frames = line, False
            continue
        if _HEADER.match(line):
            if blocks[-1].frames or blocks[-1].exception:
                blocks.append(Block())
            in_frames = True
            continue
        frame = _FRAME.match(line)
        if frame:
            blocks[-1].frames.append(Frame(frame["file"], int(frame["line"]), frame["func"] or "?"))
            in_frames = True
            continue
        if in_frames and line.startswith(" "):
            current = blocks[-1].frames
            if current and not current[-1].code and not _MARKS.match(line):
                current[-1].code, current[-1].raw_code = line.strip(), line
            elif current and current[-1].code and not current[-1].raw_marks and _MARKS.match(line):
                current[-1].raw_marks = line
            continue
        in_frames = False
        if line or blocks[-1].exception:
            blocks[-1].exception.append(line)
    for block in blocks:
        while block.exception and not block.exception[-1].strip():
            block.exception.pop()
    return [b for b in blocks if b.frames or b.exception]


# A line that starts with an exception's name: "ValueError: ...", "triton.compiler.errors.CompilationError: at 4:8:".
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b", re.MULTILINE)


def looks_like_error(text: str) -> bool:
    """Whether `text` is an error (a traceback, or a line starting with an exception's name), not
    source code or prose."""
    return bool(_EXCEPTION_LINE.search(text or "")) or any(b.frames for b in parse(text))


def exception_text(text: str) -> str:
    """The exception lines of every traceback in `text`, without any frame: what went wrong, in
    the words of the exceptions. A text with no frames comes back unchanged."""
    blocks = parse(text)
    if not any(b.frames for b in blocks):
        return text or ""
    return "\n\n".join("\n".join(b.exception) for b in blocks if b.exception)


def candidate_part(text: str) -> str:
    """`text` as a traceback of the candidate alone: the frames in the candidate's file (its
    path shortened to the file name) and every exception, chained as Python prints them. The
    result parses like the original. A text with no frames comes back unchanged."""
    blocks = parse(text)
    if not any(b.frames for b in blocks):
        return text or ""
    parts: list[str] = []
    for b in blocks:
        lines = [b.separator, ""] if b.separator and parts else []
        frames = [f for f in b.frames if f.in_candidate]
        if frames:
            lines.append("Traceback (most recent call last):")
        for f in frames:
            lines.append(f'  File "{CANDIDATE_FILE}", line {f.line}, in {f.func}')
            lines += [x for x in (f.raw_code, f.raw_marks) if x]
        parts.append("\n".join([*lines, *b.exception]))
    return "\n\n".join(parts)


def error_line(text: str) -> str:
    """One line: where the candidate failed and the exception that says why. Empty for no text.

    Where: for a Triton CompilationError, the kernel line its caret points at (the last such
    error of the chain: the kernel being compiled); otherwise the innermost frame in the
    candidate's file of the first traceback that has one (Python prints the cause first). The
    exception is that traceback's first line of diagnosis (the first cause's when it has none).
    """
    blocks = parse(text)
    if not blocks:
        return ""
    spot = _locate(blocks)
    # An outer CompilationError may quote the kernel and say nothing more: the cause says why.
    message = _first_message(spot.block.exception) or next(
        (m for b in blocks if (m := _first_message(b.exception))), ""
    )
    line = f"{spot.where} — {message}" if spot.where and message else (spot.where or message)
    return _shorten(line, MAX_LINE_CHARS)


def pointed_names(text: str) -> list[str]:
    """Dotted names the error is about, most specific first, without repeats: the expression the
    located caret points at (see `error_line`), then APIs the exception messages name."""
    blocks = parse(text)
    names = [_spot_name(_locate(blocks))] if blocks else []
    for block in blocks:
        for line in block.exception:
            names += [_alias(f"{m['module']}.{m['name']}") for m in _NO_ATTRIBUTE.finditer(line)]
            names += [f"torch.{m['name']}" for m in _TORCH_ARGUMENT.finditer(line)]
    return list(dict.fromkeys(n for n in names if n))


# "module 'triton.language' has no attribute 'tanh'" (compiled and interpreted alike).
_NO_ATTRIBUTE = re.compile(r"module '(?P<module>[\w.]+)' has no attribute '(?P<name>\w+)'")
# torch's argument parser on a Triton tensor in the interpreter: "exp(): argument 'input' (position
# 1) must be Tensor, not tensor" — a torch function called inside a kernel.
_TORCH_ARGUMENT = re.compile(r"\b(?P<name>\w+)\(\): argument '\w+' \(position \d+\) must be Tensor\b")
_ALIASES = (("triton.language.", "tl."),)
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")


@dataclass
class _Spot:
    block: Block
    where: str = ""
    code: str = ""  # the code the error points at, from its start


def _locate(blocks: list[Block]) -> _Spot:
    for block in reversed(blocks):
        excerpt = _excerpt(block)
        if excerpt is not None:
            return excerpt
    block = next((b for b in blocks if any(f.in_candidate for f in b.frames)), blocks[-1])
    frames = [f for f in block.frames if f.in_candidate]
    if not frames:
        return _Spot(block)
    frame = frames[-1]
    return _Spot(block, _where(frame), _marked(frame))


def _marked(frame: Frame) -> str:
    """The code under a frame's caret marks, from the first mark on; the whole line without marks."""
    marks = [i for i, ch in enumerate(frame.raw_marks) if ch in "^~"]
    if not marks:
        return frame.code
    return frame.raw_code[marks[0] : marks[-1] + 1]


def _spot_name(spot: _Spot) -> str:
    m = _DOTTED.match(spot.code.strip())
    return _alias(m.group(0).rstrip(".")) if m else ""


def _alias(name: str) -> str:
    for long, short in _ALIASES:
        if name.startswith(long):
            return short + name[len(long) :]
    return name


def _where(frame: Frame) -> str:
    code = f": {_shorten(frame.code, MAX_CODE_CHARS)}" if frame.code else ""
    return f"line {frame.line}, in {frame.func}{code}"


def _excerpt(block: Block) -> _Spot | None:
    """Where a CompilationError's quoted source points: `line L of kernel k: code`, or None."""
    exception = block.exception
    for i, line in enumerate(exception):
        at = _EXCERPT_AT.search(line)
        if at is None:
            continue
        quoted = exception[i + 1 :]
        caret = next((j for j, q in enumerate(quoted) if q.strip() == "^"), None)
        if caret is None or caret == 0:
            return None
        kernel = next((m["name"] for q in quoted[:caret] if (m := _DEF.match(q))), "the kernel")
        code = quoted[caret - 1]
        where = f"line {at['line']} of {kernel}: {_shorten(code.strip(), MAX_CODE_CHARS)}"
        return _Spot(block, where, code[quoted[caret].index("^") :])
    return None


def _first_message(exception: list[str]) -> str:
    """The first line that says what went wrong: after a CompilationError's quoted source, if any."""
    lines = exception
    for i, line in enumerate(exception):
        if _EXCERPT_AT.search(line):
            rest = exception[i + 1 :]
            caret = next((j for j, q in enumerate(rest) if q.strip() == "^"), None)
            if caret is not None:
                lines = rest[caret + 1 :]
            break
    return next((line.strip() for line in lines if line.strip()), "")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
