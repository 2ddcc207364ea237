"""Fixtures of the trainer tests."""

import pytest
import ray


@pytest.fixture(scope="module")
def ray_8cpu():
    """A fresh local Ray with 8 logical CPUs for a module's SFT / RM runs (shut down afterwards)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=8, object_store_memory=300 * 1024**2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def cluster():
    """One Ray cluster a module's main_ppo runs join (each run's actors and placement groups end with it)."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 8, "object_store_memory": 300 * 1024**2}
    )
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()
