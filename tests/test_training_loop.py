"""The one training loop (gnnsys.training): in every mode a run killed mid-epoch resumes
without losing a completed epoch and ends in the state of an uninterrupted run; K ranks
resume at the epoch of rank 0's checkpoint whatever their own disks hold; per-rank
counters combine the same way in every mode."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnsys.config import from_dict
from gnnsys.distributed import launch
from gnnsys.distributed.ranks import split_process_counters
from gnnsys.datasets.registry import KINDS, TASKS
from gnnsys.runlog import events, read_metrics
from gnnsys.mode import MODES, Mode, mode_class
from gnnsys.training import FAIL_EXIT_CODE, LOOP_REDUCTIONS, TrainingLoop, combine_ranks

REPO = Path(__file__).resolve().parents[1]

# One small run per mode: (config, the Python expression that builds its graph).
RUNS = {
    "minibatch": ({"mode": "minibatch", "model": {"arch": "sage", "hidden": 16, "layers": 2},
                   "sampler": {"fanouts": [4, 4], "batch_size": 32, "threads": 1}},
                  "tiny_graph(num_nodes=300, num_features=8, seed=3)"),
    "fullgraph": ({"mode": "fullgraph", "model": {"arch": "gcn", "hidden": 16, "layers": 2}},
                  "tiny_graph(num_nodes=300, num_features=8, seed=3)"),
    "temporal": ({"mode": "temporal", "model": {"arch": "tgn", "heads": 2, "dropout": 0.0},
                  "sampler": {"batch_size": 100, "threads": 1},
                  "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                               "num_neighbors": 5, "eval_negatives": 4}},
                 "make_tiny_graph()"),
}

RUNNER = """
import json, sys
from gnnsys.config import from_dict
from gnnsys.testing import tiny_graph
from gnnsys.training import fit
from tests.temporal.conftest import make_tiny_graph
config = from_dict(json.loads(sys.argv[1]))
print(json.dumps(fit(config, {graph})))
"""


def _config(mode: str, run_dir: Path, **train) -> dict:
    base, _ = RUNS[mode]
    config = json.loads(json.dumps(base))
    config["train"] = {"epochs": 4, "lr": 0.01, "progress": False, "seed": 1, **train}
    config["run"] = {"dir": str(run_dir)}
    return config


def _train(mode: str, config: dict) -> subprocess.CompletedProcess:
    """The run in a process of its own, so that a simulated crash kills only it."""
    code = RUNNER.format(graph=RUNS[mode][1])
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, json.dumps(config)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def _final_state(run_dir: Path) -> dict:
    """The model's and the optimizer's tensors in the run's last checkpoint, by name."""
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    optimizer = {f"adam.{p}.{k}": v for p, per in state["optimizer"]["state"].items()
                 for k, v in per.items()}
    return {**state["current"]["model"], **optimizer}


