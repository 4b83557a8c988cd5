"""scripts/bench_accuracy.py (issue 12): its one config table covers every static bundle the
registry and the shared manifest both hold, each protocol fits its file, and it runs end to
end on texas (1 split, 1 epoch)."""
import json
import re

import numpy as np
import pytest

from gnnsys.datasets.registry import registry
from gnnsys.testing import shared_data_dir

DATA = shared_data_dir()
pytestmark = pytest.mark.skipif(DATA is None, reason="shared/data bundles are not present")


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script("bench_accuracy")


def shared_static_bundles() -> dict:
    """Registry name -> file, for static bundles the shared manifest lists."""
    listed = set(re.findall(r"static/(\w+)\.npz", (DATA / "MANIFEST.md").read_text()))
    return {name: entry["file"] for name, entry in registry().items()
            if entry.get("source") == "bundle" and entry.get("file", "").startswith("static/")
            and entry["file"].removeprefix("static/").removesuffix(".npz") in listed}


def test_config_table_covers_every_shared_static_bundle(bench):
    bundles = shared_static_bundles()
    assert len(bundles) >= 13
    assert set(bench.CONFIGS) == set(bundles)
    assert set(bench.REFERENCES) == set(bundles)


def test_each_protocol_fits_its_file(bench):
    for name, file in shared_static_bundles().items():
        spec = bench.CONFIGS[name]
        with np.load(DATA / file, allow_pickle=False) as arrays:
            masks = arrays["train_mask"] if "train_mask" in arrays.files else None
        if spec["protocol"] == "splits":        # one run per standard split
            assert masks is not None and masks.ndim == 2 and masks.shape[0] >= spec["runs"], name
        elif spec["protocol"] == "random":      # stratified random splits: the file has none
            assert masks is None, name
        else:                                   # seeds over one public split
            assert spec["protocol"] == "seeds" and masks is not None, name
        assert spec["runs"] >= 3, name
        assert len(spec["fanouts"]) == spec["layers"], name


def test_runs_end_to_end_on_texas(bench, tmp_path, capsys):
    out = tmp_path / "rows.json"
    rows = bench.main(["--datasets", "texas", "--splits", "1", "--epochs", "1",
                       "--json", str(out)])
    captured = capsys.readouterr()
    assert "[1/1] texas: acc" in captured.err
    table = captured.out.splitlines()
    assert table[0].startswith("| dataset | metric |") and table[2].startswith("| texas | acc |")
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(rows))
    row = saved[0]
    assert row["runs"] == 1 and len(row["scores"]) == 1 and 0.0 <= row["mean"] <= 1.0
    assert row["reference"] is not None and "H2GCN" in row["source"]
    assert f"{row['mean'] - row['reference']:+.4f}" in table[2]
