"""Every failure a user can cause ends in one line on stderr naming the file or key and what
to do, exit code 2 for bad input; --debug / GNNSYS_DEBUG=1 add the traceback."""
import errno
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gnnsys import cli
from gnnsys.datasets import load_dataset
from gnnsys.errors import DatasetError, WorkerFailure

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    return code, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("gnnsys:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_config_path_that_is_a_directory(capsys, tmp_path):
    code, err = run_cli(capsys, "train", "--config", str(tmp_path))
    assert code == 2 and "is a directory" in one_line(err) and str(tmp_path) in err


@pytest.mark.parametrize("item", ["train.epochs", "=3", "sampler.fanouts=[5,"])
def test_malformed_set(capsys, item):
    code, err = run_cli(capsys, "train", "--config", QUICKSTART, "--set", item)
    assert code == 2 and item in one_line(err)


def test_out_of_range_key(capsys):
    code, err = run_cli(capsys, "train", "-c", QUICKSTART,
                        "--set", "fullgraph.quantization.group_size=0")
    assert code == 2 and "'fullgraph.quantization.group_size' must be >= 1" in one_line(err)


def test_cuda_without_a_gpu_is_refused_before_any_work(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, err = run_cli(capsys, "train", "-c", QUICKSTART,
                        "--set", "sampler.device=cuda")
    assert code == 2 and "'sampler.device' is 'cuda' but no CUDA GPU" in one_line(err)
    code, err = run_cli(capsys, "train", "-c", QUICKSTART, "--set", "train.device=cuda")
    assert code == 2 and "'train.device' is 'cuda' but torch sees no CUDA GPU" in one_line(err)


@pytest.fixture()
def failing_train(monkeypatch):
    """Make `gnnsys train` raise the given error (where a real run would)."""
    def arm(err):
        def _train(args):
            raise err
        monkeypatch.setattr(cli, "_train", _train)
    return arm


def test_disk_full_is_one_line(capsys, failing_train):
    failing_train(OSError(errno.ENOSPC, "No space left on device", "/runs/a/metrics.jsonl"))
    code, err = run_cli(capsys, "train", "-c", QUICKSTART)
    assert code == 1 and "no space left" in one_line(err) and "/runs/a/metrics.jsonl" in err


def test_worker_failure_after_max_failures_is_one_line(capsys, failing_train):
    failing_train(WorkerFailure("worker 1 died (RayActorError); gave up after "
                                "cluster.max_failures=1 recoveries"))
    code, err = run_cli(capsys, "train", "-c", QUICKSTART)
    assert code == 1 and "training failed: worker 1 died" in one_line(err)


def test_unexpected_error_is_one_line_and_debug_shows_the_traceback(capsys, failing_train,
                                                                    monkeypatch):
    failing_train(KeyError("x"))
    code, err = run_cli(capsys, "train", "-c", QUICKSTART)
    assert code == 1 and "--debug" in one_line(err)
    code, err = run_cli(capsys, "train", "--debug", "-c", QUICKSTART)
    assert code == 1 and "Traceback" in err
    monkeypatch.setenv("GNNSYS_DEBUG", "1")
    code, err = run_cli(capsys, "train", "-c", QUICKSTART)
    assert "Traceback" in err


@pytest.fixture()
def bundle_root(tmp_path, monkeypatch):
    """A data root whose bundles/static/cora.npz the test writes (found before shared data)."""
    monkeypatch.delenv("GNNSYS_SHARED_DATA", raising=False)
    (tmp_path / "bundles" / "static").mkdir(parents=True)
    return tmp_path, tmp_path / "bundles" / "static" / "cora.npz"


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "missing array"])
def test_corrupt_bundle_names_the_file(bundle_root, damage):
    root, path = bundle_root
    np.savez(path, edge_index=np.zeros((2, 3), np.int64), num_nodes=np.array(4),
             y=np.zeros(4, np.int64), num_classes=np.array(2))
    if damage == "not a zip":
        path.write_bytes(b"garbage")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        with zipfile.ZipFile(path, "w") as z:          # a zip without num_nodes
            z.writestr("y.npy", b"")
    with pytest.raises(DatasetError) as err:
        load_dataset("cora", root=root)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("stop, code, says", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGHUP, 129, "hung up (SIGHUP")])