@pytest.mark.parametrize("mode", sorted(RUNS))
def test_killed_mid_epoch_resumes_to_the_uninterrupted_state(mode, tmp_path):
    straight = _train(mode, _config(mode, tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr[-2000:]

    crashed_config = _config(mode, tmp_path / "crashed")
    crashed_config["cluster"] = {"fail_at": "0:3"}          # rank 0 dies inside epoch 3
    crashed = _train(mode, crashed_config)
    assert crashed.returncode == FAIL_EXIT_CODE, crashed.stderr[-2000:]
    done = [r["epoch"] for r in read_metrics(tmp_path / "crashed") if r["kind"] == "epoch"]
    assert done == [1, 2]                                    # epoch 3 never finished

    resumed_config = _config(mode, tmp_path / "crashed")
    resumed_config["run"]["resume"] = True
    resumed = _train(mode, resumed_config)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    records = read_metrics(tmp_path / "crashed")
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2, 3, 4]   # none lost or twice
    assert [r["from_epoch"] for r in events(tmp_path / "crashed", "resume")] == [3]

    a, b = _final_state(tmp_path / "straight"), _final_state(tmp_path / "crashed")
    assert a.keys() == b.keys() and any(k.startswith("adam.") for k in a)
    for name, value in a.items():
        torch.testing.assert_close(b[name], value, rtol=0, atol=0, msg=name)
    final_a = json.loads(straight.stdout.strip().splitlines()[-1])
    final_b = json.loads(resumed.stdout.strip().splitlines()[-1])
    metric = next(k for k in final_a if k.startswith("test_"))
    assert final_a["best_epoch"] == final_b["best_epoch"]
    assert final_a[metric] == final_b[metric]


def test_resume_without_a_checkpoint_is_one_clear_error(tmp_path):
    config = _config("fullgraph", tmp_path / "empty")
    config["run"]["resume"] = True
    out = _train("fullgraph", config)
    assert out.returncode != 0
    assert "holds no checkpoint" in out.stderr and str(tmp_path / "empty") in out.stderr


def test_ranks_resume_at_rank_zeros_epoch_without_shared_storage(tmp_path):
    """Each rank sees only its own run directory: rank 0's holds the checkpoint of epoch 1,
    rank 1's an older one of epoch 0. Every rank must continue from epoch 2."""
    from tests.temporal.conftest import make_tiny_graph
    from gnnsys.temporal.mode import TemporalMode
    graph = make_tiny_graph()

    def config(run_dir, epochs, resume=False):
        data = _config("temporal", run_dir, epochs=epochs)
        data["run"]["resume"] = resume
        data["cluster"] = {"workers": 2, "launcher": "threads"}
        return from_dict(data)

    prepared = TemporalMode.prepare(config(tmp_path / "x", 1), graph)

    def run(configs):
        return launch(lambda ctx, _, *p: TrainingLoop(ctx, configs[ctx.rank], p).run(),
                      configs[0], *prepared)

    for rank, epochs in ((0, 2), (1, 1)):   # rank r's disk: a checkpoint after `epochs`
        view = tmp_path / f"rank{rank}"
        run([config(view, epochs), config(tmp_path / f"scratch{rank}", epochs)])
    resumed = run([config(tmp_path / f"rank{r}", 4, resume=True) for r in range(2)])
    straight = run([config(tmp_path / f"straight{r}", 4) for r in range(2)])
    assert [r["epochs"] for r in resumed] == [4, 4]
    epochs = [r["epoch"] for r in read_metrics(tmp_path / "rank0") if r["kind"] == "epoch"]
    assert epochs == [1, 2, 3, 4]
    for key in ("val_ap", "test_ap", "best_epoch"):
        assert resumed[0][key] == pytest.approx(straight[0][key], abs=1e-6), key


def test_every_mode_implements_the_typed_contract():
    for name in MODES:
        cls = mode_class(name)
        assert issubclass(cls, Mode), name
        for method in ("build_model", "train_batches", "split_outputs", "score"):
            assert getattr(cls, method) is not getattr(Mode, method), (name, method)
        assert cls.grad_op in ("mean", "sum") and cls.task in TASKS
        assert cls.data_kind in KINDS
        assert set(cls.final_splits) | set(cls.eval_splits) <= {"train", "val", "test"}


def test_rank_values_combine_as_declared():
    ranks = [{"remote_rows": 3, "fetch_s": 0.5, "bytes_by_bits": {"8": 10}, "sampler": "cpu",
              "share": 0.25},
             {"remote_rows": 4, "fetch_s": 0.2, "bytes_by_bits": {"8": 1, "2": 5},
              "sampler": "cpu", "share": 0.75}]
    how = {"remote_rows": "sum", "fetch_s": "max", "bytes_by_bits": "sum", "sampler": "sum",
           "share": "mean"}
    assert combine_ranks(ranks, how) == {"remote_rows": 7, "fetch_s": 0.5, "share": 0.5,
                                         "bytes_by_bits": {"8": 11, "2": 5}, "sampler": "cpu"}
    with pytest.raises(KeyError, match="'fetch_s' has no declared reduction"):
        combine_ranks(ranks, {k: v for k, v in how.items() if k != "fetch_s"})


def test_full_graph_phase_times_are_the_slowest_ranks():
    from gnnsys.fullgraph.mode import TIME_KEYS, FullGraphMode
    keys = [key for key, _ in TIME_KEYS] + ["assign_solve_s", "epoch_s"]
    ranks = [dict.fromkeys(keys, 0.3), dict.fromkeys(keys, 0.2)]
    combined = combine_ranks(ranks, {**LOOP_REDUCTIONS, **FullGraphMode.reductions})
    assert combined == dict.fromkeys(keys, 0.3)             # summed, they would be 0.5


@pytest.mark.parametrize("mode", sorted(RUNS))
def test_two_ranks_log_no_seconds_beyond_the_epoch(tmp_path, mode):
    """Two ranks as threads, through fit: every per-epoch seconds value the log holds
    (combined over ranks as its code declares) fits in that epoch's wall time, every value
    of every rank has a declared reduction, and the log's records all have a kind."""
    from gnnsys import runlog
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    from tests.temporal.conftest import make_tiny_graph
    data = _config(mode, tmp_path / mode, epochs=2)
    data["cluster"] = {"workers": 2, "launcher": "threads"}
    data["partition"] = {"dir": str(tmp_path / "parts")}
    graph = make_tiny_graph() if mode == "temporal" else \
        tiny_graph(num_nodes=300, num_features=8, seed=3)
    result = fit(from_dict(data), graph)
    assert result["workers"] == 2
    records = runlog.read_metrics(tmp_path / mode)
    assert [r["kind"] for r in records] == ["start", "epoch", "epoch", "final"]
    declared = {**LOOP_REDUCTIONS, **mode_class(mode).reductions}
    compared = set()      # seconds keys where a sum of the ranks' values would show
    for epoch in runlog.epochs(tmp_path / mode):
        assert len(epoch["workers"]) == 2
        for key, value in epoch.items():
            seconds = key.endswith("_s") and not key.endswith("_per_s")
            if seconds and key not in ("epoch_s", "eval_s"):
                assert value <= epoch["epoch_s"], (key, value, epoch["epoch_s"])
            if seconds and key in epoch["workers"][0]:
                # the slowest rank's: a sum of two small values could still fit in epoch_s
                ranks = [rank[key] for rank in epoch["workers"]]
                assert value == pytest.approx(max(ranks), abs=1e-6), (key, value, ranks)
                if min(ranks) > 1e-5:
                    compared.add(key)
        for rank in epoch["workers"]:
            assert set(rank) - {"rank"} <= set(declared)
    assert "epoch_s" in compared
    if mode == "fullgraph":                    # its own phase times, not just the loop's
        from gnnsys.fullgraph.mode import TIME_KEYS
        assert compared & {key for key, _ in TIME_KEYS}, compared


@pytest.mark.parametrize("mode", sorted(RUNS))
def test_the_start_record_says_which_split_the_run_used(tmp_path, mode):
    """Each split's size and digest, the same from 1 worker and 2 (which split the items
    across ranks); node modes: the graph's own split ids."""
    import hashlib
    import numpy as np
    from gnnsys import runlog
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    from tests.temporal.conftest import make_tiny_graph
    logged = []
    for workers in (1, 2):
        data = _config(mode, tmp_path / f"run{workers}", epochs=1)
        data["cluster"] = {"workers": workers, "launcher": "threads"}
        data["partition"] = {"dir": str(tmp_path / "parts")}
        graph = make_tiny_graph() if mode == "temporal" else \
            tiny_graph(num_nodes=300, num_features=8, seed=3)
        fit(from_dict(data), graph)
        logged.append(runlog.start(tmp_path / f"run{workers}")["split"])
    assert logged[0] == logged[1] and set(logged[0]) == {"train", "val", "test"}
    if mode == "temporal":
        counts = [logged[0][name]["count"] for name in ("train", "val", "test")]
        assert min(counts) > 0 and sum(counts) <= graph.num_events
    else:
        for name, entry in logged[0].items():
            ids = np.sort(np.asarray(getattr(graph, f"{name}_idx"), dtype=np.int64))
            assert entry == {"count": ids.size,
                             "sha256": hashlib.sha256(ids.tobytes()).hexdigest()[:16]}


def test_ranks_sharing_a_process_split_its_cpu_time_and_memory():
    # ranks 0 and 1 are threads of one process (each measured all of it), rank 2 its own
    ranks = [{"cpu_cores": 1.8, "peak_rss_mb": 900.0, "process": ("a", 7), "x": 1},
             {"cpu_cores": 1.8, "peak_rss_mb": 900.0, "process": ("a", 7), "x": 2},
             {"cpu_cores": 0.9, "peak_rss_mb": 500.0, "process": ("b", 7), "x": 3}]
    split = split_process_counters(ranks)
    assert [r["cpu_cores"] for r in split] == [0.9, 0.9, 0.9]
    assert combine_ranks(split, {**LOOP_REDUCTIONS, "x": "sum"})["peak_rss_mb"] == \
        pytest.approx(1400.0)
    assert all("process" not in r for r in split) and [r["x"] for r in split] == [1, 2, 3]
    assert combine_ranks(split, {**LOOP_REDUCTIONS, "x": "sum"})["cpu_cores"] == \
        pytest.approx(2.7)


def test_patience_stops_when_validation_stops_improving(tmp_path):
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    graph = tiny_graph(num_nodes=300, num_features=8, seed=3)
    # lr so small that the validation metric never moves: the best epoch stays the first
    frozen = _config("minibatch", tmp_path / "stop", epochs=6, lr=1e-12, patience=2)
    result = fit(from_dict(frozen), graph)
    assert result["epochs"] == 3 and result["best_epoch"] == 1
    stops = events(tmp_path / "stop", "early_stop")
    assert [(e["epoch"], e["best_epoch"]) for e in stops] == [(3, 1)]
    # resumed, a run that stopped early trains no more: it tests the same selected model
    again = fit(from_dict({**frozen, "run": {**frozen["run"], "resume": True}}), graph)
    assert (again["epochs"], again["best_epoch"]) == (3, 1)
    assert again["test_acc"] == result["test_acc"]
    assert [r["epoch"] for r in read_metrics(tmp_path / "stop") if r["kind"] == "epoch"] == \
        [1, 2, 3]
    patient = _config("minibatch", tmp_path / "all", epochs=6, lr=1e-12)   # patience 0: off
    assert fit(from_dict(patient), graph)["epochs"] == 6


def test_epoch_records_the_cores_the_process_kept_busy(tmp_path):
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    fit(from_dict(_config("minibatch", tmp_path / "run", epochs=2)),
        tiny_graph(num_nodes=300, num_features=8, seed=3))
    epochs = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "epoch"]
    # CPU seconds over wall seconds: above zero, and no more than every core of the machine
    assert len(epochs) == 2
    assert all(0 < r["cpu_cores"] <= os.cpu_count() + 0.5 for r in epochs)


