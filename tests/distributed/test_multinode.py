"""The multi-node path: two Ray nodes on one machine (ray.cluster_utils.Cluster), one
worker on each (each node has one CPU), training over gloo between the nodes."""
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture()
def two_node_cluster():
    from ray.cluster_utils import Cluster
    ray.shutdown()                               # a session-wide local Ray would collide
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_two_nodes_train_one_model(tiny_parts, dist_config, two_node_cluster):
    from gnnsys.training import fit as fit_distributed
    config = dist_config(tiny_parts, train={"epochs": 2},
                         cluster={"address": two_node_cluster.address})
    result = fit_distributed(config)
    assert result["workers"] == 2 and result["epochs"] == 2
    # One CPU per node and one per worker: the workers must land on different nodes.
    import sys
    import ray.cloudpickle
    from gnnsys.distributed import launch
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # actors can't import us
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    placed = launch(_node_of_worker, config)
    assert len(alive) == 2 and sorted(placed) == sorted(alive), (placed, alive)


def _node_of_worker(ctx, config):
    return ray.get_runtime_context().get_node_id()
