"""A two-node cluster simulated on one machine: the pool spec [2, 2] puts two workers on each node."""

import ray
from ray.cluster_utils import Cluster

from tests.single_controller.workers import Echo
from verl_lite.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


def test_spec_two_by_two_places_two_workers_per_node():
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "object_store_memory": 150 * 1024**2}
    )
    cluster.add_node(num_cpus=2, object_store_memory=150 * 1024**2)
    ray.init(address=cluster.address)
    try:
        group = RayWorkerGroup(RayResourcePool([2, 2], name_prefix="two_nodes"), RayClassWithInitArgs(Echo))
        nodes = group.node_id()
        assert len(set(nodes)) == 2
        assert nodes[0] == nodes[1] and nodes[2] == nodes[3] and nodes[0] != nodes[2]
        # local ranks restart on every node
        assert group.local_rank_here() == [0, 1, 0, 1]
        group.kill()
    finally:
        ray.shutdown()
        cluster.shutdown()
