"""`ray job submit --address <head> -- gnnsys train --config run.yaml` against a local
Ray head started for this test (dashboard on a free port, its own temp dir, token
authentication as README's block sets it up)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

RAY = shutil.which("ray")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(RAY is None, reason="the `ray` command is not installed")]

PORT_FLAGS = ("--port", "--dashboard-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--node-manager-port",
              "--object-manager-port", "--ray-client-server-port", "--runtime-env-agent-port")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head with a dashboard; yields the job-submission address. One for the module:
    a head takes many seconds to start, and no test changes it."""
    # Short temp path: Ray's unix sockets live under it and have a length limit.
    temp = Path(tempfile.mkdtemp(prefix="gnsrj", dir="/tmp"))
    ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
    # Token auth as README's block runs it (RAY_AUTH_MODE=token, head and client), with the
    # token in this test's own HOME (~/.ray/auth_token), not the user's.
    # RAY_TMPDIR: the head's address file (ray_current_cluster) lands in this test's own
    # directory, where a plain `ray.init()` with the same environment finds it.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_TMPDIR": str(temp), "HOME": str(temp)}
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    args = [RAY, "start", "--head", "--block", "--num-cpus=2", "--include-dashboard=true",
            "--dashboard-host=127.0.0.1", f"--temp-dir={temp / 'ray'}"]
    args += [f"{flag}={port}" for flag, port in ports.items()]
    log = open(temp / "head.log", "w")
    head = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{ports['--dashboard-port']}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/version", timeout=2)
                break
            except urllib.error.HTTPError:     # it answers (401 Unauthorized without the token)
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the Ray head did not come up:\n"
                                + (temp / "head.log").read_text()[-2000:])
                time.sleep(1)
        yield url, env
    finally:
        head.terminate()                       # --block: stops the processes it started
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            head.kill()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_job_submit_trains(tiny_parts, dist_config, ray_head):
    url, env = ray_head
    config = dist_config(tiny_parts, train={"epochs": 2})
    run_yaml = tiny_parts / "run.yaml"
    run_yaml.write_text(yaml.safe_dump(config.to_dict()))
    gnnsys = shutil.which("gnnsys")
    entry = [gnnsys] if gnnsys else [sys.executable, "-m", "gnnsys.cli"]
    done = subprocess.run([RAY, "job", "submit", "--address", url, "--", *entry, "train",
                           "--config", str(run_yaml)],
                          capture_output=True, text=True, env=env, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "final: epochs 2" in out and "workers 2" in out
    assert (tiny_parts / "run" / "metrics.jsonl").exists()


def write_run_yaml(tmp_path, dist_config, **sections) -> Path:
    """A 2-worker run of the registered synthetic-tiny (partitioned by the run itself)."""
    config = dist_config(tmp_path, dataset={"name": "synthetic-tiny",
                                            "root": str(tmp_path / "data")}, **sections)
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(yaml.safe_dump(config.to_dict()))
    return run_yaml


def gnnsys_train(run_yaml, env, *extra, **popen):
    gnnsys = shutil.which("gnnsys")
    entry = [gnnsys] if gnnsys else [sys.executable, "-m", "gnnsys.cli"]
    return subprocess.Popen([*entry, "train", "--config", str(run_yaml), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def test_plain_train_beside_a_running_head(tmp_path, dist_config, ray_head):
    """A running `ray start --head` must not make a plain multi-worker run fail ("num_cpus
    and num_gpus must not be provided"): the run starts its own private local cluster."""
    _, env = ray_head
    run_yaml = write_run_yaml(tmp_path, dist_config, train={"epochs": 1})
    env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
    out, _ = gnnsys_train(run_yaml, env).communicate(timeout=300)
    assert "final: epochs 1" in out, out[-3000:]


def test_missing_gpus_are_named_at_once(tmp_path, dist_config):
    run_yaml = write_run_yaml(tmp_path, dist_config, cluster={"gpus_per_worker": 1.0})
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_TMPDIR": tempfile.mkdtemp(prefix="gnsrg", dir="/tmp")}
    env.pop("RAY_ADDRESS", None)
    proc = gnnsys_train(run_yaml, env)
    out, _ = proc.communicate(timeout=120)       # well below start_timeout_s (180 s)
    shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    import torch
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    assert proc.returncode == 2, out[-3000:]
    assert "needs 2 GPUs but the Ray cluster has" in out and "cluster.gpus_per_worker" in out


def descendants(pid: int) -> set[int]:
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:       # a zombie (state Z) has exited; only its parent has not reaped it yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_driver_killed_with_sigkill_leaves_nothing_running(tmp_path, dist_config):
    """kill -9 of the driver: the actors (owned by it) and the private cluster it started
    all exit; no worker trains on."""
    run_yaml = write_run_yaml(tmp_path, dist_config, train={"epochs": 500})
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_TMPDIR": tempfile.mkdtemp(prefix="gnsrk", dir="/tmp")}
    env.pop("RAY_ADDRESS", None)
    driver = gnnsys_train(run_yaml, env)
    metrics = tmp_path / "run" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert driver.poll() is None, driver.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the run did not start training"
            time.sleep(1)
        spawned = descendants(driver.pid)
        assert len(spawned) >= 3          # the cluster's processes and the two workers
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 90
        while [p for p in spawned if alive(p)] and time.monotonic() < deadline:
            time.sleep(1)
        left = [p for p in spawned if alive(p)]
        assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left]
    finally:
        if driver.poll() is None:
            driver.kill()
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
