"""scripts/bench_temporal_pyg.py runs end to end (one epoch of CollegeMsg, 2 threads): both
sides train and evaluate, the header says how many torch threads each trained on, and the
table and ratio print."""
import sys

import pytest

from gnnsys.testing import shared_data_dir

pytestmark = pytest.mark.skipif(shared_data_dir() is None,
                                reason="shared/data bundles are not present")


def test_bench_temporal_pyg_runs_both_sides(load_script, repo_root, tmp_path, monkeypatch,
                                            capsys, threads_restored):
    bench = load_script("bench_temporal_pyg")
    monkeypatch.setattr(sys, "argv", [
        "bench_temporal_pyg.py", "--config", str(repo_root / "configs/tgn-collegemsg.yaml"),
        "--epochs", "1", "--threads", "2", "--run-dir", str(tmp_path / "run")])
    bench.main()
    out = capsys.readouterr().out
    assert "2 threads (torch trains on 1 in gnnsys, 2 in PyG)" in out   # batch 200 < 800
    for name in ("gnnsys temporal TGN", "PyG examples/tgn.py"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {name} |"))
        rate, val_ap, test_ap = (float(x.replace(",", "")) for x in row.split("|")[2:5])
        assert rate > 0 and 0 <= val_ap <= 1 and 0 <= test_ap <= 1
    assert "gnnsys / PyG events/s:" in out
