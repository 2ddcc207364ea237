"""``MultiAgentLoop``: the controller's multi-agent step over N agents' worker groups, and its evaluation.

Each agent is a ``WorkerGroups`` (its policy, rollout servers and agent-loop workers); agents that share
one policy share one ``WorkerGroups``. Prompts and trajectories live in the KV store; the controller
reads back only decoded answer texts (the reward function needs them), grows each task's joint tree over
turns (:mod:`~verl_lite.trainer.multi_agent.joint_tree`) and sends one return per trajectory back to the
agent-loop workers, which put it on the trajectory's last model token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from verl_lite.kv import KVBatchMeta
from verl_lite.trainer.multi_agent.callbacks import format_prompt, joint_rewards
from verl_lite.trainer.multi_agent.config import MultiAgentConfig
from verl_lite.trainer.multi_agent.joint_tree import (
    JointNode,
    compute_returns,
    continues,
    extend_history,
    joint_combinations,
)
from verl_lite.trainer.ppo import trainer_base
from verl_lite.trajectory import ROLLOUT_COLUMNS, group_tag, parse_trajectory_key


@dataclass
class Agent:
    """One agent: the worker groups of its policy, its tokenizer, its verl_lite config, its formatter."""

    groups: Any
    tokenizer: Any
    config: Any
    formatter: Callable[..., str]


@dataclass
class TaskFunctions:
    """The task's user functions (see :mod:`verl_lite.trainer.multi_agent.callbacks`)."""

    reward_func: Callable[..., Sequence[float]]
    reward_processor: Callable[[float], float] | None = None
    # CoMLRL's (prompt=, agent_completions=, num_agents=, prompt_history_per_agent=,
    # response_history_per_agent=) -> one external prompt per agent for the next turn
    external_transition: Callable[..., list[str]] | None = None
    eval_logger: Callable[..., list[dict]] | None = None
    eval_aggregator: Callable[..., dict] | None = None
    # IAC / MAAC: (rollouts: list[RolloutSample]) -> {name: number}, in training and evaluation
    metrics_callback: Callable[[list], dict] | None = None


@dataclass
class RolloutSample:
    """One agent's answer as ``metrics_callback`` sees it."""

    agent_idx: int
    prompt: str
    completion: str
    # the task item, the turn (from 1) and the answer's return: its joint answer's reward (cross: the sum
    # over the combinations it is in)
    metadata: dict[str, Any]


def samples(agent_idx: int, prompt: str, answers: list[str], rewards: list[float], item: dict, turn: int):
    """``RolloutSample`` of each of an agent's answers to one prompt."""
    return [
        RolloutSample(agent_idx, prompt, a, {"item": item, "turn": turn, "reward": r})
        for a, r in zip(answers, rewards)
    ]


def node_samples(node: JointNode, item: dict) -> list[RolloutSample]:
    """``RolloutSample`` of every agent's answers at ``node``, each with the return it is trained on."""
    return [
        s
        for i, answers in enumerate(node.answers)
        for s in samples(i, node.prompts[i], answers, node.agent_returns(i), item, node.turn + 1)
    ]


@dataclass
class TreeRollout:
    """What :meth:`MultiAgentLoop.rollout` hands to :meth:`MultiAgentLoop.update` and the trainer."""

    # every agent's trajectory meta of every turn (agent i's at positions i, i + num_agents, ...)
    outs: list[KVBatchMeta]
    # env_steps (joint rewards evaluated) each task took
    env_steps: list[int]
    # metrics_callback's values, one dict per task ({} without a callback)
    callback_metrics: list[dict[str, float]]
    # the turn_k/... metrics
    metrics: dict[str, float]
    # seconds the rollout took
    seconds: float


