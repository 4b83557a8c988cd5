"""Inference throughput of `gnnsys predict` (nodes per second) on 1 and K workers, against
PyG's own full-graph forward of the exported model on the same graph.

One small minibatch model is trained once (--epochs, default 1: inference costs the same
whatever the accuracy) from --config (default configs/dist-synthetic-products.yaml, on
one worker) into a temporary run directory, or a finished run is read from --run-dir.
Then, --repeats times, interleaved (each round starts one side later than the last):

    gnnsys predict            RunResult.predict("all", workers=K) for each K of --workers
                              (K > 1: once per launcher of --launchers, ray = Ray actors,
                              threads = K threads of this process), timed whole: opening
                              the dataset or partitions, building the model, the exact
                              layer-wise inference, the gather and the sort by node id
    PyG, edge_index           torch_geometric.nn.<class>(**kwargs) from the file
                              RunResult.export_pyg writes, forward(x, edge_index) as the
                              README's "Use" shows, inputs prepared as the file says
    PyG, sparse adj_t         the same model's forward over the graph's CSR as a
                              torch.sparse_csr adjacency (PyG's fused sparse aggregation)

A PyG row times the forward alone: its inputs (features, edge_index or adjacency) are
built once before the first round (the seconds printed beside the table). A PyG forward
whose estimated peak memory (the messages of its widest layer, E x width x 4 bytes for
edge_index) exceeds the memory available, or that fails to allocate, reads "does not
fit". Every row's scores are compared with gnnsys's on 1 worker (max |difference|).
Nodes/s is the nodes predicted over the median wall seconds; the ratio is against
gnnsys predict on 1 worker, measured in the same run. `--alone` also runs every side
once in a fresh process of its own (this script with --only), so a ratio can be checked
free of what earlier sides left in the process (memory kept, thread pools, Ray).

Every process of the script keeps the memory it frees from its start (`gnnsys.allocator`,
as training and prediction do; `GNNSYS_MALLOC=system` keeps glibc's defaults), so the PyG
sides run under the same policy and no side depends on an earlier one having switched it
on (without it, every batch's messages are page-faulted in afresh: BENCHMARKS.md,
"Inference throughput").

    python scripts/bench_predict.py                   # synthetic-products, 3 repeats
    python scripts/bench_predict.py --alone --repeats 3
    python scripts/bench_predict.py --run-dir runs/dist-synthetic-products --workers 1 2
"""
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import harness
import numpy as np
import torch

import gnnsys
from gnnsys import allocator
from gnnsys.config import load_config
from gnnsys.result import RunResult
from gnnsys.step_memory import available_memory

PYG = {"pyg-edge_index": "edge_index (README)", "pyg-adj_t": "sparse adj_t"}


def train(args, run_dir: Path) -> RunResult:
    """The small model every side predicts with: --config on one worker, --epochs."""
    config = load_config(args.config, [
        f"train.epochs={args.epochs}", "cluster.workers=1", "train.progress=false",
        f"train.seed={args.seed}", f"run.dir={run_dir}", *args.set])
    started = time.perf_counter()
    final, _ = harness.train(config)
    metric = harness.test_metric(final)
    print(f"trained {config.dataset.name} ({config.model.arch}, {config.model.layers} layers x "
          f"{config.model.hidden}) for {args.epochs} epoch(s) in "
          f"{time.perf_counter() - started:.1f} s: {metric} {final[metric]:.4f}", flush=True)
    return gnnsys.load_run(run_dir)


def on_workers(result: RunResult, workers: int, launcher: str | None = None):
    """`result`'s config for `workers` workers (as RunResult.predict makes it), on
    `launcher`."""
    c = result.config
    cluster = dataclasses.replace(c.cluster, workers=workers,
                                  **({"launcher": launcher} if launcher else {}))
    return dataclasses.replace(c, cluster=cluster,
                               partition=dataclasses.replace(c.partition, num_parts=None))


# ----------------------------------------------------------------------------- sides
def side_keys(args) -> list[str]:
    """gnnsys-<K>[-<launcher>] for each K (the first is the baseline), then the PyG sides."""
    keys = []
    for k in args.workers:
        keys += [f"gnnsys-{k}"] if k == 1 else [f"gnnsys-{k}-{lau}" for lau in args.launchers]
    return keys + list(PYG)


