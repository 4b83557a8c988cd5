"""`gnnsys report`: which charts each mode's metrics.jsonl gives, what they plot, the
errors, and one real train-then-report run."""
import json

import matplotlib.image
import pytest
import yaml

import gnnsys
from gnnsys import report, runlog
from gnnsys.cli import main

GENERAL = {"loss", "metrics", "time", "traffic"}
MODE_CHARTS = {"minibatch": {"feature_rows"}, "temporal": {"exchange_rows", "exchange_bytes"},
               "fullgraph": {"message_bytes", "phase_time"}, "link": set()}
ALL = GENERAL.union(*MODE_CHARTS.values(), {"memory"})   # memory: runs logging peak_rss_mb


def test_a_modes_charts_are_declared_beside_how_its_keys_combine():
    """A mode's own charts live on its class with its `reductions`: every key one draws
    is a key the mode declares; the general table draws the loop's keys alone."""
    from gnnsys.mode import MODES, mode_class
    for name in MODES:
        cls = mode_class(name)
        assert set(cls.charts) == MODE_CHARTS[name], name
        drawn = {key.removesuffix(".*") for _, _, keys in cls.charts.values() for key in keys}
        assert drawn <= set(cls.reductions), (name, drawn - set(cls.reductions))
    assert set(report.CHARTS) == GENERAL | {"memory"}
    assert set(report.chart_stems()) == ALL


def _comm(e):
    return {"comm_bytes_sent": 1000 * (e + 1), "comm_bytes_recv": 900 * (e + 1),
            "comm_wait_s": 0.01 * e}


def minibatch_records(epochs=4):
    out = []
    for e in range(epochs):
        out.append({"kind": "epoch", "epoch": e + 1, "loss": 2.0 / (e + 1), "epoch_s": 1.5, **_comm(e),
                    "remote_rows": 500 - 50 * e, "cache_hits": 300 + 50 * e, "local_rows": 900,
                    "batch_wait_s": 0.2, "bytes_sent": 12345,   # old key, not a minibatch chart
                    **({"val_acc": 0.5 + e / 20} if e % 2 else {})})
    return out + [{"kind": "final", "epochs": epochs, "test_acc": 0.81, "val_acc": 0.8}]


def temporal_records(epochs=3):
    out = [{"kind": "epoch", "epoch": e + 1, "loss": 0.7 - e / 10, "epoch_s": 3.0, **_comm(e), "rows_sent": 40,
            "rows_naive": 100, "bytes_sent": 4000, "bytes_naive": 10000, "exchange_s": 0.3,
            "val_ap": 0.6 + e / 20, "val_mrr": 0.4 + e / 20} for e in range(epochs)]
    return out + [{"kind": "final", "test_ap": 0.75, "test_mrr": 0.55,
                   "test_ap_inductive": 0.7}]


PHASES = ("comm", "quant", "central", "marginal", "wait")


def fullgraph_records(epochs=3, name="{}_s"):
    """`name`: how a phase's seconds key is spelled ("time_{}": an older gnnsys's log)."""
    out = []
    for e in range(epochs):
        times = {name.format(p): 0.01 * (k + 1) for k, p in enumerate(PHASES)}
        out.append({"kind": "epoch", "epoch": e + 1, "loss": 1.0 / (e + 1), "epoch_s": 0.4, **_comm(e), **times,
                    "bytes_sent": 7000, "train_acc": 0.3 + e / 10, "val_acc": 0.3 + e / 10,
                    "bytes_by_bits": {"32": 4000, "8": 2000, "2": 600, "4": 400}})
    return out + [{"kind": "final", "test_acc": 0.7, "bytes_per_epoch": 7000.0}]


def write_run(path, records, mode=None):
    """A run directory whose log starts with the loop's `start` record naming the mode."""
    path.mkdir(parents=True, exist_ok=True)
    start = [{"kind": "start", "mode": mode, "workers": 2, "epochs_from": 1}] if mode else []
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in start + records))
    return path


@pytest.fixture
def drawn(monkeypatch):
    """Charts as make_report hands them to _draw: {stem: (title, {label: [(epoch, y)]})}."""
    charts = {}
    real = report._draw

    def record(path, title, ylabel, lines):
        charts[path.stem] = (title, {label: points for label, points in lines})
        real(path, title, ylabel, lines)
    monkeypatch.setattr(report, "_draw", record)
    return charts


