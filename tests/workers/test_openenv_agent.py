"""The openenv agent loop: an OpenEnv environment's episode as one trajectory, with the real tokenizer.

The policy is scripted (fixed answers through the ``ServerClient`` interface); the environment is the
shipped example (``verl_lite/configs/envs/arithmetic_env.py``), run in-process. tests/trainer/
test_openenv_on_cpu.py runs it through main_ppo.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from verl_lite.trainer.validation import EMBEDDED_MODEL
from verl_lite.workers.agent_loop import AgentLoopContext, get_agent_loop
from verl_lite.workers.agent_loop.openenv_agent import load_env
from verl_lite.workers.config import AgentConfig, EnvClassRef, OpenEnvConfig, RolloutConfig, SamplingConfig
from verl_lite.workers.rollout.server import TokenOutput
from verl_lite.workers.tools.rendering import ChatRenderer

ARITHMETIC = str(Path(__file__).resolve().parents[2] / "verl_lite" / "configs" / "envs" / "arithmetic_env.py")
ROW = {
    "messages": [{"role": "system", "content": "End your answer with #### and the number."}],
    "prompt_ids": [],
    "extra_info": {"reset_kwargs": {"seed": 3}},
}
# seed 3: 19 - 6 = 13, then 13 + 2 = 15
FIRST = "Mia has 19 cookies. She uses 6. How many cookies does Mia have now?"
FOLLOW_UP = "Mia has 13 cookies. Mia picks up 2 more. How many cookies does Mia have now?"


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(EMBEDDED_MODEL)


class ScriptedClient:
    """Replays one answer (and EOS) per ``generate`` call; log-probs -(turn + 1) mark whose tokens they are."""

    def __init__(self, tok, answers: list[str]):
        self.turns = [tok.encode(a, add_special_tokens=False) + [tok.eos_token_id] for a in answers]
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids, sampling, max_tokens):
        i = len(self.prompts)
        self.prompts.append(list(prompt_ids))
        return TokenOutput(
            self.turns[i][:max_tokens], [-(i + 1.0)] * len(self.turns[i][:max_tokens]), "stop", 7
        )


def make_loop(tok, path=ARITHMETIC, name="ArithmeticEnvironment", **env_kwargs):
    openenv = OpenEnvConfig(env=EnvClassRef(path=path, name=name), env_kwargs=env_kwargs)
    return get_agent_loop("openenv")(AgentLoopContext(tok, RolloutConfig(agent=AgentConfig(openenv=openenv))))


def play(loop, client, max_tokens=200):
    return asyncio.run(loop.run(dict(ROW), client, SamplingConfig(), max_tokens))


def test_an_episode_is_the_rendered_conversation_with_the_env_reward_and_mask_zero_on_observations(tok):
    client = ScriptedClient(tok, ["19-6=13\n#### 13", "#### 40"])
    out = play(make_loop(tok), client)
    renderer = ChatRenderer(tok)
    prompt = renderer.prompt_ids([*ROW["messages"], {"role": "user", "content": FIRST}])
    observation = renderer.appended_ids([{"role": "user", "content": FOLLOW_UP}])
    first, second = client.turns
    assert out.prompt_ids == prompt
    assert out.response_ids == first + observation + second
    # 1 exactly on the sampled tokens; the environment's question is context (mask 0, log-prob 0.0)
    assert out.response_mask == [1] * len(first) + [0] * len(observation) + [1] * len(second)
    assert out.response_log_probs == [-1.0] * len(first) + [0.0] * len(observation) + [-2.0] * len(second)
    # the second generation continued from exactly the stored tokens
    assert client.prompts == [prompt, prompt + first + observation]
    # right, then wrong (15): the return is the environment's, 1/2 + 0
    assert out.reward == 0.5 and out.finish_reason == "stop" and out.num_turns == 3
    assert (
        out.metrics["env_steps"] == 2 and out.metrics["episodes_done"] == 1 and out.metrics["env_errors"] == 0
    )


def test_max_assistant_turns_ends_an_episode_before_the_environment_does(tok):
    from verl_lite.workers.config import MultiTurnConfig

    openenv = OpenEnvConfig(env=EnvClassRef(path=ARITHMETIC, name="ArithmeticEnvironment"))
    config = RolloutConfig(
        agent=AgentConfig(openenv=openenv), multi_turn=MultiTurnConfig(max_assistant_turns=1)
    )
    loop = get_agent_loop("openenv")(AgentLoopContext(tok, config))
    out = play(loop, ScriptedClient(tok, ["#### 13", "#### 15"]))
    assert out.finish_reason == "max_assistant_turns" and out.num_turns == 1 and set(out.response_mask) == {1}
    assert out.reward == 0.5 and out.metrics["episodes_done"] == 0


FAILING_ENV = """
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class Say(Action):
    message: str


