"""gnnsys on an emulated 2-node cluster (two network namespaces on a private bridge, one
Ray node each): a minibatch run with one worker per node, a full-graph run submitted as a
Ray job, a run whose second node is cut off mid-training, and a teardown that leaves
nothing behind."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from gnnsys.netcluster import NetCluster, leftovers, unavailable_reason

REASON = unavailable_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
TIMEOUT_S = 20.0


def write_config(tmp_path, dist_config, name, mode="minibatch", **sections):
    config = dist_config(tmp_path, dataset={"name": "synthetic-tiny",
                                            "root": str(tmp_path / "data")},
                         run={"dir": str(tmp_path / name)}, **sections)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**config.to_dict(), "mode": mode}))
    return path


def train(cluster, config_path, *, popen=False):
    argv = [sys.executable, "-m", "gnnsys.cli", "train", "--config", str(config_path),
            "--set", f"cluster.address={cluster.address}"]
    if popen:
        return cluster.popen(0, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    # a run takes ~2 minutes alone here; the limit only stops a hang, so it leaves room
    # for a machine shared with other work
    return cluster.run(0, argv, timeout=400, stderr=subprocess.STDOUT, stdout=subprocess.PIPE,
                       capture_output=False)


def workers_in(cluster, k) -> int:
    """Ray actor processes of gnnsys's workers living in node k's namespace."""
    pids = subprocess.run(["ip", "netns", "pids", cluster.netns(k)], capture_output=True,
                          text=True, timeout=10).stdout.split()
    count = 0
    for pid in pids:
        try:
            count += Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::_Worker")
        except OSError:
            pass
    return count


def test_two_namespaces_train_and_survive_a_cut_link(tmp_path, dist_config):
    common = dict(cluster={"workers": 2, "cpus_per_worker": 1, "timeout_s": TIMEOUT_S,
                           "max_failures": 0},
                  sampler={"threads": 1}, partition={"dir": str(tmp_path / "parts")})
    minibatch = write_config(tmp_path, dist_config, "mb", train={"epochs": 2}, **common)
    fullgraph = write_config(tmp_path, dist_config, "fg", mode="fullgraph",
                             model={"arch": "gcn", "hidden": 16, "layers": 2},
                             train={"epochs": 2}, **common)
    cut = write_config(tmp_path, dist_config, "cut", train={"epochs": 500}, **common)

    with NetCluster(2, bandwidth="200mbit", cpus_per_node=1, dashboard=True) as cluster:
        prefix = cluster.prefix
        assert cluster.addresses[0] != cluster.addresses[1]
        # One CPU per node and per worker: a worker on each node, i.e. each address.
        seen = [0, 0]
        done = threading.Event()

        def watch():
            while not done.is_set():
                seen[:] = [max(s, workers_in(cluster, k)) for k, s in enumerate(seen)]
                time.sleep(0.5)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        run = train(cluster, minibatch)
        done.set()
        watcher.join()
        assert run.returncode == 0 and "final: epochs 2" in run.stdout, run.stdout[-3000:]
        assert seen == [1, 1], f"workers per node: {seen}"

        # A full-graph run as a Ray job submitted to the head: the job's driver joins the
        # cluster it runs in (no cluster.address), workers on both nodes. (The minibatch run
        # above covers a driver started on a node; one Ray start fewer keeps the suite short.)
        job = cluster.run(0, ["ray", "job", "submit", "--address", cluster.dashboard_url,
                              "--", sys.executable, "-m", "gnnsys.cli", "train", "--config",
                              str(fullgraph), "--set", f"run.dir={tmp_path / 'job'}"],
                          timeout=240, stderr=subprocess.STDOUT, stdout=subprocess.PIPE,
                          capture_output=False)
        assert job.returncode == 0 and "final: epochs 2" in job.stdout, job.stdout[-3000:]
        assert "succeeded" in job.stdout, job.stdout[-2000:]

        # Cut node 1's link after the first epoch: a bounded, one-line failure.
        driver = train(cluster, cut, popen=True)
        metrics = tmp_path / "cut" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and '"epoch"' in metrics.read_text()):
            assert driver.poll() is None and time.monotonic() < deadline, \
                "the run did not reach its first epoch"
            time.sleep(0.5)
        subprocess.run(["ip", "link", "set", cluster.host_veth(1), "down"], check=True,
                       timeout=10)
        cut_at = time.monotonic()
        try:
            out, _ = driver.communicate(timeout=TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run still trains {TIMEOUT_S + 60:.0f}s after its link was cut")
        took = time.monotonic() - cut_at
        assert driver.returncode != 0, out[-3000:]
        errors = [line for line in out.splitlines() if line.startswith("gnnsys: ")]
        assert len(errors) == 1 and "training failed: worker" in errors[0], out[-3000:]
        # the line names the node whose link was cut
        assert f"on node {cluster.addresses[1]} " in errors[0], errors[0]
        assert took < TIMEOUT_S + 40, (took, out[-2000:])
        print(f"cut link: failed {took:.0f}s later with: {errors[0]}")

    assert leftovers(prefix) == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=10)
    assert prefix not in ps.stdout           # every Ray process of the run had its temp dir
