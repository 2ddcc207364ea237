"""Pack TensorDicts into plain numpy buffers so Ray ships them on its zero-copy path.

Ray serializes numpy arrays out of band (no pickling of the bytes, zero-copy reads from the object
store), while torch tensors and TensorDicts go through the slower generic pickler. Every batch that crosses a process boundary
in verl_lite (dispatch to workers, results back, KV store puts and gets) is therefore packed with
``pack`` and rebuilt with ``unpack``; neither copies tensor memory.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict, TensorDictBase

# torch dtypes numpy has no equivalent for travel as same-width integers and are viewed back.
_REINTERPRET = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}
_DTYPE_BY_NAME = {str(dtype): dtype for dtype in _REINTERPRET}


@dataclass
class PackedTensorDict:
    """A TensorDict flattened into numpy arrays and python values, ready for Ray.

    ``fields`` maps each key to one of:
    ``("dense", array, dtype_name)``, ``("jagged", values, offsets, dtype_name)``,
    ``("rows", list)`` (a per-row non-tensor field), ``("data", value)`` (one value for the
    whole batch) or ``("td", PackedTensorDict)`` (a nested TensorDict).
    """

    batch_size: tuple[int, ...]
    fields: dict[str, tuple] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Bytes held in numpy buffers (what actually travels through the object store)."""
        total = 0
        for entry in self.fields.values():
            if entry[0] == "dense":
                total += entry[1].nbytes
            elif entry[0] == "jagged":
                total += entry[1].nbytes + entry[2].nbytes
            elif entry[0] == "td":
                total += entry[1].nbytes()
        return total


def tensor_to_numpy(tensor: torch.Tensor) -> tuple[np.ndarray, str]:
    """Return a numpy view of ``tensor`` (detached, on CPU) and the torch dtype name to restore."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    dtype_name = str(tensor.dtype)
    if tensor.dtype in _REINTERPRET:
        tensor = tensor.view(_REINTERPRET[tensor.dtype])
    return tensor.numpy(), dtype_name


# Arrays read from Ray's object store are flagged read-only; wrapping them without a copy is the
# point (readers treat them as read-only). torch warns about that once per process; that one time
# is silenced, and later calls skip the (per-call costly) catch_warnings block.
_READ_ONLY_WARNED = False


def numpy_to_tensor(array: np.ndarray, dtype_name: str) -> torch.Tensor:
    """Wrap ``array`` as a tensor without copying; reinterpret dtypes numpy cannot hold."""
    global _READ_ONLY_WARNED
    if _READ_ONLY_WARNED or array.flags.writeable:
        tensor = torch.from_numpy(array)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(array)
        _READ_ONLY_WARNED = True
    if dtype_name in _DTYPE_BY_NAME:
        tensor = tensor.view(_DTYPE_BY_NAME[dtype_name])
    return tensor


def pack(td: TensorDictBase) -> PackedTensorDict:
    """Flatten ``td`` into a :class:`PackedTensorDict` without copying tensor memory."""
    packed = PackedTensorDict(batch_size=tuple(td.batch_size))
    for key, value in td.items():
        if isinstance(value, NonTensorStack):
            packed.fields[key] = ("rows", value.tolist())
        elif isinstance(value, NonTensorData):
            packed.fields[key] = ("data", value.data)
        elif isinstance(value, TensorDictBase):
            packed.fields[key] = ("td", pack(value))
        elif value.is_nested:
            values, dtype_name = tensor_to_numpy(value.values())
            offsets, _ = tensor_to_numpy(value.offsets())
            packed.fields[key] = ("jagged", values, offsets, dtype_name)
        else:
            array, dtype_name = tensor_to_numpy(value)
            packed.fields[key] = ("dense", array, dtype_name)
    return packed


def unpack(packed: PackedTensorDict) -> TensorDict:
    """Rebuild the TensorDict that :func:`pack` flattened (tensors share the numpy memory)."""
    tensors: dict[str, Any] = {}
    extras: list[tuple[str, Any]] = []
    for key, entry in packed.fields.items():
        kind = entry[0]
        if kind == "dense":
            tensors[key] = numpy_to_tensor(entry[1], entry[2])
        elif kind == "jagged":
            values = numpy_to_tensor(entry[1], entry[3])
            offsets = numpy_to_tensor(entry[2], "torch.int64")
            tensors[key] = torch.nested.nested_tensor_from_jagged(values, offsets)
        elif kind == "td":
            tensors[key] = unpack(entry[1])
        else:
            extras.append((key, entry))
    td = TensorDict(tensors, batch_size=packed.batch_size)
    for key, entry in extras:
        if entry[0] == "rows":
            td.set(key, NonTensorStack.from_list(entry[1]))
        else:
            td.set_non_tensor(key, entry[1])
    return td


def pack_tree(obj: Any) -> Any:
    """Pack every TensorDict inside ``obj`` (a value, list, tuple or dict of them)."""
    if isinstance(obj, TensorDictBase):
        return pack(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack_tree(item) for item in obj)
    if isinstance(obj, dict):
        return {key: pack_tree(value) for key, value in obj.items()}
    return obj


def unpack_tree(obj: Any) -> Any:
    """Inverse of :func:`pack_tree`."""
    if isinstance(obj, PackedTensorDict):
        return unpack(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(unpack_tree(item) for item in obj)
    if isinstance(obj, dict):
        return {key: unpack_tree(value) for key, value in obj.items()}
    return obj
