import json

import pytest

from gnnsys.config import from_dict
from gnnsys.runlog import RunDir, read_metrics


def test_metrics_and_checkpoint_roundtrip(tmp_path):
    run = RunDir(tmp_path / "run")
    run.save_config(from_dict({}))
    run.log({"epoch": 0, "loss": 1.0})
    run.log({"epoch": 1, "loss": 0.5})
    assert [r["epoch"] for r in read_metrics(run.path)] == [0, 1]
    run.save_checkpoint({"epoch": 1, "w": [1, 2]})
    assert run.load_checkpoint()["w"] == [1, 2]
    run.truncate_metrics_after(0)
    assert [r["epoch"] for r in run.read_metrics()] == [0]
    assert (run.path / "config.yaml").exists()


def test_fresh_start_keeps_old_files(tmp_path):
    run = RunDir(tmp_path)
    run.log({"epoch": 0})
    run.save_checkpoint({"epoch": 0})
    run.start(resume=False)
    assert not (tmp_path / "metrics.jsonl").exists()
    kept = list((tmp_path / "previous").glob("*/metrics.jsonl"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["epoch"] == 0


def test_unreadable_checkpoint_is_an_error(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="unreadable"):
        RunDir(tmp_path).load_checkpoint()


def test_non_writer_writes_nothing(tmp_path):
    run = RunDir(tmp_path / "r", writer=False)
    run.log({"epoch": 0})
    run.save_checkpoint({"epoch": 0})
    assert not (tmp_path / "r").exists()
