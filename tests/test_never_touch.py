"""gnnsys never deletes or overwrites a file it did not create: the temp sweep
takes only its own dead temporaries, no write goes through a planted symbolic link, a
refused run leaves the last one as it was, a repeated run moves all of the old one aside,
and a full disk is an error naming the file, never a silently lost record."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnsys import cli
from gnnsys.config import from_dict
from gnnsys.partition_cache import ensure_partitions
from gnnsys.report import chart_stems, make_report
from gnnsys.runlog import RunDir, epochs
from gnnsys.testing import tiny_graph
from gnnsys.training import fit
from common.files import temp_prefix

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
DEAD = 999_999_999                    # above any pid_max: never a running process


def _train_args(run_dir, *extra):
    return ["train", "--config", QUICKSTART, "--set", "dataset.name=synthetic-tiny",
            "--set", "train.epochs=1", "--set", "train.progress=false",
            "--set", f"run.dir={run_dir}", *extra]


def _files(folder: Path) -> dict:
    """Every file under `folder` (but the lock, which holds the pid of its last run)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def test_the_sweep_takes_only_dead_gnnsys_temps_beside_a_run_and_a_partition_build(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".zshrc.1700000000.bak").write_text("mine")
    (home / ".config.2023.old").mkdir()
    (home / ".config.2023.old" / "settings").write_text("mine too")
    dead_file = home / f".gnnsys-tmp.{DEAD}.checkpoint.pt.abc123"
    dead_dir = home / f".gnnsys-tmp.{DEAD}.parts.xyz"
    live = home / f"{temp_prefix(home / 'checkpoint.pt')}live"     # this process writes it
    dead_file.write_bytes(b"half a checkpoint")
    dead_dir.mkdir()
    live.write_bytes(b"being written")
    fit(from_dict({"mode": "fullgraph", "model": {"arch": "gcn", "hidden": 8, "layers": 2},
                   "train": {"epochs": 1, "progress": False}, "run": {"dir": str(home)}}),
        tiny_graph(num_nodes=60))
    ensure_partitions(from_dict({"mode": "minibatch", "cluster": {"workers": 2},
                                 "dataset": {"name": "synthetic-tiny",
                                             "root": str(tmp_path / "data")},
                                 "partition": {"method": "random", "dir": str(home / "parts")}}),
                      progress=False)
    assert (home / ".zshrc.1700000000.bak").read_text() == "mine"
    assert (home / ".config.2023.old" / "settings").read_text() == "mine too"
    assert not dead_file.exists() and not dead_dir.exists() and live.exists()
    assert (home / "parts" / "manifest.json").exists()


