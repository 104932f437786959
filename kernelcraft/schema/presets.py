"""The search's configuration: every constant and rule a tree search follows, and its presets.

A tree records the whole configuration it was started with (the `trees.params` JSON, which
`TreeInfo.params` shows), preset name included, so a reader knows what produced it and a resumed
run behaves as it began. The agent reads the parts that concern it (rules learnt during
`optimize`, the offline tuner's steps) from the tree, and `adapt`'s steps per task from the preset.

Two presets:

- `adaexplore`: AdaExplore exactly, as its released code and configs run it (`agent/mcts.py`,
  `agent/actions.py`, `skill_memory/`, `config/KB-l2`, `config/KB-l3`): UCB c = 0.3 over the mean,
  expand c_exp = 0.3 (0.15 on KernelBench level 3), p_large 0.2, two small children then large,
  the other kind only after a step that produced nothing, chains and pools of 5, every active rule
  in every prompt, rules frozen while exploring, 25 steps per adapt task; no warm start, no
  hardware manuals, no profile, no offline tuner. Its adapt trees take AdaExplore's adapt run's
  values instead (`ADAPT_PARAMS`: c = c_exp = 0.25 over the max reward, p_large 0.25, no reviser).
- `kernelcraft` (the default): the same search, with KernelEvolve's feedback — the target's
  most relevant hardware-manual sections and the parent's profile in each step, a warm start from
  the best kernel of an earlier tree — and the offline tuner taking turns at small steps. Where it
  departs from the papers, the README gives the reason and `bench/bench_policy.py` the ablation.

The best kernel, the pools and the warm start are ranked by (compiled, correct, speedup) in every
preset, as AdaExplore ranks them: the clipped reward ties every kernel above 10× at 1.6.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelcraft.base.knobs import TIMEOUT_S

PresetName = Literal["adaexplore", "kernelcraft"]
PRESET_NAMES: tuple[PresetName, ...] = ("kernelcraft", "adaexplore")
DEFAULT_PRESET: PresetName = "kernelcraft"
KindSwitch = Literal["no_candidate", "failed"]
TunerSteps = Literal["off", "alternate", "only"]
PoolUse = Literal["build_upon", "new_design"]
# A chain's code is measured in tokens of about this many characters (source code averages 3.5-4).
CHARS_PER_TOKEN = 4


class SearchConfig(BaseModel):
    """Every constant and rule of one tree's search. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    preset: PresetName = Field(
        default=DEFAULT_PRESET, description="The preset these values started from (overrides on top)."
    )
    level: int = Field(
        default=0,
        ge=0,
        le=3,
        description="KernelBench level of the task (1-3; 0: not a KernelBench level). Picks c_exp.",
    )
    # AdaExplore's tree (the adaexplore policy; greedy and beam ignore these)
    c: float = Field(default=0.3, ge=0, description="UCB1 exploration weight (over the mean reward).")
    c_exp: float = Field(default=0.3, ge=0, description="Exploration weight of the virtual expand action.")
    reward_alpha: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="UCB1's exploitation term: alpha × a node's max reward + (1 − alpha) × its mean "
        "(AdaExplore's reward_alpha: 0 in its explore configs, 1 in its adapt run).",
    )
    p_large: float = Field(default=0.2, ge=0, le=1, description="Probability of a large step.")
    small_step_limit: int = Field(
        default=2, ge=1, description="Small children after which a node goes large."
    )
    kind_switch: KindSwitch = Field(
        default="no_candidate",
        description="After which failed step of a node its next step is the other kind: 'no_candidate' "
        "(abandoned or lapsed: AdaExplore's fallback) or 'failed' (also one that did not compile).",
    )
    # what a step shows
    memory: int = Field(default=5, ge=1, le=50, description="Small-step context: last nodes of the chain.")
    context_tokens: int = Field(
        default=16_000,
        ge=500,
        le=1_000_000,
        description="Small-step context: the chain's code, newest first, up to about this many tokens; "
        "older versions beyond it show their verdicts only.",
    )
    pool_size: int = Field(
        default=5, ge=1, le=20, description="Large-step context: kernels to beat, at most."
    )
    pool_use: PoolUse = Field(
        default="new_design",
        description="What a large step is told to do with its pool: 'build_upon' (AdaExplore's POOL_PROMPT: "
        "reuse, adapt or build upon any pool kernel, the best one included) or 'new_design' (a different "
        "approach, not a copy of a pool kernel tweaked).",
    )
    rules_in_prompt: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Active rules a step carries: 0 every one, else the N most relevant.",
    )
    manual_sections: int = Field(
        default=3, ge=0, le=5, description="Hardware-manual sections a step carries (KernelEvolve); 0 none."
    )
    profile_feedback: bool = Field(
        default=True,
        description="A step carries its kernels' profile in words: bound, roofline fraction, registers, "
        "spills, shared memory (KernelEvolve).",
    )
    warm_start: bool = Field(
        default=True, description="Seed from the best kernel of an earlier matching tree (KernelEvolve)."
    )
    # rules and the driver agent
    learn_rules: bool = Field(
        default=False,
        description="optimize proposes rules from failed candidates (AdaExplore freezes them while exploring; "
        "adapt always learns).",
    )
    adapt_steps: int = Field(default=25, ge=1, le=10_000, description="adapt: candidates per task.")
    tuner_steps: TunerSteps = Field(
        default="alternate",
        description="optimize with an LLM: small steps the offline tuner writes ('off', 'alternate', 'only').",
    )
    reviser: bool = Field(
        default=True,
        description="optimize with an LLM: a small step asks the reviser for 1-3 changes before the "
        "tuner's edits; off, the tuner gets AdaExplore's fixed guidance instead (its disable_reviewer).",
    )
    edit_retries: int = Field(
        default=0,
        ge=0,
        le=5,
        description="optimize with an LLM: asks again, saying why, when a small step's edits do not all "
        "apply; after the last, the edits that apply are kept (the unchanged kernel when none does).",
    )
    # the service
    lease_seconds: float = Field(default=1800.0, gt=0, le=7 * 86400, description="How long a step is held.")
    timeout_s: float = TIMEOUT_S.field(
        description="Seconds each candidate's evaluation may take (its deadline)."
    )
    baseline: Literal["eager", "compiled"] = Field(default="eager", description="Speedup measured against.")
    correctness: Literal["kernelcraft", "adaexplore"] = Field(
        default="kernelcraft",
        description="The rule a candidate is judged by: 'kernelcraft' (no PyTorch compute in forward, "
        "tolerances by dtype) or 'adaexplore' (AdaExplore's harness: PyTorch allowed beside a Triton "
        "launch, atol=rtol=5e-2).",
    )


