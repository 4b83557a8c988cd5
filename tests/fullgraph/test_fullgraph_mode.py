"""`mode: fullgraph` end to end: the Trainer with two Ray workers, and resume in one process."""
import numpy as np
import pytest

import gnnsys
from gnnsys import runlog
from gnnsys.config import from_dict
from gnnsys.training import fit
from gnnsys.testing import shared_data_dir, tiny_graph

TIME_KEYS = ("comm_s", "quant_s", "central_s", "marginal_s", "wait_s", "step_s", "grad_sync_s")


@pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data (Cora)")
def test_trainer_two_workers_adaptive_quantisation_with_overlap(tmp_path):
    config = from_dict({
        "mode": "fullgraph",
        "dataset": {"name": "cora"},
        "model": {"arch": "gcn", "hidden": 16, "layers": 2},
        "train": {"epochs": 4, "lr": 0.01, "progress": False},
        "cluster": {"workers": 2, "timeout_s": 120},
        "run": {"dir": str(tmp_path)}, "partition": {"dir": str(tmp_path / "parts")},
        "fullgraph": {"overlap": True, "quantization": {"mode": "adaptive", "assign_every": 2,
                                                        "profile_points": 5}},
    })
    result = gnnsys.Trainer(config).fit()
    assert 0.0 <= result["test_acc"] <= 1.0 and result["epochs"] == 4
    setup = runlog.start(tmp_path)["setup"][0]
    assert set(setup["links"]) == {"0->1", "1->0"}
    epochs = runlog.epochs(tmp_path)
    assert [r["epoch"] for r in epochs] == [1, 2, 3, 4]
    for r in epochs:
        assert all(r[k] >= 0 for k in TIME_KEYS) and r["bytes_sent"] > 0
        assert np.isfinite(r["loss"]) and "val_acc" in r
    # the third epoch re-solves the bits from the traces of the first two and reports it
    assert epochs[2]["assign_solve_s"] > 0 and "forward0" in epochs[2]["bits"]
    # the first cycle runs at 8 bits: the boundary rows cost about D + 4 bytes each, and
    # an adaptive cycle never costs more than that
    assert epochs[3]["bytes_sent"] <= epochs[0]["bytes_sent"]
    assert (tmp_path / "checkpoint.pt").exists()


def test_single_process_run_resumes_from_its_checkpoint(tmp_path):
    graph = tiny_graph(num_nodes=100, num_features=4)
    base = {"mode": "fullgraph", "model": {"arch": "sage", "hidden": 8, "layers": 2},
            "train": {"epochs": 2, "progress": False}, "run": {"dir": str(tmp_path)}}
    first = fit(from_dict(base), graph)
    assert first["epochs"] == 2
    assert all(r["bytes_sent"] == 0 for r in runlog.epochs(tmp_path))  # 1 worker
    resumed = fit(from_dict(base, ["train.epochs=4", "run.resume=true"]), graph)
    assert resumed["epochs"] == 4
    epochs = [r["epoch"] for r in runlog.epochs(tmp_path)]
    assert epochs == [1, 2, 3, 4]


def test_partition_count_must_match_workers(tmp_path):
    graph = tiny_graph(num_nodes=50)
    config = from_dict({"mode": "fullgraph", "partition": {"num_parts": 3},
                        "train": {"epochs": 1, "progress": False}, "run": {"dir": str(tmp_path)}})
    with pytest.raises(ValueError, match="one partition per worker"):
        fit(config, graph)