class Sides:
    """Each side's measurement: `measure(key)` -> (nodes, seconds, scores) or a reason it
    was not run (str). PyG inputs are built on first use and kept."""

    def __init__(self, result: RunResult):
        self.result, self.saved, self.inputs, self.prep_s = result, None, {}, {}

    def measure(self, key: str):
        if key.startswith("gnnsys-"):
            _, workers, *launcher = key.split("-")
            run = RunResult(self.result, on_workers(self.result, int(workers), *launcher),
                            self.result.run_dir)
            started = time.perf_counter()
            table = run.predict("all", workers=int(workers))
            seconds = time.perf_counter() - started
            return len(table["node_id"]), seconds, table["scores"]
        return self.pyg(key)

    def prepare(self, keys: list[str]) -> None:
        """Before any timing, what `keys` need: the partitions of K > 1 workers (built once,
        on disk), the exported model (written and read back, as it is served)."""
        for k in sorted({int(key.split("-")[1]) for key in keys if key.startswith("gnnsys-")}):
            if k > 1:
                config = on_workers(self.result, k)
                harness.mode_class(config.mode).prepare(config)
        if any(key in PYG for key in keys):
            with tempfile.TemporaryDirectory() as tmp:
                self.result.export_pyg(Path(tmp) / "model.pt")
                self.saved = torch.load(Path(tmp) / "model.pt", weights_only=True)

    # PyG ------------------------------------------------------------------------
    def model(self):
        import torch_geometric
        saved = self.saved
        model = getattr(torch_geometric.nn, saved["class"])(**saved["kwargs"])
        model.load_state_dict(saved["state_dict"])
        return model.eval()

    def graph(self):
        """The run's graph as it is on disk (no normalisation, float32), as PyG gets it."""
        if "graph" not in self.inputs:
            from gnnsys.datasets import load_run_graph
            c = self.result.config
            raw = dataclasses.replace(c.dataset, normalize_features="none",
                                      feature_dtype="float32")
            self.inputs["graph"] = load_run_graph(dataclasses.replace(c, dataset=raw))
        return self.inputs["graph"]

    def features(self) -> torch.Tensor:
        """x prepared as the export's "features" says (README, "Use")."""
        if "x" not in self.inputs:
            from gnnsys.datasets.for_run import prepared_inputs
            from gnnsys.sparse_features import densified
            started = time.perf_counter()
            graph = self.graph()
            x = torch.from_numpy(np.array(densified(graph.x, "PyG's forward takes dense x"),
                                          dtype=np.float32))
            self.inputs["x"] = prepared_inputs(x, self.saved["features"])
            self.prep_s["features"] = time.perf_counter() - started
        return self.inputs["x"]

    def estimate(self, key: str) -> int:
        """Bytes a full-graph forward holds at its peak, roughly: the widest layer's
        messages (edge_index: one row per edge; adj_t: none, the CSR instead), the
        structure, and three node-by-width tensors (input, aggregate, output)."""
        graph, kw = self.graph(), self.saved["kwargs"]
        n, e = graph.num_nodes, int(graph.indptr[-1])
        width = max(kw["in_channels"], kw["hidden_channels"] * kw.get("heads", 1))
        nodes = 3 * n * width * 4
        if key == "pyg-edge_index":
            return e * width * 4 + 2 * e * 8 + nodes
        return e * (8 + 4) + (n + 1) * 8 + nodes

    def structure(self, key: str):
        if key not in self.inputs:
            started = time.perf_counter()
            graph = self.graph()
            indptr = torch.from_numpy(np.asarray(graph.indptr, dtype=np.int64))
            indices = torch.from_numpy(np.asarray(graph.indices, dtype=np.int64))
            if key == "pyg-edge_index":      # a CSR row lists a node's in-neighbours
                targets = torch.repeat_interleave(torch.arange(graph.num_nodes),
                                                  indptr.diff())
                self.inputs[key] = torch.stack([indices, targets])
            else:                            # adj_t[target, source]: the same CSR
                with warnings.catch_warnings():  # "sparse CSR support is in beta state"
                    warnings.simplefilter("ignore", UserWarning)
                    self.inputs[key] = torch.sparse_csr_tensor(
                        indptr, indices, torch.ones(len(indices)),
                        size=(graph.num_nodes, graph.num_nodes), check_invariants=False)
            self.prep_s[key] = time.perf_counter() - started
        return self.inputs[key]

    def pyg(self, key: str):
        need, have = self.estimate(key), available_memory()
        if need > have:
            return (f"does not fit: needs ~{need / 2**30:.1f} GiB, "
                    f"{have / 2**30:.1f} GiB available")
        try:
            x, structure, model = self.features(), self.structure(key), self.model()
            with torch.no_grad():
                started = time.perf_counter()
                scores = model(x, structure)
                seconds = time.perf_counter() - started
        except (MemoryError, RuntimeError) as err:
            if isinstance(err, RuntimeError) and "alloc" not in str(err):
                raise
            self.inputs.pop(key, None)
            return f"does not fit: {type(err).__name__} ({str(err).splitlines()[0][:80]})"
        return self.graph().num_nodes, seconds, scores.numpy()