def test_sigterm_ends_the_cli_like_ctrl_c(tmp_path, stop, code, says):
    """The CLI's SIGTERM / SIGHUP handler raises like Ctrl-C: one line, exit 128 + the
    signal, cleanup runs; also when a library turned the exception into a plain
    KeyboardInterrupt (Ray's ray.get does: a 2-worker run exited 130)."""
    script = ("import sys, time, gnnsys.cli as c\n"
              "def slow(args):\n"
              "    try:\n        print('ready', flush=True)\n        time.sleep(60)\n"
              "    except KeyboardInterrupt:\n        raise KeyboardInterrupt from None\n"
              "    finally:\n        open(%r, 'w').close()\n"
              "c._train = slow\n"
              "raise SystemExit(c.main(['train', '-c', %r]))\n"
              % (str(tmp_path / "cleaned"), QUICKSTART))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GNNSYS_DEBUG": ""})
    assert proc.stdout.readline().strip() == "ready"   # inside the run, handler installed
    proc.send_signal(stop)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert says in one_line(err) and (tmp_path / "cleaned").exists()


def test_paths_that_are_not_what_they_should_be_are_one_line(capsys, tmp_path):
    """run.dir a file or a dangling link; a dataset.path that is a text file, a device or a
    pipe (which would block for ever); a report of a folder with no run, or of a log whose
    lines are not records: each one line, exit 2."""
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "text.npz").write_text("hello")
    os.mkfifo(tmp_path / "fifo.npz")
    (tmp_path / "empty").mkdir()
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "metrics.jsonl").write_text("[1, 2]\n")
    train = ("train", "--config", QUICKSTART, "--set", "train.progress=false")
    cases = [(train + ("--set", f"run.dir={tmp_path / 'afile'}"), "is a file, not a directory"),
             (train + ("--set", f"run.dir={tmp_path / 'dangling'}"), "is a link to nowhere"),
             (train + ("--set", f"dataset.path={tmp_path / 'text.npz'}"),
              "is not a readable .npz (not a zip archive"),
             (train + ("--set", "dataset.path=/dev/zero"), "is not a regular file"),
             (train + ("--set", f"dataset.path={tmp_path / 'fifo.npz'}"), "is not a regular file"),
             (("report", str(tmp_path / "empty")), "metrics.jsonl is missing or empty"),
             (("report", str(tmp_path / "lists")), "metrics.jsonl:1 is not a gnnsys run record")]
    for argv, message in cases:
        code, err = run_cli(capsys, *argv)
        assert code == 2 and message in one_line(err), (argv, err)
    assert (tmp_path / "afile").read_text() == "mine"


