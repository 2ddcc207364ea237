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
        self._repack_tied_lm_head()
        return True

    def _repack_tied_lm_head(self) -> None:
        # A tied lm_head is a module of its own that shares embed_tokens' weight. The reload re-processes
        # only the modules it loaded into (embed_tokens), so on CPU the lm_head would keep its oneDNN-packed
        # copy of the old weights and score tokens with them.
        model = self.model_runner.get_model()
        lm_head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        weight = getattr(lm_head, "weight", None)
        if lm_head is not embed and weight is not None and weight is getattr(embed, "weight", None):
            lm_head.quant_method.process_weights_after_loading(lm_head)
