"""An OpenEnv environment of multi-step word problems, for the ``openenv`` agent loop (docs/environments.md).

An episode asks a word problem of the embedded synthetic task, then ``turns - 1`` follow-ups that each add
to the running total. Every answer whose ``#### <number>`` (or, without one, last number) is the
running total earns ``1 / turns``, so an episode's return is the fraction of its answers that were right.
``reset(seed=...)`` fixes the episode: give each data row a seed, and the samples of one prompt play the
same problem.
"""

from __future__ import annotations

import random
import re
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from verl_lite.data.synthetic import ArithmeticSpec, make_problem

# The first question: one or two steps, as the embedded synthetic task words them.
FIRST_QUESTION = ArithmeticSpec(min_steps=1, max_steps=2)
ADD_PHRASES = ("buys {n} more", "finds {n} more", "picks up {n} more")


class AnswerAction(Action):
    """The model's answer, as it wrote it."""

    text: str


class ProblemObservation(Observation):
    """The next question of the episode (empty once it is done)."""

    question: str = ""


class ArithmeticState(State):
    """Where an episode stands: its running total and the answers still to come."""

    total: int = 0
    turns_left: int = 0


class ArithmeticEnvironment(Environment[AnswerAction, ProblemObservation, ArithmeticState]):
    """Word problems of ``turns`` questions; each right answer earns ``1 / turns``.

    Args:
        turns: questions per episode (the first one and ``turns - 1`` follow-ups).
        max_term: the largest number a follow-up adds.
    """

    def __init__(self, turns: int = 2, max_term: int = 9):
        super().__init__()
        self.turns, self.max_term = turns, max_term
        self.rng = random.Random()
        self.name, self.item = "", ""
        self._state = ArithmeticState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> ProblemObservation:
        self.rng = random.Random(seed)
        problem = make_problem(self.rng, FIRST_QUESTION)
        # "Tom has 3 apples. ..." names the person and the things counted
        self.name, _, rest = problem.question.partition(" has ")
        self.item = rest.split(" ")[1].rstrip(".")
        self._state = ArithmeticState(episode_id=episode_id, total=problem.answer, turns_left=self.turns)
        return ProblemObservation(question=problem.question)

    def step(self, action: AnswerAction, timeout_s: float | None = None, **kwargs: Any) -> ProblemObservation:
        state = self._state
        reward = 1.0 / self.turns if _answer(action.text) == state.total else 0.0
        state.step_count += 1
        state.turns_left -= 1
        if state.turns_left <= 0:
            return ProblemObservation(done=True, reward=reward)
        more = self.rng.randint(1, self.max_term)
        phrase = self.rng.choice(ADD_PHRASES).format(n=more)
        question = (
            f"{self.name} has {state.total} {self.item}. {self.name} {phrase}. "
            f"How many {self.item} does {self.name} have now?"
        )
        state.total += more
        return ProblemObservation(question=question, reward=reward)

    @property
    def state(self) -> ArithmeticState:
        return self._state


def _answer(text: str) -> int | None:
    """The number after the last ``####``, else the last number of ``text`` (None without one)."""
    marked = re.findall(r"####\s*(-?\d+)", text)
    numbers = marked or re.findall(r"-?\d+", text)
    return int(numbers[-1]) if numbers else None
