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
    # One CPU per node and one per worker: Ray had to place the workers on both nodes.
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2
