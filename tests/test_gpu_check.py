"""scripts/gpu_check.py runs end to end in numba's CUDA simulator (issue #17: the script is
known to work before any GPU minutes are spent on it).

It runs as a child process (the simulator must be on before numba.cuda is imported). Every
step must succeed, every mode must train and report a metric, and no target may claim a
verdict: simulated times say nothing about a GPU.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_in_the_simulator(tmp_path):
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    child = subprocess.run([sys.executable, "scripts/gpu_check.py", "--simulate",
                            "--out", str(tmp_path)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["machine"]["simulated"] is True
    for step in ("tests", "sampler", "modes"):
        assert report[step]["ok"], f"{step}: {report[step].get('error')}"
    # the GPU-marked tests were found (and skip without a real GPU)
    assert report["tests"]["result"]["counts"].get("skipped", 0) > 0
    assert "tests/samplers/test_fused_gpu.py" in report["tests"]["result"]["files"]
    # the sampler benchmark timed every method, the fused one on the simulated device
    medians = report["sampler"]["result"]["median_s"]
    for method in ("fused", "fused_graph_host", "fused_all_host", "fused_tiered",
                   "sample_only", "index_select"):
        assert medians[method] > 0, method
    modes = report["modes"]["result"]
    assert set(modes) == {"minibatch", "temporal", "fullgraph"}
    for name, run in modes.items():
        assert run["epoch_s"] > 0 and 0.0 <= run["value"] <= 1.0, (name, run)
    assert [t["met"] for t in report["targets"]] == [None] * len(report["targets"])
    text = (tmp_path / "gpu_check.md").read_text()
    verdicts = [line for line in text.splitlines()
                if line.endswith("| not yet measured on hardware |")]
    assert len(verdicts) == len(report["targets"])
    assert "| minibatch | sage |" in text
