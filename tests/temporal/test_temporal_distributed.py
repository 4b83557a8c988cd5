"""Two Ray workers with a real gloo group: the same model and memory after an epoch as one
process on the same batches (the dedup exchange loses nothing), and Trainer(cfg).fit()
end to end on a real bundle. Two launches only: Ray start-up dominates."""
from __future__ import annotations

import math

import pytest
import torch

import gnnsys
from tests.temporal.conftest import checkpoint_state
from gnnsys.distributed import launcher
from gnnsys.training import fit
from gnnsys.testing import shared_data_dir

pytest.importorskip("ray")


def assert_same_state(a, b):
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=1e-4, atol=1e-5)
    for name in ("memory", "mailbox"):
        torch.testing.assert_close(b["memory"][name], a["memory"][name], rtol=1e-4, atol=1e-5)
    for name in ("vertex", "mem_ts", "mail_ts", "next_slot"):
        assert (b["memory"][name] == a["memory"][name]).all(), name


def test_ray_workers_equal_single_process(graph_factory, tiny_config, tmp_path):
    graph = graph_factory(edge_dim=2)
    model = {"dropout": 0.2}         # each process drops what the single one does
    single = fit(tiny_config(model=model, run={"dir": str(tmp_path / "single")}), graph)
    double = fit(tiny_config(model=model, run={"dir": str(tmp_path / "double")},
                             cluster={"workers": 2, "cpus_per_worker": 1},
                             temporal={"ownership": "balanced"}), graph)
    assert_same_state(checkpoint_state(tmp_path / "single"),
                      checkpoint_state(tmp_path / "double"))
    assert double["test_ap"] == pytest.approx(single["test_ap"], abs=1e-4)
    assert single["bytes_sent"] == 0 < double["bytes_sent"]
    # Ray opened its sessions folder to every user: the folder around it stays this user's
    assert launcher.private_sessions_dir().parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(shared_data_dir() is None, reason="needs the shared temporal bundles")
def test_trainer_fit_two_workers_on_a_bundle(tmp_path):
    def config(run, workers):
        return gnnsys.config.from_dict({
            "mode": "temporal", "dataset": {"name": "bitcoin_alpha"},
            "model": {"arch": "tgn", "heads": 2, "dropout": 0.0},
            "sampler": {"batch_size": 2000, "threads": 1},
            "train": {"epochs": 1, "lr": 0.003, "progress": False},
            "run": {"dir": str(tmp_path / run)},
            "cluster": {"workers": workers, "cpus_per_worker": 1},
            "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                         "num_neighbors": 5, "eval_negatives": 2, "exchange": "naive"}})

    single = gnnsys.Trainer(config("single", 1)).fit()
    out = gnnsys.Trainer(config("double", 2)).fit()
    assert out["workers"] == 2 and out["exchange"] == "naive"
    for key in ("val_ap", "test_ap", "test_mrr", "test_ap_inductive"):
        assert math.isfinite(out[key]) and 0 <= out[key] <= 1, key
    assert single["bytes_sent"] == 0 < out["bytes_sent"]
    assert out["worker_bytes_max"] >= out["worker_bytes_mean"] > 0
    assert out["redundancy"] > 1
    # Unix-second gaps (~1e7 s) make the learned time encoding amplify last-bit float
    # differences, so the float state is compared exactly only on small times (above);
    # which vertex holds which mail at which time must still match exactly here.
    a = checkpoint_state(tmp_path / "single")["memory"]
    b = checkpoint_state(tmp_path / "double")["memory"]
    for name in ("vertex", "mem_ts", "mail_ts", "next_slot"):
        assert (a[name] == b[name]).all(), name
