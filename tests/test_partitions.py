"""`gnnsys partition` / ensure_partitions: built once, reused, mismatch and corruption
named; `gnnsys report` draws the charts."""
import json

import pytest

from gnnsys.cli import main
from gnnsys.config import from_dict
from gnnsys.partitions import ensure_partitions, parts_dir


def config_for(tmp_path, **partition):
    return from_dict({"dataset": {"name": "synthetic-tiny", "root": str(tmp_path / "data")},
                      "model": {"layers": 2}, "sampler": {"fanouts": [5, 5]},
                      "cluster": {"workers": 2}, "partition": partition})


def test_partitions_are_built_once_then_reused(tmp_path):
    config = config_for(tmp_path, method="random")
    first = ensure_partitions(config, progress=False)
    assert first.path == parts_dir(config) and first.num_parts == 2
    stamp = (first.path / "manifest.json").stat().st_mtime_ns
    again = ensure_partitions(config, progress=False)
    assert (again.path / "manifest.json").stat().st_mtime_ns == stamp
    rebuilt = ensure_partitions(config, force=True, progress=False)
    assert (rebuilt.path / "manifest.json").stat().st_mtime_ns != stamp


def test_mismatched_directory_is_named(tmp_path):
    path = tmp_path / "shared-parts"
    ensure_partitions(config_for(tmp_path, method="random", dir=str(path)), progress=False)
    with pytest.raises(ValueError, match=f"{path} was made with method='random'"):
        ensure_partitions(config_for(tmp_path, method="stream", dir=str(path)), progress=False)


def test_cli_partition_verify_and_report(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps({"dataset": {"name": "synthetic-tiny",
                                           "root": str(tmp_path / "data")},
                               "model": {"layers": 2}, "sampler": {"fanouts": [5, 5]},
                               "cluster": {"workers": 2}, "partition": {"method": "metis"}}))
    assert main(["partition", "--config", str(cfg), "--verify"]) == 0
    assert "2 parts (metis), edge cut" in capsys.readouterr().out
    victim = next((tmp_path / "data" / "parts").glob("*/part-0/x.npy"))
    victim.write_bytes(victim.read_bytes()[:-8])
    assert main(["partition", "--config", str(cfg)]) == 1
    assert "part-0/x.npy has" in capsys.readouterr().err

    run = tmp_path / "run"
    run.mkdir()
    lines = [{"epoch": e, "loss": 1.0 / (e + 1), "val_acc": 0.5 + e / 10, "workers": [
        {"rank": r, "remote_rows": 10, "cache_hits": 5, "bytes_recv": 100,
         "fetch_wait_s": 0.1, "batch_wait_s": 0.1, "allreduce_s": 0.1} for r in (0, 1)]}
        for e in range(3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["report", str(run)]) == 0
    assert (run / "training.png").stat().st_size > 0
    assert (run / "communication.png").stat().st_size > 0
    assert main(["report", str(tmp_path / "missing")]) == 1
