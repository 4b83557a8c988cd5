import json

import pytest

from gnnsys.config import from_dict
from gnnsys.runlog import RunDir, read_metrics


def test_metrics_and_checkpoint_roundtrip(tmp_path):
    run = RunDir(tmp_path / "run")
    run.save_config(from_dict({}))
    run.log("epoch", {"epoch": 1, "loss": 1.0})
    run.log("epoch", {"epoch": 2, "loss": 0.5})
    assert [r["epoch"] for r in read_metrics(run.path)] == [1, 2]
    run.save_checkpoint({"epoch": 1, "w": [1, 2]})
    assert run.load_checkpoint()["w"] == [1, 2]
    run.truncate_metrics_after(1)
    assert [r["epoch"] for r in read_metrics(run.path)] == [1]
    assert (run.path / "config.yaml").exists()


def test_fresh_start_keeps_old_files(tmp_path):
    run = RunDir(tmp_path)
    run.log("epoch", {"epoch": 0})
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
    run.log("epoch", {"epoch": 0})
    run.save_checkpoint({"epoch": 0})
    assert not (tmp_path / "r").exists()


def test_records_and_the_cli_print_strict_json_and_no_nan():
    """A metric over nothing (e.g. an AP over no inductive test events) is NaN: metrics.jsonl
    and `gnnsys train --json` write null (JSON has no NaN), the final line says n/a."""
    import numpy as np
    import torch
    from gnnsys.cli import _number
    from gnnsys.runlog import json_line
    line = json_line({"test_ap_inductive": float("nan"), "loss": np.float32(0.5),
                      "sizes": torch.tensor([1, 2]), "worst": [float("inf")]})
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in {line}")) == {
        "test_ap_inductive": None, "loss": 0.5, "sizes": [1, 2], "worst": [None]}
    assert _number(float("nan")) == "n/a" and _number(0.98765) == "0.9877"


COMPILES = """
from numba import njit
from gnnsys.runlog import announce_kernel_compiles
announce_kernel_compiles(); announce_kernel_compiles()     # registered once

def ours(x): return x + 1
def theirs(x): return x + 2
def ours_too(x): return x + 3
ours.__module__, ours_too.__module__ = "samplers.example", "gnnsys.example"
print(njit(theirs)(1), flush=True)       # a user's kernel: not ours to announce
print(njit(ours)(1), flush=True)
print(njit(ours_too)(1), flush=True)     # said once per process
"""


def test_compiling_kernels_is_said_once_when_it_happens():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", COMPILES], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["3", "2", "4"]
    assert out.stderr.count("compiling kernels (first run only") == 1, out.stderr
