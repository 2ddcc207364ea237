"""CoMLRL's joint tree over turns: which joint answers a task's answers form, which of them continue, and
the return each answer is trained on. Pure Python; :class:`~verl_lite.trainer.multi_agent.loop.MultiAgentLoop`
generates and scores the nodes.

A node is one turn of one branch: every agent's ``num_generations`` answers to its prompt there. Its joint
answers are answer j of every agent (``aligned``) or every combination of one answer per agent (``cross``).
Unless the node is cut (its mean joint reward above ``early_termination_threshold``) or the last turn,
each joint answer continues as a child node whose prompts come from the external transition. A joint
answer's return is its reward plus ``discount`` times the mean return of its child's joint answers; an
agent's answer is trained on the sum of the returns of the joint answers it is in (aligned: its one).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass
class JointNode:
    """One node of a task's joint tree (see the module docstring)."""

    # the task's position among the tasks generated together
    task: int
    # 0-based turn
    turn: int
    # each agent's prompt text at this node
    prompts: list[str]
    # (prompts, chosen answers) per agent along the branch before this node, oldest first
    history: tuple[list[list[str]], list[list[str]]]
    # per agent, its answers in sample order
    answers: list[list[str]] = field(default_factory=list)
    # per joint answer: each agent's answer index
    combos: list[tuple[int, ...]] = field(default_factory=list)
    # per joint answer: its (processed) reward
    rewards: list[float] = field(default_factory=list)
    # per joint answer: the node its branch continues in (empty: a leaf)
    children: list[JointNode] = field(default_factory=list)
    # per joint answer: its return (set by compute_returns)
    returns: list[float] = field(default_factory=list)

    def joint_answer(self, j: int) -> list[str]:
        """Joint answer ``j``: one answer per agent, in agent order."""
        return [self.answers[i][a] for i, a in enumerate(self.combos[j])]

    def branch_history(self, j: int) -> tuple[list[list[str]], list[list[str]]]:
        """The history a child of joint answer ``j`` starts from: this node's prompts and that joint answer
        added to each agent's."""
        return extend_history(self.history, self.prompts, self.joint_answer(j))

    def agent_returns(self, agent: int) -> list[float]:
        """Per answer of ``agent``: the sum of the returns of the joint answers it is in."""
        out = [0.0] * len(self.answers[agent])
        for combo, value in zip(self.combos, self.returns):
            out[combo[agent]] += value
        return out

    def walk(self):
        """This node and every node below it, parents first."""
        yield self
        for child in self.children:
            yield from child.walk()


def extend_history(
    history: tuple[list[list[str]], list[list[str]]], prompts: list[str], answers: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """A new (prompts, answers) history per agent: ``history`` with one more turn's ``prompts`` and
    ``answers`` (one per agent) added; ``history`` itself is left as it was."""
    return (
        [[*h, prompts[i]] for i, h in enumerate(history[0])],
        [[*h, answers[i]] for i, h in enumerate(history[1])],
    )


def joint_combinations(num_answers: int, num_agents: int, joint_mode: str) -> list[tuple[int, ...]]:
    """The joint answers of ``num_answers`` answers per agent: ``(j, j, ...)`` for each j (aligned), or
    every combination in ``itertools.product`` order (cross)."""
    if joint_mode == "cross":
        return list(itertools.product(range(num_answers), repeat=num_agents))
    return [(j,) * num_agents for j in range(num_answers)]


def continues(rewards: list[float], threshold: float | None) -> bool:
    """Whether a node's joint answers get children: not when its mean reward exceeds ``threshold``."""
    return threshold is None or sum(rewards) / len(rewards) <= threshold


def compute_returns(node: JointNode, discount: float) -> list[float]:
    """Set the return of every joint answer under ``node`` (bottom-up) and give ``node``'s."""
    if node.children:
        below = [compute_returns(child, discount) for child in node.children]
        node.returns = [r + discount * sum(c) / len(c) for r, c in zip(node.rewards, below)]
    else:
        node.returns = list(node.rewards)
    return node.returns
