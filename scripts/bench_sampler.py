"""Benchmark the fused CPU sample+gather kernel against the plain way and the machine's ceiling.

Per batch, in the same run and on the same seeds, it times:
  1. fused:   FusedSampler.sample with features, as shipped (part of the gather runs
              beside the serial relabel) and with its phases in sequence (sample /
              relabel / gather: the gather phase then covers every row);
  2. plain:   the same sampling without features, then torch.index_select of the rows
              into a fresh tensor, and into a preallocated out= tensor;
  1b. fused with huge pages: the same kernel over copies of the CSR and the features in
              memory backed by transparent huge pages (samplers/huge_pages.py);
  1c. fused over float16 features: the same kernel over a float16 copy of the features
              (SALIENT++'s storage, `dataset.feature_dtype: float16`): half the bytes
              gathered per batch;
  3. ceiling: numpy.take(features, random_rows, axis=0, out=prealloc) of as many random
              rows as the fused batch gathered (one thread: what a plain copy reaches),
              from the 4 KiB-page and the huge-page copy of the features;
              for scale, also a contiguous copy of as many bytes (memory bandwidth);
  4. floor:   the CPU time of sampling without features plus index_select(out=) of the
              rows (float32 and float16), divided by the threads: what no overlap of the
              phases can beat on this many cores.
Methods are interleaved batch by batch so machine noise hits all of them alike. Prints
a table (median and fastest batch, wall clock; median CPU time of all threads) with
ratios against the ceiling; --json saves it.

OpenMP threads (numba's and torch's) sleep between parallel loops here unless
OMP_WAIT_POLICY says otherwise: on a shared, oversubscribed machine their default
spinning burns the cores the working threads need (on the 2-core dev box under load
~15 it made every method 3-6x slower). Set OMP_WAIT_POLICY=ACTIVE to measure the
spinning default; the table records the setting.

    python scripts/bench_sampler.py                        # synthetic-products
    python scripts/bench_sampler.py --nodes 200000 --degree 20 --batches 10   # quick
"""
import harness  # first: gnnsys sets the OpenMP wait default (see above)
import os
import platform
import time

import numpy as np
import torch

from samplers import FusedSampler
from samplers.huge_pages import huge_page_copy, thp_mode


