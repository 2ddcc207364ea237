"""PPOTrainer's controller logic on fake workers (verl_lite/trainer/ppo/trainer_base.py)."""

from types import SimpleNamespace

import torch

from verl_lite.kv import KVBatchMeta
from verl_lite.trainer.config import PPOConfig
from verl_lite.trainer.ppo.trainer_base import PPOTrainer, WorkerGroups


class _Rollout:
    """Records the prompts of each generate call; every prompt gets one correct sample."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def generate_sequences(self, meta, validate=False):
        self.calls.append(list(meta.keys))
        return KVBatchMeta(
            keys=[f"{uid}_0_0" for uid in meta.keys],
            tags=[{"uid": uid, "acc": 1.0} for uid in meta.keys],
            partition_id=meta.partition_id,
        )


def _trainer(val_batch_size, num_prompts):
    config = PPOConfig()
    config.data.val_batch_size = val_batch_size
    kv = SimpleNamespace(
        kv_batch_put=lambda keys, partition, fields=None: SimpleNamespace(fields=list(fields.keys())),
        kv_clear=lambda keys, partition: None,
    )
    buffer = SimpleNamespace(  # what ReplayBuffer.add_groups returns: the markers' tags
        add_groups=lambda uids, step, part, tags: SimpleNamespace(
            tags=[{"uid": uid, **tag} for uid, tag in zip(uids, tags)]
        )
    )
    item = {"prompt_ids": torch.arange(3), "raw_prompt": "1+1", "data_source": "arith", "ground_truth": "2"}
    val = [{**item, "extra_info": {"index": i}} for i in range(num_prompts)]
    groups = WorkerGroups(actor_rollout=_Rollout())
    return PPOTrainer(config, groups, kv, buffer, [], val, tracker=None), groups.actor_rollout


def test_validation_generates_in_chunks_of_val_batch_size_covering_each_prompt_once():
    trainer, rollout = _trainer(val_batch_size=4, num_prompts=10)
    metrics = trainer.validate()
    assert [len(call) for call in rollout.calls] == [4, 4, 2]
    uids = [uid for call in rollout.calls for uid in call]
    assert len(set(uids)) == 10
    assert metrics == {"val-core/arith/acc/mean@1": 1.0}


def test_validation_without_val_batch_size_is_one_call():
    trainer, rollout = _trainer(val_batch_size=None, num_prompts=10)
    trainer.validate()
    assert [len(call) for call in rollout.calls] == [10]