def test_a_symlinked_lock_is_refused_in_one_line_and_its_target_untouched(tmp_path, capsys):
    """Chosen: refuse (exit 2, one line naming the link), never write through it."""
    target, run = tmp_path / "precious", tmp_path / "run"
    target.write_text("keep me")
    run.mkdir()
    (run / ".lock").symlink_to(target)
    assert cli.main(_train_args(run)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{run / '.lock'}: is a symbolic link" in err
    assert target.read_text() == "keep me" and not (run / "metrics.jsonl").exists()

    (run / ".lock").unlink()                             # metrics.jsonl: the same
    (run / "metrics.jsonl").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        RunDir(run).log("event", {"event": "x"})
    from gnnsys.datasets.cache import load_or_build     # the data root's build lock too
    (tmp_path / ".graph.lock").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        load_or_build(tmp_path / "graph", lambda: tiny_graph(num_nodes=10))
    assert target.read_text() == "keep me"


def test_a_refused_run_leaves_the_last_run_as_it_was_and_a_new_one_moves_all_of_it(
        tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(_train_args(run)) == 0
    make_report(run)                                     # the charts of `gnnsys report`
    (run / "notes.txt").write_text("the user's")         # not gnnsys's: stays where it is
    before = _files(run)
    assert {f"{c}.png" for c in chart_stems()} & set(before) and "config.yaml" in before

    assert cli.main(_train_args(run, "--set", "dataset.name=no-such-graph")) == 2
    assert "no-such-graph" in capsys.readouterr().err
    assert _files(run) == before                         # nothing moved, nothing written

    assert cli.main(_train_args(run)) == 0               # a repeated run
    [kept] = (run / "previous").iterdir()
    assert _files(kept) == {k: v for k, v in before.items() if k != "notes.txt"}
    assert not list(run.glob("*.png")) and (run / "notes.txt").read_text() == "the user's"


def test_a_run_moves_every_file_of_the_old_run_aside(tmp_path):
    old = ["metrics.jsonl", "checkpoint.pt", "config.yaml", "tensorboard/events",
           *(f"{c}.png" for c in chart_stems())]
    for name in old:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    RunDir(tmp_path).start(resume=False, also=[f"{c}.png" for c in chart_stems()])
    [kept] = (tmp_path / "previous").iterdir()
    assert set(_files(kept)) == set(old) and set(_files(tmp_path)) == {
        f"previous/{kept.name}/{name}" for name in old}


def test_a_short_metrics_write_is_an_error_naming_the_file(tmp_path, monkeypatch):
    run, write = RunDir(tmp_path), os.write
    with monkeypatch.context() as m:                   # the disk fills mid-record
        m.setattr(os, "write", lambda fd, data: write(fd, data[:7]))
        with pytest.raises(OSError) as short:
            run.log("epoch", {"epoch": 0, "loss": 1.0})
    with monkeypatch.context() as m:                   # ... or before it
        m.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(
            OSError(errno.ENOSPC, "No space left on device")))
        with pytest.raises(OSError) as none:
            run.log("epoch", {"epoch": 0, "loss": 1.0})
    for err in short.value, none.value:
        assert err.errno == errno.ENOSPC and err.filename == str(tmp_path / "metrics.jsonl")
        code, line = cli.explain(err)
        assert code == 1 and line.startswith(f"no space left on the device holding {tmp_path}")


def test_a_full_disk_under_the_data_root_names_the_file(tmp_path):
    """numpy's own error is `OSError: N requested and M written`, naming no file."""
    code = ("import errno, resource, signal, sys\n"
            "from gnnsys.datasets.cache import load_or_build\n"
            "from gnnsys.testing import tiny_graph\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
            "try:\n"
            "    load_or_build(sys.argv[1], lambda: tiny_graph(num_nodes=5000))\n"
            "except OSError as err:\n"
            "    print(err.errno == errno.ENOSPC, err.filename)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "graph")],
                         capture_output=True, text=True, timeout=120)
    ok, filename = out.stdout.split()
    assert ok == "True" and filename.endswith(".npy") and filename.startswith(str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [".graph.lock"]   # no temp left behind


def test_every_file_and_folder_gnnsys_writes_follows_the_umask(tmp_path):
    """One policy: checkpoint, config, metrics (also after a resume),
    lock, charts, partitions and the dataset cache all get the modes the user's umask
    gives; nothing is left private (0600 / 0700) because a temp file made it."""
    import stat
    import gnnsys
    from gnnsys.report import make_report
    data = {"mode": "minibatch", "dataset": {"name": "synthetic-tiny",
                                             "root": str(tmp_path / "data")},
            "model": {"hidden": 8, "layers": 2},
            "sampler": {"fanouts": [3, 3], "batch_size": 128, "threads": 1},
            "cluster": {"workers": 2, "launcher": "threads"},
            "partition": {"dir": str(tmp_path / "parts")},
            "train": {"epochs": 1, "progress": False}, "run": {"dir": str(tmp_path / "run")}}
    old = os.umask(0o027)
    try:
        gnnsys.Trainer(data).fit()
        data["train"]["epochs"], data["run"]["resume"] = 2, True
        gnnsys.Trainer(data).fit()
        make_report(tmp_path / "run")
    finally:
        os.umask(old)
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode)
             for p in tmp_path.rglob("*") if not p.is_symlink()}
    wrong = {p: oct(m) for p, m in modes.items()
             if m != (0o750 if (tmp_path / p).is_dir() else 0o640)}
    assert not wrong, wrong
    assert {"run/checkpoint.pt", "run/config.yaml", "run/metrics.jsonl", "run/.lock",
            "run/loss.png", "parts/manifest.json", "parts/part-0/y.npy"} <= set(modes)


