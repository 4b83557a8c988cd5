"""Benchmark the GPU fused sample+gather kernel against unfused, CPU and the copy bandwidth.

Per batch, on the same seeds, methods interleaved so machine noise hits all alike:
  a. fused:        GpuFusedSampler.sample(on_device=True): graph and features on the GPU;
     a-host:       the same with the graph (CSR indices) in pinned host memory, read
                   zero-copy by the kernel (features still on the GPU);
     a-all-host:   graph and features both in pinned host memory;
     a-tiered:     features tiered by degree: --device-fraction of the rows on the GPU,
                   the rest in pinned host memory (graph on the GPU);
  b. unfused:      the same sampling kernels without features, then torch.index_select
                   of n_id from the feature tensor on the GPU;
  c. CPU fused:    samplers.FusedSampler (--threads threads; --skip-cpu leaves it out);
  d. copy:         the device's copy bandwidth, torch copy_ of a 1 GiB buffer, same run.
"sample only" (b's first half) also gives the fused kernel's gather cost: fused minus
sample-only; device-tier gather GB/s = gathered bytes / that difference. GB/s counts
the bytes of the rows written (each is also read once), like the copy bandwidth.
Prints a table (medians) with ratios and the issue's targets; --json saves it.

    python scripts/bench_gpu_sampler.py                         # synthetic-products
    python scripts/bench_gpu_sampler.py --nodes 200000 --degree 20 --batches 10
    python scripts/bench_gpu_sampler.py --simulate      # numba's CUDA simulator: code path only

Needs a CUDA GPU, torch built with CUDA and numba.cuda (pip install -e .[gpu]).
"""
import json
import os
import platform
import time

import numpy as np

import harness

COPY_BYTES = 1 << 30


def simulate_sizes(args) -> None:
    """Sizes the simulator runs in seconds (it runs every GPU thread as a Python thread)."""
    args.nodes, args.degree, args.features = min(args.nodes or 300, 300), 4.0, 8
    args.fanouts, args.batch_size = [3, 2], 16
    args.batches, args.warmup, args.lanes, args.groups_per_block = 1, 0, 4, 8
    args.threads, args.skip_cpu = 1, False


