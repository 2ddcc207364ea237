"""Every registered name and every key of ``configs/ppo_trainer.yaml`` is run through ``main_ppo`` by a test.

"Run through main_ppo" means: the override ``key=value`` reaches a real training run started by a
test (``tests/trainer/helpers.py::train``, ``main_ppo.run`` or ``python -m verl_lite.main_ppo``). The
tests are read, not run: every string that flows into such a call is collected, following local and
module-level lists, helper functions that start runs, and f-strings over ``pytest.mark.parametrize``
values. A registry name counts as run when some run sets its key to it, or when it is that key's
yaml default (every run uses it); names registered to the same object (``k1`` / ``kl``) count together.

Registered names that validation refuses in main_ppo today are advertised differently (``REFUSED``:
they serve placements no trainer flow builds yet, and the test below proves each is refused before Ray
starts). verl's spellings are not keys of the yaml: they are translated on the command line
(``verl_lite/trainer/verl_compat.py``; tests/trainer/test_verl_compat.py checks each).

Set is not seen: whether a row's check notices each key it sets is audited outside the suite by
``scripts/audit_key_effects.py`` (one rerun per key without its override; the check must fail).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.test_docs_config import gen, yaml_defaults

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Calls that start a real main_ppo run.
RUN_CALLS = {"train", "train_cli", "run", "check_call", "check_output"}
OVERRIDE = re.compile(r"^[~+]*([A-Za-z_][\w.]*)=(.*)$", re.DOTALL)
# Registered names main_ppo's validation refuses, by registry: the override that asks for each.
REFUSED = {
    # nccl broadcasts between GPUs: refused on a machine without CUDA, before Ray starts
    "checkpoint engine": {
        "nccl": "actor_rollout_ref.rollout.checkpoint_engine=nccl",
    },
}


def _registries() -> dict[str, tuple[object, tuple[str, ...]]]:
    """Each config-selected registry and the keys that select a name from it."""
    import verl_lite.trainer.modes  # noqa: F401  register the built-in modes
    from verl_lite.algorithms import ADV_ESTIMATORS, KL_CONTROLLERS, KL_PENALTIES, POLICY_LOSSES, RATIO_LEVELS
    from verl_lite.algorithms.aggregation import LOSS_AGG_MODES
    from verl_lite.checkpoint_engine import CHECKPOINT_ENGINES
    from verl_lite.reward import REWARD_MANAGERS
    from verl_lite.reward.scorers.registry import SCORERS
    from verl_lite.trainer.ppo.trainer_base import TRAINERS
    from verl_lite.trainer.tracking import LOGGERS
    from verl_lite.workers.agent_loop import AGENT_LOOPS
    from verl_lite.workers.engine import ENGINES
    from verl_lite.workers.rollout import ROLLOUTS
    from verl_lite.workers.tools.parsers import TOOL_PARSERS

    arr = "actor_rollout_ref"
    return {
        "advantage estimator": (ADV_ESTIMATORS, ("algorithm.adv_estimator",)),
        "policy loss": (POLICY_LOSSES, (f"{arr}.actor.policy_loss",)),
        "loss aggregation": (LOSS_AGG_MODES, (f"{arr}.actor.loss_agg_mode", "critic.critic.loss_agg_mode")),
        "KL estimator": (KL_PENALTIES, ("algorithm.kl_penalty", f"{arr}.actor.kl_loss_type")),
        "KL controller": (KL_CONTROLLERS, ("algorithm.kl_ctrl.type",)),
        "rollout ratio level": (
            RATIO_LEVELS,
            ("algorithm.rollout_correction.rollout_is", "algorithm.rollout_correction.rollout_rs"),
        ),
        "rollout backend": (ROLLOUTS, (f"{arr}.rollout.name",)),
        "agent loop": (AGENT_LOOPS, (f"{arr}.rollout.agent.default_agent_loop",)),
        "tool parser": (TOOL_PARSERS, (f"{arr}.rollout.multi_turn.format",)),
        "training engine": (ENGINES, (f"{arr}.engine.name", "critic.engine.name")),
        "checkpoint engine": (CHECKPOINT_ENGINES, (f"{arr}.rollout.checkpoint_engine",)),
        "reward manager": (REWARD_MANAGERS, ("reward.reward_manager",)),
        "trainer mode": (TRAINERS, ("trainer.mode",)),
        "scorer": (SCORERS, ("data.default_data_source",)),
        "logger": ({name: name for name in LOGGERS}, ("trainer.logger",)),
    }


# ---- reading the tests ----------------------------------------------------------------------------
class _Module:
    """One test file: its module-level assignments, its functions and which of them start runs."""

    def __init__(self, path: Path, follow_imports: bool = True):
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.assigned = {
            target.id: node.value
            for node in self.tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        self.functions = {
            node.name: node for node in ast.walk(self.tree) if isinstance(node, ast.FunctionDef)
        }
        # Constants and helper functions imported from other test modules (tests.trainer.helpers):
        # name -> (the module that defines it, its node).
        self.imported: dict[str, tuple[_Module, ast.AST]] = {}
        for node in self.tree.body if follow_imports else []:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
                source = ROOT.joinpath(*node.module.split(".")).with_suffix(".py")
                if not source.is_file():
                    continue
                other = _Module(source, follow_imports=False)
                for alias in node.names:
                    found = other.assigned.get(alias.name) or other.functions.get(alias.name)
                    if found is not None:
                        self.imported[alias.asname or alias.name] = (other, found)
        # Helpers that start runs themselves count as run calls (to a fixed point).
        self.runners = set(RUN_CALLS)
        while True:
            more = {name for name, fn in self.functions.items() if self._calls_runner(fn)} - self.runners
            if not more:
                break
            self.runners |= more

    def _calls_runner(self, fn: ast.FunctionDef) -> bool:
        return any(isinstance(n, ast.Call) and _name(n.func) in self.runners for n in ast.walk(fn))

    def run_strings(self) -> set[str]:
        """Every string that flows into a run call anywhere in the module."""
        out: set[str] = set()
        for fn in self.functions.values():
            scope = _Scope(self, fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and _name(node.func) in self.runners:
                    for arg in [*node.args, *(k.value for k in node.keywords)]:
                        out |= scope.strings(arg)
        return out


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


class _Scope:
    """Resolves an expression inside one function to the strings it can hold."""

    def __init__(self, module: _Module, fn: ast.FunctionDef | None):
        self.module = module
        self.local = {
            target.id: node.value
            for node in (ast.walk(fn) if fn is not None else ())
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        self.params = _parametrized(fn) if fn is not None else {}

    def strings(self, node: ast.expr, depth: int = 0) -> set[str]:
        if depth > 12:
            return set()
        deeper = depth + 1
        if isinstance(node, ast.Constant):
            return {node.value} if isinstance(node.value, str) else set()
        if isinstance(node, ast.JoinedStr):
            parts = [
                {str(p.value)} if isinstance(p, ast.Constant) else self.values(p.value, deeper) or {"<?>"}
                for p in node.values
            ]
            return {"".join(combo) for combo in itertools.product(*parts)}
        if isinstance(node, ast.Name):
            return self.values(node, deeper)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return set().union(*(self.strings(e, deeper) for e in node.elts)) if node.elts else set()
        if isinstance(node, ast.Dict):
            return set().union(*(self.strings(v, deeper) for v in node.values)) if node.values else set()
        if isinstance(node, (ast.Starred, ast.Subscript)):
            return self.strings(node.value, deeper)
        if isinstance(node, ast.BinOp):
            return self.strings(node.left, deeper) | self.strings(node.right, deeper)
        if isinstance(node, ast.Call):
            inner = [*node.args, *(k.value for k in node.keywords)]
            out = set().union(*(self.strings(a, deeper) for a in inner)) if inner else set()
            return out | self._returned(_name(node.func), deeper)
        return set()

    def _returned(self, name: str, depth: int) -> set[str]:
        """The strings a helper imported from another test module returns (``joining(cluster)``)."""
        module, fn = self.module.imported.get(name, (None, None))
        if not isinstance(fn, ast.FunctionDef):
            return set()
        scope = _Scope(module, fn)
        returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        return set().union(*(scope.strings(r, depth) for r in returns)) if returns else set()

    def values(self, node: ast.expr, depth: int) -> set[str]:
        if not isinstance(node, ast.Name):
            return {str(node.value)} if isinstance(node, ast.Constant) else set()
        if node.id in self.params:
            return self.params[node.id]
        source = self.local.get(node.id, self.module.assigned.get(node.id))
        if source is not None:
            return self.strings(source, depth)
        module, found = self.module.imported.get(node.id, (None, None))
        if module is not None and not isinstance(found, ast.FunctionDef):
            return _Scope(module, None).strings(found, depth)
        return set()


def _parametrized(fn: ast.FunctionDef) -> dict[str, set[str]]:
    """The values ``@pytest.mark.parametrize`` gives each argument of ``fn`` (literals only)."""
    out: dict[str, set[str]] = defaultdict(set)
    for deco in fn.decorator_list:
        if not (isinstance(deco, ast.Call) and _name(deco.func) == "parametrize" and len(deco.args) >= 2):
            continue
        try:
            names, values = ast.literal_eval(deco.args[0]), ast.literal_eval(deco.args[1])
        except ValueError:
            continue
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        for value in values:
            row = value if len(names) > 1 else (value,)
            for name, item in zip(names, row):
                out[name].add(str(item))
    return out


def run_overrides() -> dict[str, set[str]]:
    """``{key: values}`` of every override that some test passes to a real main_ppo run."""
    out: dict[str, set[str]] = defaultdict(set)
    for path in sorted(TESTS.rglob("test_*.py")):
        for text in _Module(path).run_strings():
            match = OVERRIDE.match(text)
            if match:
                out[match.group(1)].add(match.group(2))
    return out


def _names_in(value: str) -> set[str]:
    """``[console,jsonl]`` → {console, jsonl}; a plain value → itself."""
    return {v.strip() for v in value.strip("[]").split(",") if v.strip()}


# ---- the checks -----------------------------------------------------------------------------------
OVERRIDES = run_overrides()
DEFAULTS = yaml_defaults(gen.CONFIG_DIR, "ppo_trainer")


def test_every_yaml_key_is_set_by_some_main_ppo_run():
    # A mapping-valued key (reward.reward_kwargs) is set through its entries (+reward.reward_kwargs.x=1).
    never = sorted(key for key in DEFAULTS if not any(k == key or k.startswith(key + ".") for k in OVERRIDES))
    assert never == [], f"keys of configs/ppo_trainer.yaml that no test run sets: {never}"


@pytest.mark.parametrize("kind", sorted(_registries()))
def test_every_registered_name_is_run_through_main_ppo(kind):
    registry, keys = _registries()[kind]
    entries = {name: registry[name] for name in registry} if isinstance(registry, dict) else {}
    if not entries:
        entries = {name: registry.get(name) for name in registry.names()}
    # What verl_lite itself registers (other tests register throwaway names into the same tables).
    entries = {
        name: obj
        for name, obj in entries.items()
        if getattr(obj, "__module__", "verl_lite").startswith("verl_lite")
    }
    chosen = set()
    for key in keys:
        chosen |= set().union(*(_names_in(v) for v in OVERRIDES.get(key, set())), set())
        default = DEFAULTS.get(key)
        chosen |= set(default) if isinstance(default, list) else {str(default)}
    run_objects = [entries[name] for name in chosen if name in entries]
    refused = REFUSED.get(kind, {})
    never = sorted(
        name
        for name, obj in entries.items()
        if name not in refused and not any(obj is o for o in run_objects)
    )
    assert never == [], f"{kind} names no test runs through main_ppo ({', '.join(keys)}): {never}"


@pytest.mark.parametrize(
    "override", [o for names in REFUSED.values() for o in names.values()], ids=lambda o: o.split(".")[-1]
)
def test_each_refused_name_is_refused_before_ray_starts(override):
    from verl_lite.trainer.load import compose_config, load_ppo_config
    from verl_lite.trainer.validation import ConfigError

    with pytest.raises(ConfigError, match=re.escape(override.replace("=", "='", 1) + "'")):
        load_ppo_config(compose_config("ppo_trainer", [override]))


def test_the_reader_follows_lists_helpers_and_parametrized_f_strings(tmp_path):
    source = (
        "import pytest\n"
        "BASE = ['a.b=1']\n"
        "def _short(tmp_path, *extra):\n"
        "    return train(tmp_path, *BASE, 'c.d=2', *extra)\n"
        "@pytest.mark.parametrize('loss, coef', [('x', 0.1), ('y', 0.2)])\n"
        "def test_it(tmp_path, loss, coef):\n"
        "    more = [f'e.f={loss}']\n"
        "    _short(tmp_path, *more, f'g.h={coef}')\n"
        "def test_not_a_run():\n"
        "    compose_config('ppo_trainer', ['i.j=3'])\n"
    )
    path = tmp_path / "test_sample.py"
    path.write_text(source)
    assert _Module(path).run_strings() == {"a.b=1", "c.d=2", "e.f=x", "e.f=y", "g.h=0.1", "g.h=0.2"}
