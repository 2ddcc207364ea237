"""CoMLRL's joint tree over turns (joint answers, cuts, returns), without Ray or a model."""

import pytest

from verl_lite.trainer.multi_agent import RewardProcessors
from verl_lite.trainer.multi_agent.callbacks import joint_rewards
from verl_lite.trainer.multi_agent.joint_tree import JointNode, compute_returns, continues, joint_combinations


def node(answers, combos, rewards, turn=0):
    return JointNode(
        0, turn, ["p"] * len(answers), ([[]] * len(answers), [[]] * len(answers)), answers, combos, rewards
    )


def test_cross_scores_every_combination_once_and_sums_each_answers_combinations():
    calls = []

    def reward(a, b, c):
        calls.append((a[0], b[0], c[0]))
        return [100 * len(a[0]) + 10 * len(b[0]) + len(c[0])]

    answers = [["a", "aa"], ["b", "bb"], ["c", "cc"]]
    leaf = node(answers, joint_combinations(2, 3, "cross"), [])
    aligned = [[leaf.joint_answer(j)[i] for j in range(len(leaf.combos))] for i in range(3)]
    leaf.rewards = joint_rewards(reward, aligned, [{}], RewardProcessors.shift(-111.0))
    # 2 x 2 x 2 combinations in itertools.product order, each scored once, then shifted
    assert calls == [(a, b, c) for a in answers[0] for b in answers[1] for c in answers[2]]
    assert leaf.rewards == [100.0 * i + 10.0 * j + k for i in (0, 1) for j in (0, 1) for k in (0, 1)]
    assert compute_returns(leaf, 0.5) == leaf.rewards  # a leaf's returns are its rewards
    # agent 0's answer "aa" is in the 4 combinations with i = 1: 4 * 100 + (0 + 0 + 10 + 10) + (0 + 1 + 0 + 1)
    returns = [leaf.agent_returns(i) for i in range(3)]
    assert returns == [[22.0, 422.0], [202.0, 242.0], [220.0, 224.0]]
    assert all(sum(r) == sum(leaf.rewards) for r in returns)


def test_aligned_pairs_answer_j_of_every_agent():
    assert joint_combinations(3, 2, "aligned") == [(0, 0), (1, 1), (2, 2)]
    assert len(joint_combinations(3, 2, "cross")) == 9


def test_a_joint_answers_return_adds_the_discounted_mean_return_of_its_child():
    root = node([["a0", "a1"], ["b0", "b1"]], joint_combinations(2, 2, "aligned"), [1.0, 0.0])
    first = node([["c0", "c1"], ["d0", "d1"]], root.combos, [0.5, 1.5], turn=1)
    second = node([["e0", "e1"], ["f0", "f1"]], root.combos, [0.0, 0.0], turn=1)
    grand = node([["g0", "g1"], ["h0", "h1"]], root.combos, [2.0, 4.0], turn=2)
    first.children, second.children = [grand, node([["x"] * 2] * 2, root.combos, [0.0, 0.0], turn=2)], []
    second.rewards = [0.0, 0.0]
    root.children = [first, second]
    compute_returns(root, 0.5)
    # first: joint answer 0 continues in grand (mean return 3), joint answer 1 in a zero leaf
    assert first.returns == [0.5 + 0.5 * 3.0, 1.5 + 0.0]
    assert root.returns == [1.0 + 0.5 * (2.0 + 1.5) / 2, 0.0 + 0.5 * 0.0]
    assert [n.turn for n in root.walk()] == [0, 1, 2, 2, 1]
    assert root.agent_returns(1) == root.returns  # aligned: each answer is in one joint answer


def test_a_child_starts_from_its_branchs_history():
    root = node([["a0", "a1"], ["b0", "b1"]], joint_combinations(2, 2, "cross"), [0.0] * 4)
    root.prompts = ["pa", "pb"]
    # cross joint answer 1 is (a0, b1)
    assert root.branch_history(1) == ([["pa"], ["pb"]], [["a0"], ["b1"]])
    assert root.history == ([[], []], [[], []])  # the parent's own history is left as it was


@pytest.mark.parametrize(("threshold", "expected"), [(None, True), (0.5, True), (0.49, False), (-0.2, False)])
def test_a_node_whose_mean_reward_exceeds_the_threshold_is_cut(threshold, expected):
    assert continues([0.0, 1.0], threshold) is expected
