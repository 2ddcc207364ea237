"""Every algorithms registry follows the shared Registry rules (verl_lite/utils/registry.py)."""

import pytest

from verl_lite.algorithms import (
    ADV_ESTIMATORS,
    KL_CONTROLLERS,
    KL_PENALTIES,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_loss_agg_mode,
    register_policy_loss,
)

BUILTIN_ESTIMATORS = {
    "gae",
    "grpo",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "opo",
    "grpo_passk",
    "gpg",
}
BUILTIN_LOSSES = {"vanilla", "gspo", "sapo", "cispo", "gpg", "clip_cov", "kl_cov", "reinforce"}

# (register decorator factory, getter, an existing name, a substring the unknown-name error must show)
CASES = {
    "advantage_estimator": (register_adv_est, get_adv_estimator_fn, "grpo", "rloo"),
    "policy_loss": (register_policy_loss, get_policy_loss_fn, "vanilla", "gspo"),
    "kl_penalty": (KL_PENALTIES.register, KL_PENALTIES.get, "k3", "low_var_kl"),
    "loss_agg_mode": (register_loss_agg_mode, LOSS_AGG_MODES.get, "token-mean", "seq-mean-token-mean"),
    "kl_controller": (KL_CONTROLLERS.register, KL_CONTROLLERS.get, "fixed", "adaptive"),
}


def test_builtin_names_are_registered():
    assert BUILTIN_ESTIMATORS <= set(ADV_ESTIMATORS.names())
    assert BUILTIN_LOSSES <= set(POLICY_LOSSES.names())


@pytest.mark.parametrize("kind", sorted(CASES))
def test_registry_accepts_new_name_and_same_function_again(kind):
    register, get, _, _ = CASES[kind]

    def custom(*args, **kwargs):
        return None

    name = f"_test_custom_{kind}"
    assert register(name)(custom) is custom
    assert get(name) is custom
    register(name)(custom)  # the same object again (a module imported twice) is harmless
    assert get(name) is custom


@pytest.mark.parametrize("kind", sorted(CASES))
def test_registry_rejects_a_different_function_under_a_taken_name(kind):
    register, get, taken, _ = CASES[kind]

    def impostor(*args, **kwargs):
        return None

    with pytest.raises(ValueError, match="already registered"):
        register(taken)(impostor)
    assert get(taken) is not impostor


@pytest.mark.parametrize("kind", sorted(CASES))
def test_registry_unknown_name_lists_known_names(kind):
    _, get, taken, other = CASES[kind]
    with pytest.raises(KeyError) as info:
        get("no_such_name")
    assert taken in str(info.value) and other in str(info.value)
