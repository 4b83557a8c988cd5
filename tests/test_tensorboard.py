"""`run.tensorboard: true` writes the run log's numbers as TensorBoard event files too:
every epoch scalar at step = epoch, the final metrics as final/<key>, the config as
text; off by default; a missing tensorboard package is one line naming the fix."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from gnnsys import cli
from gnnsys.config import ConfigError, from_dict
from gnnsys.runlog import epochs, final, scalars
from gnnsys.testing import tiny_graph
from gnnsys.training import fit

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")


def _config(run_dir, mode="fullgraph", epochs=2, **sections):
    data = {"mode": mode, "model": {"arch": "gcn" if mode == "fullgraph" else "sage",
                                    "hidden": 8, "layers": 2},
            "sampler": {"fanouts": [4, 4], "batch_size": 32, "threads": 1},
            "train": {"epochs": epochs, "progress": False}, "run": {"dir": str(run_dir)}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return from_dict(data)


def _events(run_dir):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = accumulator.EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return events


def _series(events, tag) -> dict:
    return {e.step: e.value for e in events.Scalars(tag)}


def test_event_files_hold_every_number_of_the_run_log(tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    metrics = fit(_config(run, mode="minibatch", run={"tensorboard": True},
                          cluster={"workers": 2, "launcher": "threads"},
                          partition={"dir": str(tmp_path / "parts")}),
                  tiny_graph(num_nodes=200))
    events = _events(run)
    logged = epochs(run)
    assert [r["epoch"] for r in logged] == [1, 2] and len(logged[0]["workers"]) == 2
    expected = {}                            # tag -> {step: value}, read from metrics.jsonl
    for record in logged:
        numbers = {k: v for k, v in record.items() if k not in ("kind", "time", "epoch")}
        numbers["workers"] = {f"rank{w.pop('rank')}": w for w in numbers["workers"]}
        for tag, value in scalars(numbers).items():
            expected.setdefault(tag, {})[record["epoch"]] = value
    for tag, value in final(run).items():
        if isinstance(value, (int, float)) and tag != "time":
            expected[f"final/{tag}"] = {metrics["epochs"]: value}
    for key in ("loss", "epoch_s", "val_acc", "comm_bytes_sent", "workers/rank1/epoch_s",
                "final/test_acc", "final/best_epoch", "final/peak_rss_mb"):
        assert key in expected, key
    assert sorted(events.Tags()["scalars"]) == sorted(expected)
    for tag, values in expected.items():
        assert _series(events, tag) == pytest.approx(values, rel=1e-6), tag
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert yaml.safe_load(text.strip("`").removeprefix("yaml\n")) == \
        yaml.safe_load((run / "config.yaml").read_text())


def test_a_resumed_run_continues_the_events_and_hides_the_epochs_it_redoes(tmp_path):
    pytest.importorskip("tensorboard")
    run, graph = tmp_path / "run", tiny_graph(num_nodes=60)
    fit(_config(run, run={"tensorboard": True}), graph)
    fit(_config(run, epochs=3, run={"tensorboard": True, "resume": True}), graph)
    events = _events(run)
    assert _series(events, "loss") == pytest.approx({r["epoch"]: r["loss"] for r in epochs(run)})
    assert list(_series(events, "final/test_acc")) == [3]   # the first run's final is hidden
    fit(_config(run, run={"tensorboard": True}), graph)     # a fresh run: old events aside
    assert list(_series(_events(run), "loss")) == [1, 2]
    # the first run's and the resumed one's event files, moved aside together
    assert len(list(run.glob("previous/*/tensorboard/events.out.tfevents.*"))) == 2


def test_off_by_default(tmp_path):
    assert from_dict({}).run.tensorboard is False
    fit(_config(tmp_path, epochs=1), tiny_graph(num_nodes=60))
    assert (tmp_path / "metrics.jsonl").exists() and not (tmp_path / "tensorboard").exists()


def test_nested_values_are_flattened_and_non_numbers_left_out():
    assert scalars({"epoch": 3, "loss": 0.5, "bytes_by_bits": {"8": 10, "4": {"x": 2}},
                    "ok": True, "name": "a", "nan": float("nan"), "none": None,
                    "workers": [{"rank": 0, "epoch_s": 1.0}, {"rank": 1, "epoch_s": 2.0}]},
                   "final/") == {"final/loss": 0.5, "final/bytes_by_bits/8": 10.0,
                                 "final/bytes_by_bits/4/x": 2.0, "final/workers/rank0/epoch_s":
                                 1.0, "final/workers/rank1/epoch_s": 2.0}


def test_a_missing_tensorboard_is_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)   # import fails
    with pytest.raises(ConfigError) as err:
        fit(_config(tmp_path / "run", run={"tensorboard": True}), tiny_graph(num_nodes=60))
    assert "\n" not in str(err.value) and 'pip install "gnnsys[tensorboard]"' in str(err.value) \
        and "run.tensorboard: false" in str(err.value)
    assert not (tmp_path / "run").exists()
    code = cli.main(["train", "--config", QUICKSTART, "--set", f"run.dir={tmp_path / 'cli'}",
                     "--set", "run.tensorboard=true"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gnnsys:")]
    assert code == 2 and len(lines) == 1 and "gnnsys[tensorboard]" in lines[0], lines


@pytest.mark.parametrize("blocked", ["a file", "a read-only folder"])
def test_a_tensorboard_folder_that_cannot_be_written_is_one_line(tmp_path, capsys, blocked):
    """TensorBoard's writer fails in a thread of its own (a traceback, a b'...' path): the
    folder is tried first and named in one line, exit 2."""
    import subprocess
    pytest.importorskip("tensorboard")
    train = ["train", "--config", QUICKSTART, "--set", "dataset.name=synthetic-tiny",
             "--set", "train.progress=false", "--set", f"run.dir={tmp_path}", "--set",
             "run.tensorboard=true"]
    assert cli.main(train + ["--set", "train.epochs=1"]) == 0
    capsys.readouterr()
    board = tmp_path / "tensorboard"
    resume = train + ["--set", "train.epochs=2", "--resume"]
    if blocked == "a file":
        shutil.rmtree(board)
        board.write_text("not a folder")
        code, err = cli.main(resume), capsys.readouterr().err
    elif os.geteuid() != 0:
        board.chmod(0o500)
        code, err = cli.main(resume), capsys.readouterr().err
    else:             # root writes anywhere: a read-only mount, in a namespace of its own
        script = (f"mount --bind {board} {board} && mount -o remount,ro,bind {board} || "
                  f"exit 99; exec {sys.executable} -m gnnsys.cli {' '.join(resume)}")
        try:
            got = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                                 text=True, timeout=300, env={**os.environ, "GNNSYS_DEBUG": ""})
        except FileNotFoundError:
            pytest.skip("no unshare to mount a read-only folder as root")
        if got.returncode == 99:
            pytest.skip("cannot mount a read-only folder here")
        code, err = got.returncode, got.stderr
    assert code == 2 and err.startswith(f"gnnsys: config error: run.tensorboard: cannot write "
                                        f"its events into {board} (") and \
        "set run.tensorboard: false" in err and err.count("\n") == 1, err
