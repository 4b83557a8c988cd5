"""The whole GPU validation in one command, in stages, cheapest first, sized for a short
device lease: the report is written after every stage, so a run killed at its time limit
still returns what it measured.

    python scripts/gpu_check.py --out $OUT               # a GPU machine: < 5 min (budget 290 s)
    python scripts/gpu_check.py --stages sampler modes   # the long stages, a second call
    python scripts/gpu_check.py --simulate               # numba's CUDA simulator, tiny sizes
    python scripts/gpu_check.py --cpu-baseline           # the minibatch run on this CPU

Stages (each one's failure is recorded and the next still runs):
  preflight: versions of the device, driver, torch, numba and numba-cuda; a numba kernel
             compiled and launched; a CUDA array handed to torch without a copy; mapped
             pinned host memory read by a kernel; the fused sampler on a tiny graph equal
             to the CPU kernel (scripts/gpu_probes.py);
  tests:     pytest -m gpu over the test files holding GPU-marked tests;
  races:     the GPU kernels against the CPU kernel over 40 batch seeds on a hub-heavy
             graph (thousands of threads claim the same hub: a lost atomic shows as a
             mismatch), then a small run under compute-sanitizer memcheck and racecheck;
  sampler:   scripts/bench_gpu_sampler.py on synthetic-products (fanouts 15,10,5, batch
             1024; the graph is generated on the machine's cores first, timed): graph +
             features on the device, both in pinned host memory, tiered; fused against
             sample-then-index_select, device copy bandwidth as ceiling;
  modes:     one short run per mode with train.device and sampler.device on the GPU:
             minibatch SAGE on synthetic-products, TGN on wikipedia, full-graph GCN on a
             500k-node synthetic graph; time per epoch and the metric.
Then one line per target (met / not met; in the simulator "not yet measured on hardware").
`--budget-s` stops starting stages whose estimate (STAGES below, measured on an H200)
would not fit; the report says which were left and why.
Writes <out>/gpu_check.json and <out>/gpu_check.md (the tables, ready for BENCHMARKS.md).
Exit status 1 when a stage failed, else 0 (a missed target is a finding, not a failure).

The device machine's image (torch, numba-cuda, torch_geometric; no ray, no pymetis) is
enough: nothing here imports Ray or partitions with METIS (tests/test_scripts.py runs this
script in the simulator with both imports blocked). The shared real data does not travel
with the working tree: copy `shared/data/temporal/wikipedia.npz` into a folder the run
carries and point $GNNSYS_SHARED_DATA at it, else the modes stage trains TGN on a small
synthetic event stream and says so.
"""
import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from common.files import atomic_write_bytes
import gpu_probes

# Minibatch SAGE on synthetic-products (the MINIBATCH config below), one epoch on the
# 2-core CPU dev machine (`--cpu-baseline`, 2026-11-23, load 4-6 on the 2 cores, so a
# quiet machine may be somewhat faster): BENCHMARKS.md, "GPU validation in one command".
# The GPU target is 10x that.
CPU_MINIBATCH_EPOCH_S = 765.0
MIN_MINIBATCH_SPEEDUP = 10.0
# Each mode's test metric after the run below on the CPU (`--cpu-baseline MODE`; the
# minibatch one with the 765 s epoch, the others 2026-11-27, 2 threads): the GPU run
# trains the same config with the same seeds. GPU kernels sum in another order (and
# scatter-adds are not deterministic), so "the same" means within SAME_METRIC_WITHIN.
CPU_METRICS = {"minibatch": 0.8524, "temporal": 0.9378, "fullgraph": 0.8457}
SAME_METRIC_WITHIN = 0.02

MINIBATCH = {"mode": "minibatch", "dataset": {"name": "synthetic-products"},
             "model": {"arch": "sage", "hidden": 256, "layers": 3, "dropout": 0.5},
             "sampler": {"fanouts": [15, 10, 5], "batch_size": 1024},
             "train": {"epochs": 1, "lr": 0.003}}
TEMPORAL = {"mode": "temporal", "dataset": {"name": "wikipedia"},
            "model": {"arch": "tgn", "heads": 2, "dropout": 0.1},
            "sampler": {"batch_size": 200},
            "train": {"epochs": 1, "lr": 0.0003}}
FULLGRAPH = {"mode": "fullgraph",
             "dataset": {"name": "synthetic-small", "params": {"num_nodes": 500_000}},
             "model": {"arch": "gcn", "hidden": 256, "layers": 2, "dropout": 0.5},
             "train": {"epochs": 10, "lr": 0.01, "eval_every": 10}}
