"""`ray job submit --address <head> -- gnnsys train --config run.yaml` against a local
Ray head started for this test (dashboard on a free port, its own temp dir)."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
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


@pytest.fixture()
def ray_head():
    """A Ray head with a dashboard; yields the job-submission address."""
    # Short temp path: Ray's unix sockets live under it and have a length limit.
    temp = Path(tempfile.mkdtemp(prefix="gnsrj", dir="/tmp"))
    ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
    # No token auth for this private, loopback-only test cluster.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    args = [RAY, "start", "--head", "--block", "--num-cpus=2", "--include-dashboard=true",
            "--dashboard-host=127.0.0.1", f"--temp-dir={temp}"]
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