def copy_bandwidth(torch, device: str = "cuda", repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy of COPY_BYTES (median of repeats);
    on "cpu" (the simulator run) a host copy of 1/64 of that, for the code path only."""
    size = COPY_BYTES if device == "cuda" else COPY_BYTES // 64
    source = torch.empty(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        target.copy_(source)
        sync()
        times.append(time.perf_counter() - start)
    return size / float(np.median(times))


def summed_locality(reports: list) -> dict:
    """Per-batch GpuFusedSampler.locality() reports added up."""
    total = {}
    for report in reports:
        for kind, counts in report.items():
            for where, count in counts.items():
                total.setdefault(kind, {}).setdefault(where, 0)
                total[kind][where] += count
    return total


def run(args) -> dict:
    """Time every method on the same seeds; `args.simulate`: numba's CUDA simulator with
    torch on the CPU (the code paths run; the times mean nothing)."""
    import torch
    from numba import cuda
    from gnnsys.minibatch.batch import sampled_tensor
    from samplers import FusedSampler
    from samplers.fused_gpu import GpuFusedSampler
    from samplers.gpu_tiers import TierBudgets
    simulate = getattr(args, "simulate", False)
    device = "cpu" if simulate else "cuda"

    loading = time.perf_counter()
    indptr, indices, features, train_ids = harness.load_graph(args)
    load_s = time.perf_counter() - loading          # generated on first use, then read
    print(f"graph ready in {load_s:.1f} s on {os.cpu_count()} CPUs", flush=True)
    num_nodes, row_bytes = indptr.size - 1, features.shape[1] * features.itemsize
    make = lambda **kw: GpuFusedSampler(indptr, indices, args.fanouts, lanes=args.lanes,
                                        groups_per_block=args.groups_per_block, **kw)
    samplers = {
        "fused": make(features=features),
        "fused_graph_host": make(features=features, adjacency_device_bytes=0),
        "fused_all_host": make(features=features, adjacency_device_bytes=0,
                               budgets=TierBudgets(device_bytes=0)),
        "fused_tiered": make(features=features, budgets=TierBudgets.from_device_fraction(
            num_nodes, row_bytes, args.device_fraction)),
        "sample_only": make(),
    }
    cpu = None if args.skip_cpu else FusedSampler(indptr, indices, args.fanouts,
                                                  features=features, num_threads=args.threads)
    feature_tensor = torch.from_numpy(features).to(device)
    copy_bytes_per_s = copy_bandwidth(torch, device)

    def timed_gpu(fn):
        cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        cuda.synchronize()
        if not simulate:
            torch.cuda.synchronize()
        return time.perf_counter() - start, result

    rng = np.random.default_rng(1)
    times = {key: [] for key in (*samplers, "index_select", "cpu")}
    edges, rows = [], []
    locality = {"fused_tiered": [], "fused_graph_host": []}
    for batch in range(args.warmup + args.batches):
        seeds = rng.choice(train_ids, size=args.batch_size, replace=False)
        measured, sub = {}, None
        for name, sampler in samplers.items():
            measured[name], result = timed_gpu(lambda: sampler.sample(seeds, batch,
                                                                      on_device=True))
            if name == "sample_only":
                n_id = sampled_tensor(result.n_id)
                measured["index_select"], _ = timed_gpu(
                    lambda: torch.index_select(feature_tensor, 0, n_id))
            if name == "fused":
                sub = result
            if name in locality and batch >= args.warmup:      # outside the timed region
                locality[name].append(sampler.locality(result))
        if cpu is not None:
            start = time.perf_counter()
            cpu.sample(seeds, batch)
            measured["cpu"] = time.perf_counter() - start
        if batch < args.warmup:                         # JIT compiles, buffer growth
            continue
        for key, value in measured.items():
            times[key].append(value)
        edges.append(sub.num_sampled_edges)
        rows.append(sub.hop_sizes[-1])
    median = {key: float(np.median(v)) for key, v in times.items() if v}
    tiers = {name: s.memory_report() for name, s in samplers.items()}
    hits = {name: summed_locality(reports) for name, reports in locality.items()}
    return {
        "config": {"dataset": "power-law" if args.nodes else args.dataset,
                   "nodes": int(num_nodes), "edges": int(indices.size),
                   "features": int(features.shape[1]), "dtype": str(features.dtype),
                   "fanouts": args.fanouts, "batch_size": args.batch_size,
                   "device_fraction": args.device_fraction, "lanes": args.lanes,
                   "cpu_threads": args.threads, "batches": args.batches,
                   "warmup": args.warmup},
        "machine": {"gpu": "numba CUDA simulator" if simulate else torch.cuda.get_device_name(),
                    "simulated": simulate, "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "median_s": median, "median_edges": float(np.median(edges)),
        "median_rows": float(np.median(rows)), "row_bytes": int(row_bytes),
        "copy_bytes_per_s": copy_bytes_per_s, "tiers": tiers, "locality": hits,
        "graph_load_s": round(load_s, 1),
    }


# The targets on a real GPU (H100 / H200), checked by targets() below.
MIN_EDGES_PER_S_DEVICE = 100e6       # graph + features in device memory
MIN_EDGES_PER_S_HOST = 40e6          # graph in pinned host memory
MIN_GATHER_SHARE_OF_COPY = 0.6       # device-tier gather GB/s / device copy GB/s
MIN_FUSED_SPEEDUP = 1.5              # unfused (sample + index_select) time / fused time


def targets(result: dict) -> list:
    """[{target, value, met}] of the fused kernel's targets; met is None in the simulator
    (its times say nothing about a GPU)."""
    m, edges = result["median_s"], result["median_edges"]
    gathered = result["median_rows"] * result["row_bytes"]
    unfused = m["sample_only"] + m["index_select"]
    fused_gather = m["fused"] - m["sample_only"]
    share = (gathered / fused_gather) / result["copy_bytes_per_s"] if fused_gather > 0 \
        else float("nan")
    rows = [("fused, graph + features on the GPU: sampled edges/s >= 100M",
             edges / m["fused"], MIN_EDGES_PER_S_DEVICE),
            ("fused, graph + features in pinned host memory: sampled edges/s >= 40M",
             edges / m["fused_all_host"], MIN_EDGES_PER_S_HOST),
            ("device-tier gather >= 60% of device copy bandwidth", share,
             MIN_GATHER_SHARE_OF_COPY),
            ("fused >= 1.5x sample-then-index_select", unfused / m["fused"],
             MIN_FUSED_SPEEDUP)]
    simulated = result["machine"].get("simulated", False)
    return [{"target": label, "value": None if simulated else float(value),
             "met": None if simulated else bool(value >= threshold)}
            for label, value, threshold in rows]


def table(result: dict) -> str:
    m, edges = result["median_s"], result["median_edges"]
    gathered = result["median_rows"] * result["row_bytes"]
    copy = result["copy_bytes_per_s"]
    unfused = m["sample_only"] + m["index_select"]
    fused_gather = m["fused"] - m["sample_only"]

    def line(name, seconds):
        return (f"| {name:<44} | {seconds * 1e3:8.2f} | {edges / seconds / 1e6:8.1f}M "
                f"| {gathered / seconds / 1e9:8.2f} | {unfused / seconds:6.2f}x |")

    c = result["config"]
    lines = [
        f"{c['dataset']}: {c['nodes']:,} nodes, {c['edges']:,} edges, {c['features']} x "
        f"{c['dtype']}; fanouts {c['fanouts']}, batch {c['batch_size']}; "
        f"{result['machine']['gpu']}; median of {c['batches']} batches; "
        f"{edges:,.0f} sampled edges and {result['median_rows']:,.0f} rows "
        f"({gathered / 1e6:.0f} MB) per batch",
        "",
        "| method | ms/batch | sampled edges/s | gathered GB/s | vs unfused |",
        "|---|---:|---:|---:|---:|",
        line("a. fused, graph + features on the GPU", m["fused"]),
        line("a. fused, graph in pinned host memory", m["fused_graph_host"]),
        line("a. fused, graph + features in pinned host memory", m["fused_all_host"]),
        line(f"a. fused, features {c['device_fraction']:.0%} GPU / rest host", m["fused_tiered"]),
        line("b. unfused: sample kernels + index_select", unfused),
        line("   (sample kernels only, no features)", m["sample_only"]),
    ]
    if "cpu" in m:
        lines.append(line(f"c. CPU fused kernel, {c['cpu_threads']} threads", m["cpu"]))
    gather_share = (gathered / fused_gather) / copy if fused_gather > 0 else float("nan")
    lines += [
        f"| d. device copy bandwidth (torch copy_) | | | {copy / 1e9:8.2f} | |",
        "",
        f"device-tier gather inside the fused kernel: {gathered / 1e6:.0f} MB in "
        f"{fused_gather * 1e3:.2f} ms = {gather_share:.0%} of copy bandwidth; "
        f"index_select: {gathered / m['index_select'] / copy:.0%}",
        "targets: " + "; ".join(f"{t['target']} {harness.verdict(t['met'])}"
                                for t in targets(result)),
        "",
        "bytes per tier (fused, a-tiered, a-host):",
    ]
    for name in ("fused", "fused_tiered", "fused_graph_host"):
        lines.append(f"  {name}: {json.dumps(result['tiers'][name])}")
    rows = result["locality"]["fused_tiered"].get("feature_rows", {})
    reads = result["locality"]["fused_graph_host"].get("adjacency_reads", {})
    if rows and reads:
        lines.append(f"local hits: a-tiered feature rows from the GPU tier "
                     f"{rows['device'] / max(1, sum(rows.values())):.1%}; a-host neighbour "
                     f"reads from the GPU replica "
                     f"{reads['device'] / max(1, sum(reads.values())):.1%}")
    return "\n".join(lines)


def main(argv=None):
    parser = harness.parser(__doc__, threads=os.cpu_count(), json=True)
    harness.add_graph_arguments(parser)
    parser.add_argument("--device-fraction", type=float, default=0.15,
                        help="share of feature rows on the GPU in the tiered run")
    parser.add_argument("--lanes", type=int, default=32, help="threads per target/row")
    parser.add_argument("--groups-per-block", type=int, default=4)
    parser.add_argument("--skip-cpu", action="store_true",
                        help="leave out the CPU kernel (--threads threads otherwise)")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--simulate", action="store_true",
                        help="numba's CUDA simulator, tiny graph, torch on CPU: checks the "
                             "code path, times mean nothing")
    args = parser.parse_args(argv)
    harness.require_gpu(args.simulate)
    if args.simulate:
        simulate_sizes(args)
    result = run(args)
    result.update(table=table(result), targets=targets(result))
    print(result["table"])
    harness.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
