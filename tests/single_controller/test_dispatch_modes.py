"""Every built-in dispatch mode on real Ray worker groups of 1 to 3 workers."""

import pytest
import torch
from tensordict import TensorDict

from tests.single_controller.workers import Echo
from verl_lite.single_controller import Dispatch, Execute
from verl_lite.single_controller.decorator import METHOD_SPEC_ATTR
from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

# One rank, an even split and an uneven one; every worker is a process that imports torch.
WORLD_SIZES = [1, 2, 3]


@pytest.fixture(scope="module")
def groups():
    from tests.conftest import start_local_ray

    start_local_ray()
    made = {
        n: RayWorkerGroup(RayResourcePool([n], name_prefix=f"echo{n}"), RayClassWithInitArgs(Echo))
        for n in WORLD_SIZES
    }
    yield made
    for group in made.values():
        group.kill()
        group.resource_pool.release()


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_one_to_all_sends_same_arguments_to_every_rank(groups, n):
    assert groups[n].one_to_all("hi") == [(r, "hi") for r in range(n)]


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_all_to_all_scatters_per_rank_lists_and_broadcasts_the_rest(groups, n):
    out = groups[n].all_to_all([f"v{r}" for r in range(n)], shared="s")
    assert out == [(r, f"v{r}", "s") for r in range(n)]


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_rank_zero_dispatch_returns_rank_zero_result(groups, n):
    assert groups[n].rank_zero(5) == (0, 5)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_execute_rank_zero_runs_only_on_rank_zero(groups, n):
    assert groups[n].only_rank_zero_runs() == 0


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_dp_compute_gives_each_rank_its_list_element(groups, n):
    assert groups[n].dp_compute([10 * r for r in range(n)]) == [(r, 10 * r) for r in range(n)]


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_dp_compute_rejects_list_of_wrong_length(groups, n):
    with pytest.raises(ValueError, match=f"one element per rank.*{n} workers"):
        groups[n].dp_compute(list(range(n + 1)))


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_dp_compute_data_splits_rows_and_keeps_order(groups, n):
    batch = TensorDict({"x": torch.arange(8.0)}, batch_size=[8])
    out = groups[n].dp_compute_data(batch)
    assert out["y"].tolist() == [2.0 * i for i in range(8)]
    assert sorted(set(out["rank"].tolist())) == list(range(n))


def test_dp_compute_data_pads_seven_rows_over_three_workers_and_strips_padding(groups):
    batch = TensorDict({"x": torch.arange(7.0)}, batch_size=[7])
    out = groups[3].dp_compute_data(batch)
    # 7 rows are padded to 9 -> 3 rows per rank; the 2 padded rows are stripped from the result.
    assert out["y"].tolist() == [2.0 * i for i in range(7)]
    assert out["rank"].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert out["rows"].tolist() == [3] * 7


def test_dp_compute_data_keeps_jagged_and_non_tensor_fields_aligned(groups):
    from tests.batches import make_batch
    from verl_lite.protocol import to_jagged

    batch = make_batch(
        {
            "x": torch.arange(5.0),
            "uid": list("abcde"),
            "tokens": to_jagged([torch.arange(i + 1) for i in range(5)]),
        }
    )
    out = groups[2].dp_compute_data(batch)
    assert out["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_non_blocking_call_returns_future_that_collects(groups):
    batch = TensorDict({"x": torch.arange(5.0)}, batch_size=[5])
    future = groups[3].dp_compute_data_async(batch)
    assert hasattr(future, "get")
    assert future.get()["y"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


# Each built-in mode as dispatch.py documents it, run on 3 workers: the Echo method that declares it, its
# arguments, and the group call's result (Echo returns what each rank received, with the rank).
DOCUMENTED = {
    # the same arguments to every rank, the list of every rank's result
    "one_to_all": ("one_to_all", ("hi",), {}, [(0, "hi"), (1, "hi"), (2, "hi")]),
    # lists of world-size length scattered element-wise, anything else broadcast; the list of results
    "all_to_all": (
        "all_to_all",
        (["a", "b", "c"],),
        {"shared": "s"},
        [(0, "a", "s"), (1, "b", "s"), (2, "c", "s")],
    ),
    # every rank runs, rank 0's result alone comes back
    "rank_zero": ("rank_zero", (5,), {}, (0, 5)),
    # every argument a list of one element per rank; the list of results
    "dp_compute": ("dp_compute", ([0, 10, 20],), {}, [(0, 0), (1, 10), (2, 20)]),
    # rows split in order (7 padded to 9: 3 a rank), results concatenated and the padding stripped
    "dp_compute_data": (
        "dp_compute_data",
        (TensorDict({"x": torch.arange(7.0)}, batch_size=[7]),),
        {},
        {"y": [2.0 * i for i in range(7)], "rank": [0, 0, 0, 1, 1, 1, 2], "rows": [3] * 7},
    ),
}


@pytest.mark.parametrize("attr", sorted(a for a in vars(Dispatch) if a.isupper()))
def test_every_builtin_dispatch_mode_dispatches_and_collects_as_documented(groups, attr):
    mode = getattr(Dispatch, attr)
    assert mode.name in DOCUMENTED, f"Dispatch.{attr} has no documented behaviour in DOCUMENTED to run"
    method, args, kwargs, expected = DOCUMENTED[mode.name]
    spec = getattr(getattr(Echo, method), METHOD_SPEC_ATTR)
    assert spec.dispatch_mode is mode and spec.execute_mode is Execute.ALL and spec.blocking
    result = getattr(groups[3], method)(*args, **kwargs)
    if isinstance(result, TensorDict):
        result = {key: result[key].tolist() for key in expected}
    assert result == expected
