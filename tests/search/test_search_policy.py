"""The search policies' decisions on hand-built trees, against values worked out by hand."""

from __future__ import annotations

import math
import random

import pytest

from kernelcraft.base.errors import UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.schema.evaluation import (
    CompileResult,
    EvalResult,
    Evidence,
    ProfileResult,
    VerifyResult,
)
from kernelcraft.schema.presets import preset_config
from kernelcraft.search.policy import (
    Beam,
    BeamParams,
    Greedy,
    GreedyParams,
    SnapNode,
    Snapshot,
    choose_kind,
    expand_score,
    large_pool,
    make_policy,
    outcome_of,
    reward_for,
    score,
    select_node,
    small_chain,
    start_policy,
    step_rng,
    ucb1,
)

C = C_EXP = 0.3


class FixedDraw(random.Random):
    """A generator whose random() always returns `value` (to pin the p_large draw)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def speedup_of(reward: float) -> float:
    """The speedup whose reward is `reward` (the inverse of the mapping below 10×)."""
    return 0.1 + (reward - 0.4) * 9.9 / 1.2


def node(id, parent, kind="small", *, visits=1, value=None, outcome="correct", reward=None, **kw) -> SnapNode:
    reward = reward if reward is not None else (value if value is not None and visits == 1 else None)
    if outcome == "correct" and reward is not None and kind != "root":
        kw.setdefault("speedup", speedup_of(reward))
    return SnapNode(
        id=id,
        parent_id=parent,
        kind=kind,
        visits=visits,
        value_sum=value if value is not None else 0.0,
        outcome=outcome if kind != "root" else None,
        reward=reward,
        **kw,
    )


def root(visits=0, value=0.0) -> SnapNode:
    return SnapNode(id=1, parent_id=None, kind="root", visits=visits, value_sum=value)


# ------------------------------------------------------------------------------------- reward


def test_reward_is_zero_not_compiled_005_wrong_and_speedup_mapped_onto_04_16():
    assert reward_for("not_compiled", None) == 0.0
    assert reward_for("wrong", None) == 0.05
    # correct: 0.4 + 1.2 * (clip(s, 0.1, 10) - 0.1) / 9.9
    assert reward_for("correct", 0.1) == pytest.approx(0.4)
    assert reward_for("correct", 0.01) == pytest.approx(0.4)  # clipped up to 0.1
    assert reward_for("correct", 10.0) == pytest.approx(1.6)
    assert reward_for("correct", 50.0) == pytest.approx(1.6)  # clipped down to 10
    assert reward_for("correct", 5.05) == pytest.approx(1.0)  # 0.4 + 1.2 * 4.95 / 9.9 = 1.0
    assert reward_for("correct", 1.0) == pytest.approx(0.4 + 1.2 * 0.9 / 9.9)  # 0.50909…
    # Unknown speedup (no GPU) scores as parity.
    assert reward_for("correct", None) == reward_for("correct", 1.0)


def test_outcome_comes_from_verify_and_the_failure_class_stage():
    compile_fail = EvalResult(
        compile=CompileResult(
            ok=False,
            failure_class=FailureClass.COMPILE_ERROR,
            evidence=Evidence(message="no", error_text="boom"),
        )
    )
    assert outcome_of(compile_fail) == ("not_compiled", None)
    load_fail = EvalResult(
        verify=VerifyResult(
            correct=False,
            status="load_error",
            failure_class=FailureClass.LOAD_ERROR,
            trials=5,
            device="cpu",
            interpreter=True,
        )
    )
    assert outcome_of(load_fail) == ("not_compiled", None)
    runtime = EvalResult(
        verify=VerifyResult(
            correct=False,
            status="runtime_illegal_memory_access",
            failure_class=FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS,
            trials=5,
            device="cuda:0",
            interpreter=False,
        )
    )
    assert outcome_of(runtime) == ("wrong", None)  # it compiled, then crashed: 0.05
    ok = VerifyResult(correct=True, status="passed", trials=5, device="cpu", interpreter=True)
    assert outcome_of(EvalResult(verify=ok)) == ("correct", None)
    timed = EvalResult(
        verify=ok, profile=ProfileResult(available=True, speedup_vs_eager=2.0, speedup_vs_compiled=1.5)
    )
    assert outcome_of(timed) == ("correct", 2.0)
    assert outcome_of(timed, "compiled") == ("correct", 1.5)
    untimed = EvalResult(verify=ok, profile=ProfileResult(available=False, message="needs a CUDA GPU"))
    assert outcome_of(untimed) == ("correct", None)


# ---------------------------------------------------------------------------------- selection


def three_level_tree() -> Snapshot:
    """root ─ A (own reward 0.5) ─ A1 (0.3)
                                 └ A2 (0.2)
            └ B (0.05)
    visits/value_sum are what back-propagation leaves: A 3 / 1.0, root 4 / 1.05."""
    return Snapshot(
        [
            root(visits=4, value=1.05),
            node(2, 1, "large", visits=3, value=1.0, reward=0.5),
            node(3, 2, visits=1, value=0.3),
            node(4, 2, visits=1, value=0.2),
            node(5, 1, "large", visits=1, value=0.05, outcome="wrong"),
        ]
    )


def test_ucb1_is_mean_plus_c_sqrt_ln_parent_visits_over_visits():
    snap = three_level_tree()
    # A: 1.0/3 + 0.3·sqrt(ln 4 / 3) = 0.333333 + 0.3·0.679778 = 0.537267
    assert ucb1(snap, 2, C) == pytest.approx(0.537267, abs=1e-6)
    # B: 0.05 + 0.3·sqrt(ln 4 / 1) = 0.05 + 0.3·1.177410 = 0.403223
    assert ucb1(snap, 5, C) == pytest.approx(0.403223, abs=1e-6)
    # A1 under A (3 visits): 0.3 + 0.3·sqrt(ln 3) = 0.3 + 0.3·1.048147 = 0.614444
    assert ucb1(snap, 3, C) == pytest.approx(0.614444, abs=1e-6)
    assert ucb1(Snapshot([root(), node(2, 1, visits=0)]), 2, C) == math.inf


def test_expand_action_is_max_child_mean_plus_c_exp_sqrt_ln_n_over_children_squared():
    snap = three_level_tree()
    # root: max(1/3, 0.05) + 0.3·sqrt(ln 4 / 2²) = 0.333333 + 0.3·0.588705 = 0.509945
    assert expand_score(snap, 1, C_EXP) == pytest.approx(0.509945, abs=1e-6)
    # A: max(0.3, 0.2) + 0.3·sqrt(ln 3 / 2²) = 0.3 + 0.3·0.524074 = 0.457222
    assert expand_score(snap, 2, C_EXP) == pytest.approx(0.457222, abs=1e-6)
    # a leaf always expands
    assert expand_score(snap, 3, C_EXP) == math.inf


def test_selection_descends_while_the_best_child_beats_the_expand_action():
    # root: expand 0.5099 < UCB(A) 0.5373 → A; at A: expand 0.4572 < UCB(A1) 0.6144 → A1, a leaf.
    assert select_node(three_level_tree(), C, C_EXP) == 3


def test_selection_stops_where_the_expand_action_wins():
    # root (2 visits) ─ A (2 visits, value 0.1) ─ A1 (0.05)
    # expand(root) = 0.05 + 0.3·sqrt(ln 2 / 1) = 0.05 + 0.249766 = 0.299766
    # UCB(A)       = 0.05 + 0.3·sqrt(ln 2 / 2) = 0.05 + 0.176611 = 0.226611  → expand the root
    snap = Snapshot(
        [root(visits=2, value=0.1), node(2, 1, "large", visits=2, value=0.1, reward=0.05), node(3, 2)]
    )
    assert expand_score(snap, 1, C_EXP) == pytest.approx(0.299766, abs=1e-6)
    assert ucb1(snap, 2, C) == pytest.approx(0.226611, abs=1e-6)
    assert select_node(snap, C, C_EXP) == 1


def test_with_reward_alpha_one_ucb1_and_expand_use_the_max_reward_and_pick_the_peak_not_the_mean():
    # AdaExplore's adapt run (reward_alpha 1.0): root (4 visits) ─ A (2 visits, mean 0.3, max 0.5)
    # and B (2 visits, mean 0.4, max 0.4). Mean: B leads; max: A does.
    snap = Snapshot(
        [
            root(visits=4, value=1.4),
            node(2, 1, "large", visits=2, value=0.6, reward=0.1, max_reward=0.5),
            node(3, 1, "large", visits=2, value=0.8, reward=0.4, max_reward=0.4),
        ]
    )
    # UCB = value + 0.25·sqrt(ln 4 / 2) = value + 0.25·0.832555 = value + 0.208139
    assert ucb1(snap, 2, 0.25) == pytest.approx(0.3 + 0.208139, abs=1e-6)
    assert ucb1(snap, 2, 0.25, alpha=1.0) == pytest.approx(0.5 + 0.208139, abs=1e-6)
    assert ucb1(snap, 2, 0.25, alpha=0.5) == pytest.approx(0.4 + 0.208139, abs=1e-6)
    # expand(root) = max child value + 0.25·sqrt(ln 4 / 2²): with alpha 1, A's max 0.5
    assert expand_score(snap, 1, 0.25, alpha=1.0) == pytest.approx(0.5 + 0.25 * 0.588705, abs=1e-6)
    assert expand_score(snap, 1, 0.25) == pytest.approx(0.4 + 0.25 * 0.588705, abs=1e-6)
    # the best child beats expand under either rule (0.608 > 0.547; 0.708 > 0.647): the mean picks B, the max A
    assert select_node(snap, 0.25, 0.25) == 3 and select_node(snap, 0.25, 0.25, alpha=1.0) == 2


def test_ties_between_expand_and_the_best_child_descend():
    # root (1 visit) ─ A (1 visit): ln 1 = 0, so expand = UCB(A) = A's mean; expand must win strictly.
    snap = Snapshot([root(visits=1, value=0.5), node(2, 1, "large", visits=1, value=0.5)])
    assert select_node(snap, C, C_EXP) == 2


def test_a_step_in_flight_is_a_virtual_loss_that_sends_the_next_client_elsewhere():
    # root (1) ─ A (1 visit, 0.5) ─ P (in flight). The virtual visit makes root 2 and A 2 visits:
    # UCB(A) = 0.5/2 + 0.3·sqrt(ln 2 / 2) = 0.25 + 0.176611 = 0.426611
    # expand(root) = 0.25 + 0.3·sqrt(ln 2 / 1) = 0.25 + 0.249766 = 0.499766  → expand the root
    nodes = [root(visits=1, value=0.5), node(2, 1, "large", visits=1, value=0.5)]
    assert select_node(Snapshot(nodes), C, C_EXP) == 2  # without the step in flight: A
    inflight = SnapNode(id=3, parent_id=2, kind="small", status="pending", in_flight=True)
    snap = Snapshot([root(visits=1, value=0.5), node(2, 1, "large", visits=1, value=0.5), inflight])
    assert ucb1(snap, 2, C) == pytest.approx(0.426611, abs=1e-6)
    assert expand_score(snap, 1, C_EXP) == pytest.approx(0.499766, abs=1e-6)
    assert select_node(snap, C, C_EXP) == 1


def test_a_lapsed_step_is_neither_a_child_nor_a_virtual_loss():
    lapsed = SnapNode(id=3, parent_id=2, kind="small", status="pending", in_flight=False)
    snap = Snapshot([root(visits=1, value=0.5), node(2, 1, "large", visits=1, value=0.5), lapsed])
    assert snap.visits(1) == 1 and snap.live_children(2) == []
    assert select_node(snap, C, C_EXP) == 2


# ---------------------------------------------------------------------------------- step kind


def kind(snap: Snapshot, node_id: int, draw: float) -> str:
    return choose_kind(snap, node_id, FixedDraw(draw), p_large=0.2, small_step_limit=2)[0]


def test_the_root_always_gets_a_large_step():
    assert kind(Snapshot([root()]), 1, 0.99) == "large"


def test_a_node_with_two_small_children_gets_a_large_step():
    snap = Snapshot([root(3, 1.5), node(2, 1, "large", visits=3, value=1.5), node(3, 2), node(4, 2)])
    assert kind(snap, 2, 0.99) == "large"


def test_otherwise_large_with_probability_p_large():
    snap = Snapshot([root(2, 1.0), node(2, 1, "large", visits=2, value=1.0), node(3, 2)])
    assert kind(snap, 2, 0.19) == "large"  # 0.19 < 0.2
    assert kind(snap, 2, 0.2) == "small"  # 0.2 ≥ 0.2


def test_after_a_step_that_produced_nothing_the_other_kind():
    # The last step from A was a small one abandoned without a candidate → large, whatever the draw.
    abandoned = node(3, 2, outcome="not_compiled", value=0.0, abandoned=True)
    snap = Snapshot([root(2, 0.5), node(2, 1, "large", visits=2, value=0.5), abandoned])
    assert kind(snap, 2, 0.99) == "large"
    # The last step was a large one whose lease lapsed with nothing submitted → small.
    lapsed = SnapNode(id=4, parent_id=2, kind="large", status="pending", in_flight=False)
    snap = Snapshot([root(1, 0.5), node(2, 1, "large", visits=1, value=0.5), lapsed])
    assert kind(snap, 2, 0.0) == "small"
    # A wrong (but compiled) kernel is a result, not a failed step: the usual rule applies.
    snap = Snapshot(
        [root(2, 0.55), node(2, 1, "large", visits=2, value=0.55), node(3, 2, outcome="wrong", value=0.05)]
    )
    assert kind(snap, 2, 0.99) == "small"


def test_a_candidate_that_did_not_compile_switches_nothing_as_in_adaexplore():
    # A's one small child did not compile: a result, so p_large decides (0.99 ≥ 0.2: small again).
    snap = Snapshot(
        [
            root(2, 0.5),
            node(2, 1, "large", visits=2, value=0.5),
            node(3, 2, outcome="not_compiled", value=0.0),
        ]
    )
    assert kind(snap, 2, 0.99) == "small"
    # The ablation's rule ("failed") switches after it.
    forced = choose_kind(snap, 2, FixedDraw(0.99), p_large=0.2, small_step_limit=2, kind_switch="failed")
    assert forced == (
        "large",
        "the last small step from node 2 failed (its kernel did not compile): trying a large step",
    )


def test_a_failed_small_step_on_a_node_with_two_small_children_goes_large_by_the_limit():
    # A ─ s3 (correct), s4 (did not compile): two small children, so large — for the limit's reason.
    snap = Snapshot(
        [
            root(3, 1.0),
            node(2, 1, "large", visits=3, value=1.0),
            node(3, 2, value=0.5),
            node(4, 2, outcome="not_compiled", value=0.0),
        ]
    )
    chosen, why = choose_kind(snap, 2, FixedDraw(0.99), p_large=0.2, small_step_limit=2)
    assert (chosen, why) == ("large", "node 2 already has 2 small-step children (limit 2)")
    # A large step from A that then did not compile does not earn A a third small child.
    snap = Snapshot(
        [
            root(4, 1.0),
            node(2, 1, "large", visits=4, value=1.0),
            node(3, 2, value=0.5),
            node(4, 2, value=0.5),
            node(5, 2, "large", outcome="not_compiled", value=0.0),
        ]
    )
    assert kind(snap, 2, 0.99) == "large"
    forced = choose_kind(snap, 2, FixedDraw(0.99), p_large=0.2, small_step_limit=2, kind_switch="failed")
    assert forced[0] == "small"  # what the old rule did: a third small child


def test_a_small_step_that_produced_nothing_is_not_a_child_towards_the_limit():
    # A ─ s3 (correct), s4 (abandoned), then a large step l5: one small kernel, so p_large decides.
    snap = Snapshot(
        [
            root(3, 1.0),
            node(2, 1, "large", visits=3, value=1.0),
            node(3, 2, value=0.5),
            node(4, 2, outcome="not_compiled", value=0.0, abandoned=True),
            node(5, 2, "large", value=0.5),
        ]
    )
    assert kind(snap, 2, 0.99) == "small"


# ---------------------------------------------------------------------------------- contexts


def test_small_step_context_is_the_chain_back_to_the_nearest_large_step_last_five():
    # root ─ L2 ─ s3 ─ s4 ─ s5 ─ s6 ─ s7 ─ s8
    nodes = [root(), node(2, 1, "large")] + [node(i, i - 1) for i in range(3, 9)]
    snap = Snapshot(nodes)
    assert small_chain(snap, 8, 5) == [4, 5, 6, 7, 8]
    assert small_chain(snap, 4, 5) == [2, 3, 4]
    # A large step in the middle cuts the chain: root ─ L2 ─ s3 ─ L4 ─ s5
    snap = Snapshot([root(), node(2, 1, "large"), node(3, 2), node(4, 3, "large"), node(5, 4)])
    assert small_chain(snap, 5, 5) == [4, 5]
    assert small_chain(snap, 4, 5) == [4]


def test_large_step_pool_is_the_best_correct_kernel_of_each_branch_on_the_path():
    # root ─ L2 (0.5) ─ s3 (0.6) ─ L5 (wrong) ─ s6 (0.7) ─ s8 (selected, wrong)
    #                 └ s4 (0.9: best of L2's branch, off the path but in its component)
    #      └ L7 (1.2: a branch not on the path: excluded)
    #        L5 ─ s9 (wrong)
    nodes = [
        root(),
        node(2, 1, "large", reward=0.5),
        node(3, 2, reward=0.6),
        node(4, 2, reward=0.9),
        node(5, 3, "large", outcome="wrong", reward=0.05),
        node(6, 5, reward=0.7),
        node(7, 1, "large", reward=1.2),
        node(8, 6, outcome="wrong", reward=0.05),
        node(9, 5, outcome="wrong", reward=0.05),
    ]
    snap = Snapshot(nodes)
    assert large_pool(snap, 8, 5, random.Random(0)) == [4, 6]
    # A branch without a correct kernel adds nothing: root ─ L2 (wrong) ─ s3 (wrong)
    snap = Snapshot([root(), node(2, 1, "large", outcome="wrong", reward=0.05), node(3, 2, outcome="wrong")])
    assert large_pool(snap, 3, 5, random.Random(0)) == []


def test_pool_keeps_at_most_pool_size_sampled_with_the_seeded_generator():
    # A chain of 7 large steps, each correct: 7 branches on the path, pool of 5.
    nodes = [root()] + [node(i, i - 1, "large", reward=0.4 + i / 10) for i in range(2, 9)]
    snap = Snapshot(nodes)
    first = large_pool(snap, 8, 5, step_rng(7, 3))
    assert len(first) == 5 and first == sorted(first)  # path order
    assert large_pool(snap, 8, 5, step_rng(7, 3)) == first  # same seed and step: same pool


# ---------------------------------------------------------------------- greedy, beam, params


def test_greedy_refines_the_best_kernel_with_room_then_drafts():
    # root ─ L2 (0.5) ─ s3 (0.9) ─ s4, s5 (s3 is full with max_children=2)
    snap = Snapshot(
        [
            root(),
            node(2, 1, "large", reward=0.5),
            node(3, 2, reward=0.9),
            node(4, 3, reward=0.3),
            node(5, 3, reward=0.2),
        ]
    )
    d = Greedy(GreedyParams(max_children=2)).decide(snap, random.Random(0))
    assert (d.parent_id, d.kind) == (2, "small")  # s3 is full; L2 (0.5) beats s4 (0.3)
    d = Greedy(GreedyParams()).decide(Snapshot([root()]), random.Random(0))
    assert (d.parent_id, d.kind) == (1, "large")


def test_beam_drafts_width_kernels_then_refines_the_least_expanded_of_the_top_width():
    snap = Snapshot([root(), node(2, 1, "large", reward=0.5)])
    d = Beam(BeamParams(width=2)).decide(snap, random.Random(0))
    assert (d.parent_id, d.kind) == (1, "large")  # draft 2 of 2
    # drafts L2 (0.5), L3 (0.9); L3 has one refinement s4 (0.2): beam = {L3, L2}; L2 has no child yet.
    snap = Snapshot(
        [root(), node(2, 1, "large", reward=0.5), node(3, 1, "large", reward=0.9), node(4, 3, reward=0.2)]
    )
    d = Beam(BeamParams(width=2)).decide(snap, random.Random(0))
    assert (d.parent_id, d.kind) == (2, "small")


def test_unknown_policies_and_parameters_are_refused_with_the_allowed_names():
    with pytest.raises(UsageError, match="use one of: adaexplore, greedy, beam"):
        make_policy("mcts")
    with pytest.raises(UsageError, match="allowed keys: .*p_large"):
        make_policy("adaexplore", {"p_larg": 0.3})
    with pytest.raises(UsageError, match="p_large"):
        make_policy("adaexplore", {"p_large": 2})
    assert make_policy("adaexplore", {"p_large": 0.5}).params.model_dump()["p_large"] == 0.5


# ----------------------------------------------------------------------------- ranking, presets


def test_a_40x_kernel_beats_a_12x_one_in_the_pool_and_for_greedy_though_both_clip_to_reward_16():
    # root ─ L2 ─ s3 (12×, earlier) and s4 (40×): both rewards are 1.6, the clip's ceiling.
    assert reward_for("correct", 12.0) == reward_for("correct", 40.0) == pytest.approx(1.6)
    snap = Snapshot(
        [
            root(),
            node(2, 1, "large", reward=0.6),
            node(3, 2, reward=1.6, speedup=12.0),
            node(4, 2, reward=1.6, speedup=40.0),
            node(5, 4, outcome="wrong", reward=0.05),
        ]
    )
    assert large_pool(snap, 5, 5, random.Random(0)) == [4]
    d = Greedy(GreedyParams(max_children=3)).decide(snap, random.Random(0))
    assert d.parent_id == 4
    assert (
        score("correct", 40.0) > score("correct", 12.0) > score("wrong", None) > score("not_compiled", None)
    )
    assert score("correct", None) == score("correct", 1.0)  # unmeasured: parity, as the reward


def test_the_adaexplore_preset_is_the_papers_configuration_per_level():
    l2 = preset_config("adaexplore", level=2)
    assert (l2.c, l2.c_exp, l2.p_large, l2.small_step_limit, l2.memory, l2.pool_size) == (
        0.3,
        0.3,
        0.2,
        2,
        5,
        5,
    )
    assert l2.kind_switch == "no_candidate" and l2.rules_in_prompt == 0 and l2.adapt_steps == 25
    assert not (l2.learn_rules or l2.warm_start or l2.profile_feedback) and l2.manual_sections == 0
    assert l2.tuner_steps == "off"
    assert preset_config("adaexplore", level=3).c_exp == 0.15  # KB-l3: expand_exploration_ratio 0.5
    assert l2.reward_alpha == 0.0 and l2.reviser  # KB-l2/KB-l3: reward_alpha 0.0, the reviewer on
    ours = preset_config("kernelcraft")
    assert ours.manual_sections == 3 and ours.profile_feedback and ours.warm_start
    assert preset_config("kernelcraft", level=3).c_exp == 0.15


def test_a_new_trees_parameters_are_its_preset_for_its_level_with_overrides_on_top():
    p = start_policy("adaexplore", "adaexplore", {"level": 3, "p_large": 0.5}).params
    assert (p.preset, p.level, p.c_exp, p.p_large, p.warm_start) == ("adaexplore", 3, 0.15, 0.5, False)
    assert start_policy("adaexplore", None, None).params.preset == "kernelcraft"
    assert start_policy("greedy", "adaexplore").params.manual_sections == 0
    with pytest.raises(UsageError, match="unknown preset 'ada'; use one of: kernelcraft, adaexplore"):
        start_policy("adaexplore", "ada")
    with pytest.raises(UsageError, match="level must be a KernelBench level"):
        start_policy("adaexplore", "adaexplore", {"level": 4})
    with pytest.raises(UsageError, match="kind_switch"):
        start_policy("adaexplore", None, {"kind_switch": "always"})
