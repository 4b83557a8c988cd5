"""What a run says per epoch, and how it counts: epochs from 1 on the console, in `--json`,
metrics.jsonl and TensorBoard (older logs, counted from 0, read the same); progress bars
only on a terminal, one plain line per epoch elsewhere and with `train.progress: false`,
in every mode; after the first epoch, its cost and the run's projected length."""
from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from gnnsys import cli, runlog
from gnnsys.config import from_dict
from gnnsys.runlog import RunDir, events, final
from gnnsys.testing import tiny_graph, tiny_temporal_graph
from gnnsys.training import duration, fit

EPOCH_LINE = re.compile(r"^epoch (\d+): loss ", re.M)
PROJECTION = re.compile(r"^epoch (\d+) took [\d.]+ s of training \([\d.]+ CPU-s\)"
                        r"( \+ [\d.]+ s of evaluation)?; (\d+) more epochs? at that pace: "
                        r"~\d+(\.\d)? (s|min|h)", re.M)


def _config(run_dir, mode="minibatch", **train) -> dict:
    return {"mode": mode, "model": {"arch": "sage" if mode == "minibatch" else "gcn",
                                    "hidden": 16, "layers": 2},
            "sampler": {"fanouts": [4, 4], "batch_size": 32, "threads": 1},
            "train": {"epochs": 3, "lr": 0.01, "seed": 1, **train}, "run": {"dir": str(run_dir)}}