def test_a_record_is_appended_whole_or_not_at_all(tmp_path, monkeypatch):
    """A full disk that cuts a metrics.jsonl record short takes its first part back: the
    file stays the records before it, each a whole line."""
    run, write = RunDir(tmp_path), os.write
    run.log("epoch", {"epoch": 0, "loss": 1.0})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with monkeypatch.context() as m:                   # the disk fills mid-record
        m.setattr(os, "write", lambda fd, data: write(fd, data[:7]))
        with pytest.raises(OSError, match="No space left"):
            run.log("epoch", {"epoch": 1, "loss": 0.5})
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    run.log("epoch", {"epoch": 1, "loss": 0.5})        # room again: the log goes on
    assert [r["epoch"] for r in epochs(tmp_path)] == [0, 1]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished minibatch run and a partition directory."""
    from partition.build import build_partitions
    tmp = tmp_path_factory.mktemp("finished")
    assert cli.main(_train_args(tmp / "run")) == 0
    build_partitions(tiny_graph(num_nodes=100), tmp / "parts", method="random", num_parts=2,
                     fanouts=[3, 3], batch_size=32)
    return tmp / "run", tmp / "parts"


def test_no_output_replaces_a_file_a_run_needs(finished, tmp_path, capsys):
    """export, predict and report --out: never a run's checkpoint, metrics, config, its
    folders, nor a partition file, whatever the path (a link counts as its target); a
    folder as --out is named as --out."""
    from gnnsys.datasets.registry import dataset_location
    run, parts = finished
    (tmp_path / "link.pt").symlink_to(run / "config.yaml")
    (tmp_path / "folder").mkdir()
    kept = {**_files(run), **{f"parts/{k}": v for k, v in _files(parts).items()}}
    cases = [("export", run, run / "checkpoint.pt", "would replace"),
             ("export", run, run / "metrics.jsonl", "would replace"),
             ("export", run, tmp_path / "link.pt", "would replace"),
             ("export", run, tmp_path / "folder", "is a directory"),
             ("predict", run, parts / "preds.npz", "inside the partition directory"),
             ("predict", run, run / "tensorboard" / "preds.npz", "would replace"),
             ("predict", run, run / "previous" / "preds.npz", "would replace"),
             ("predict", run, tmp_path / "folder", "is a directory"),
             ("predict", run, dataset_location("synthetic-tiny") / "x.npz", "which the run needs"),
             ("report", run, run / "tensorboard", "would replace"),
             ("report", run, parts / "part-0", "inside the partition directory")]
    for command, run_dir, out, says in cases:
        code = cli.main([command, str(run_dir), "--out", str(out)])
        line = capsys.readouterr().err.strip()
        assert code == 2 and line.startswith(f"gnnsys: config error: --out {out}") and \
            says in line and "\n" not in line, (command, out, line)
    assert {**_files(run), **{f"parts/{k}": v for k, v in _files(parts).items()}} == kept
    assert not (run / "tensorboard").exists() and not (run / "previous").exists()
    assert cli.main(["export", str(run), "--out", str(tmp_path / "model.pt")]) == 0


def test_a_full_disk_under_an_output_names_out_and_the_disk(finished, tmp_path, capsys,
                                                             monkeypatch):
    """predict / export: the line names --out and the file system, and does not send the
    user to --resume (the run lost nothing)."""
    run, _ = finished

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    for argv in (["export", str(run), "--out", str(tmp_path / "m.pt")],
                 ["predict", str(run), "--out", str(tmp_path / "p.npz"), "--workers", "1"]):
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", full)
            code = cli.main(argv)
        line = capsys.readouterr().err.strip()
        assert code == 1 and line.startswith("gnnsys: no space left on the device holding "
                                             f"--out {argv[3]}"), line
        assert "file system mounted at /" in line and "--resume" not in line and "\n" not in line
        assert not list(tmp_path.iterdir())            # no temp file left behind
