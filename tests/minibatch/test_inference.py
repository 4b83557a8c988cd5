"""Halo-exchange inference over parts equals single-machine layer-wise inference."""
import numpy as np
import pytest
import torch

from gnnsys.config import from_dict
from gnnsys.minibatch.inference import HaloGraph, halo_inference
from gnnsys.distributed.local import ThreadGroup
from gnnsys.graph import Graph
from gnnsys.models import build_model
from gnnsys.testing import tiny_graph
from partition.build import build_partitions
from partition.format import PartitionSet


@pytest.mark.parametrize("arch", ["sage", "gcn"])
def test_halo_inference_matches_single_machine(tmp_path, arch):
    g = tiny_graph(num_nodes=300, num_features=6, seed=9)
    build_partitions(g, tmp_path / "p", method="metis", num_parts=3, fanouts=[3, 3],
                     batch_size=16)
    parts = PartitionSet(tmp_path / "p")
    indptr, indices = parts.full_csr()
    x = np.concatenate([parts.array(k, "x") for k in range(3)])
    whole = Graph(indptr=indptr, indices=indices, x=x)
    config = from_dict({"model": {"arch": arch, "hidden": 8, "layers": 2},
                        "sampler": {"fanouts": [3, 3]}})
    torch.manual_seed(0)
    model = build_model(config, 6, 3)
    model.set_degree(np.diff(indptr))
    want = model.inference(whole, batch_size=50)

    def worker(comm):
        lo, hi = parts.book.range(comm.rank)
        halo = HaloGraph(indptr, indices, lo, hi)
        return halo_inference(model, halo, x[lo:hi], comm, parts.book, comm.rank,
                              batch_size=40)

    got = torch.cat(ThreadGroup(3).run(worker))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
