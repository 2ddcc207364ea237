"""Which CUDA device and which process-group backend a worker process trains with.

Pure functions of what Ray and the config say, so a CPU test can play every case:

* Ray gives a ``num_gpus`` actor its own devices: ``ray.get_gpu_ids()`` names them, and Ray sets
  ``CUDA_VISIBLE_DEVICES`` to them, so inside the actor the device is found by its position in
  that list (0 for a one-GPU actor), never by the rank or the bundle index (``LOCAL_RANK``).
  Only a process that Ray gave no GPU (``torchrun``, a test) falls back to ``LOCAL_RANK``.
* On GPU the process group is ``cpu:gloo,cuda:nccl`` (as verl does): collectives on CUDA tensors
  go over NCCL, and the ones on CPU tensors (token counts, CPU-offloaded parameters, their
  gradient norm and full-tensor gathers for the weight sync) over gloo, which NCCL cannot do.
"""

from __future__ import annotations

from collections.abc import Sequence

GPU_BACKEND = "cpu:gloo,cuda:nccl"
BACKENDS = ("auto", "gloo", "nccl")


def cuda_device_index(ray_gpu_ids: Sequence[str | int], visible_devices: str | None, local_rank: int) -> int:
    """Index, among this process's visible CUDA devices, of the first GPU Ray assigned to it.

    Args:
        ray_gpu_ids: ``ray.get_gpu_ids()`` in this process (empty outside a Ray GPU actor).
        visible_devices: ``CUDA_VISIBLE_DEVICES`` (None when unset: every device is visible, as
            with ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``).
        local_rank: ``LOCAL_RANK``, used only when Ray assigned no GPU.
    """
    if not ray_gpu_ids:
        return local_rank
    gpu = str(ray_gpu_ids[0]).strip()
    if visible_devices is None:
        return int(gpu)
    visible = [d.strip() for d in visible_devices.split(",") if d.strip()]
    if gpu not in visible:
        raise RuntimeError(
            f"Ray assigned GPU {gpu} to this process, but CUDA_VISIBLE_DEVICES={visible_devices!r} does not "
            "list it; do not override CUDA_VISIBLE_DEVICES inside Ray workers."
        )
    return visible.index(gpu)


def process_group_backend(requested: str, cuda_available: bool) -> str:
    """The ``init_process_group`` backend for ``engine.backend`` (``auto`` | ``gloo`` | ``nccl``)."""
    if requested not in BACKENDS:
        raise ValueError(f"engine.backend={requested!r} is not one of {', '.join(BACKENDS)}.")
    if requested == "gloo" or (requested == "auto" and not cuda_available):
        return "gloo"
    return GPU_BACKEND


def backend_uses_cuda(backend: str) -> bool:
    """Whether a process group with this backend string runs its device collectives on CUDA."""
    return "nccl" in backend