def test_version_and_a_closed_pipe():
    out = subprocess.run([sys.executable, "-m", "gnnsys.cli", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("gnnsys 0.")
    # `gnnsys datasets | head -1`: the reader closes the pipe early, nothing is printed
    reader = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL)
    lister = subprocess.run([sys.executable, "-c", "import sys, gnnsys.cli as c\n"
                             "for _ in range(200): sys.argv = ['gnnsys', 'datasets']; c.main()"],
                            stdout=reader.stdin, stderr=subprocess.PIPE, text=True)
    reader.stdin.close()
    reader.wait()
    assert "BrokenPipeError" not in lister.stderr and "Traceback" not in lister.stderr, \
        lister.stderr[-2000:]


def test_a_cluster_address_where_nothing_answers_is_one_line(capsys, tmp_path):
    """ray.init waits for ever on an address where no head listens: refused at once."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]               # closed again: nothing listens there
    code, err = run_cli(capsys, "train", "--config", QUICKSTART, "--set", "cluster.workers=2",
                        "--set", f"cluster.address=127.0.0.1:{port}",
                        "--set", f"run.dir={tmp_path / 'run'}",
                        "--set", f"partition.dir={tmp_path / 'parts'}")
    assert code == 2 and f"cluster.address 127.0.0.1:{port}: no Ray head answers" in \
        one_line(err)


def test_rays_out_of_memory_report_is_one_short_line():
    class OutOfMemoryError(Exception):          # ray.exceptions.OutOfMemoryError's message
        pass
    text = ("2 worker(s) were killed due to the node running low on memory. Memory on the "
            "node (IP: 10.0.0.2, ID: 5de8) was 23.10GB used / 23.54GB limit (0.98) OOM kill "
            "reason: ... Ray killed 2 worker(s) based on the killing policy ... " + "x" * 3000)
    code, line = cli.explain(OutOfMemoryError(text))
    assert code == 1 and len(line) < 200 and "(23.10GB used / 23.54GB limit)" in line


def test_the_final_line_is_one_readable_summary():
    line = cli.final_line({"epochs": 3, "best_epoch": 1, "val_acc": 0.5, "rows_sent": 0,
                           "partition": [{"rank": 0, "inner": 10}], "exchange": "dedup",
                           "test_ap_inductive": float("nan"), "bytes": {"2": 0}})
    assert line == ("final: epochs 3, best_epoch 1, val_acc 0.5000, exchange dedup, "
                    "test_ap_inductive n/a")


def test_worker_lines_reach_a_log_without_colour_codes(monkeypatch):
    import io
    from gnnsys.distributed.launcher import plain_worker_lines
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    plain_worker_lines(io.StringIO())               # a pipe or a file: plain
    assert os.environ["RAY_COLOR_PREFIX"] == "0"
    monkeypatch.setenv("RAY_COLOR_PREFIX", "1")     # the user's choice stays
    plain_worker_lines(io.StringIO())
    assert os.environ["RAY_COLOR_PREFIX"] == "1"


def test_rays_token_notice_is_quiet_and_its_warning_when_off_is_not():
    import importlib.util
    import logging
    from gnnsys.distributed.launcher import RAY_TOKEN_LOGGER, _quiet_token_notice
    assert importlib.util.find_spec(RAY_TOKEN_LOGGER)      # the module that logs it
    logger, seen = logging.getLogger(RAY_TOKEN_LOGGER), []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage()[:36])
    logger.addHandler(handler)
    logger.addFilter(_quiet_token_notice)                  # as init_ray does
    try:
        logger.warning("Token authentication is enabled for this Ray cluster. Set ...")
        logger.warning("Token authentication is disabled for this Ray cluster. Anyone ...")
    finally:
        logger.removeFilter(_quiet_token_notice)
        logger.removeHandler(handler)
    assert seen == ["Token authentication is disabled for"]


def test_worker_lines_are_prefixed_by_rank():
    """Ray prefixes an actor's lines with its repr: "(rank 1 pid=N)", not "(_Worker pid=N)"."""
    from types import SimpleNamespace
    from gnnsys.distributed.launcher import _Worker
    assert _Worker.__repr__(SimpleNamespace(rank=1)) == "rank 1"



def test_a_config_or_run_file_that_is_a_pipe_or_a_device_never_hangs(tmp_path, capsys):
    """A named pipe no one writes to blocks its reader for ever (a device never ends):
    --config, and a run's metrics.jsonl / checkpoint.pt that report and predict read, are
    each one line, exit 2. A pipe with a writer (<(...), /dev/stdin) is still read."""
    import threading
    os.mkfifo(tmp_path / "fifo.yaml")
    for name in ("metrics.jsonl", "checkpoint.pt"):
        (tmp_path / name.split(".")[0]).mkdir()
        os.mkfifo(tmp_path / name.split(".")[0] / name)
    (tmp_path / "checkpoint" / "config.yaml").write_text("mode: minibatch\n")
    (tmp_path / "checkpoint" / "metrics.jsonl").write_text('{"kind": "final"}\n')
    read, write = os.pipe()
    os.write(write, b"train: {epochs: 0}\n")
    os.close(write)
    cases = [(["train", "--config", str(tmp_path / "fifo.yaml")],
              "is a pipe that nothing was written to"),
             (["train", "--config", "/dev/zero"], "is not a regular file (a device)"),
             (["report", str(tmp_path / "metrics")], "metrics.jsonl is not a regular file"),
             (["predict", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "p.npz")],
              "checkpoint.pt is not a regular file"),
             (["train", "--config", f"/dev/fd/{read}"], "'train.epochs' must be >= 1")]
    for argv, says in cases:
        got = []
        worker = threading.Thread(target=lambda: got.append(cli.main(argv)), daemon=True)
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive(), f"{argv} hangs"
        err = capsys.readouterr().err
        assert got == [2] and says in one_line(err), (argv, err)
    os.close(read)