def test_one_epoch_count_on_the_console_in_json_the_log_and_tensorboard(capsys, tmp_path):
    """The same run's best epoch is one number in the final line, the --json line and
    metrics.jsonl, and it names the epoch line and record of the best validation."""
    pytest.importorskip("tensorboard")
    data = _config(tmp_path / "run", mode="fullgraph", epochs=4)
    data["dataset"], data["run"]["tensorboard"] = {"name": "synthetic-tiny"}, True
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(data))
    assert cli.main(["train", "--config", str(tmp_path / "run.yaml"), "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    printed = [int(n) for n in EPOCH_LINE.findall("\n".join(out))]
    human = re.search(r"\bbest_epoch (\d+)", next(s for s in out if s.startswith("final:")))
    as_json = json.loads(out[-1])
    logged = runlog.epochs(tmp_path / "run")
    best = as_json["best_epoch"]
    assert int(human.group(1)) == best == final(tmp_path / "run")["best_epoch"]
    assert [r["epoch"] for r in logged] == printed == [1, 2, 3, 4]
    first_best = max(logged, key=lambda r: r["val_acc"])      # selection keeps the first best
    assert best == first_best["epoch"]
    assert runlog.start(tmp_path / "run")["epochs_from"] == 1
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    board = accumulator.EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    board.Reload()
    assert [e.step for e in board.Scalars("loss")] == [1, 2, 3, 4]
    assert [e.step for e in board.Scalars("final/best_epoch")] == [4]


def test_a_log_an_older_gnnsys_wrote_counts_from_one_when_read(tmp_path):
    """Logs written before the start record said `epochs_from` counted from 0: readers
    (report, load_run, a resume's truncation) see them counted from 1, and a resume that
    rewrites one leaves it in the new count, shifted once."""
    old = [{"kind": "start", "mode": "minibatch"},
           {"kind": "epoch", "epoch": 0, "loss": 1.0}, {"kind": "epoch", "epoch": 1, "loss": 0.9},
           {"kind": "event", "event": "early_stop", "epoch": 1, "best_epoch": 0},
           {"kind": "event", "event": "resume", "from_epoch": 2},
           {"kind": "epoch", "epoch": 2, "loss": 0.8},
           {"kind": "final", "epochs": 3, "best_epoch": 0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    assert [r["epoch"] for r in runlog.epochs(tmp_path)] == [1, 2, 3]
    assert final(tmp_path)["best_epoch"] == 1 and final(tmp_path)["epochs"] == 3
    assert [(e["epoch"], e["best_epoch"]) for e in events(tmp_path, "early_stop")] == [(2, 1)]
    assert [e["from_epoch"] for e in events(tmp_path, "resume")] == [3]
    RunDir(tmp_path).truncate_metrics_after(2)      # a resume from the second epoch's checkpoint
    assert [r["epoch"] for r in runlog.epochs(tmp_path)] == [1, 2]
    assert runlog.start(tmp_path)["epochs_from"] == 1
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in written if r["kind"] == "epoch"] == [1, 2]


def test_bars_are_drawn_on_a_terminal_only(monkeypatch):
    """A log file, a pipe or a Ray worker's captured stderr gets no bar (and no redraws)."""
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert runlog.progress(range(3)).disable
    assert list(runlog.progress(range(3))) == [0, 1, 2]
    parent, child = os.openpty()
    with os.fdopen(child, "w") as terminal:
        monkeypatch.setattr("sys.stderr", terminal)
        assert not runlog.progress(range(3)).disable
        assert runlog.progress(range(3), enabled=False).disable
    os.close(parent)
    import tqdm.autonotebook                      # in a notebook tqdm draws a widget instead
    monkeypatch.setattr("sys.stderr", io.StringIO())
    monkeypatch.setattr(tqdm.autonotebook, "tqdm", type("Widget", (), {}))
    assert runlog.on_terminal()


@pytest.mark.parametrize("mode,bars", [("minibatch", True), ("minibatch", False),
                                       ("fullgraph", True)])
def test_off_a_terminal_every_mode_prints_one_plain_line_per_epoch(capsys, tmp_path, mode,
                                                                   bars):
    """capsys's streams are no terminal: no bar redraws reach them, and every epoch is one
    line, with train.progress off too and in full-graph runs (one step per epoch)."""
    fit(from_dict(_config(tmp_path / "run", mode=mode, progress=bars)),
        tiny_graph(num_nodes=300, num_features=8, seed=3))
    out, err = capsys.readouterr()
    assert "\r" not in err and "\r" not in out and "it/s" not in err
    assert [int(n) for n in EPOCH_LINE.findall(out)] == [1, 2, 3]


def test_the_first_epoch_prints_its_cost_and_the_runs_projected_length(capsys, tmp_path):
    """A temporal run (whose length depends most on the data) says after its first epoch
    what it cost and how long the epochs left take at that pace; a resumed run says it of
    its own first epoch."""
    graph = tiny_temporal_graph()
    data = {"mode": "temporal", "model": {"arch": "tgn", "heads": 2, "dropout": 0.0},
            "sampler": {"batch_size": 100, "threads": 1},
            "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                         "num_neighbors": 5, "eval_negatives": 4},
            "train": {"epochs": 3, "lr": 0.003, "progress": False, "seed": 0},
            "run": {"dir": str(tmp_path / "run")}}
    fit(from_dict(data), graph)
    said = PROJECTION.findall(capsys.readouterr().out)
    assert [(epoch, left) for epoch, _, left, *_ in said] == [("1", "2")]
    assert said[0][1]                             # the first epoch evaluated: its time counts
    data["train"]["epochs"], data["run"]["resume"] = 4, True
    fit(from_dict(data), graph)
    said = PROJECTION.findall(capsys.readouterr().out)
    assert said == []                             # its one epoch is its last: nothing to project
    data["train"]["epochs"] = 6
    fit(from_dict(data), graph)
    said = PROJECTION.findall(capsys.readouterr().out)
    assert [(epoch, left) for epoch, _, left, *_ in said] == [("5", "1")]


def test_run_lengths_read_as_people_say_them():
    assert [duration(s) for s in (4.2, 89, 600, 5399, 7200)] == \
        ["4 s", "89 s", "10 min", "90 min", "2.0 h"]


def test_no_shipped_config_promises_a_run_length():
    """A run's length depends on the machine and its load: a config's comment says what was
    measured where (a run prints its own projection), not "~10-20 min"."""
    configs = Path(__file__).resolve().parents[1] / "configs"
    promises = {p.name: m.group(0) for p in sorted(configs.glob("*.yaml"))
                if (m := re.search(r"~\d+(-\d+)? ?min", p.read_text()))}
    assert promises == {}
