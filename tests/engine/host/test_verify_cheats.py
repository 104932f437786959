"""The evaluator rejects deliberately broken and cheating candidates, each with the right class.

Every fixture in tests/cheats/ runs through the real engine on the CPU (Triton's interpreter,
tiny shapes): isolated workers, secret seeds, comparison in the trusted reference worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import PLANTED_SECRETS

CHEATS = Path(__file__).parents[2] / "cheats"
TASK = CHEATS / "task_scale.py"

# fixture -> (task, accepted failure classes)
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "pytorch_only.py": ("task_scale.py", {"pytorch_fallback"}),
    "decoy_kernel.py": ("task_scale.py", {"pytorch_fallback"}),
    "compiled_pytorch.py": ("task_scale.py", {"pytorch_fallback"}),
    "try_except_fallback.py": ("task_scale.py", {"forbidden_construct"}),
    "off_by_one_mask.py": ("task_scale.py", {"numerical_mismatch"}),
    "writes_input.py": ("task_scale.py", {"inputs_mutated"}),
    "caches_results.py": ("task_scale.py", {"numerical_mismatch"}),
    "zeros_on_tiny.py": ("task_tiny.py", {"numerical_mismatch"}),
    "exit_fake_verdict_static.py": ("task_scale.py", {"forbidden_construct"}),
    # getattr(os, "_ex" + "it"): the static rules read it as os._exit (the exit itself:
    # test_fake_verdict_on_stdout_is_not_believed, with the static rules off)
    "exit_fake_verdict.py": ("task_scale.py", {"forbidden_construct"}),
    "patch_allclose_static.py": ("task_scale.py", {"forbidden_construct"}),
    "patch_allclose.py": ("task_scale.py", {"forbidden_construct"}),
    "patch_rng_zeros.py": ("task_scale.py", {"forbidden_construct"}),
    "segfault.py": ("task_scale.py", {"runtime_crash"}),
    "nan_output.py": ("task_scale.py", {"nan_or_inf"}),
    "wrong_shape.py": ("task_scale.py", {"wrong_shape"}),
    "fp16_downgrade.py": ("task_scale.py", {"numerical_mismatch"}),
    "fp16_output.py": ("task_scale.py", {"wrong_dtype"}),
    "calls_reference_static.py": ("task_scale.py", {"forbidden_construct"}),
    # getattr(sys, "mod" + "ules"): an attribute by a literal name is the attribute (static rules)
    "calls_reference.py": ("task_scale.py", {"forbidden_construct"}),
    "uninitialised.py": ("task_scale.py", {"nan_or_inf", "numerical_mismatch", "nondeterministic"}),
    "thread_after_return.py": ("task_scale.py", {"forbidden_construct"}),
    "widens_allow_list.py": ("task_scale.py", {"forbidden_construct"}),
    "widens_allow_list_runtime.py": ("task_scale.py", {"forbidden_construct"}),
    "numpy_compute.py": ("task_scale.py", {"forbidden_construct"}),
    "dispatch_disabled.py": ("task_scale.py", {"forbidden_construct"}),
    "runpy_reference.py": ("task_scale.py", {"forbidden_construct"}),
    "layernorm_ignores_affine.py": ("task_layernorm.py", {"numerical_mismatch"}),
    "forges_task_error.py": ("task_scale.py", {"forbidden_construct"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_verify_rejects_cheat(evaluator, job_for, fixture: str) -> None:
    task, classes = EXPECTED[fixture]
    result = evaluator.submit(job_for(CHEATS / task, CHEATS / fixture, trials=3, timeout_s=60))
    v = result.verify
    assert v is not None
    assert not v.correct, f"{fixture} passed: {v}"
    assert v.status in classes, f"{fixture}: got {v.status}: {v.evidence}"
    assert v.evidence is not None and v.evidence.message


@pytest.mark.slow
def test_verify_accepts_the_honest_version_of_the_cheats(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "good.py", trials=3)).verify
    assert v is not None and v.correct, v
    assert v.status == "passed" and v.trials_passed == 3 and v.kernels_launched == ["relu_affine_kernel"]
    assert v.interpreter and "interpreter" in v.device


@pytest.mark.slow
def test_verify_names_the_fallback_op(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "decoy_kernel.py", trials=1)).verify
    assert v is not None and v.evidence is not None
    assert v.evidence.op in ("aten.relu", "aten.mul", "aten.add")


@pytest.mark.slow
def test_verify_allows_an_op_the_caller_named(evaluator, job_for) -> None:
    src = (CHEATS / "good.py").read_text().replace("        return y\n", "        return y + 0.0\n")
    v = evaluator.submit(job_for(TASK, src, trials=1, allowed_ops=["add"])).verify
    assert v is not None and v.correct, v
    v = evaluator.submit(job_for(TASK, src, trials=1)).verify
    assert v is not None and v.status == "pytorch_fallback" and v.evidence and v.evidence.op == "aten.add"


@pytest.mark.slow
def test_verify_reports_mismatch_evidence(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "off_by_one_mask.py", trials=2)).verify
    assert v is not None and v.evidence is not None
    ev = v.evidence
    assert ev.first_mismatch_index == [32, 64]  # the last element of the 33 x 65 output
    assert ev.expected is not None and ev.actual == 0.0
    assert ev.max_abs_error is not None and ev.max_abs_error > 0.9 and ev.relative_l2_error is not None


@pytest.mark.slow
def test_verify_reports_the_static_line(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "try_except_fallback.py")).verify
    assert v is not None and v.evidence is not None and v.evidence.line is not None
    src = (CHEATS / "try_except_fallback.py").read_text().splitlines()
    assert src[v.evidence.line - 1].strip() == "try:"


@pytest.mark.slow
def test_verify_times_out_a_hang_and_kills_it(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "hang.py", trials=1, timeout_s=6)).verify
    # In the interpreter the deadline is the harness's limit (a GPU tells a hang from a slow run):
    # never a pass, never the kernel's blame.
    assert v is not None and v.status == "harness_limit", v
    assert v.evidence is not None and "did not finish within the 6 s deadline" in v.evidence.message


@pytest.mark.slow
def test_verify_stops_a_memory_hog(evaluator, job_for) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "memory_hog.py", trials=1, timeout_s=60)).verify
    assert v is not None and v.status == "runtime_out_of_memory", v


@pytest.mark.slow
def test_verify_never_shows_a_candidate_the_parents_secrets(evaluator, job_for, static_checks_off) -> None:
    result = evaluator.submit(job_for(TASK, CHEATS / "reads_secrets.py", trials=1))
    v = result.verify
    assert v is not None and v.status == "runtime_error"
    text = result.model_dump_json()
    assert "PATH" in text  # the candidate did dump its environment into the error text
    for name, value in PLANTED_SECRETS.items():
        assert value not in text and name not in text


@pytest.mark.slow
def test_fake_verdict_on_stdout_is_not_believed(evaluator, job_for, static_checks_off) -> None:
    v = evaluator.submit(job_for(TASK, CHEATS / "exit_fake_verdict.py", trials=1)).verify
    assert v is not None and not v.correct and v.status == "runtime_crash"
    assert v.evidence is not None and "exited with code 0" in v.evidence.message
    json.dumps(v.model_dump())


def test_the_worker_environment_drops_secrets_and_kernelcrafts_own_settings() -> None:
    from kernelcraft.engine.machine.pool import scrubbed_env

    env = scrubbed_env(
        {
            "PATH": "/usr/bin",
            "ANTHROPIC_BASE_URL": "u",
            "MY_API_KEY": "k",
            "GH_TOKEN": "t",
            "DB_PASSWORD": "p",
            "KERNELCRAFT_TOKENS": "tok=alice",
            "KERNELCRAFT_DB": "/home/me/.kernelcraft/kernelcraft.db",
            "TRITON_OVERRIDE_DIR": "/evil",
        }
    )
    assert env == {"PATH": "/usr/bin"}


@pytest.mark.slow
def test_a_candidate_cannot_write_outside_its_directory(evaluator, job_for, tmp_path: Path) -> None:
    # Candidates run as the server's user: without the sandbox they could rewrite the shared
    # database or any of the user's files. The writes are attempted quietly, so the candidate is
    # otherwise correct: the verdict passes and the files must be untouched.
    import sqlite3

    from kernelcraft.engine.box.sandbox import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel")
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's file\n")
    db = tmp_path / "kernelcraft.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE rules (text TEXT)")
        conn.execute("INSERT INTO rules VALUES ('You cannot trust candidates.')")
    attack = (
        "import contextlib as _c\nimport sqlite3 as _s\n"
        f"with _c.suppress(Exception):\n    open({str(victim)!r}, 'a').write('pwned\\n')\n"
        f"with _c.suppress(Exception):\n    open({str(tmp_path / 'new.txt')!r}, 'w').write('pwned')\n"
        f"with _c.suppress(Exception):\n"
        f'    _k = _s.connect({str(db)!r}); _k.execute("DELETE FROM rules"); _k.commit()\n'
    )
    source = (CHEATS / "good.py").read_text() + "\n" + attack
    result = evaluator.submit(job_for(TASK, source, trials=1))
    assert result.verify is not None and result.verify.correct, result.verify
    assert not any("Landlock" in n for n in result.verify.notes)
    assert victim.read_text() == "the user's file\n"
    assert not (tmp_path / "new.txt").exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM rules").fetchone() == (1,)


@pytest.mark.slow
def test_a_layernorm_that_applies_its_weight_and_bias_passes_with_fresh_parameters(
    evaluator, job_for
) -> None:
    v = evaluator.submit(job_for(CHEATS / "task_layernorm.py", CHEATS / "layernorm_honest_affine.py")).verify
    assert v is not None and v.correct, v


@pytest.mark.slow
def test_a_decoy_is_named_by_the_replay(evaluator, job_for, static_checks_off) -> None:
    """A decoy kernel beside numpy compute: the replay (before the knockout) cannot reproduce the
    output from the recorded launches and names the tensor numpy made."""
    v = evaluator.submit(job_for(TASK, CHEATS / "numpy_compute.py", trials=1)).verify
    assert v is not None and v.status == "forbidden_construct"
    assert v.evidence is not None and "replaying forward" in v.evidence.message
    assert "no recorded op made" in v.evidence.message and v.evidence.op == "replay"


@pytest.mark.slow
def test_an_rmsnorm_without_its_eps_fails_the_small_magnitude_trial_and_the_honest_one_passes(
    evaluator, job_for, tmp_path: Path
) -> None:
    task = CHEATS / "task_rmsnorm.py"
    honest = evaluator.submit(job_for(task, CHEATS / "rmsnorm_honest.py", trials=2)).verify
    assert honest is not None and honest.correct, honest
    v = evaluator.submit(job_for(task, CHEATS / "rmsnorm_no_eps.py", trials=2)).verify
    assert v is not None and v.status == "numerical_mismatch", v
    assert v.evidence is not None and "scaled by 2^-10" in v.evidence.message, v.evidence
    assert v.trials_passed == 1  # the first trial, on randn inputs, cannot tell
    # A task whose inputs must stay as drawn opts out, and then the hole is open again.
    opted_out = tmp_path / "task_rmsnorm.py"
    opted_out.write_text(task.read_text() + "\nKERNELCRAFT_SCALED_TRIAL = False\n")
    v = evaluator.submit(job_for(opted_out, CHEATS / "rmsnorm_no_eps.py", trials=2)).verify
    assert v is not None and v.correct, v


def test_the_integrity_guard_watches_modules_that_exist_and_every_module_of_the_watch_room() -> None:
    """A harness module the guard names but cannot find is one it silently stops watching (its
    loop skips modules not loaded), so every name must be a real module, and everything that
    watches the candidate in its own process (engine/watch/) must be among them."""
    import importlib.util

    from kernelcraft.engine.watch.guard import HARNESS_MODULES

    missing = [name for name in HARNESS_MODULES if importlib.util.find_spec(name) is None]
    assert not missing, f"the guard watches modules that do not exist: {missing}"
    watch = Path(__file__).resolve().parents[3] / "kernelcraft" / "engine" / "watch"
    room = {f"kernelcraft.engine.watch.{p.stem}" for p in watch.glob("*.py") if p.stem != "__init__"}
    assert room <= set(HARNESS_MODULES), f"not watched: {sorted(room - set(HARNESS_MODULES))}"
