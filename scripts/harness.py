"""What every script in scripts/ shares, so that a script is its own measurement and table
and nothing else. Scripts import this module (and gnnsys), never each other.

    ap = harness.parser(__doc__, config="configs/quickstart.yaml", set=True, json=True)
    final, epochs = harness.train(config)                 # one run in this process
    seconds = harness.median_after_first(e["epoch_s"] for e in epochs)
    print(harness.markdown(["config", "epoch s"], rows, align="lr"))
    harness.write_json(args.json, rows)

Runs go through gnnsys's one launcher: `train` (= `gnnsys.training.fit`), or `on_loop` for
a script that drives the `TrainingLoop` itself; one worker runs in this process, K workers
as Ray actors, or as threads of this process with `--set cluster.launcher=threads`. A run
that needs a process of its own (its allocator or OpenMP settings, its peak memory, no
memory kept from an earlier run) is a `gnnsys train` child: `start_train`, then `finish`.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# this checkout's gnnsys where it is not installed (the GPU machines); gnnsys before numpy
# and torch: it sets the OpenMP wait default before they load OpenMP
sys.path.insert(1, str(ROOT))
import gnnsys  # noqa: E402, F401
import numpy as np  # noqa: E402
from common.files import atomic_write_bytes  # noqa: E402
from gnnsys import runlog  # noqa: E402
from gnnsys.distributed import launch  # noqa: E402
from gnnsys.mode import mode_class  # noqa: E402
from gnnsys.training import TrainingLoop, fit  # noqa: E402

TEST_METRICS = ("test_acc", "test_auc", "test_ap")     # one per dataset metric


# ----------------------------------------------------------------------------- arguments
def config_file(path: str) -> Path:
    """`path`, or the repository's file of that name where the current directory has none
    (so the defaults, configs/..., work from any directory)."""
    return Path(path) if Path(path).exists() else ROOT / path


COMMON = {
    "config": dict(type=config_file, help="the config file"),
    "configs": dict(type=config_file, nargs="+", help="the config files"),
    "rounds": dict(type=int, help="rounds: every setting once per round, interleaved"),
    "set": dict(action="append", default=[], metavar="KEY=VALUE",
                help="config override for every run, as gnnsys train --set"),
    "epochs": dict(type=int, help="train.epochs of every run"),
    "threads": dict(type=int, help="threads of numba's and torch's pools"),
    "seed": dict(type=int, help="random seed (of runs: train.seed)"),
    "json": dict(type=Path, help="also write the results here (JSON)"),
}


def parser(doc: str, **common) -> argparse.ArgumentParser:
    """An ArgumentParser described by the first paragraph of `doc`, with the COMMON options
    named: `name=True` adds it without a default, `name=value` with that default."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for name, default in common.items():
        if isinstance(default, list) and "type" in COMMON[name]:    # argparse types strings
            default = [COMMON[name]["type"](d) for d in default]
        ap.add_argument(f"--{name}", **{**COMMON[name],
                                        **({} if default is True else {"default": default})})
    return ap


# ----------------------------------------------------------------------------- runs
def train(config, graph=None) -> tuple[dict, list[dict]]:
    """Run `config` from this process (`graph`: instead of the config's dataset); rank 0's
    final metrics and the run's epoch records, in order."""
    final = fit(config, graph=graph)
    return final, runlog.epochs(config.run.dir)


def on_loop(config, work) -> list:
    """`work(loop)` on every rank, `loop` the `TrainingLoop` of `config` built as `fit`
    builds it; the results in rank order."""
    prepared = mode_class(config.mode).prepare(config)

    def worker(ctx, config, *prepared):
        with contextlib.closing(TrainingLoop(ctx, config, prepared)) as loop:
            return work(loop)
    return launch(worker, config, *prepared)


def train_command(config, overrides) -> list[str]:
    """`gnnsys train --config config --set ...` in this interpreter."""
    return [sys.executable, "-m", "gnnsys.cli", "train", "--config", str(config),
            *(arg for item in overrides for arg in ("--set", item))]


def start_train(config, overrides, env=None) -> subprocess.Popen:
    """`gnnsys train` as a child process, OMP_WAIT_POLICY=PASSIVE whatever the shell says;
    `env`: more variables (None: remove it). Its stdout is dropped, its stderr kept."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **(env or {})}
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(train_command(config, overrides), stdout=subprocess.DEVNULL,
                            stderr=log, env={k: v for k, v in env.items() if v is not None})
    proc.log = log
    return proc


def start_one_worker(config, args, run_dir, env=None) -> subprocess.Popen:
    """`start_train` of `config` on one worker with the script's --epochs (>= 2: the first
    is not timed), --threads and --set, into `run_dir`."""
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: the first epoch (warm-up) is not counted")
    return start_train(config, [f"train.epochs={args.epochs}", f"sampler.threads={args.threads}",
                                "cluster.workers=1", "train.progress=false", f"run.dir={run_dir}",
                                *args.set], env)


def finish(proc: subprocess.Popen):
    """Wait for a `start_train` child; the kernel's accounting of it (os.wait4's rusage:
    page faults, CPU seconds, peak memory). A failed run stops the script with its stderr."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.log.seek(0)
    errors = proc.log.read()
    proc.log.close()
    if proc.returncode:
        raise SystemExit(f"a run failed ({' '.join(proc.args[5:])}):\n{errors[-2000:]}")
    return usage


# ----------------------------------------------------------------------------- run logs
def after_first(epochs: list) -> list:
    """The epochs after the first, which pays one-off costs (JIT compiles, buffers growing,
    a first profile); all of them when there is only one."""
    return epochs[1:] or epochs


def median_after_first(values) -> float:
    return statistics.median(after_first(list(values)))


