"""Shared tiny partitions and configs for the distributed tests (Ray tests stay few)."""
import pytest

from gnnsys.config import from_dict
from gnnsys.partition_cache import ensure_partitions
from gnnsys.testing import tiny_graph


def make_dist_config(tmp_path, **sections):
    data = {"dataset": {"name": "tiny"},
            "model": {"hidden": 16, "layers": 2},
            "sampler": {"fanouts": [4, 4], "batch_size": 64, "threads": 1},
            "train": {"epochs": 3, "progress": False},
            "run": {"dir": str(tmp_path / "run")},
            "cluster": {"workers": 2, "timeout_s": 60.0},
            "partition": {"dir": str(tmp_path / "parts")}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return from_dict(data)


@pytest.fixture()
def tiny_parts(tmp_path):
    """Two METIS parts of a 600-node graph, built for `dist_config` (partition.dir)."""
    graph = tiny_graph(num_nodes=600, avg_degree=6, num_features=8, seed=11)
    ensure_partitions(make_dist_config(tmp_path), graph, progress=False)
    return tmp_path


@pytest.fixture()
def dist_config():
    """Factory: dist_config(tmp_path, cluster={...}, ...) -> a validated 2-worker Config."""
    return make_dist_config