def timed(fn):
    """(wall seconds, CPU seconds of all this process's threads, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    indptr, indices, features, train_ids = harness.load_graph(args)
    num_nodes, row_bytes = indptr.size - 1, features.shape[1] * features.itemsize
    make = lambda **kw: FusedSampler(indptr, indices, args.fanouts, num_threads=args.threads,
                                     **kw)
    fused = make(features=features)                              # default: overlapped
    # The same arrays copied into memory backed by transparent huge pages.
    huge_features = huge_page_copy(features)
    fused_huge = FusedSampler(huge_page_copy(indptr), huge_page_copy(indices), args.fanouts,
                              num_threads=args.threads, features=huge_features)
    fused_half = make(features=features.astype(np.float16))
    fused_in_sequence = make(features=features, overlap_gather=False)
    plain = make(features=None)
    feature_tensor = torch.from_numpy(features)
    half_tensor = torch.from_numpy(fused_half.features)
    rng = np.random.default_rng(1)
    take_out = index_out = half_out = None
    wall, cpu = {}, {}
    edges, gathered_rows, overlapped_rows = [], [], []
    load_before = harness.load_average()

    def record(key, seconds, cpu_seconds=None):
        wall.setdefault(key, []).append(seconds)
        if cpu_seconds is not None:
            cpu.setdefault(key, []).append(cpu_seconds)

    for batch in range(args.warmup + args.batches):
        seeds = rng.choice(train_ids, size=args.batch_size, replace=False)
        t_fused, c_fused, sub = timed(lambda: fused.sample(seeds, seed=batch))
        fused_phases = dict(fused.last_timings)
        rows_beside_relabel = fused.last_rows_gathered_beside_relabel
        t_huge, c_huge, _ = timed(lambda: fused_huge.sample(seeds, seed=batch))
        t_half, c_half, _ = timed(lambda: fused_half.sample(seeds, seed=batch))
        half_phases = dict(fused_half.last_timings)
        t_seq, c_seq, _ = timed(lambda: fused_in_sequence.sample(seeds, seed=batch))
        seq_phases = fused_in_sequence.last_timings
        t_plain, c_plain, plain_sub = timed(lambda: plain.sample(seeds, seed=batch))
        n_id = torch.from_numpy(plain_sub.n_id)
        num_rows = n_id.numel()
        if take_out is None or take_out.shape[0] < num_rows:
            take_out = np.zeros((2 * num_rows, features.shape[1]), dtype=features.dtype)
            index_out = torch.zeros((2 * num_rows, features.shape[1]),
                                    dtype=feature_tensor.dtype)
            half_out = torch.zeros((2 * num_rows, features.shape[1]), dtype=half_tensor.dtype)
        t_fresh, c_fresh, _ = timed(lambda: torch.index_select(feature_tensor, 0, n_id))
        t_out, c_out, _ = timed(lambda: torch.index_select(feature_tensor, 0, n_id,
                                                           out=index_out[:num_rows]))
        t_out16, c_out16, _ = timed(lambda: torch.index_select(half_tensor, 0, n_id,
                                                               out=half_out[:num_rows]))
        random_rows = rng.integers(0, num_nodes, size=num_rows)
        t_take, c_take, _ = timed(lambda: np.take(features, random_rows, axis=0,
                                                  out=take_out[:num_rows]))
        t_take_huge, c_take_huge, _ = timed(lambda: np.take(huge_features, random_rows, axis=0,
                                                            out=take_out[:num_rows]))
        first_rows = min(num_rows, num_nodes)
        t_copy, c_copy, _ = timed(lambda: np.copyto(take_out[:first_rows],
                                                    features[:first_rows]))
        if batch < args.warmup:
            continue
        record("fused", t_fused, c_fused)
        record("fused_huge", t_huge, c_huge)
        record("take_huge", t_take_huge, c_take_huge)
        record("fused_fp16", t_half, c_half)
        record("fused_seq", t_seq, c_seq)
        record("plain_fresh", t_plain + t_fresh, c_plain + c_fresh)
        record("plain_out", t_plain + t_out, c_plain + c_out)
        record("index_select", t_fresh)
        record("index_select_out", t_out, c_out)
        record("index_select_out_fp16", t_out16, c_out16)
        record("sample_only", t_plain, c_plain)
        record("take", t_take, c_take)
        record("copy", t_copy, c_copy)
        for phase in ("sample", "relabel", "gather"):
            record(f"fused_{phase}", fused_phases[phase])
            record(f"fused_seq_{phase}", seq_phases[phase])
            record(f"fused_fp16_{phase}", half_phases[phase])
        edges.append(sub.num_sampled_edges)
        gathered_rows.append(num_rows)
        overlapped_rows.append(rows_beside_relabel)
    return {
        "config": {"dataset": "power-law" if args.nodes else args.dataset,
                   "nodes": int(num_nodes), "edges": int(indices.size),
                   "features": int(features.shape[1]), "dtype": str(features.dtype),
                   "fanouts": args.fanouts, "batch_size": args.batch_size,
                   "threads": args.threads, "batches": args.batches, "warmup": args.warmup},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
                    "loadavg_before": load_before, "loadavg_after": harness.load_average()},
        "median_s": {key: float(np.median(values)) for key, values in wall.items()},
        "min_s": {key: float(np.min(values)) for key, values in wall.items()},
        "median_cpu_s": {key: float(np.median(values)) for key, values in cpu.items()},
        "median_edges": float(np.median(edges)),
        "median_rows": float(np.median(gathered_rows)),
        "median_rows_gathered_beside_relabel": float(np.median(overlapped_rows)),
        "row_bytes": int(row_bytes), "thp": f"THP {thp_mode()}",
    }


def floor_line(cpu: dict, threads: int, dtype: str, gather_key: str) -> str:
    """The CPU a batch needs, spread over every core: sampling without features plus
    torch.index_select(out=) of its rows (each measured alone, on all threads), / threads.
    No overlap of these two phases, as fast as they run here, gets a batch under it."""
    sample, gather = cpu["sample_only"], cpu[gather_key]
    return (f"floor, {dtype}: sampling without features {sample * 1e3:.1f} + gather "
            f"(index_select(out=)) {gather * 1e3:.1f} ms CPU = {(sample + gather) * 1e3:.1f} "
            f"ms CPU per batch, / {threads} cores = {(sample + gather) / threads * 1e3:.1f} "
            f"ms/batch at best")


def table(result: dict) -> str:
    m, fastest, cpu = result["median_s"], result["min_s"], result["median_cpu_s"]
    edges = result["median_edges"]
    gathered = result["median_rows"] * result["row_bytes"]
    ceiling = m["take"]

    def line(name, key, gather_key=None, edges_per_s=True):
        cells = [f"{name:<38}", f"{m[key] * 1e3:7.1f}", f"{fastest[key] * 1e3:7.1f}",
                 f"{cpu[key] * 1e3:7.1f}", f"{edges / m[key] / 1e6:6.1f}M" if edges_per_s else ""]
        if gather_key is None:
            cells += ["", "", ""]
        else:
            gather = m[gather_key]
            cells += [f"{gather * 1e3:7.1f}", f"{gathered / gather / 1e9:6.2f}",
                      f"{gather / ceiling:5.2f}x"]
        return "| " + " | ".join(cells) + " |"

    def phases(name, prefix):
        return (f"| &nbsp; {name}: sample {m[prefix + '_sample'] * 1e3:.1f} / relabel "
                f"{m[prefix + '_relabel'] * 1e3:.1f} / gather {m[prefix + '_gather'] * 1e3:.1f}"
                f" ms |" + " |" * 7)

    c, machine = result["config"], result["machine"]
    beside = result["median_rows_gathered_beside_relabel"]
    lines = [
        f"{c['dataset']}: {c['nodes']:,} nodes, {c['edges']:,} edges, {c['features']} x "
        f"{c['dtype']}; fanouts {c['fanouts']}, batch {c['batch_size']}, {c['threads']} "
        f"threads; {c['batches']} batches after {c['warmup']} warm-up; per batch "
        f"{edges:,.0f} sampled edges, {result['median_rows']:,.0f} rows "
        f"({gathered / 1e6:.0f} MB) gathered",
        f"machine: {machine['cpus']} CPUs, load average {machine['loadavg_before']} -> "
        f"{machine['loadavg_after']}, OMP_WAIT_POLICY {machine['omp_wait_policy']}",
        "",
        "| method | median ms/batch | min ms | CPU ms/batch | sampled edges/s | gather ms "
        "| gather GB/s | gather vs ceiling |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        line("fused sample+gather (default)", "fused"),
        phases(f"phases, {beside:,.0f} rows gathered beside the relabel", "fused"),
        line(f"fused, huge pages ({result['thp']})", "fused_huge"),
        line("fused, float16 features (half the bytes)", "fused_fp16"),
        phases("phases", "fused_fp16"),
        line("fused, phases in sequence", "fused_seq", "fused_seq_gather"),
        phases("phases", "fused_seq"),
        line("plain: sample, index_select (fresh)", "plain_fresh", "index_select"),
        line("plain: sample, index_select (out=)", "plain_out", "index_select_out"),
        line("ceiling: numpy.take(out=), same #rows", "take", "take", edges_per_s=False),
        line("ceiling, huge pages", "take_huge", "take_huge", edges_per_s=False),
        line("(bandwidth: contiguous copy, same MB)", "copy", "copy", edges_per_s=False),
        "",
        f"fused (default) vs sample + index_select: {m['plain_fresh'] / m['fused']:.2f}x "
        f"faster (fresh), {m['plain_out'] / m['fused']:.2f}x (out=); huge pages: "
        f"{m['fused'] / m['fused_huge']:.2f}x faster; float16 features: "
        f"{m['fused'] / m['fused_fp16']:.2f}x faster; targets: <= 25 ms/batch "
        f"{'met' if min(m['fused'], m['fused_huge']) <= 0.025 else 'NOT MET'} "
        f"({m['fused'] * 1e3:.1f} median, {m['fused_huge'] * 1e3:.1f} with huge pages, "
        f"{fastest['fused'] * 1e3:.1f} min), with float16 features "
        f"{'met' if m['fused_fp16'] <= 0.025 else 'NOT MET'} ({m['fused_fp16'] * 1e3:.1f}); "
        f"gather phase <= 1.5x ceiling "
        f"{'met' if m['fused_seq_gather'] <= 1.5 * ceiling else 'MISSED'} "
        f"({m['fused_seq_gather'] / ceiling:.2f}x)",
        "",
        floor_line(cpu, c["threads"], "float32", "index_select_out"),
        floor_line(cpu, c["threads"], "float16", "index_select_out_fp16"),
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = harness.parser(__doc__, threads=2, json=True)
    harness.add_graph_arguments(parser)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=6,
                        help="untimed batches first; more than num_buffers (4), so every "
                             "ring buffer of the fused sampler has reached its size")
    args = parser.parse_args(argv)
    result = run(args)
    print(table(result))
    harness.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
