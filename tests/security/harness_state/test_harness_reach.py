"""Threat: the harness's objects live in the candidate's process and can be changed there
(docs/security.md, class "harness state in the candidate's process").

Two layers, each tested on its own. The static rules close the ways to reach a builtin or a
module without naming it (`source/escapes.py`, `source/static.py`): a builtin held under another name
or as a default, a module as another's attribute (`torch.sys`, `queue.threading`) or from-import
(`from numpy import sys`) or value (`[sys][0]`), dunder attributes and keys
(`torch.__builtins__["__import__"]`, `len.__self__`), strings something evaluates or imports
(typing's annotations, a pickle through `torch.load`). With the static rules off, the guard
checks the harness member by member after import and after every forward (`watch/members.py`:
class dicts, function code, module globals added or rebound, torch's dispatch-mode base class),
through a check bound before the candidate was imported, and the live op recorder's own state
(`guard.recorder_intact`). Each probe's kernel computes relu and leaves `* 2 + 1` to PyTorch,
which passes only if its change to the harness holds."""

from __future__ import annotations

from pathlib import Path

import pytest

PROBES = Path(__file__).parents[1] / "probes"
TASK = Path(__file__).parents[2] / "cheats" / "task_scale.py"

# probe -> (the rule, the construct it names)
STATIC = {
    "reach_torch_sys.py": ("module-reach", ".sys"),
    "reach_getattr_alias.py": ("builtin-alias", "getattr"),
    "reach_getattr_default.py": ("builtin-alias", "getattr"),
    "reach_builtins_import.py": ("dunder-attribute", "['__import__']"),
    "reach_builtin_self.py": ("dunder-attribute", ".__self__"),
    "reach_module_value.py": ("module-reach", "sys"),
    "reach_from_import.py": ("module-reach", "from numpy import sys"),
    "reach_type_hints.py": ("string-evaluation", ".get_type_hints"),
    "reach_pickle.py": ("string-evaluation", "torch.load"),
    "reach_queue_threading.py": ("module-reach", ".threading"),
    "reach_pydoc.py": ("banned-module", "import pydoc"),
    "reach_os_system.py": ("process-spawn", "os.system"),
}

# probe -> words the refusal must hold (what was changed)
DYNAMIC = {
    "patch_recorder_init.py": "OpRecorder.__init__",
    "patch_integrity_changed.py": "Integrity.changed",
    "patch_recorder_live.py": "the op recorder's state",
    "patch_shadow_global.py": "guard.in_triton_launch",
    "patch_dispatch_base.py": "TorchDispatchMode.__enter__",
}


@pytest.mark.parametrize("probe", sorted(STATIC))
def test_the_static_rules_refuse_each_way_to_reach_a_module_or_builtin_unnamed(
    evaluator, job_for, probe: str
) -> None:
    rule_construct = STATIC[probe]
    v = evaluator.submit(job_for(TASK, PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and not v.correct and v.failure_class is not None, v
    assert v.failure_class.value == "forbidden_construct", v
    assert v.evidence is not None and v.evidence.op == rule_construct[1], v.evidence


@pytest.mark.slow
@pytest.mark.parametrize("probe", sorted(DYNAMIC))
def test_a_candidate_that_changes_the_harness_in_its_process_is_refused(
    evaluator, job_for, static_checks_off, probe: str
) -> None:
    v = evaluator.submit(job_for(TASK, PROBES / probe, trials=1, gpu_check=None)).verify
    assert v is not None and not v.correct and v.failure_class is not None, v
    assert v.failure_class.value == "forbidden_construct", v
    assert v.evidence is not None and DYNAMIC[probe] in v.evidence.message, v.evidence


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("probe", sorted(DYNAMIC))
def test_gpu_a_candidate_that_changes_the_harness_in_its_process_is_refused(
    gpu_submit, job_for, static_checks_off, probe: str
) -> None:
    v = gpu_submit(job_for(TASK, PROBES / probe, trials=1))
    assert v is not None and not v.correct and v.failure_class is not None, v
    assert v.failure_class.value == "forbidden_construct", v
    assert v.evidence is not None and DYNAMIC[probe] in v.evidence.message, v.evidence
