"""Features stored as float16 (`dataset.feature_dtype: float16`, SALIENT++'s storage):
half the bytes in memory, in the partitions and on the wire, and, for features that
float16 holds exactly, the very same training as float32."""
import dataclasses

import numpy as np
import pytest

from gnnsys.config import ConfigError, from_dict
from gnnsys.datasets import load_run_graph
from gnnsys.partition_cache import ensure_partitions
from gnnsys.runlog import epochs, start
from gnnsys.sparse_features import as_csr
from gnnsys.testing import tiny_graph
from gnnsys.training import fit


def exact_graph():
    """Features on a 1/64 grid in [-4, 4]: float16 holds every one exactly."""
    graph = tiny_graph(num_nodes=240, num_features=32)
    return dataclasses.replace(graph, x=np.round(graph.x * 64).clip(-256, 256) / 64)


def settings(tmp_path, workers, dtype, mode="minibatch"):
    return from_dict({
        "mode": mode,
        "dataset": {"feature_dtype": dtype},
        "model": {"arch": "tgn" if mode == "temporal" else "sage", "hidden": 16, "layers": 2,
                  "dropout": 0.0},
        "sampler": {"fanouts": [5, 5], "batch_size": 32, "threads": 1, "prefetch": 1},
        "cache": {"replication": 0.1},
        "cluster": {"workers": workers, "launcher": "threads"},
        "partition": {"dir": str(tmp_path / f"parts-{dtype}")},
        "train": {"epochs": 2, "seed": 3, "progress": False},
        "run": {"dir": str(tmp_path / f"run-{dtype}")}})


def test_the_run_graph_holds_float16_rows(tmp_path):
    graph = exact_graph()
    half = load_run_graph(settings(tmp_path, 1, "float16"), graph)
    assert half.x.dtype == np.float16 and half.x.nbytes * 2 == graph.x.nbytes
    assert np.array_equal(half.x.astype(np.float32), graph.x)
    assert load_run_graph(settings(tmp_path, 1, "float32"), graph).x is graph.x   # no copy


def test_one_worker_float16_run_equals_float32_run(tmp_path):
    graph = exact_graph()
    runs = {dtype: fit(settings(tmp_path, 1, dtype),
                       graph=load_run_graph(settings(tmp_path, 1, dtype), graph))
            for dtype in ("float16", "float32")}
    for key in ("final_loss", "val_acc", "test_acc"):
        assert runs["float16"][key] == runs["float32"][key], key
    setup = {dtype: start(tmp_path / f"run-{dtype}")["setup"][0] for dtype in runs}
    assert setup["float16"]["feature_bytes"] * 2 == setup["float32"]["feature_bytes"]


def test_inference_reads_float16_rows_without_a_float32_copy():
    import tracemalloc
    import torch
    from gnnsys.models.block_gnn import BlockGNN
    graph = tiny_graph(num_nodes=4000, num_features=512)
    half = dataclasses.replace(graph, x=graph.x.astype(np.float16))
    exact = dataclasses.replace(graph, x=half.x.astype(np.float32))
    torch.manual_seed(0)
    model = BlockGNN("sage", 512, 16, 3, 2, dropout=0.0)
    expected = model.inference(exact)
    tracemalloc.start()           # numpy's allocations; a float32 copy of x is 8 MB
    got = model.inference(half)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert torch.allclose(got, expected, atol=1e-5)
    assert peak < exact.x.nbytes / 4, peak


def test_two_workers_store_and_send_half_the_bytes(tmp_path):
    graph = exact_graph()
    results = {}
    for dtype in ("float16", "float32"):
        config = settings(tmp_path, 2, dtype)
        parts = ensure_partitions(config, load_run_graph(config, graph), progress=False)
        assert parts.features(0).dtype == np.dtype(dtype)
        results[dtype] = fit(config)           # ranks as threads, on the parts built above
    for key in ("final_loss", "val_acc", "test_acc"):
        assert results["float16"][key] == results["float32"][key], key
    # the ranks are threads of this process: its peak memory is counted once, not twice
    import resource
    assert 0 < results["float16"]["peak_rss_mb"] <= \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + 0.05   # logged to 0.1 MB
    half, full = (epochs(tmp_path / f"run-{dtype}")[0] for dtype in ("float16", "float32"))
    for h, f in zip(half["workers"], full["workers"]):
        assert h["remote_rows"] == f["remote_rows"] > 0
        assert 2 * h["remote_feature_bytes"] == f["remote_feature_bytes"]


def test_float16_refuses_what_it_cannot_hold(tmp_path):
    graph = exact_graph()
    sparse = dataclasses.replace(graph, x=as_csr(graph.x))
    with pytest.raises(ValueError, match="sparse .CSR. features.*leave dataset.feature_dtype"):
        load_run_graph(settings(tmp_path, 1, "float16"), sparse)
    huge = dataclasses.replace(graph, x=graph.x * 1e5)
    with pytest.raises(ValueError, match="above float16's 65504; normalise them"):
        load_run_graph(settings(tmp_path, 1, "float16"), huge)
    for mode in ("fullgraph", "temporal"):
        with pytest.raises(ConfigError, match=f"'dataset.feature_dtype' is 'float16' but "
                                              f"mode '{mode}' supports: float32"):
            settings(tmp_path, 1, "float16", mode)