class Heard(Observation):
    text: str = ""


class Crashing(Environment[Say, Heard, State]):
    def reset(self, seed=None, episode_id=None, **kwargs):
        return Heard(text="say something")

    def step(self, action, timeout_s=None, **kwargs):
        raise RuntimeError("a bug in the environment")

    @property
    def state(self):
        return State()


class TwoFields(Action):
    a: str
    b: str


class Unusable(Environment[TwoFields, Heard, State]):
    pass
"""


def test_an_environment_that_raises_is_a_counted_failure_with_reward_zero(tok, tmp_path):
    path = tmp_path / "crashing.py"
    path.write_text(FAILING_ENV)
    out = play(make_loop(tok, str(path), "Crashing"), ScriptedClient(tok, ["hello"]))
    assert out.reward == 0.0 and out.metrics["env_errors"] == 1 and out.num_turns == 1
    # the answer the environment failed on is kept (a well-formed trajectory)
    assert out.response_ids == tok.encode("hello", add_special_tokens=False) + [tok.eos_token_id]


class DeadServers:
    async def generate(self, prompt_ids, sampling, max_tokens):
        raise RuntimeError("every rollout server is gone")


def test_a_rollout_fault_is_not_the_environments_and_still_raises(tok):
    with pytest.raises(RuntimeError, match="every rollout server is gone"):
        play(make_loop(tok), DeadServers())


def test_a_class_that_is_no_environment_or_has_no_text_action_is_refused(tmp_path):
    path = tmp_path / "crashing.py"
    path.write_text(FAILING_ENV)
    with pytest.raises(ValueError, match=r"openenv.env.name='Say' is .*not an OpenEnv environment"):
        load_env(str(path), "Say")
    with pytest.raises(ValueError, match=r"action TwoFields has required str fields \['a', 'b'\]"):
        load_env(str(path), "Unusable")
    with pytest.raises(ValueError, match=r"openenv.env.name='no_such.Env' cannot be imported"):
        load_env(None, "no_such.Env")


ARITHMETIC_CLIENT = """
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State

from verl_lite.configs.envs.arithmetic_env import AnswerAction, ProblemObservation


class ArithmeticClient(EnvClient[AnswerAction, ProblemObservation, State]):
    def _step_payload(self, action):
        return action.model_dump()

    def _parse_result(self, payload):
        observation = ProblemObservation(**payload["observation"], done=payload["done"], reward=payload["reward"])
        return StepResult(observation, payload["reward"], payload["done"])

    def _parse_state(self, payload):
        return State(**payload)
"""


@pytest.fixture
def arithmetic_server():
    """The shipped environment behind OpenEnv's own server (create_app), on a loopback port of this process."""
    import socket
    import threading
    import time

    import uvicorn
    from openenv.core.env_server.http_server import create_app

    from verl_lite.configs.envs.arithmetic_env import AnswerAction, ArithmeticEnvironment, ProblemObservation

    app = create_app(ArithmeticEnvironment, AnswerAction, ProblemObservation)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join()


def test_an_env_client_plays_the_episode_on_the_environments_server(tok, tmp_path, arithmetic_server):
    path = tmp_path / "arithmetic_client.py"
    path.write_text(ARITHMETIC_CLIENT)
    loop = make_loop(tok, str(path), "ArithmeticClient", base_url=arithmetic_server)
    client = ScriptedClient(tok, ["#### 13", "#### 15"])
    out = play(loop, client)
    renderer = ChatRenderer(tok)
    # the same episode as in-process: the server's questions, both answers right
    assert out.prompt_ids == renderer.prompt_ids([*ROW["messages"], {"role": "user", "content": FIRST}])
    observation = renderer.appended_ids([{"role": "user", "content": FOLLOW_UP}])
    first, second = client.turns
    assert out.response_mask == [1] * len(first) + [0] * len(observation) + [1] * len(second)
    assert out.reward == 1.0 and out.metrics["env_steps"] == 2 and out.metrics["env_errors"] == 0


def test_the_model_is_shown_an_observations_one_field_or_the_json_of_its_fields():
    from openenv.core.env_server.types import Observation

    from verl_lite.workers.agent_loop.openenv_agent import observation_text

    class Board(Observation):
        board: list[list[int]] = [[1, 0], [0, 2]]
        note: str = "your move"

    assert (
        observation_text(Board(reward=1.0, done=True)) == '{"board": [[1, 0], [0, 2]], "note": "your move"}'
    )
    # a client's observation as a dict: done / reward / metadata are never shown
    assert observation_text({"prompt": "Guess a word.", "done": False, "reward": None}) == "Guess a word."