# `optimize`'s budget when --steps is not given: AdaExplore explores 50 candidates a task.
OPTIMIZE_STEPS: dict[PresetName, int] = {"adaexplore": 50, "kernelcraft": 10}

# Each preset's values, every field but `preset` and `level` (c_exp per level below).
PRESETS: dict[PresetName, dict[str, int | float | str | bool]] = {
    "adaexplore": {
        "c": 0.3,
        "c_exp": 0.3,
        "reward_alpha": 0.0,
        "p_large": 0.2,
        "small_step_limit": 2,
        "kind_switch": "no_candidate",
        "memory": 5,
        "context_tokens": 16_000,
        "pool_size": 5,
        "pool_use": "build_upon",
        "rules_in_prompt": 0,
        "manual_sections": 0,
        "profile_feedback": False,
        "warm_start": False,
        "learn_rules": False,
        "adapt_steps": 25,
        "tuner_steps": "off",
        "reviser": True,
        "edit_retries": 0,
        "lease_seconds": 1800.0,
        "timeout_s": TIMEOUT_S.default,
        "baseline": "eager",
        "correctness": "adaexplore",
    },
    "kernelcraft": {
        "c": 0.3,
        "c_exp": 0.3,
        "reward_alpha": 0.0,
        "p_large": 0.2,
        "small_step_limit": 2,
        "kind_switch": "no_candidate",
        "memory": 5,
        "context_tokens": 16_000,
        "pool_size": 5,
        "pool_use": "new_design",
        "rules_in_prompt": 0,
        "manual_sections": 3,
        "profile_feedback": True,
        "warm_start": True,
        "learn_rules": False,
        "adapt_steps": 25,
        "tuner_steps": "alternate",
        "reviser": True,
        "edit_retries": 0,
        "lease_seconds": 1800.0,
        "timeout_s": TIMEOUT_S.default,
        "baseline": "eager",
        "correctness": "kernelcraft",
    },
}
# AdaExplore's KB-l3 config halves the expand action's weight (expand_exploration_ratio 0.5).
C_EXP_BY_LEVEL: dict[PresetName, dict[int, float]] = {
    "adaexplore": {3: 0.15},
    "kernelcraft": {3: 0.15},
}


# What `adapt` puts over the preset for its trees (besides learn_rules). AdaExplore's Adapt is
# one run of its agent with config/SYN-v1/config_SYN-v1_none_MCTS.yaml, which sets none of the
# search's constants, so they are agent/agent_entry.py's argparse defaults: exploration_weight
# 0.25 (line 303), expand_exploration_ratio 1.0 (304, so c_exp = 0.25 at every level), reward_alpha
# 1.0 (305), p_large 0.25 (307); and the config's disable_reviewer: true (line 18). docs/cli.md
# has the whole comparison. The kernelcraft preset adapts with its explore's values.
ADAPT_PARAMS: dict[PresetName, dict[str, int | float | str | bool]] = {
    "adaexplore": {"c": 0.25, "c_exp": 0.25, "reward_alpha": 1.0, "p_large": 0.25, "reviser": False},
    "kernelcraft": {},
}


def preset_values(name: PresetName, level: int = 0) -> dict[str, int | float | str | bool]:
    """The preset's values for a task of KernelBench `level` (0: none), `preset` and `level` included."""
    values = dict(PRESETS[name])
    values["c_exp"] = C_EXP_BY_LEVEL[name].get(level, values["c_exp"])
    values["preset"] = name
    values["level"] = level
    return values


def preset_config(name: PresetName = DEFAULT_PRESET, level: int = 0) -> SearchConfig:
    return SearchConfig.model_validate(preset_values(name, level))


def config_of(params: dict[str, object]) -> SearchConfig:
    """A tree's configuration from its recorded parameters (a policy's own keys, such as beam's
    `width`, left aside; a tree from before presets gets the defaults for what it lacks)."""
    return SearchConfig.model_validate({k: v for k, v in params.items() if k in SearchConfig.model_fields})
