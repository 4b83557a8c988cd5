"""A run directory is safe: no file runs code, one run owns a directory at a
time, resume refuses what it cannot honour, a diverging run stops, no torn records."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.config import ConfigError, from_dict
from gnnsys.runlog import RunDir, events, read_metrics
from gnnsys.testing import tiny_graph
from gnnsys.training import fit


def _config(run_dir, **sections):
    data = {"mode": "fullgraph", "model": {"arch": "gcn", "hidden": 8, "layers": 2},
            "train": {"epochs": 2, "progress": False}, "run": {"dir": str(run_dir)}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return from_dict(data)


class _Payload:
    """Unpickling this would create the marker file: a checkpoint must never run it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


def test_a_crafted_checkpoint_runs_nothing_and_is_named(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    run.mkdir()
    torch.save({"epoch": 0, "evil": _Payload(marker)}, run / "checkpoint.pt")
    with pytest.raises(RuntimeError, match=str(run / "checkpoint.pt")):
        fit(_config(run, run={"resume": True}), tiny_graph(num_nodes=60))
    assert not marker.exists()


def test_one_run_owns_a_directory_at_a_time_and_a_dead_one_releases_it(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(      # a process that takes the lock, then sleeps
        [sys.executable, "-c", "import sys, time; from gnnsys.runlog import RunDir; "
         f"RunDir({str(run)!r}).lock(); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RuntimeError, match=f"{run} is in use by another run \\(pid "
                                               f"{holder.pid}\\)"):
            fit(_config(run), tiny_graph(num_nodes=60))
        assert not (run / "metrics.jsonl").exists()        # nothing of ours was written
    finally:
        holder.kill()
        holder.wait()
    fit(_config(run), tiny_graph(num_nodes=60))            # a dead run holds nothing


def test_temp_files_of_killed_writes_are_removed_on_the_next_start(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = run / f".gnnsys-tmp.{dead}.checkpoint.pt.abc123"
    left.write_bytes(b"half a checkpoint")
    mine = run / f".gnnsys-tmp.{os.getpid()}.checkpoint.pt.xyz"   # a live writer's: kept
    mine.write_bytes(b"being written")
    fit(_config(run), tiny_graph(num_nodes=60))
    assert not left.exists() and mine.exists()


def test_resume_refuses_changed_model_and_applies_a_new_lr(tmp_path):
    run, graph = tmp_path / "run", tiny_graph(num_nodes=80)
    fit(_config(run), graph)
    saved = (run / "config.yaml").read_text()
    with pytest.raises(ConfigError, match=r"changed model.hidden \(8 -> 16\)"):
        fit(_config(run, model={"hidden": 16}, run={"resume": True}), graph)
    assert (run / "config.yaml").read_text() == saved       # written only after the check
    fit(_config(run, train={"epochs": 3, "lr": 0.05}, run={"resume": True}), graph)
    resume = events(run, "resume")[-1]
    assert resume["changed"] == {"train.epochs": [2, 3], "train.lr": [0.003, 0.05]}
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.05


def test_a_diverging_run_stops_and_keeps_its_last_good_checkpoint(tmp_path):
    run, graph = tmp_path / "run", tiny_graph(num_nodes=80)
    fit(_config(run), graph)
    with pytest.raises(FloatingPointError, match="became non-finite in epoch .*kept") as err:
        fit(_config(run, train={"epochs": 6, "lr": 1e30}, run={"resume": True}), graph)
    bad = int(str(err.value).split("epoch ")[1].split(";")[0]) - 1   # counted from 1
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == bad - 1                        # the last finite epoch's
    assert all(torch.isfinite(v).all() for v in state["current"]["model"].values())
    assert max(r["epoch"] for r in read_metrics(run) if "loss" in r) == bad     # (from 1)


def test_non_finite_numbers_are_logged_as_null_and_torn_lines_skipped(tmp_path, caplog):
    run = RunDir(tmp_path)
    run.log("epoch", {"epoch": 0, "loss": float("nan"), "val": np.float32("inf"), "x": [1.0, -math.inf]})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 1, "loss": 0.')                  # a write cut short
    records = read_metrics(tmp_path)
    assert records[0]["loss"] is None and records[0]["val"] is None
    assert records[0]["x"] == [1.0, None] and len(records) == 1
    assert "metrics.jsonl:2 is not valid JSON; skipped" in caplog.text
    json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])   # strict JSON


def test_non_finite_features_are_refused_at_load(tmp_path, monkeypatch):
    import dataclasses
    from gnnsys.datasets import for_run
    graph = tiny_graph(num_nodes=60)
    x = graph.x.copy()
    x[[7, 9], 2] = [np.nan, np.inf]
    monkeypatch.setattr(for_run, "load_dataset",
                        lambda *a, **k: dataclasses.replace(graph, x=x))
    with pytest.raises(ValueError, match=r"'synthetic-small': 2 feature rows hold NaN or "
                                         r"infinite values \(first: row 7\)"):
        for_run.load_run_graph(_config(tmp_path))


def test_partitions_of_changed_dataset_files_are_never_reused(tmp_path):
    from gnnsys.partition_cache import ensure_partitions
    from gnnsys.testing import shared_data_dir
    from partition.format import PartitionError
    if shared_data_dir() is None:
        pytest.skip("needs ../shared/data (cora)")
    bundle = tmp_path / "data" / "bundles" / "static" / "cora.npz"
    bundle.parent.mkdir(parents=True)
    with np.load(shared_data_dir() / "static" / "cora.npz") as arrays:
        cora = dict(arrays)
    np.savez(bundle, **cora)

    def config(**partition):
        return from_dict({"dataset": {"name": "cora", "root": str(tmp_path / "data")},
                          "cluster": {"workers": 2},
                          "partition": {"method": "random", **partition}})
    explicit = config(dir=str(tmp_path / "parts"))
    ensure_partitions(explicit, progress=False)
    default = ensure_partitions(config(), progress=False).path
    # the file edited in place: same size, same modification time, other content
    before = bundle.stat()
    np.savez(bundle, **{**cora, "y": cora["y"][::-1].copy()})
    os.utime(bundle, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert bundle.stat().st_size == before.st_size
    with pytest.raises(PartitionError, match="was built with dataset.files='cora.npz: "):
        ensure_partitions(explicit, progress=False)
    assert ensure_partitions(config(), progress=False).path != default   # built anew


def test_a_repeated_temporal_run_moves_the_previous_one_aside(tmp_path):
    from tests.temporal.conftest import _tiny_config, make_tiny_graph
    graph = make_tiny_graph()
    fit(_tiny_config(tmp_path), graph)
    first = (tmp_path / "run" / "metrics.jsonl").read_text()
    fit(_tiny_config(tmp_path), graph)
    kept = list((tmp_path / "run" / "previous").glob("*/metrics.jsonl"))
    assert [p.read_text() for p in kept] == [first]          # not appended to, not lost
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count('"kind": "start"') == 1


def test_a_damaged_dataset_cache_says_how_to_rebuild(tmp_path):
    from gnnsys.datasets import DatasetError
    from gnnsys.datasets.cache import load_or_build
    load_or_build(tmp_path / "cached", lambda: tiny_graph(num_nodes=50))
    (tmp_path / "cached" / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match=r"the cached graph in .* is damaged \(JSONDecodeError"
                                           r".*delete that directory and the next run rebuilds"):
        load_or_build(tmp_path / "cached", lambda: tiny_graph(num_nodes=50))


def test_resume_onto_changed_data_is_one_line(tmp_path):
    """The bundle edited in place (same size, same time): --resume refuses it by content.
    A graph handed over in memory with another class count: the cause, not torch's size
    mismatch."""
    g = tiny_graph(num_nodes=120, num_features=4)
    rows = np.repeat(np.arange(120), np.diff(g.indptr))
    bundle = tmp_path / "g.npz"
    np.savez(bundle, edge_index=np.stack([g.indices, rows]), y=g.y, x=g.x)
    data = {"mode": "minibatch", "dataset": {"path": str(bundle)},
            "model": {"hidden": 8, "layers": 2},
            "sampler": {"fanouts": [3, 3], "batch_size": 64, "threads": 1},
            "train": {"epochs": 1, "progress": False}, "run": {"dir": str(tmp_path / "run")}}
    gnnsys.Trainer(data).fit()
    before = bundle.stat()
    np.savez(bundle, edge_index=np.stack([g.indices, rows]), y=g.y, x=g.x + 1)
    os.utime(bundle, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert bundle.stat().st_size == before.st_size
    data["train"]["epochs"], data["run"]["resume"] = 2, True
    with pytest.raises(ConfigError, match=r"the dataset's files changed since the checkpoint"
                                          r" .*restore them, or drop --resume"):
        gnnsys.Trainer(data).fit()
    memory = {**data, "dataset": {}, "run": {"dir": str(tmp_path / "mem")}}
    gnnsys.Trainer(memory, data=g).fit()
    memory["run"] = {"dir": str(tmp_path / "mem"), "resume": True}
    with pytest.raises(ConfigError, match=r"holds a model this run's data no longer fits .*"
                                          r"restore it, or drop --resume"):
        gnnsys.Trainer(memory, data=dataclasses.replace(g, num_classes=5)).fit()


def test_a_crafted_file_of_any_kind_runs_nothing(tmp_path, capsys):
    """The sweep over what a user hands gnnsys: a YAML config (file or --set) with python
    tags, a dataset bundle and a query file that are pickled .npz, and a pickled
    checkpoint under predict and export each fail in one line, and nothing they hold
    runs (unpickled, the payload would make the marker)."""
    from gnnsys import cli
    from gnnsys.temporal.queries import read_queries
    marker = tmp_path / "pwned"
    tag = f"!!python/object/apply:os.makedirs [{marker}]"
    (tmp_path / "tagged.yaml").write_text(f"mode: minibatch\ntrain:\n  epochs: {tag}\n")
    evil = np.array([_Payload(marker)], dtype=object)
    np.savez(tmp_path / "bundle.npz", edge_index=evil, x=evil, y=evil)
    np.savez(tmp_path / "queries.npz", src=evil, dst=evil, t=evil)
    run = tmp_path / "run"                      # a finished run but for its checkpoint
    run.mkdir()
    (run / "config.yaml").write_text("mode: minibatch\n")
    (run / "metrics.jsonl").write_text('{"kind": "final", "epochs": 1}\n')
    torch.save({"epoch": 0, "best": {"model": _Payload(marker)}}, run / "checkpoint.pt")
    quickstart = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
    for argv in (["train", "--config", str(tmp_path / "tagged.yaml")],
                 ["train", "--config", quickstart, "--set", f"train.epochs={tag}"],
                 ["train", "--config", quickstart, "--set", f"dataset.path={tmp_path}/bundle.npz",
                  "--set", f"run.dir={tmp_path / 'trained'}"],
                 ["predict", str(run), "--out", str(tmp_path / "p.npz")],
                 ["export", str(run), "--out", str(tmp_path / "m.pt")]):
        code = cli.main(argv)
        lines = capsys.readouterr().err.strip().splitlines()
        assert code in (1, 2) and len(lines) == 1 and lines[0].startswith("gnnsys:"), \
            (argv, lines)
        assert "weights_only" not in lines[0]     # torch's advice to unpickle: never given
    with pytest.raises(ConfigError, match="queries.npz is not a readable query file"):
        read_queries(tmp_path / "queries.npz")
    assert not marker.exists()