def _valid_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(path).shape[:2] == (450, 700)


@pytest.mark.parametrize("mode, records", [("minibatch", minibatch_records()),
                                           ("temporal", temporal_records()),
                                           ("fullgraph", fullgraph_records())])
def test_each_mode_gets_its_charts_and_only_those(tmp_path, drawn, mode, records):
    run = write_run(tmp_path / "run", records, mode)
    paths = report.make_report(run)
    assert {p.stem for p in paths} == GENERAL | MODE_CHARTS[mode]
    for p in paths:
        assert p.parent == run
        _valid_png(p)
    # only the PNGs are left: no temp files from the atomic writes
    assert sorted(f.name for f in run.iterdir()) == sorted(
        ["metrics.jsonl"] + [p.name for p in paths])
    assert all(f"run ({mode})" in title for title, _ in drawn.values())
    assert drawn["loss"][1]["loss"] == [(r["epoch"], r["loss"]) for r in records
                                        if r["kind"] == "epoch"]


def test_what_the_mode_charts_plot(tmp_path, drawn):
    report.make_report(write_run(tmp_path / "mb", minibatch_records(), "minibatch"))
    assert list(drawn["feature_rows"][1]) == ["remote_rows", "cache_hits", "local_rows"]
    assert drawn["metrics"][1] == {"val_acc": [(2, 0.55), (4, 0.65)]}   # evaluation epochs only
    assert "final: test_acc 0.8100" in drawn["metrics"][0]

    report.make_report(write_run(tmp_path / "tg", temporal_records(), "temporal"))
    assert drawn["exchange_rows"][1] == {"rows_naive": [(e, 100) for e in (1, 2, 3)],
                                         "rows_sent": [(e, 40) for e in (1, 2, 3)]}
    assert set(drawn["exchange_bytes"][1]) == {"bytes_naive", "bytes_sent"}
    assert len(drawn["loss"][1]["loss"]) == 3          # the final record is not an epoch
    assert "test_ap 0.7500, test_mrr 0.5500" in drawn["metrics"][0]

    report.make_report(write_run(tmp_path / "fg", fullgraph_records(), "fullgraph"))
    assert list(drawn["message_bytes"][1]) == ["bytes_sent", "bytes_by_bits[2]",
                                              "bytes_by_bits[4]", "bytes_by_bits[8]",
                                              "bytes_by_bits[32]"]
    assert drawn["message_bytes"][1]["bytes_by_bits[32]"] == [(e, 4000) for e in (1, 2, 3)]
    assert list(drawn["phase_time"][1]) == [f"{p}_s" for p in PHASES]
    assert set(drawn["metrics"][1]) == {"val_acc", "train_acc"}


def test_an_older_full_graph_log_draws_its_phase_times_under_todays_names(tmp_path, drawn):
    old = fullgraph_records(name="time_{}")
    old[0]["workers"] = [{"rank": 0, "time_comm": 0.5}, {"rank": 1, "time_comm": 0.25}]
    run = write_run(tmp_path / "old", old, "fullgraph")
    report.make_report(run)
    assert drawn["phase_time"][1] == {f"{p}_s": [(e, 0.01 * (k + 1)) for e in (1, 2, 3)]
                                      for k, p in enumerate(PHASES)}
    first = runlog.epochs(run)[0]
    assert "time_comm" not in first and first["workers"][1] == {"rank": 1, "comm_s": 0.25}


def test_logs_draw_the_charts_whose_keys_they_have(tmp_path):
    # a temporal log with rows_sent, bytes_sent, redundancy; no naive counts, no comm_*
    old_temporal = [{"kind": "epoch", "epoch": e, "loss": 0.5, "epoch_s": 2.0, "rows_sent": 40, "bytes_sent": 4000,
                     "redundancy": 2.5, "exchange_s": 0.1, "val_ap": 0.7} for e in range(2)]
    paths = report.make_report(write_run(tmp_path / "t", old_temporal, "temporal"))
    assert {p.stem for p in paths} == {"loss", "metrics", "time", "exchange_rows",
                                       "exchange_bytes"}
    old_fullgraph = [{k: v for k, v in r.items() if k not in ("bytes_by_bits", "epoch_s")
                      and not k.startswith("comm_")} for r in fullgraph_records()]
    paths = report.make_report(write_run(tmp_path / "f", old_fullgraph, "fullgraph"))
    assert {p.stem for p in paths} == {"loss", "metrics", "message_bytes", "phase_time"}


