"""scripts/bench_temporal_step.py runs end to end (a few steps on CollegeMsg): both paths of
each comparison train, the table and the ratio print, and the path switch is restored."""
import sys

import pytest

from gnnsys.temporal import models
from gnnsys.testing import shared_data_dir

pytestmark = pytest.mark.skipif(shared_data_dir() is None,
                                reason="shared/data bundles are not present")


@pytest.mark.parametrize("compare, names", [
    ("attention", ("fused kernel", "tensor ops (baseline)")),
    ("threads", ("1 torch thread", "2 torch threads (baseline)"))])
def test_bench_temporal_step_runs_both_paths(compare, names, load_script, repo_root, tmp_path,
                                             monkeypatch, capsys, threads_restored):
    bench = load_script("bench_temporal_step")
    monkeypatch.chdir(tmp_path)                    # its run dir is relative
    monkeypatch.setattr(models, "fused_kernel_on", models.fused_kernel_on)
    monkeypatch.setattr(sys, "argv", [
        "bench_temporal_step.py", "--config", str(repo_root / "configs/tgn-collegemsg.yaml"),
        "--batches", "2", "--rounds", "2", "--warmup", "1", "--set", "train.seed=0",
        "--compare", compare, "--threads", "2"])
    bench.main()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(tuple(f"| {n} |" for n in names))]
    assert len(rows) == 2
    for row in rows:
        assert float(row.split("|")[2]) > 0
    assert f"{names[0]} against the baseline:" in out


def test_bench_temporal_step_attention_needs_tgn_threads_any_model(load_script, repo_root,
                                                                   tmp_path, monkeypatch,
                                                                   capsys, threads_restored):
    bench = load_script("bench_temporal_step")
    monkeypatch.chdir(tmp_path)                    # its run dir is relative
    argv = ["bench_temporal_step.py", "--config",
            str(repo_root / "configs/tgn-collegemsg.yaml"), "--set", "model.arch=jodie"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="model.arch tgn"):
        bench.main()
    # the threads comparison needs no neighbours: any temporal model
    monkeypatch.setattr(sys, "argv", argv + ["--compare", "threads", "--threads", "2",
                                             "--batches", "1", "--rounds", "1",
                                             "--warmup", "1"])
    bench.main()
    assert "1 torch thread against the baseline:" in capsys.readouterr().out