class MultiAgentLoop:
    """Generates every agent's answers, scores the joint answers, and updates each policy (MAGRPO, IAC, MAAC)."""

    def __init__(
        self,
        args: MultiAgentConfig,
        agents: list[Agent],
        kv: Any,
        functions: TaskFunctions,
        critic: Any = None,
    ):
        # MAAC's centralised critic (a critic worker group); None: each policy's own critic, if any
        self.critic = critic
        self.args = args
        self.agents = agents
        self.kv = kv
        self.fn = functions
        self.version = 0
        self._submitted = 0

    def state_dict(self) -> dict[str, int]:
        """What a resumed run needs to repeat the next task exactly: the weight version and the count of
        prompts submitted (request ids, and so the rollout's sampling seeds, follow from it)."""
        return {"version": self.version, "submitted": self._submitted}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore :meth:`state_dict`."""
        self.version = int(state["version"])
        self._submitted = int(state["submitted"])

    # ---- one update -----------------------------------------------------------------------------
    def rollout(self, items: list[dict[str, Any]], step: int) -> TreeRollout:
        """Every task's joint tree (the open nodes of every task in one generation call per agent and turn),
        each trajectory's return on its last token; the weights are not touched yet.

        Each node's ``num_generations`` samples form their own prompt group (its baseline and
        normalisation stay within the node); ``turn_k/...`` metrics cover every node of turn k. ``step``
        names the update (request ids, the mini-batch shuffle seed).
        """
        start = time.perf_counter()
        empty = [[] for _ in self.agents]
        roots = [
            JointNode(r, 0, [self.prompt(a, item, None) for a in self.agents], (empty, empty))
            for r, item in enumerate(items)
        ]
        turns: list[tuple[list[KVBatchMeta], list[JointNode]]] = []
        env_steps = [0] * len(items)
        nodes = roots
        while nodes:
            turns.append((self.grow(nodes, items, step), nodes))
            for node in nodes:
                env_steps[node.task] += len(node.rewards)
            nodes = [child for node in nodes for child in node.children]
        for root in roots:
            compute_returns(root, self.args.discount)
        metrics: dict[str, float] = {}
        for turn, (outs, level) in enumerate(turns, start=1):
            returns = [[r for node in level for r in node.agent_returns(i)] for i in range(len(self.agents))]
            self.each_agent(self.write_rewards, outs, returns)
            metrics.update(turn_metrics(turn, level))
        # metrics_callback's values, one dict per task, are logged at rollout time (no logging_steps gate)
        callback = self.fn.metrics_callback
        values = [{} for _ in items]
        if callback is not None:
            for root in roots:
                rollouts = [s for node in root.walk() for s in node_samples(node, items[root.task])]
                values[root.task] = {k: float(v) for k, v in callback(rollouts).items()}
        outs = [o for turn_outs, _ in turns for o in turn_outs]
        return TreeRollout(outs, env_steps, values, metrics, time.perf_counter() - start)

    def grow(self, nodes: list[JointNode], items: list[dict[str, Any]], step: int) -> list[KVBatchMeta]:
        """Generate, score and expand ``nodes`` (one turn's open nodes): every agent answers each node's
        prompt ``num_generations`` times in one call; each joint answer continues in a child unless the
        node is cut or its turn is the last. Returns each agent's trajectory meta, in node order."""
        size, n_agents = self.args.num_generations, len(self.agents)
        outs = self.generate([[n.prompts[i] for n in nodes] for i in range(n_agents)], step, "train", False)
        completions = self.each_agent(self.responses, outs)  # by node, then sample
        combos = joint_combinations(size, n_agents, self.args.joint_mode)
        for k, node in enumerate(nodes):
            item = items[node.task]
            node.answers = [c[k * size : (k + 1) * size] for c in completions]
            node.combos = combos
            # per agent, its answer in each joint answer: the reward function's argument lists
            aligned = [[node.answers[i][c[i]] for c in combos] for i in range(n_agents)]
            node.rewards = joint_rewards(self.fn.reward_func, aligned, [item], self.fn.reward_processor)
            last = node.turn + 1 == self.args.num_turns
            if last or not continues(node.rewards, self.args.early_termination_threshold):
                continue
            for j in range(len(node.combos)):
                history = node.branch_history(j)
                external = self.transition(item, history, node.joint_answer(j))
                prompts = [self.prompt(a, item, external[i]) for i, a in enumerate(self.agents)]
                node.children.append(JointNode(node.task, node.turn + 1, prompts, history))
        return outs

    def update(self, rollout: TreeRollout, step: int) -> dict[str, float]:
        """One update per policy over every trajectory of ``rollout``; returns the rollout's and the
        update's metrics."""
        parts: dict[int, list[KVBatchMeta]] = {}
        for i, out in enumerate(rollout.outs):
            parts.setdefault(id(self.agents[i % len(self.agents)].groups), []).append(out)
        self.version += 1
        policies = [
            (next(a for a in self.agents if id(a.groups) == key), KVBatchMeta.concat(metas))
            for key, metas in parts.items()
        ]
        start = time.perf_counter()
        metrics = {**rollout.metrics, **self.update_policies(policies, step)}
        metrics["timing_s/step"] = rollout.seconds + time.perf_counter() - start
        return metrics

    def update_policies(self, policies: list[tuple[Agent, KVBatchMeta]], step: int) -> dict[str, float]:
        """The PPO step's pieces (``trainer_base``'s functions) on each policy: log-probs → values →
        advantages → critic updates → actor updates → weight syncs → keys cleared.

        With several policies their metrics carry a ``policy_<k>/`` prefix. The critic is each policy's own
        (IAC: a value model, or a value head on the actor trained in its loss; none for MAGRPO), or with
        ``self.critic`` one centralised critic valuing every agent's answers and trained on all of them at
        once (MAAC).
        """
        metrics: dict[str, float] = {}
        prefixes = [f"policy_{k}/" if len(policies) > 1 else "" for k in range(len(policies))]
        for prefix, (agent, batch) in zip(prefixes, policies):
            batch.fields = list(ROLLOUT_COLUMNS)
            batch.global_step, batch.samples_per_prompt = step, self.args.num_generations
            metrics.update(
                prefixed(prefix, trainer_base.add_log_probs(agent.groups.actor, agent.config, batch))
            )
        joint = KVBatchMeta.concat([b for _, b in policies]) if self.critic is not None else None
        if joint is not None:
            trainer_base.add_values(self.critic, joint)
        for prefix, (agent, batch) in zip(prefixes, policies):
            critic = agent.groups.critic if self.critic is None else None
            if joint is not None:
                batch.fields = joint.fields
            elif agent.groups.value_model is not None:  # its own critic, or its actor's value head (IAC)
                trainer_base.add_values(agent.groups.value_model, batch)
            algorithm = agent.config.algorithm
            kl_coef = algorithm.kl_ctrl.kl_coef if algorithm.use_kl_in_reward else 0.0
            metrics.update(
                prefixed(prefix, trainer_base.add_advantages(agent.groups.actor, batch, algorithm, kl_coef))
            )
            if critic is not None:
                metrics.update(prefixed(prefix, trainer_base.train_critic(critic, batch)))
        if joint is not None:
            metrics.update(trainer_base.train_critic(self.critic, joint))
        # each policy updates and syncs in its own processes: every policy at once
        with ThreadPoolExecutor(len(policies), thread_name_prefix="update-policy") as pool:
            updates = list(pool.map(lambda policy: self.update_actor(*policy), policies))
        for prefix, update, (_, batch) in zip(prefixes, updates, policies):
            metrics.update(prefixed(prefix, update))
            self.kv.kv_clear(batch.keys, batch.partition_id)
        return metrics

    def update_actor(self, agent: Agent, batch: KVBatchMeta) -> dict[str, float]:
        """The policy update, then its weights to its rollout servers; returns the update's metrics."""
        metrics = trainer_base.train_actor(agent.groups.actor, batch)
        agent.groups.sync_weights(self.version)
        return metrics

    def prompt(self, agent: Agent, item: dict[str, Any], external: Any) -> str:
        """Agent's prompt text: its formatter's, or with ``external_prompt_passthrough`` the external prompt
        itself on turns after the first."""
        if external is not None and self.args.external_prompt_passthrough:
            return str(external)
        return format_prompt(agent.formatter, item, external)

    def transition(
        self, item: dict, history: tuple[list[list[str]], list[list[str]]], answers: list[str]
    ) -> list[Any]:
        """The next turn's external prompt per agent after the joint answer ``answers``: CoMLRL's
        transition callback, or each agent's own answer. ``history`` holds the prompts and chosen answers
        per agent along the branch, this turn's included."""
        if self.fn.external_transition is None:
            return list(answers)
        out = self.fn.external_transition(
            prompt=item.get("prompt", ""),
            agent_completions=list(answers),
            num_agents=len(self.agents),
            prompt_history_per_agent=[list(h) for h in history[0]],
            response_history_per_agent=[list(h) for h in history[1]],
        )
        if not isinstance(out, (list, tuple)) or len(out) != len(self.agents):
            raise ValueError(
                f"external_transition returned {out!r:.80}; return a list of one prompt per agent "
                f"({len(self.agents)}), in agent order."
            )
        return list(out)

    # ---- generation -----------------------------------------------------------------------------
    def generate(
        self, prompts: list[str] | list[list[str]], step: int, partition: str, validate: bool
    ) -> list[KVBatchMeta]:
        """Every agent's answers to its prompt(s), all agents at once; one trajectory meta per agent.

        ``prompts[i]`` is agent i's prompt (training: ``num_generations`` samples of it) or its list of
        prompts (evaluation: one sample each).
        """
        pending = []
        for agent, prompt in zip(self.agents, prompts):
            texts = [prompt] if isinstance(prompt, str) else list(prompt)
            meta, rows = self.submit(agent, texts, step, partition)
            pending.append((agent, agent.groups.agent_loop.launch_sequences(meta, rows, validate=validate)))
        return [agent.groups.agent_loop.collect_sequences(p) for agent, p in pending]

    def submit(
        self, agent: Agent, texts: list[str], step: int, partition: str
    ) -> tuple[KVBatchMeta, list[dict]]:
        """Pending prompt groups for the chat-templated ``texts``: their uids and tags (no store write),
        and the prompt rows that travel with the launch call."""
        first = self._submitted
        self._submitted += len(texts)
        uids = [f"{partition}{step}-{first + j}" for j in range(len(texts))]
        templated = [
            agent.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
            for text in texts
        ]
        rows = [
            {"prompt_ids": agent.tokenizer(t, add_special_tokens=False)["input_ids"], "raw_prompt": t}
            for t in templated
        ]
        tags = [group_tag(uid, step) for uid in uids]
        meta = KVBatchMeta(keys=uids, tags=tags, partition_id=partition, global_step=step)
        return meta, rows

    def each_agent(self, fn: Callable[..., Any], outs: list[KVBatchMeta], *per_agent: list) -> list[Any]:
        """``fn(i, outs[i], *(a[i] for a in per_agent))`` for every agent ``i`` at once (each call waits
        on that agent's workers); the results in agent order."""
        with ThreadPoolExecutor(len(outs), thread_name_prefix="per-agent") as pool:
            return list(pool.map(fn, range(len(outs)), outs, *per_agent))

    def responses(self, agent_index: int, out: KVBatchMeta) -> list[str]:
        """Agent ``agent_index``'s decoded answers in trajectory order (by prompt, then sample index)."""
        texts = self.agents[agent_index].groups.agent_loop.decode_trajectories(out)
        order = sorted(out.keys, key=submission_order)
        if order != list(out.keys):  # keep metas and texts aligned for the reward write-back
            out.keys, out.tags = order, [out.tags[out.keys.index(k)] for k in order]
        return [texts[k]["response"] for k in out.keys]

    def write_rewards(self, agent_index: int, out: KVBatchMeta, rewards: list[float]) -> None:
        """Each trajectory's joint reward (its return) as its ``score`` tag and, written by agent
        ``agent_index``'s workers, on its last model token (``token_level_scores``)."""
        self.agents[agent_index].groups.agent_loop.put_scores(out, rewards)
        for tag, r in zip(out.tags, rewards):
            tag["score"] = r

    # ---- evaluation -----------------------------------------------------------------------------
    def evaluate(self, items: list[dict[str, Any]], step: int) -> tuple[dict[str, float], dict[str, Any]]:
        """One answer per agent per turn for each task; returns the ``eval/`` metrics and the raw records.

        The records hold ``agent_completions_turns`` in ``[agent][task item][turn]`` order (as the eval
        logger receives them), ``batch_items`` and the prompts the agents saw (``[agent][task item][turn]``;
        the eval logger gets each item's task ``prompt`` instead, as in CoMLRL).
        """
        n_agents, turns = len(self.agents), self.args.num_turns
        completions = [[[] for _ in items] for _ in range(n_agents)]
        prompts = [[[] for _ in items] for _ in range(n_agents)]
        rewards: list[list[float]] = [[] for _ in range(turns)]
        per_item: list[list[RolloutSample]] = [[] for _ in items]
        size = self.args.eval_batch_size
        for begin in range(0, len(items), size):
            chunk = items[begin : begin + size]
            external = [[None] * n_agents for _ in chunk]
            histories = [([[]] * n_agents, [[]] * n_agents) for _ in chunk]
            for turn in range(turns):
                texts = [
                    [self.prompt(a, it, external[r][i]) for r, it in enumerate(chunk)]
                    for i, a in enumerate(self.agents)
                ]
                outs = self.generate(texts, step, "val", validate=True)
                answers = self.each_agent(self.responses, outs)
                for out in outs:
                    self.kv.kv_clear(out.keys, "val")
                for r, it in enumerate(chunk):
                    joint = [[answers[i][r]] for i in range(n_agents)]
                    [reward] = joint_rewards(self.fn.reward_func, joint, [it], self.fn.reward_processor)
                    rewards[turn].append(reward)
                    for i in range(n_agents):
                        completions[i][begin + r].append(answers[i][r])
                        prompts[i][begin + r].append(texts[i][r])
                        per_item[begin + r] += samples(
                            i, texts[i][r], [answers[i][r]], [reward], it, turn + 1
                        )
                    if turn + 1 < turns:  # one path: each turn's one joint answer continues
                        chosen = [a[r] for a in answers]
                        histories[r] = extend_history(histories[r], [t[r] for t in texts], chosen)
                        external[r] = self.transition(it, histories[r], chosen)
        metrics = {}
        for turn in range(turns):
            metrics[f"eval/turn_{turn + 1}/reward_mean"] = sum(rewards[turn]) / max(len(rewards[turn]), 1)
            # CoMLRL's evaluation return: the undiscounted reward sum from this turn on, per task item
            remaining = [sum(rewards[t][r] for t in range(turn, turns)) for r in range(len(items))]
            metrics[f"eval/turn_{turn + 1}/expected_return"] = sum(remaining) / max(len(remaining), 1)
        if self.fn.eval_logger is not None and self.fn.eval_aggregator is not None:
            rows = self.fn.eval_logger(  # CoMLRL's prompts: each item's task prompt
                agent_completions_turns=completions,
                batch_items=items,
                prompts=[item.get("prompt", "") for item in items],
            )
            extra = self.fn.eval_aggregator(rows, num_turns=turns)
            metrics.update({f"eval/{k}": float(v) for k, v in extra.items()})
        if self.fn.metrics_callback is not None:  # averaged over the evaluated task items
            values = [self.fn.metrics_callback(rows) for rows in per_item]
            for key in values[0]:
                metrics[f"eval/{key}"] = sum(float(v[key]) for v in values) / len(values)
        records = {"agent_completions_turns": completions, "batch_items": items, "prompts": prompts}
        return metrics, records


def prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with every name behind ``prefix``."""
    return {prefix + name: value for name, value in metrics.items()}


def submission_order(key: str) -> tuple[int, int]:
    """A trajectory key's place in submission order: its prompt's counter (the ``-<n>`` ending of the uids
    :meth:`MultiAgentLoop.submit` gives), then its session; string order would put prompt 10 before 9."""
    uid, session, _ = parse_trajectory_key(key)
    return int(uid.rsplit("-", 1)[1]), session


def turn_metrics(turn: int, nodes: list[JointNode]) -> dict[str, float]:
    """Per-turn training metrics over the turn's ``nodes``: the joint reward's mean/max/min, CoMLRL's
    expected return (the mean return), and each agent's mean answer length."""
    rewards = [r for node in nodes for r in node.rewards]
    returns = [r for node in nodes for r in node.returns]
    out = {
        f"turn_{turn}/reward_mean": sum(rewards) / len(rewards),
        f"turn_{turn}/reward_max": max(rewards),
        f"turn_{turn}/reward_min": min(rewards),
        f"turn_{turn}/expected_return": sum(returns) / len(returns),
    }
    for i in range(len(nodes[0].answers)):
        answers = [a for node in nodes for a in node.answers[i]]
        out[f"turn_{turn}/agent_{i}/response_chars"] = sum(len(a) for a in answers) / len(answers)
    return out