def max_difference(scores, base) -> float:
    return float(np.abs(np.asarray(scores) - base).max())


# ----------------------------------------------------------------------------- alone
def run_alone(args, run_dir: Path, keys: list[str], scratch: Path) -> dict:
    """Each side once in a fresh process of its own (this script, --only KEY): key ->
    seconds (or the reason it was not run)."""
    out = {}
    for key in keys:
        json_path = scratch / f"alone-{key}.json"
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--run-dir", str(run_dir),
             "--only", key, "--repeats", "1", "--json", str(json_path)],
            stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        proc.log = log
        harness.finish(proc)
        [row] = json.loads(json_path.read_text())["rows"]
        out[key] = row["seconds"][0] if row["seconds"] else row["skipped"]
        print(f"alone {key}: {out[key] if isinstance(out[key], str) else f'{out[key]:.2f} s'}",
              flush=True)
    return out


# ----------------------------------------------------------------------------- table
def label(key: str, saved: dict) -> tuple[str, str]:
    """(method, workers) of a side."""
    if key.startswith("gnnsys-"):
        _, workers, *launcher = key.split("-")
        return "gnnsys predict" + (f" ({launcher[0]})" if launcher else ""), workers
    return f"PyG {saved['class']}, {PYG[key]}", "-"


def table(rows: dict, saved: dict, base_key: str, alone: dict | None) -> str:
    base = statistics.median(rows[base_key]["seconds"]) / rows[base_key]["nodes"]
    base_alone = alone.get(base_key) if alone else None
    lines = []
    for key, row in rows.items():
        method, workers = label(key, saved)
        if row["skipped"]:
            cells = [method, workers, row["nodes"] or "-", row["skipped"], "-", "-", "-"]
        else:
            s = row["seconds"]
            rate = row["nodes"] / statistics.median(s)
            cells = [method, workers, f"{row['nodes']:,}",
                     f"{min(s):.2f} / {statistics.median(s):.2f} / {max(s):.2f}",
                     f"{rate:,.0f}", f"{rate * base:.2f}x", f"{row['max_diff']:.1e}"]
        if alone is not None:
            seconds = alone.get(key)
            if isinstance(seconds, float) and isinstance(base_alone, float):
                cells += [f"{seconds:.2f}", f"{row['nodes'] / seconds:,.0f}",
                          f"{base_alone / seconds:.2f}x"]
            else:
                cells += [seconds if isinstance(seconds, str) else "-", "-", "-"]
        lines.append(cells)
    header = ["method", "workers", "nodes", "seconds min / median / max", "nodes/s (median)",
              "vs gnnsys 1 worker", "max abs diff vs gnnsys 1 worker"]
    if alone is not None:
        header += ["alone: seconds", "alone: nodes/s", "alone: vs gnnsys 1 worker"]
    return harness.markdown(header, lines, align="llrlrrrrrr"[:len(header)])


