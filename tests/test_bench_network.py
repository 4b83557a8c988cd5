"""scripts/bench_network.py (issue 15) without a cluster: every suite's runs are valid
configs (a typo in an override would otherwise surface minutes into a benchmark), and the
table's ratios come from the right rows (the slowest rank, the baseline's epoch time)."""
import argparse

import pytest

from gnnsys.config import load_config


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script("bench_network")


def _args(**kw):
    base = dict(suites="minibatch,fullgraph,temporal", mb_data="products,tolokers",
                fg_data="cora,tolokers,synthetic", temporal_data="collegemsg,wikipedia",
                fg_epochs=40, scaling="")
    return argparse.Namespace(**{**base, **kw})


def test_every_run_is_a_valid_config(bench, repo_root):
    chosen = bench.suites(_args())
    assert len(chosen) == 7
    for name, (config, extra, variants, base) in chosen.items():
        assert base in variants
        for overrides in variants.values():
            cfg = load_config(repo_root / config,
                              overrides=bench.run_overrides(overrides, extra, 2))
            assert cfg.mode == name.split("/")[0]
    # the dataset's overrides come last, so they can tune a variant's defaults
    config, extra, variants, _ = chosen["fullgraph/synthetic"]
    adaptive = load_config(repo_root / config, overrides=bench.run_overrides(
        variants["adaptive"], extra, 2))
    assert adaptive.fullgraph.quantization.assign_every == 1 and adaptive.train.epochs == 4
    products = load_config(repo_root / chosen["minibatch/products"][0],
                           overrides=chosen["minibatch/products"][1])
    assert products.dataset.name == "synthetic-products"
    assert products.dataset.params == {"num_nodes": 250000, "locality_exponent": 0.5}


def test_scaling_runs_only_the_saving(bench):
    chosen = bench.suites(_args(scaling="1,2,4"))
    assert {name: list(v[2]) for name, v in chosen.items()}["minibatch/products"] == ["vip"]
    assert {v[3] for v in chosen.values()} == {"vip", "adaptive", "dedup"}
    with pytest.raises(SystemExit, match="no fullgraph dataset 'karate'"):
        bench.suites(_args(fg_data="karate"))


def test_summary_uses_the_slowest_rank_and_the_baseline(bench):
    def run(epoch_s, waits, fetch):
        epochs = [{"epoch": e, "epoch_s": epoch_s, "comm_wait_s": max(waits),
                   "comm_bytes_sent": 100, "fetch_s": max(fetch),
                   "workers": [{"rank": r, "comm_wait_s": w, "fetch_s": f}
                               for r, (w, f) in enumerate(zip(waits, fetch))]}
                  for e in range(3)]
        return epochs + [{"final": True, "test_acc": 0.5}]
    none = bench.summarise(run(4.0, [1.0, 2.0], [0.5, 1.5]))
    assert none["comm_share"] == 0.5 and none["exchange_s"] == 1.5
    vip = bench.summarise(run(2.0, [0.2, 0.4], [0.1, 0.3]))
    rows = bench._rows("150mbit", "minibatch/products", {"none": [none], "vip": [vip]}, "none")
    assert [(r["variant"], r["speedup"]) for r in rows] == [("none", 1.0), ("vip", 2.0)]
    minibatch = run(4.0, [3.0, 3.0], [0.5, 1.5])
    for epoch in minibatch[:-1]:        # the step's own waits count, not the loader's
        for w, (batch, sync) in zip(epoch["workers"], [(0.4, 0.2), (0.1, 0.3)]):
            w.update(batch_wait_s=batch, grad_sync_s=sync)
    assert bench.summarise(minibatch)["comm_share"] == pytest.approx(0.15)
    table = bench._table(rows)
    assert "| 150mbit | minibatch/products | vip | 2.000 | 20% | 0.300 |" in table
    assert "epochs/s vs 1 node" in bench._table(rows, scaling=True)
