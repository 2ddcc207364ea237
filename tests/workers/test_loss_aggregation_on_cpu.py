"""The actor update's loss does not depend on how a mini-batch is cut, for every aggregation mode.

The four rows have responses of 3, 4, 1 and 5 tokens, so micro-batches of 1, 2 and 8 rows are
padded to widths 3/4/1/5, 4/5 and 5, and a 14-token budget packs them in pairs. Every cut must give
the full-batch gradient of ``agg_loss`` with the global counts and, for ``seq-mean-token-sum-norm``,
the constant T = ``actor.loss_scale_factor`` (default: ``rollout.response_length``, 6 here), not a
micro-batch's own width. One group per padding layout serves every setting: ``lr = 0`` keeps the
weights (and so the gradients of the next update) unchanged between updates.
"""

import pytest

from tests.workers.helpers import make_group, put_trajectories, release
from tests.workers.test_actor_update_on_cpu import GRAD_RTOL, OPTIM, assert_gradients_match, reference_step

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
RESPONSE_LENGTH = 6  # tests/workers/helpers.py's rollout.response_length
# Cuts: micro-batches of 1, 2 and 8 rows (8 > the 4 rows: one micro-batch), and a 14-token budget.
CUTS = {
    "micro1": {"ppo_micro_batch_size_per_gpu": 1},
    "micro2": {"ppo_micro_batch_size_per_gpu": 2},
    "micro8": {"ppo_micro_batch_size_per_gpu": 8},
    "budget14": {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 14},
}
# Bound: GRAD_RTOL (test_actor_update_on_cpu) = 64 reductions x 128 terms x float32 roundoff, relative
# to the gradient's largest element. These rows hold 27 tokens in all, below the 128 that rule assumes,
# and the cuts only reorder float32 sums; dividing by a count or T adds one rounding (U). A wrong T
# is off by 6/5 or more (a width of 5 instead of 6), far outside it.
assert GRAD_RTOL < 1e-3


def gradients_by_setting(group, kv, settings: dict[str, dict]) -> dict[str, dict]:
    """The accumulated gradient of one update per setting (actor keys), all from the same weights."""
    group.keep_gradients()
    meta = group.compute_log_prob(put_trajectories(kv))
    out = {}
    for name, keys in settings.items():
        base = {"use_dynamic_bsz": False, "loss_scale_factor": None}
        group.set_actor_config(**{**base, **keys})
        group.update_actor(meta)
        out[name] = group.saved_gradients()
    return out


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_every_mode_has_the_full_batch_gradient_whatever_the_cut(tiny_model_dir, kv_store, packed):
    settings = {
        f"{mode}/{cut}": {"loss_agg_mode": mode, **keys} for mode in MODES for cut, keys in CUTS.items()
    }
    # An explicit T replaces the response length.
    settings["norm12"] = {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 12.0}
    group = make_group(
        tiny_model_dir,
        1,
        name=f"agg_{packed}",
        model={"use_remove_padding": packed},
        optim={**OPTIM, "lr": 0.0},
    )
    try:
        grads = gradients_by_setting(group, kv_store, settings)
    finally:
        release(group)
    for mode in MODES:
        expected, _ = reference_step(tiny_model_dir, mode, RESPONSE_LENGTH)
        for cut in CUTS:
            assert_gradients_match(grads[f"{mode}/{cut}"], expected)
    assert_gradients_match(
        grads["norm12"], reference_step(tiny_model_dir, "seq-mean-token-sum-norm", 12.0)[0]
    )
