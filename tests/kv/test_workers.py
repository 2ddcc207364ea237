"""Ray workers of the same job find the store by name, write to it concurrently and read each other's rows."""

import asyncio

import ray
import torch
from tensordict import TensorDict

from verl_lite.kv import get_kv_client
from verl_lite.protocol import to_jagged
from verl_lite.trajectory import trajectory_key


def rows_of(worker: int, n: int) -> TensorDict:
    """Worker-specific rows, so a mix-up between writers would show."""
    g = torch.Generator().manual_seed(worker)
    return TensorDict(
        {
            "responses": to_jagged([torch.randint(0, 100, (k,), generator=g) for k in range(1, n + 1)]),
            "old_log_probs": torch.randn(n, 8, generator=g),
        },
        batch_size=[n],
    )


@ray.remote(num_cpus=0)
class Writer:
    """A worker process that finds the store by name, like any worker of the job."""

    def write(self, worker: int, partition: str, n: int) -> tuple[list[str], str]:
        client = get_kv_client()
        keys = [trajectory_key(f"w{worker}", s) for s in range(n)]
        for start in range(0, n, 8):  # several puts per worker, interleaving with the others
            client.kv_batch_put(
                keys[start : start + 8], partition, fields=rows_of(worker, n)[start : start + 8]
            )
        return keys, client.name


@ray.remote(num_cpus=0)
class AsyncRollout:
    """An asyncio actor (like a rollout worker) that calls the store off its event loop."""

    async def run(self, partition: str, keys: list[str]) -> dict:
        client = await asyncio.to_thread(get_kv_client, name="async-rollout")
        written = TensorDict({"x": torch.tensor([1.0, 2.0])}, [2])
        await asyncio.to_thread(client.kv_batch_put, ["a_0_0", "a_1_0"], partition, written)
        await asyncio.to_thread(
            client.kv_batch_put, ["a_0_0", "a_1_0"], partition, None, [{"status": "success"}] * 2
        )
        # Rows the driver wrote, read concurrently by two coroutines.
        reads = await asyncio.gather(
            *(asyncio.to_thread(client.kv_batch_get, keys, partition) for _ in range(2))
        )
        return {"ids": [r["ids"].sum().item() for r in reads]}


def test_four_workers_write_concurrently_and_every_row_reads_back_exactly(kv_client, partition):
    writers = [Writer.remote() for _ in range(4)]
    results = ray.get([writer.write.remote(w, partition, 32) for w, writer in enumerate(writers)])
    for w, (keys, _) in enumerate(results):
        back = kv_client.kv_batch_get(keys, partition)
        expected = rows_of(w, 32)
        assert torch.equal(back["old_log_probs"], expected["old_log_probs"])
        assert torch.equal(back["responses"].values(), expected["responses"].values())
    assert kv_client.stats()["partitions"][partition]["keys"] == 128
    names = {name for _, name in results}
    io = kv_client.stats()["io"]
    assert len(names) == 4 and all(io[name]["bytes_written"] > 0 for name in names)  # one name per process
    for writer in writers:
        ray.kill(writer)


def test_an_asyncio_actor_reads_rows_the_driver_wrote_and_its_writes_reach_the_driver(kv_client, partition):
    ids = torch.arange(512 * 64).view(512, 64)  # 256 KB, read in another process
    keys = [trajectory_key("big", s) for s in range(512)]
    kv_client.kv_batch_put(keys, partition, fields=TensorDict({"ids": ids}, [512]))
    actor = AsyncRollout.remote()
    assert ray.get(actor.run.remote(partition, keys)) == {"ids": [ids.sum().item()] * 2}
    assert kv_client.kv_list(partition)[partition]["a_1_0"] == {"status": "success"}
    assert kv_client.kv_batch_get(["a_0_0", "a_1_0"], partition)["x"].tolist() == [1.0, 2.0]
    assert kv_client.stats()["io"]["async-rollout"]["gets"] >= 2
    ray.kill(actor)
