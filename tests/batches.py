"""Test batches: tensors, jagged tensors and per-row python lists in one TensorDict."""

from tensordict import NonTensorStack, TensorDict


def make_batch(fields: dict) -> TensorDict:
    """A batch of ``fields``; lists become ``NonTensorStack`` fields (one python value per row)."""
    first = next(iter(fields.values()))
    td = TensorDict({k: v for k, v in fields.items() if not isinstance(v, list)}, batch_size=[len(first)])
    for key, value in fields.items():
        if isinstance(value, list):
            td.set(key, NonTensorStack.from_list(value))
    return td
