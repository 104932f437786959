"""Where the interpreter's time goes (checks/slow.py, watch/launches.py): per kernel, launches,
programs and seconds, and a note with the cause when a verdict's trials were slow."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from kernelcraft.engine.checks.slow import SLOW_S, Spent  # noqa: E402


def test_a_slow_run_names_the_kernel_its_programs_and_the_time_a_program() -> None:
    spent = Spent()
    spent.add({"attn_fwd": [3, 196608, 30.0], "bias_add": [3, 48, 0.5]})
    spent.add({"attn_fwd": [3, 196608, 31.0], "nonsense": ["x"], "neg": [1, 1, -5.0]})
    (note,) = spent.notes()
    assert note.startswith("slow in Triton's interpreter: its kernels took 62 s")
    assert "attn_fwd 61 s over 6 launches of 393,216 programs in all, 0.16 ms a program" in note
    assert note.index("attn_fwd") < note.index("bias_add") and "nonsense" not in note


def test_a_quick_run_says_nothing_of_its_time() -> None:
    spent = Spent()
    spent.add({"k": [1, 64, SLOW_S / 2]})
    assert spent.notes() == []


def test_interpreted_launches_are_counted_per_kernel_with_their_programs() -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import os, json
        os.environ["TRITON_INTERPRET"] = "1"
        import torch, triton, triton.language as tl
        from kernelcraft.engine.watch.launches import intercept_launches

        @triton.jit
        def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs))

        x = torch.randn(256)
        y = torch.empty_like(x)
        with intercept_launches(execute=True, autotune="first") as rec:
            copy_kernel[(4,)](x, y, BLOCK=64)
            copy_kernel[(2, 2)](x, y, BLOCK=64)
        n, programs, seconds = rec.interpreted["copy_kernel"]
        print(json.dumps([n, programs, seconds > 0, bool(torch.equal(x, y))]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[2, 8, true, true]"


def test_a_long_interpreter_traceback_keeps_the_candidates_kernel_line() -> None:
    import traceback

    from kernelcraft.engine.worker.common import MAX_ERROR_CHARS, trim_keeping_candidate

    deep: dict[str, object] = {}
    chain = "".join(f"def step{i}():\n    return step{i + 1}()  # an interpreter frame\n" for i in range(80))
    chain += "def step80():\n    raise ValueError('mask has unsupported dtype')\n"
    exec(compile(chain, "/site-packages/triton/runtime/interpreter.py", "exec"), deep)
    cand: dict[str, object] = {"step0": deep["step0"]}
    kernel = "def my_kernel(x):\n    return step0()  # the kernel's line\n"
    exec(compile(kernel, "/w/kernelcraft_candidate.py", "exec"), cand)
    try:
        cand["my_kernel"](1)  # type: ignore[operator]
    except ValueError as e:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        kept = trim_keeping_candidate(text, e)
    assert len(text) > MAX_ERROR_CHARS and len(kept) <= MAX_ERROR_CHARS + 1
    assert kept.startswith("the candidate's frames") and 'candidate.py", line 2, in my_kernel' in kept
    assert kept.rstrip().endswith("ValueError: mask has unsupported dtype")