# ----------------------------------------------------------------------------- main
def main(argv=None) -> None:
    parser = harness.parser(__doc__, config="configs/dist-synthetic-products.yaml", epochs=1,
                            seed=0, set=True, json=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="gnnsys predict on these worker counts (1 first: the baseline)")
    parser.add_argument("--launchers", nargs="+", default=["ray", "threads"],
                        choices=["ray", "threads"], help="how K > 1 workers run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, sides interleaved")
    parser.add_argument("--run-dir", type=Path,
                        help="a finished minibatch run to predict with (default: train one)")
    parser.add_argument("--alone", action="store_true",
                        help="also each side once in a process of its own")
    parser.add_argument("--only", help="measure this side only (what --alone runs)")
    args = parser.parse_args(argv)
    if args.workers[0] != 1:
        parser.error("--workers must start with 1: gnnsys predict on 1 worker is the baseline")
    if args.only and not (args.only in PYG or re.fullmatch(r"gnnsys-1|gnnsys-\d+-(ray|threads)",
                                                           args.only)):
        parser.error(f"--only {args.only}: gnnsys-1, gnnsys-K-ray, gnnsys-K-threads, "
                     + " or ".join(PYG))
    keys = [args.only] if args.only else side_keys(args)
    malloc = allocator.keep_freed_memory()     # before the first large allocation
    load_before = harness.load_average()
    with tempfile.TemporaryDirectory(prefix="bench_predict_") as scratch:
        scratch = Path(scratch)
        result = gnnsys.load_run(args.run_dir) if args.run_dir else train(args, scratch / "run")
        sides = Sides(result)
        sides.prepare(keys)
        rows = {key: {"nodes": None, "seconds": [], "skipped": None, "max_diff": 0.0}
                for key in keys}
        base = None
        for round_ in range(args.repeats):
            for key in keys[round_ % len(keys):] + keys[:round_ % len(keys)]:
                row = rows[key]
                if row["skipped"]:
                    continue
                got = sides.measure(key)
                if isinstance(got, str):
                    row["skipped"] = got
                    print(f"round {round_ + 1}: {key}: {got}", flush=True)
                    continue
                row["nodes"], seconds, scores = got
                row["seconds"].append(seconds)
                if key == keys[0] and base is None:
                    base = scores
                if base is not None:
                    row["max_diff"] = max(row["max_diff"], max_difference(scores, base))
                del scores, got
                print(f"round {round_ + 1}: {key}: {row['nodes']:,} nodes in {seconds:.2f} s",
                      flush=True)
        if args.only:
            harness.write_json(args.json, {"rows": [{"key": key, **row}
                                                    for key, row in rows.items()]})
            return
        sides.inputs.clear()             # each process alone gets the machine's memory
        del base
        alone = run_alone(args, result.run_dir, keys, scratch) if args.alone else None
    c = result.config
    print(f"\n{c.dataset.name}: {rows[keys[0]]['nodes']:,} nodes; {c.model.arch}, "
          f"{c.model.layers} layers x {c.model.hidden}; sampler.eval_batch_size "
          f"{c.sampler.eval_batch_size}; {args.repeats} round(s), interleaved; torch threads "
          f"{torch.get_num_threads()} (this process); malloc {malloc}; load average "
          f"{load_before} -> {harness.load_average()}\n")
    print(table(rows, sides.saved, keys[0], alone))
    print("\nseconds: gnnsys rows the whole RunResult.predict call; PyG rows the forward "
          "alone, inputs built beforehand ("
          + ", ".join(f"{k} {s:.1f} s" for k, s in sides.prep_s.items()) + "); ratios: "
          "nodes/s over gnnsys predict's on 1 worker; max abs diff: of the scores, over "
          "gnnsys's on 1 worker" + ("; alone: one run in a fresh process of its own"
                                    if alone is not None else ""))
    harness.write_json(args.json, {"args": vars(args), "malloc": malloc,
                                   "load": [load_before, harness.load_average()],
                                   "rows": [{"key": key, **row} for key, row in rows.items()],
                                   "alone": alone, "prep_s": sides.prep_s})


if __name__ == "__main__":
    main()