MODE_CONFIGS = {"minibatch": MINIBATCH, "temporal": TEMPORAL, "fullgraph": FULLGRAPH}
# The simulator runs every GPU thread as a Python thread: tiny graphs, few picks.
SIMULATED = {
    "minibatch": {"dataset": {"name": "synthetic-tiny", "params": {"num_nodes": 60}},
                  "model": {"hidden": 16, "layers": 2},
                  "sampler": {"fanouts": [3, 2], "batch_size": 32}},
    "temporal": {"model": {"heads": 1}, "sampler": {"batch_size": 100},
                 "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                              "num_neighbors": 5}},
    "fullgraph": {"dataset": {"name": "synthetic-tiny", "params": {}},
                  "model": {"hidden": 16}, "train": {"epochs": 2, "eval_every": 2}},
}


# ----------------------------------------------------------------------------- stages
def preflight(simulate: bool, out: Path) -> dict:
    """The short probes (scripts/gpu_probes.py): each one's outcome, failures named."""
    results = gpu_probes.run_probes(gpu_probes.PREFLIGHT)
    if failed := [name for name, r in results.items() if not r["ok"]]:
        raise StepFailed("preflight: " + "; ".join(f"{n}: {results[n]['error']}"
                                                   for n in failed), results)
    return results


def race_check(simulate: bool, out: Path) -> dict:
    """GPU against CPU kernel over many seeds on a hub-heavy graph, then (on a GPU) the
    small graph under compute-sanitizer's memcheck and racecheck."""
    result = {"compare": gpu_probes.races()}
    sanitizer = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if simulate or not sanitizer:
        result["sanitizer"] = "not run: " + ("the simulator" if simulate else
                                             "compute-sanitizer not found")
        return result
    failures = []
    for tool in ("memcheck", "racecheck"):
        command = [sanitizer, "--tool", tool, "--error-exitcode", "99", sys.executable,
                   str(harness.ROOT / "scripts" / "gpu_probes.py"), "races", "--small"]
        started = time.perf_counter()
        try:
            child = subprocess.run(command, cwd=harness.ROOT, capture_output=True, text=True,
                                   timeout=150)
        except subprocess.TimeoutExpired:
            result[tool] = {"exit_code": None, "summary": "timed out after 150 s"}
            failures.append(f"{tool} timed out")
            continue
        output = child.stdout + child.stderr
        summary = [line.strip() for line in output.splitlines() if "SUMMARY" in line]
        result[tool] = {"exit_code": child.returncode, "summary": "; ".join(summary),
                        "seconds": round(time.perf_counter() - started, 1)}
        if child.returncode:
            result[tool]["output_tail"] = output[-3000:]
            failures.append(f"{tool}: exit {child.returncode} ({'; '.join(summary)})")
    if failures:
        raise StepFailed("races: " + "; ".join(failures), result)
    return result


TESTS_TIMEOUT_S = 150        # they took 47-55 s on an H200


def gpu_tests(simulate: bool, out: Path) -> dict:
    """pytest -m gpu over the files that hold GPU-marked tests (not the whole suite: the
    device image has no ray, and collecting its tests would fail). The whole output goes
    to <out>/pytest.txt; the report keeps the failures."""
    tests = (harness.ROOT / "tests").rglob("test_*.py")
    files = sorted(str(p.relative_to(harness.ROOT)) for p in tests if "mark.gpu" in p.read_text())
    # no warnings summary: numba's occupancy hints once buried the failures' tracebacks
    # faulthandler: a test hung past 60 s prints every thread's stack (one did, on an H200:
    # worker threads deadlocked in a CUDA backward pass)
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
               "-p", "no:warnings", "--tb=short", "-o", "faulthandler_timeout=60", *files]
    try:
        child = subprocess.run(command, cwd=harness.ROOT, capture_output=True, text=True,
                               timeout=TESTS_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                         for part in (err.stdout or "", err.stderr or ""))
        atomic_write_bytes(out / "pytest.txt", output.encode())
        raise StepFailed(f"GPU tests: still running after {TESTS_TIMEOUT_S} s (a hang? "
                         "pytest.txt has the stacks)", {"output_tail": output[-6000:]})
    output = child.stdout + child.stderr
    atomic_write_bytes(out / "pytest.txt", output.encode())
    summary = child.stdout.strip().splitlines()[-1] if child.stdout.strip() else ""
    counts = {kind: int(n) for n, kind in re.findall(
        r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
    result = {"command": " ".join(command[1:]), "files": files, "summary": summary,
              "counts": counts, "exit_code": child.returncode}
    if child.returncode not in (0, 5) or counts.get("failed") or counts.get("error"):
        start = output.find("= FAILURES =")
        result["failures"] = output[max(start, 0):][:6000] if start >= 0 else output[-6000:]
        result["failed_tests"] = [line.split(" - ")[0] for line in output.splitlines()
                                  if line.startswith(("FAILED ", "ERROR "))]
        raise StepFailed(f"GPU tests: {summary or 'no summary'} (exit {child.returncode})",
                         result)
    if not simulate and not counts.get("passed"):
        raise StepFailed(f"GPU tests: none ran on the GPU ({summary})", result)
    return result


def sampler_bench(simulate: bool, out: Path) -> dict:
    """scripts/bench_gpu_sampler.py in a process of its own: its --json results."""
    command = [sys.executable, str(harness.ROOT / "scripts" / "bench_gpu_sampler.py"), "--json",
               str(out / "sampler.json"), "--fanouts", "15", "10", "5", "--batch-size", "1024"]
    child = subprocess.run(command + (["--simulate"] if simulate else []), cwd=harness.ROOT,
                           capture_output=True, text=True, timeout=900)
    if child.returncode:
        output = (child.stdout + child.stderr)[-4000:]
        raise StepFailed(f"bench_gpu_sampler: exit {child.returncode}: "
                         f"{output.strip().splitlines()[-1] if output.strip() else ''}",
                         {"output_tail": output})
    return json.loads((out / "sampler.json").read_text())


def mode_epochs(simulate: bool, out: Path, modes=("minibatch", "temporal", "fullgraph"),
                device: str | None = None) -> dict:
    """One short run per mode on the GPU (simulated: sampler in the simulator, torch on
    the CPU; `device` 'cpu': everything on the CPU, the baseline); epoch time and the
    selected epoch's metric of each."""
    from gnnsys.config import from_dict
    train_device = device or ("cpu" if simulate else "cuda")
    configs = MODE_CONFIGS
    runs = {}
    for name in modes:
        sections = merge(configs[name], SIMULATED[name]) if simulate else configs[name]
        sections = merge(sections, {
            "train": {"device": train_device, "progress": False},
            "sampler": {"device": device or "cuda"},
            "run": {"dir": str(out / f"run-{name}"), "checkpoint_every": 0}})
        graph, dataset = None, sections["dataset"]["name"]
        if name == "temporal" and (simulate or not bundle_available(dataset)):
            from gnnsys.testing import tiny_temporal_graph
            graph = tiny_temporal_graph(num_nodes=60, num_events=600 if simulate else 20_000)
            dataset = f"{graph.name} ({'simulator' if simulate else dataset + ' not found'})"
        started = time.perf_counter()
        try:
            final, epochs = harness.train(from_dict(sections), graph=graph)
        except Exception as err:       # record it, run the other modes
            runs[name] = {"dataset": dataset, "error": one_line(err),
                          "traceback": traceback.format_exc()[-4000:]}
            continue
        metric = harness.test_metric(final)
        runs[name] = {"dataset": dataset, "epoch_s": final.get("epoch_s"),
                      "batch_wait_s": epochs[-1].get("batch_wait_s"),
                      "epochs": final.get("epochs"), "metric": metric,
                      "value": final[metric], "wall_s": time.perf_counter() - started,
                      "arch": sections["model"]["arch"]}
    if failed := [name for name, run in runs.items() if "error" in run]:
        raise StepFailed("modes failed on the device: " + "; ".join(
            f"{name}: {runs[name]['error']}" for name in failed), runs)
    return runs


def targets(report: dict, simulate: bool) -> list:
    """Every target with its measured value and verdict (None = not measured)."""
    rows = list(report.get("sampler", {}).get("result", {}).get("targets", []))
    epoch = report.get("modes", {}).get("result", {}).get("minibatch", {}).get("epoch_s")
    speedup = CPU_MINIBATCH_EPOCH_S / epoch if (epoch and not simulate) else None
    rows.append({"target": "minibatch SAGE epoch on synthetic-products >= 10x the 2-core CPU",
                 "value": speedup,
                 "met": None if speedup is None else bool(speedup >= MIN_MINIBATCH_SPEEDUP)})
    runs = report.get("modes", {}).get("result", {})
    for mode, cpu_value in CPU_METRICS.items():
        run = runs.get(mode, {})
        same_data = run.get("dataset") == MODE_CONFIGS[mode]["dataset"]["name"]
        delta = run["value"] - cpu_value if ("value" in run and same_data and not simulate) \
            else None
        rows.append({"target": f"{mode}: test metric within {SAME_METRIC_WITHIN} of the "
                               f"CPU's {cpu_value:.4f} (same config and seeds; value: GPU - CPU)",
                     "value": delta,
                     "met": None if delta is None else bool(abs(delta) <= SAME_METRIC_WITHIN)})
    return rows


# ----------------------------------------------------------------------------- stages
# name: (function, seconds it may take on one H200: measured there 2026-11-27 as 11, 53,
# 18, 45 (26.6 of them generating synthetic-products on 16 cores) and 48 s, with margin;
# the budget reads these).
STAGES = {"preflight": (preflight, 20),
          "tests": (gpu_tests, 75),
          "races": (race_check, 30),
          "sampler": (sampler_bench, 70),
          "modes": (mode_epochs, 75)}
DEFAULT_BUDGET_S = 290.0          # the default run ends in under 5 minutes


class StepFailed(Exception):
    """A stage ran but found a failure; `result` is what it measured."""

    def __init__(self, message: str, result):
        super().__init__(message)
        self.result = result


def run_step(report: dict, name: str, fn, *args) -> None:
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    entry = report[name] = {}
    try:
        entry["result"] = fn(*args)
        entry["ok"] = True
    except StepFailed as err:
        entry.update(ok=False, error=str(err), result=err.result)
    except Exception as err:
        entry.update(ok=False, error=one_line(err), traceback=traceback.format_exc()[-4000:])
    entry["seconds"] = round(time.perf_counter() - started, 1)
    print(f"   {'ok' if entry['ok'] else 'FAILED: ' + entry['error']} "
          f"({entry['seconds']:.0f} s)", flush=True)


def run_stages(report: dict, stages: list, budget_s: float, simulate: bool, out: Path,
               started: float) -> None:
    """Each chosen stage in order unless its estimate would overrun the budget; the report
    is written after every stage."""
    for name in STAGES:
        fn, estimate = STAGES[name]
        left = budget_s - (time.perf_counter() - started)
        if name not in stages:
            report[name] = {"ok": True, "skipped": "not chosen (--stages)"}
        elif estimate > left and not simulate:
            report[name] = {"ok": True, "skipped": f"budget: needs ~{estimate} s, "
                                                   f"{max(left, 0):.0f} s of --budget-s left"}
            print(f"== {name}: not started ({report[name]['skipped']})", flush=True)
        elif not gpu_usable(report):
            report[name] = {"ok": True, "skipped": "preflight found no usable GPU"}
        else:
            run_step(report, name, fn, simulate, out)
        write_report(report, out, simulate, started)


def gpu_usable(report: dict) -> bool:
    """False once preflight could not launch a kernel: every later stage would fail on it."""
    probes = (report.get("preflight") or {}).get("result") or {}
    return probes.get("kernel_launch", {}).get("ok", True)


def write_report(report: dict, out: Path, simulate: bool, started: float) -> str:
    report["targets"] = targets(report, simulate)
    report["total_s"] = time.perf_counter() - started
    text = markdown(report)
    harness.write_json(out / "gpu_check.json", report)
    atomic_write_bytes(out / "gpu_check.md", text.encode())
    return text


def markdown(report: dict) -> str:
    machine = report["machine"]
    lines = [f"### GPU check: {machine['device']}",
             "",
             f"`{machine['command']}` on {machine['date']}; torch {machine['torch']}, "
             f"numba {machine['numba']}; {machine['cpus']} CPUs; total "
             f"{report['total_s']:.0f} s.", "",
             "| stage | outcome | s |", "|---|---|---:|"]
    for name in STAGES:
        if name in report:
            step = report[name]
            lines.append(f"| {name} | {outcome(step)} | {step.get('seconds', '')} |")
    for failed in (report.get("tests", {}).get("result") or {}).get("failed_tests", []):
        lines.append(f"- {failed}")
    if (preflight_step := report.get("preflight", {})).get("result"):
        lines += ["", "Preflight:", ""]
        for name, probe in preflight_step["result"].items():
            shown = probe["result"] if probe["ok"] else "FAILED: " + probe["error"]
            lines.append(f"- {name} ({probe['seconds']} s): {json.dumps(shown)}")
    if (races := report.get("races", {})).get("result"):
        lines += ["", "Races: " + json.dumps({k: v for k, v in races["result"].items()
                                             if k != "output_tail"})]
    if (sampler := report.get("sampler", {})).get("ok") and sampler.get("result"):
        lines += ["", "Fused sample + gather (`scripts/bench_gpu_sampler.py`):", "",
                  sampler["result"].get("table", "")]
    if (modes := report.get("modes", {})).get("result"):
        lines += ["", "One run per mode on the device:", "",
                  "| mode | model | dataset | epochs | s/epoch | test metric |",
                  "|---|---|---|---:|---:|---|"]
        for name, run in modes["result"].items():
            if "error" in run:
                lines.append(f"| {name} | | {run['dataset']} | | | FAILED: {run['error']} |")
            else:
                lines.append(f"| {name} | {run['arch']} | {run['dataset']} | {run['epochs']} "
                             f"| {run['epoch_s']:.3f} | {run['metric']} {run['value']:.4f} |")
    lines += ["", "Targets:", "", "| target | measured | verdict |", "|---|---:|---|"]
    for t in report["targets"]:
        value = "" if t["value"] is None else f"{t['value']:.3g}"
        lines.append(f"| {t['target']} | {value} | {harness.verdict(t['met'])} |")
    return "\n".join(lines) + "\n"


def outcome(step: dict) -> str:
    """ok, FAILED and why, or why the stage did not run."""
    if step.get("skipped"):
        return "not run: " + step["skipped"]
    return "ok" if step["ok"] else "FAILED: " + step["error"].replace("|", "/")[:300]


def machine_info(simulate: bool) -> dict:
    import numba
    import torch
    device = "numba CUDA simulator (torch on CPU)" if simulate else (
        torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU")
    return {"device": device, "simulated": simulate, "torch": torch.__version__,
            "numba": numba.__version__, "cpus": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": " ".join(["python", "scripts/gpu_check.py", *sys.argv[1:]])}


# ----------------------------------------------------------------------------- helpers
def merge(base: dict, override: dict) -> dict:
    """Config sections of `base` with `override`'s keys replacing (one level deep)."""
    merged = {key: dict(value) if isinstance(value, dict) else value
              for key, value in base.items()}
    for key, value in override.items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    return merged


def bundle_available(name: str) -> bool:
    from gnnsys.datasets import DatasetError, load_dataset
    try:
        load_dataset(name)
        return True
    except (DatasetError, FileNotFoundError):
        return False


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def main(argv=None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--out", type=Path, default=harness.ROOT / "runs" / "gpu_check",
                        help="where gpu_check.json / gpu_check.md (and the runs) go")
    parser.add_argument("--simulate", action="store_true",
                        help="numba's CUDA simulator and tiny sizes: checks this script")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES),
                        help="stages to run, in their fixed order (default: all)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="start no stage whose estimate would end past this many "
                             f"seconds (default {DEFAULT_BUDGET_S:.0f}; the simulator "
                             "ignores it)")
    parser.add_argument("--cpu-baseline", nargs="*", choices=list(SIMULATED), metavar="MODE",
                        help="only these modes' runs (default: minibatch), all on the CPU: "
                             "the figures the GPU is compared with (CPU_MINIBATCH_EPOCH_S, "
                             "CPU_METRICS)")
    args = parser.parse_args(argv)
    if args.cpu_baseline is not None:
        import torch
        runs = mode_epochs(False, args.out, modes=args.cpu_baseline or ["minibatch"],
                           device="cpu")
        print(json.dumps({"runs": runs, "threads": torch.get_num_threads(),
                          "load_avg": harness.load_average()}, indent=1))
        return 0
    if args.simulate:
        harness.require_gpu(True)       # starts again under the simulator
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report = {"machine": machine_info(args.simulate), "budget_s": args.budget_s}
    print(f"gpu_check on {report['machine']['device']}", flush=True)
    run_stages(report, args.stages, args.budget_s, args.simulate, args.out, started)
    print(write_report(report, args.out, args.simulate, started))
    print(f"wrote {args.out / 'gpu_check.json'} and {args.out / 'gpu_check.md'}")
    return 0 if all(report[name]["ok"] for name in STAGES) else 1


if __name__ == "__main__":
    sys.exit(main())