def test_a_run_of_unknown_mode_gets_only_the_general_charts(tmp_path):
    records = [{k: v for k, v in r.items() if k not in ("remote_rows", "cache_hits")}
               for r in minibatch_records()]
    paths = report.make_report(write_run(tmp_path / "run", records))
    assert {p.stem for p in paths} == GENERAL


def test_repeated_epochs_after_resume_keep_the_last_record(tmp_path, drawn):
    first = [{"kind": "epoch", "epoch": e, "loss": 1.0 + e, "val_acc": 0.1} for e in range(3)]
    redone = [{"kind": "epoch", "epoch": e, "loss": 10.0 + e, "val_acc": 0.9} for e in (1, 2, 3)]
    report.make_report(write_run(tmp_path / "run", first + redone, "minibatch"))
    assert drawn["loss"][1]["loss"] == [(0, 1.0), (1, 11.0), (2, 12.0), (3, 13.0)]
    assert drawn["metrics"][1]["val_acc"] == [(0, 0.1), (1, 0.9), (2, 0.9), (3, 0.9)]


def test_out_dir_and_cli(tmp_path, capsys):
    run = write_run(tmp_path / "run", fullgraph_records(), "fullgraph")
    out = tmp_path / "charts" / "here"
    assert main(["report", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(printed) == sorted(str(out / f"{s}.png") for s in
                                     GENERAL | MODE_CHARTS["fullgraph"])
    assert not list(run.glob("*.png"))


@pytest.mark.parametrize("records, says", [
    (None, "is missing or empty"),
    ([], "is missing or empty"),
    ([{"kind": "final", "test_acc": 0.5}, {"kind": "event", "event": "resume", "epoch": 0},
      {"kind": "start", "mode": "temporal"}], "has no epoch records")])
def test_no_epochs_is_one_clear_error(tmp_path, capsys, records, says):
    run = tmp_path / "run"
    if records is not None:
        write_run(run, records)
    with pytest.raises(ValueError, match=f"metrics.jsonl {says}; train first"):
        report.make_report(run)
    assert main(["report", str(run)]) == 2           # bad input: exit 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run / "metrics.jsonl") in err
    assert not (run / "loss.png").exists()


def test_random_bytes_or_a_file_are_one_line_not_a_warning_per_line(tmp_path, capsys):
    noise = bytes(range(256)) * 4 + b"\n".join(bytes([n, 255 - n]) * 7 for n in range(200))
    (tmp_path / "noise").mkdir()
    (tmp_path / "noise" / "metrics.jsonl").write_bytes(noise)
    (tmp_path / "file.bin").write_bytes(noise)
    for run, says in [("noise", "lines is JSON); is this a gnnsys run directory?"),
                      ("file.bin", "is a file, not a run directory")]:
        assert main(["report", str(tmp_path / run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


def test_many_torn_lines_are_named_three_then_counted(tmp_path, caplog):
    run = write_run(tmp_path / "run", minibatch_records(), "minibatch")
    with open(run / "metrics.jsonl", "a") as log:
        log.write("".join(f"torn {n}\n" for n in range(50)))
    assert report.make_report(run, tmp_path / "out")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 4 and warnings[0].endswith("metrics.jsonl:7 is not valid JSON; skipped")
    assert warnings[3].endswith("metrics.jsonl: 47 more lines are not valid JSON; skipped")


def test_train_quickstart_then_report(tmp_path, repo_root):
    data = yaml.safe_load((repo_root / "configs" / "quickstart.yaml").read_text())
    data["dataset"]["name"] = "synthetic-tiny"
    data["train"].update(epochs=2, progress=False)
    data["run"]["dir"] = str(tmp_path / "quick")
    gnnsys.Trainer(gnnsys.config.from_dict(data)).fit()
    paths = report.make_report(tmp_path / "quick")
    stems = {p.stem for p in paths}
    assert {"loss", "metrics", "time", "memory"} <= stems <= ALL - MODE_CHARTS["temporal"] - \
        MODE_CHARTS["fullgraph"]
    for p in paths:
        _valid_png(p)