def test_epochs_that_evaluate_record_its_time_apart_from_training(tmp_path):
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    fit(from_dict(_config("minibatch", tmp_path / "run", epochs=3, eval_every=2)),
        tiny_graph(num_nodes=300, num_features=8, seed=3))
    epochs = [r for r in read_metrics(tmp_path / "run") if r["kind"] == "epoch"]
    # evaluation after epochs 2 and 3 (the last always evaluates), not after epoch 1
    assert ["eval_s" in r for r in epochs] == [False, True, True]
    assert all(r["eval_s"] > 0 and "val_acc" in r for r in epochs[1:])


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_a_step_that_cannot_fit_is_refused_before_it_runs(tmp_path, mode, monkeypatch):
    """A huge model.hidden ran the machine out of memory (killed by the kernel, exit 137,
    no message): the step's lower bound against the free memory is one line instead."""
    from gnnsys import step_memory
    from gnnsys.errors import ConfigError
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    data = _config(mode, tmp_path / mode, epochs=1)
    graph = tiny_graph(num_nodes=300, num_features=8, seed=3)
    monkeypatch.setattr(step_memory, "available_memory", lambda: 10 * 2 ** 20)   # 10 MiB
    fit(from_dict(data), graph)                   # hidden 16 fits in 10 MiB
    data["model"]["hidden"] = 16384
    with pytest.raises(ConfigError, match=r"needs at least \d+\.\d MiB .*model\.hidden=16384 "
                                          r"wide.* but 10\.0 MiB are free; lower model\.hidden"):
        fit(from_dict(data), graph)


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_a_model_too_large_to_allocate_is_refused_before_it_is_built(tmp_path, mode):
    """model.hidden 10^12 failed inside torch's allocator (a raw RuntimeError, exit 1):
    its parameters are counted on the meta device and refused in one line."""
    from gnnsys.errors import ConfigError
    from gnnsys.testing import tiny_graph
    from gnnsys.training import fit
    data = _config(mode, tmp_path / mode, epochs=1)
    data["model"]["hidden"] = 10 ** 12
    with pytest.raises(ConfigError, match=r"needs at least .* GiB \(.*[\d,]+ parameters "
                                          r"with their gradients and Adam state\) but .* are "
                                          r"free; lower model\.hidden"):
        fit(from_dict(data), tiny_graph(num_nodes=300, num_features=8, seed=3))
    assert not (tmp_path / mode / "checkpoint.pt").exists()


def test_measuring_a_model_on_the_meta_device_draws_no_random_number():
    """The size check builds the model once more, shapes only: a draw from torch's
    generator there would change every run's initial weights at the same seed."""
    from gnnsys.models.block_gnn import BlockGNN
    from gnnsys.step_memory import shapes_only

    def build():
        return BlockGNN("gat", 10, 16, 3, 3, 0.5, 4, "batch", True)
    torch.manual_seed(0)
    plain = build().state_dict()
    torch.manual_seed(0)
    assert all(p.is_meta for p in shapes_only(build).parameters())
    after = build().state_dict()
    assert all(torch.equal(plain[k], after[k]) for k in plain)


def test_the_step_bound_counts_parameters_adam_state_and_outputs():
    from gnnsys.errors import ConfigError
    from gnnsys.step_memory import check_step_fits
    model = torch.nn.Linear(10, 10)                       # 110 parameters: 1760 bytes
    check_step_fits(model, 100, "x", "y", have=1760 + 400)
    with pytest.raises(ConfigError, match="110 parameters"):
        check_step_fits(model, 101, "x", "y", have=1760 + 400)
