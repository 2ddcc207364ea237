"""The ``openenv`` agent loop: one episode of an OpenEnv environment is one trajectory.

An OpenEnv (``openenv-core``) environment is a class with ``reset()`` and ``step(action)`` that return
observations carrying ``reward`` and ``done``. The loop drives one episode per trajectory::

    reset(**row.extra_info.reset_kwargs) -> observation (a user message after the row's messages)
      -> generate (mask 1) -> action: the model's text in the action's text field -> step(action)
      -> reward added to the episode's return; done?  yes -> stop
                                                      no  -> observation as a user message (mask 0) -> generate ...

The environment is ``rollout.agent.openenv.env`` (a file and class name, or a dotted class path), built with
``rollout.agent.openenv.env_kwargs`` once per trajectory: an ``Environment`` subclass runs in this process
(no server, no container); an ``EnvClient`` subclass talks to a running server (``base_url`` in the kwargs).
Synchronous ``reset`` / ``step`` run in a thread so that one slow environment does not stall the other
trajectories. The trajectory's reward is the episode's return (the sum of the step rewards, None counted
as 0); the reward manager does not score it.

It stops on: ``done`` ("stop"), a generation cut by its budget or aborted ("length" / "abort"),
``multi_turn.max_assistant_turns`` / ``max_user_turns``, or the response budget filled ("length"). An
environment that raises, or an action the action class refuses, is a counted failure (``env_errors``): the
trajectory keeps its tokens, gets reward 0.0, and the step goes on.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import sys
import typing
from dataclasses import dataclass
from typing import Any

from verl_lite.utils.extensions import function_from_file
from verl_lite.workers.agent_loop.base import (
    AgentLoop,
    AgentLoopContext,
    AgentLoopOutput,
    ServerClient,
    register_agent_loop,
)
from verl_lite.workers.config import SamplingConfig
from verl_lite.workers.tools.rendering import ChatRenderer
from verl_lite.workers.turns import TurnRecord

KEY = "actor_rollout_ref.rollout.agent.openenv.env"
# Observation fields every OpenEnv observation has; the others are what the model is shown.
_BASE_OBSERVATION_FIELDS = ("done", "reward", "metadata")


@dataclass(frozen=True)
class EnvSpec:
    """What the loop needs to know of an OpenEnv environment class."""

    cls: type
    # True for an EnvClient subclass (a server's client), False for an in-process Environment subclass.
    remote: bool
    action_cls: type
    # The action field that receives the model's text.
    action_field: str


@functools.cache
def load_env(path: str | None, name: str | None) -> EnvSpec:
    """The environment class ``name`` (of the file at ``path``, or a dotted import path when ``path`` is
    null), with its action class and the action field the model's text goes into.

    Raises:
        ValueError: in one sentence naming ``rollout.agent.openenv.env``, the value and what is valid.
    """
    try:
        from openenv.core.env_client import EnvClient
        from openenv.core.env_server.interfaces import Environment
    except ImportError as err:
        raise ValueError(
            f"{KEY} needs openenv-core, which is not importable ({err}); install the envs extra "
            "(pip install -e '.[envs]')."
        ) from None
    cls = _load_class(path, name)
    if not (isinstance(cls, type) and issubclass(cls, Environment | EnvClient)):
        raise ValueError(
            f"{KEY}.name={name!r} is {cls!r}, not an OpenEnv environment; give an "
            "openenv.core.env_server.interfaces.Environment subclass (run in-process) or an "
            "openenv.core.EnvClient subclass (a client of a running server)."
        )
    base = EnvClient if issubclass(cls, EnvClient) else Environment
    action_cls = _action_class(cls, base)
    return EnvSpec(cls, base is EnvClient, action_cls, _text_field(action_cls, name))


def _load_class(path: str | None, name: str | None) -> Any:
    if not name:
        raise ValueError(f"{KEY}.name is null; the openenv loop needs the environment's class name.")
    if path:
        try:
            return function_from_file(path, name, KEY)
        except FileNotFoundError as err:
            raise ValueError(str(err)) from None
    module_name, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except Exception as err:  # any way: no module, no attribute, the module's own import errors
        raise ValueError(
            f"{KEY}.name={name!r} cannot be imported ({type(err).__name__}: {err}); give a dotted class "
            f"path, or the class name with {KEY}.path naming its file."
        ) from None


def _action_class(cls: type, base: type) -> type:
    """The action type ``cls`` declares as its first type argument (``Environment[MyAction, ...]``)."""
    from openenv.core.env_server.types import Action

    for klass in cls.__mro__:
        for parent in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(parent)
            args = typing.get_args(parent)
            if isinstance(origin, type) and issubclass(origin, base) and args:
                if isinstance(args[0], type) and issubclass(args[0], Action):
                    return args[0]
    raise ValueError(
        f"{KEY}: {cls.__name__} does not declare its action class; subclass it as "
        f"{base.__name__}[MyAction, MyObservation, MyState] with MyAction an openenv Action."
    )


def _text_field(action_cls: type, name: str | None) -> str:
    """The one required ``str`` field of the action class (the model's text goes there)."""
    fields = [key for key, f in action_cls.model_fields.items() if f.is_required() and f.annotation is str]
    if len(fields) != 1:
        raise ValueError(
            f"{KEY}.name={name!r}: its action {action_cls.__name__} has required str fields {fields}; the "
            "openenv loop needs exactly one, which receives the model's text."
        )
    return fields[0]


def observation_text(observation: Any) -> str:
    """What the model is shown of an observation (an Observation, or a client's dict of its fields): its one
    field besides done/reward/metadata as text, or the JSON of those fields when there are several."""
    fields = observation if isinstance(observation, dict) else observation.model_dump()
    shown = {key: value for key, value in fields.items() if key not in _BASE_OBSERVATION_FIELDS}
    if len(shown) == 1:
        value = next(iter(shown.values()))
        return value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(shown, default=str)


class EnvironmentFault(Exception):
    """The environment (its constructor, reset, step, or its action class) raised: the trajectory's failure."""


class _Episode:
    """One environment instance, with ``reset`` / ``step`` as coroutines returning (obs, reward, done); any
    exception of the environment's own code comes out as ``EnvironmentFault``."""

    def __init__(self, spec: EnvSpec, env: Any):
        self.spec, self.env = spec, env

    @classmethod
    async def start(cls, spec: EnvSpec, kwargs: dict[str, Any]) -> _Episode:
        """A new instance of the environment (built in a thread: constructors may load data)."""
        try:
            return cls(spec, await asyncio.to_thread(spec.cls, **kwargs))
        except Exception as err:  # the environment's own code
            raise EnvironmentFault(f"{spec.cls.__name__}(**env_kwargs): {_describe(err)}") from err

    async def reset(self, kwargs: dict[str, Any]) -> tuple[Any, float | None, bool]:
        try:
            return self._result(await self._call("reset", **kwargs))
        except Exception as err:  # the environment's own code
            raise EnvironmentFault(f"reset: {_describe(err)}") from err

    async def step(self, text: str) -> tuple[Any, float | None, bool]:
        try:
            action = self.spec.action_cls(**{self.spec.action_field: text})
            return self._result(await self._call("step", action))
        except Exception as err:  # the environment's own code, or its action class refusing the text
            raise EnvironmentFault(f"step: {_describe(err)}") from err

    async def close(self) -> None:
        await asyncio.to_thread(self.env.close)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from openenv.core.env_server.interfaces import Environment

        if not self.spec.remote:
            own_async = getattr(type(self.env), f"{method}_async")
            if own_async is not getattr(Environment, f"{method}_async"):  # the env's own coroutine
                return await own_async(self.env, *args, **kwargs)
        return await asyncio.to_thread(getattr(self.env, method), *args, **kwargs)

    def _result(self, result: Any) -> tuple[Any, float | None, bool]:
        if self.spec.remote:  # a client's StepResult
            return result.observation, result.reward, bool(result.done)
        return result, result.reward, bool(result.done)


@dataclass
class _Trajectory(TurnRecord):
    """The growing state of one episode."""

    episode_return: float = 0.0


@register_agent_loop("openenv")
class OpenEnvAgentLoop(AgentLoop):
    """Plays one episode of the configured OpenEnv environment per trajectory (see the module docstring)."""

    def __init__(self, context: AgentLoopContext):
        super().__init__(context)
        openenv = context.config.agent.openenv
        self.spec = load_env(openenv.env.path, openenv.env.name)
        self.env_kwargs = dict(openenv.env_kwargs)
        self.multi_turn = context.config.multi_turn
        self.renderer = ChatRenderer(self.tokenizer, context.chat_template)

    async def run(
        self, row: dict[str, Any], client: ServerClient, sampling: SamplingConfig, max_tokens: int
    ) -> AgentLoopOutput:
        """One episode on ``row`` (see ``AgentLoop.run``); never raises for the environment's faults."""
        messages = [dict(m) for m in row.get("messages") or []]
        traj, finish_reason, episode = None, "stop", None
        try:
            episode = await _Episode.start(self.spec, self.env_kwargs)
            reset_kwargs = dict((row.get("extra_info") or {}).get("reset_kwargs") or {})
            observation, _, _ = await episode.reset(reset_kwargs)
            first = observation_text(observation)
            shown = messages + ([{"role": "user", "content": first}] if first else [])
            traj = _Trajectory(self.renderer.prompt_ids(shown))
            finish_reason = await self._turns(traj, episode, client, sampling, max_tokens)
        except (
            EnvironmentFault
        ) as err:  # its trajectory's failure, not the step's (a rollout fault still raises)
            if traj is None:
                traj = _Trajectory(
                    self.renderer.prompt_ids(messages) if messages else list(row["prompt_ids"])
                )
            traj.counts["env_errors"] += 1
            _report(str(err))
        finally:
            if episode is not None:
                await _close(episode, traj)
        if not traj.response_ids:  # nothing generated: one masked EOS keeps the trajectory well-formed
            traj.add([self.tokenizer.eos_token_id], None, mask=0)
        failed = traj.counts["env_errors"] > 0
        return traj.output(finish_reason, self._metrics(traj), reward=0.0 if failed else traj.episode_return)

    async def _turns(
        self,
        traj: _Trajectory,
        episode: _Episode,
        client: ServerClient,
        sampling: SamplingConfig,
        budget: int,
    ) -> str:
        """Alternate generations and environment steps until the episode or a limit ends; the finish reason."""
        mt = self.multi_turn
        while len(traj.response_ids) < budget:
            room = budget - len(traj.response_ids)
            out = await client.generate(traj.prompt_ids + traj.response_ids, sampling, room)
            traj.assistant_turn(out, room)
            if out.finish_reason != "stop":
                return out.finish_reason
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            observation, reward, done = await episode.step(text)
            traj.counts["env_steps"] += 1
            traj.episode_return += float(reward or 0.0)
            if done:
                traj.counts["episodes_done"] += 1
                return "stop"
            if mt.max_assistant_turns is not None and traj.assistant_turns >= mt.max_assistant_turns:
                return "max_assistant_turns"
            if mt.max_user_turns is not None and traj.user_turns >= mt.max_user_turns:
                return "max_user_turns"
            if len(traj.response_ids) >= budget:
                break
            shown = self.renderer.appended_ids([{"role": "user", "content": observation_text(observation)}])
            traj.user_turns += 1
            room = budget - len(traj.response_ids)
            traj.add(shown[:room], None, mask=0)
        return "length"

    def _metrics(self, traj: _Trajectory) -> dict[str, float]:
        metrics = {key: 0.0 for key in ("env_steps", "env_errors", "episodes_done")}
        metrics.update({key: float(value) for key, value in traj.counts.items()})
        metrics["episode_return"] = traj.episode_return
        return metrics


async def _close(episode: _Episode, traj: _Trajectory | None) -> None:
    """Close the environment; a failed clean-up counts in env_errors but never fails the trajectory."""
    try:
        await episode.close()
    except Exception as err:  # the environment's own clean-up
        if traj is not None:
            traj.counts["env_errors"] += 1
        _report(f"close: {_describe(err)}")


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _report(problem: str) -> None:
    print(f"verl_lite: openenv: {problem}", file=sys.stderr, flush=True)


__all__ = ["EnvSpec", "EnvironmentFault", "OpenEnvAgentLoop", "load_env", "observation_text"]