def test_metric(final: dict) -> str | None:
    """The key of the selected model's test metric in a final record (None: it has none)."""
    return next((key for key in TEST_METRICS if key in final), None)


def feature_memory(run_dir) -> int:
    """Bytes of vertex features a run's ranks held, summed: the graph's matrix (minibatch on
    one worker, full-graph) or the feature stores' tables (minibatch on K)."""
    return sum(rank.get("feature_bytes", rank.get("table_bytes", 0))
               for rank in runlog.start(run_dir)["setup"])


def summary(run_dir, keys=(), average=statistics.mean) -> dict:
    """A finished run's test metric ("metric": its key, "test": its value) and, per key,
    `average` over the epochs after the first (NaN where no epoch logs it)."""
    final, epochs = runlog.final(run_dir), after_first(runlog.epochs(run_dir))
    metric = test_metric(final)
    out = {"metric": metric, "test": final[metric]}
    for key in keys:
        values = [e[key] for e in epochs if key in e]
        out[key] = average(values) if values else float("nan")
    return out


# ----------------------------------------------------------------------------- output
def markdown(header: list, rows: list, align: str = "") -> str:
    """A Markdown table of `rows` (lists of cells, each printed with str) under `header`;
    `align`: a letter per column, l or r (numbers), l where it runs out."""
    rule = "|" + "|".join("---:" if a == "r" else "---"
                          for a in align.ljust(len(header), "l")) + "|"
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"      # noqa: E731
    return "\n".join([line(header), rule, *map(line, rows)])


def write_json(path, data) -> None:
    """`data` as JSON, written atomically (a reader never sees half a file); a `path` of
    None (no --json) writes nothing."""
    if path is not None:
        atomic_write_bytes(path, json.dumps(data, indent=1, default=str).encode())


def load_average() -> str:
    """The machine's load average over 1 / 5 / 15 minutes (a busy neighbour skews times)."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------- GPU scripts
def verdict(met: bool | None) -> str:
    """A target's verdict; None: not measured (a simulator's times say nothing about a GPU)."""
    return "not yet measured on hardware" if met is None else ("met" if met else "NOT MET")


def require_gpu(simulate: bool) -> None:
    """Exit unless torch and numba both see a CUDA GPU (and numba is not the simulator);
    `simulate`: numba's CUDA simulator instead, for checking a script's code path (numba
    reads NUMBA_ENABLE_CUDASIM once, at import: the script starts again with it set)."""
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if simulate and not simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if simulate:
        return
    import torch
    from samplers.fused_gpu import cuda_gpu_available
    if simulator or not (torch.cuda.is_available() and cuda_gpu_available()):
        sys.exit(f"{Path(sys.argv[0]).stem}: no CUDA GPU here (NUMBA_ENABLE_CUDASIM="
                 f"{os.environ.get('NUMBA_ENABLE_CUDASIM', '')}, torch.cuda.is_available()="
                 f"{torch.cuda.is_available()}, numba sees a GPU: {cuda_gpu_available()}); "
                 "run it on a GPU machine, or with --simulate to check its code path")


# ----------------------------------------------------------------------------- sampler graphs
def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    """The graph and batch options of the sampler benchmarks (`load_graph` reads them)."""
    parser.add_argument("--dataset", default="synthetic-products")
    parser.add_argument("--nodes", type=int, default=0,
                        help="use a power-law random graph with this many nodes instead")
    parser.add_argument("--degree", type=float, default=50.0, help="its mean degree")
    parser.add_argument("--features", type=int, default=100, help="its feature width")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)


def load_graph(args):
    """(indptr int64, indices int32, features float32, training seeds) of the chosen graph,
    in RAM (not memory-mapped: first-touch page faults of a cold mapping would pollute the
    per-batch times of any method)."""
    if args.nodes:
        print(f"graph: power-law random, {args.nodes:,} nodes, mean degree {args.degree}, "
              f"{args.features} features", flush=True)
        return power_law_graph(args.nodes, args.degree, args.features)
    from gnnsys.datasets import load_dataset
    from gnnsys.sparse_features import densified     # the kernels measured gather dense rows
    graph = load_dataset(args.dataset)
    print(f"graph: {graph}", flush=True)
    seeds = graph.train_idx if graph.train_idx is not None else np.arange(graph.num_nodes)
    return (np.array(graph.indptr), np.array(graph.indices),
            np.array(densified(graph.x, "the sampler benchmarks time the dense gather")),
            np.asarray(seeds, dtype=np.int64))


def power_law_graph(num_nodes: int, mean_degree: float, num_features: int, seed: int = 0):
    """Quick stand-in graph: Pareto in-degrees (alpha 2) and neighbours drawn with a
    power-law popularity over randomly permuted ids, so hubs exist and ids carry no
    locality. Returns (indptr int64, indices int32, features float32, train ids)."""
    rng = np.random.default_rng(seed)
    alpha = 2.0
    raw = (1.0 - rng.random(num_nodes)) ** (-1.0 / alpha)        # Pareto(alpha), min 1
    degree = np.minimum(np.floor(raw * mean_degree * (alpha - 1) / alpha),
                        num_nodes // 10).astype(np.int64)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    permutation = rng.permutation(num_nodes).astype(np.int32)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    chunk = 1 << 24
    for begin in range(0, indices.size, chunk):
        u = rng.random(min(chunk, indices.size - begin))
        # u**3 puts more mass on low ranks: popularity density ~ rank**(-2/3).
        indices[begin:begin + u.size] = permutation[(u ** 3 * num_nodes).astype(np.int64)]
    features = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
    return indptr, indices, features, np.arange(num_nodes, dtype=np.int64)
