"""An event stream a temporal run cannot train on is refused at load, in one line that
names the cause (exit 2), not a raw exception from the sampler or a bare "empty split"."""
import numpy as np
import pytest
import yaml

from gnnsys.cli import main
from gnnsys.testing import tiny_temporal_graph

CASES = {
    "negative id": ({"src": "negative"}, "event 5 has src -3; node ids are rows 0..num_nodes-1"),
    "no events": ({"empty": True}, "holds no events (src, dst and t are empty)"),
    "inverted split times": ({"split_val_t": 400.0, "split_test_t": 300.0},
                             "split_val_t 400 is after split_test_t 300, the splits' times "
                             "are inverted"),
    "split times past the events": ({"split_val_t": 1000.0, "split_test_t": 2000.5},
                                    "no event falls in the validation split (train t <= 1000 "
                                    "< validation <= 2000.5 < test; the events' times span "
                                    "1..599)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stream_that_cannot_train_is_one_line(tmp_path, capsys, case):
    change, message = CASES[case]
    change = dict(change)
    g = tiny_temporal_graph()
    arrays = {"src": g.src.copy(), "dst": g.dst, "t": g.t}
    if change.pop("src", None):
        arrays["src"][5] = -3
    if change.pop("empty", None):
        arrays = {k: v[:0] for k, v in arrays.items()}
    np.savez(tmp_path / "stream.npz", **arrays, **change)
    config = {"mode": "temporal", "model": {"arch": "tgn"}, "dataset": {"path": str(tmp_path / "stream.npz")},
              "train": {"epochs": 1, "progress": False}, "run": {"dir": str(tmp_path / "run")},
              "cluster": {"launcher": "threads"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(tmp_path / "run.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gnnsys: dataset error: ") and message in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
