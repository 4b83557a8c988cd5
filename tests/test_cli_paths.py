"""The CLI's resume, partition, report and datasets paths: exit codes and what they say."""
import json

import pytest

from gnnsys.cli import main
from gnnsys.runlog import read_metrics


def train_args(repo_root, run_dir, epochs, *extra):
    return ["train", "--config", str(repo_root / "configs" / "quickstart.yaml"),
            "--set", "dataset.name=synthetic-tiny", "--set", f"train.epochs={epochs}",
            "--set", "train.progress=false", "--set", f"run.dir={run_dir}", *extra]


def test_resume_continues_a_finished_run(tmp_path, repo_root, capsys):
    run = tmp_path / "run"
    assert main(train_args(repo_root, run, 1)) == 0
    assert main(train_args(repo_root, run, 2, "--resume", "--json")) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final["epochs"] == 2
    records = read_metrics(run)
    assert [r["epoch"] for r in records if "loss" in r] == [1, 2]
    assert [r["from_epoch"] for r in records if r.get("event") == "resume"] == [2]


def test_final_line_prints_each_number_to_the_digits_it_has(tmp_path, repo_root, capsys):
    assert main(train_args(repo_root, tmp_path / "run", 1)) == 0
    final = [line for line in capsys.readouterr().out.splitlines() if line.startswith("final: ")]
    fields = dict(item.split(" ", 1) for item in final[0][len("final: "):].split(", "))
    assert fields["epochs"] == "1"
    assert len(fields["test_acc"].split(".")[1]) == 4          # a score: 4 decimals
    assert len(fields["peak_rss_mb"].split(".")[1]) == 1       # megabytes: 1 (was 806.2000)


def test_resume_of_an_empty_run_dir_is_one_line(tmp_path, repo_root, capsys):
    run = tmp_path / "never-trained"
    code = main(train_args(repo_root, run, 1, "--resume"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "holds no checkpoint" in err and str(run) in err


@pytest.mark.parametrize("command", [["partition", "--config"], ["train", "--config"]])
def test_missing_config_file_is_bad_input(tmp_path, capsys, command):
    missing = tmp_path / "nope.yaml"
    assert main([*command, str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and err.count("\n") == 1


def test_partition_of_an_unpartitionable_mode_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "temporal.yaml"
    cfg.write_text("mode: temporal\ndataset: {name: synthetic-tiny}\nmodel: {arch: tgn}\n")
    code = main(["partition", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("gnnsys: ") and err.count("\n") == 1
    assert "mode 'temporal'" in err


def test_report_of_a_path_that_is_no_run_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nothing-here")]) == 2
    err = capsys.readouterr().err
    assert "nothing-here" in err and err.count("\n") == 1


def test_datasets_under_an_empty_root_lists_everything_as_not_local(tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.delenv("GNNSYS_SHARED_DATA", raising=False)
    assert main(["datasets", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["name", "source", "task", "kind", "local"]
    rows = {line.split()[0]: line.split()[4] for line in lines[1:]}
    assert rows["ogbn-arxiv"] == "-"                   # nothing downloaded under this root
    assert rows["synthetic-tiny"] == "yes"             # generated: always available
