"""Loaded inside vLLM's worker process: receives new weights in place (``worker_extension_cls``)."""

from __future__ import annotations


class WeightSyncExtension:
    """Mixed into vLLM's worker; ``load_weights_blob`` swaps in weights sent as safetensors bytes.

    Bytes, not tensors: ``collective_rpc`` arguments cross into the engine process by msgpack,
    which turns tensors into lists. ``model_runner.reload_weights`` (not ``model.load_weights``)
    is used because vLLM's CPU linears are repacked into oneDNN layouts after loading.
    """

    def load_weights_blob(self, blob: bytes) -> bool:
        from safetensors.torch import load

        self.model_runner.reload_weights(weights_iterator=load(blob).items(), is_checkpoint_format=True)
        return True
