"""Distributed (Ray workers, partitioned features, VIP cache) vs single-machine training:
test accuracy / ROC-AUC and epoch time with its communication share.

Each dataset runs its `configs/dist-<name>.yaml` twice per seed, each run its own
`gnnsys train` process: with `cluster.workers=1` (the single-machine trainer, all
features local: the baseline) and with the config's workers. Epoch time is the training
loop only (evaluation excluded), averaged over epochs after the first. For the
distributed runs the communication columns come from the per-worker counters in
metrics.jsonl (slowest worker): seconds in the gradient all-reduce (blocks the step),
seconds in the feature fetch collectives (in the loader thread, overlapping the step),
and seconds the step waited for its batch (sampling + fetch not hidden).

    python scripts/bench_distributed.py                      # cora + tolokers, 3 seeds
    python scripts/bench_distributed.py --datasets tolokers --seeds 0 --epochs 5
    python scripts/bench_distributed.py --cores 2 --datasets tolokers synthetic-small \
        blogcatalog --seeds 0 --epochs 4          # does a second worker slow a run down?
                                                  # (and 2 independent 1x1 runs at once:
                                                  #  the machine's own ceiling for 2 x 1)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gnnsys.config import load_config
from gnnsys.runlog import read_metrics

ROOT = Path(__file__).resolve().parents[1]


def run_overrides(name: str, workers: int, seed: int, epochs: int | None, out: Path,
                  threads: int | None, copy: int | None = None) -> list[str]:
    tag = f"{name}-w{workers}-t{threads or 0}-s{seed}" + ("" if copy is None else f"-copy{copy}")
    overrides = [f"cluster.workers={workers}", f"train.seed={seed}", "train.progress=false",
                 f"run.dir={out / tag}"]
    if epochs:
        overrides.append(f"train.epochs={epochs}")
    if threads:
        overrides.append(f"sampler.threads={threads}")
    return overrides


def gnnsys_train_command(config: Path, overrides: list[str]) -> list[str]:
    """`gnnsys train --config config --set ...` in this interpreter (every bench's runs)."""
    cmd = [sys.executable, "-m", "gnnsys.cli", "train", "--config", str(config)]
    for item in overrides:
        cmd += ["--set", item]
    return cmd


def config_path(name: str) -> Path:
    return ROOT / "configs" / f"dist-{name}.yaml"


def run_once(name: str, workers: int, seed: int, epochs: int | None, out: Path,
             threads: int | None = None) -> dict:
    """One run as its own `gnnsys train` process: a run keeps the memory it frees
    (gnnsys/allocator.py), so runs in one process would stack their peaks."""
    overrides = run_overrides(name, workers, seed, epochs, out, threads)
    run_dir = load_config(config_path(name), overrides).run.dir
    # A finished run in --out is reused, so an interrupted benchmark can be resumed.
    if not any(r.get("final") for r in read_metrics(run_dir)):
        subprocess.run(gnnsys_train_command(config_path(name), overrides), check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    return summarise(run_dir)


def run_copies(name: str, copies: int, seed: int, epochs: int | None, out: Path) -> dict:
    """`copies` independent 1 worker x 1 thread runs at once, as separate processes with
    no communication at all: what the machine gives two busy processes, the ceiling of
    any K x 1 setting on it. Their mean epoch time, summed cores busy."""
    overrides = [run_overrides(name, 1, seed, epochs, out, 1, copy=i) for i in range(copies)]
    procs = [subprocess.Popen(gnnsys_train_command(config_path(name), o),
                              stdout=subprocess.DEVNULL,
                              env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
             for o in overrides]
    if any(p.wait() for p in procs):
        raise SystemExit(f"a concurrent copy of {name} failed; run it alone to see why")
    each = [summarise(load_config(config_path(name), o).run.dir) for o in overrides]
    return {"epoch_s": statistics.mean(r["epoch_s"] for r in each),
            "cpu_cores": sum(r["cpu_cores"] for r in each)}


def summarise(run_dir) -> dict:
    records = read_metrics(run_dir)
    final = next(r for r in reversed(records) if r.get("final"))
    epochs_rec = [r for r in records if "loss" in r][1:]
    key = next(k for k in final if k.startswith("test_"))

    def mean(field):
        values = [r[field] for r in epochs_rec if field in r]
        return statistics.mean(values) if values else float("nan")

    return {"metric": key, "test": final[key], "epoch_s": mean("epoch_s"),
            "allreduce_s": mean("grad_sync_s"), "fetch_wait_s": mean("fetch_s"),
            "batch_wait_s": mean("batch_wait_s"), "remote_rows": mean("remote_rows"),
            "cache_hits": mean("cache_hits"), "bytes_recv": mean("comm_bytes_recv"),
            "cpu_cores": mean("cpu_cores"), "peak_rss_mb": mean("peak_rss_mb")}


def fmt(values) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "tolokers"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, help="override train.epochs")
    parser.add_argument("--threads", type=int,
                        help="sampler.threads for every run (numba + torch threads per "
                             "worker); default: all cores for 1 worker, 1 each for 2")
    parser.add_argument("--out", type=Path, help="run directories (default: a new temp dir); "
                                                 "finished runs found there are reused")
    parser.add_argument("--cores", type=int, default=0,
                        help="instead: throughput on this many cores, as 1 worker x cores "
                             "threads, 1 worker x 1 thread and --workers x 1 thread each "
                             "(does a second worker ever slow a run down?)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-dist-"))
    if args.cores:
        return same_cores(args, out)
    results = {}
    for name in args.datasets:
        for workers in (1, args.workers):
            results[name, workers] = [run_once(name, workers, s, args.epochs, out,
                                               args.threads) for s in args.seeds]

    print(f"\n## Accuracy: 1 worker vs {args.workers} (seeds {args.seeds})\n")
    print(f"| dataset | metric | 1 worker | {args.workers} workers | difference (points) |")
    print("|---|---|---|---|---|")
    for name in args.datasets:
        one = [r["test"] for r in results[name, 1]]
        many = [r["test"] for r in results[name, args.workers]]
        diff = 100 * (statistics.mean(many) - statistics.mean(one))
        print(f"| {name} | {results[name, 1][0]['metric']} | {fmt(one)} | {fmt(many)} | "
              f"{diff:+.2f} |")

    threads = f"{args.threads} thread(s) per worker" if args.threads else "default threads"
    print(f"\n## Epoch time: 1 vs {args.workers} CPU workers, {threads} "
          "(mean over epochs 2.., seeds)\n")
    print("| dataset | workers | epoch s | speed-up | all-reduce s | fetch collectives s "
          "| waiting for batch s | comm share | remote rows | cache hits | MB received |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        base = statistics.mean(r["epoch_s"] for r in results[name, 1])
        for workers in (1, args.workers):
            rs = results[name, workers]
            avg = {k: statistics.mean(r[k] for r in rs) for k in rs[0] if k != "metric"}
            if workers == 1:
                print(f"| {name} | 1 | {avg['epoch_s']:.3f} | 1.00x | - | - | - | - | - | - "
                      "| - |")
                continue
            # Blocking communication: the all-reduce plus the part of the fetch the
            # loader thread could not hide (bounded by the time the step waited).
            exposed = avg["allreduce_s"] + min(avg["fetch_wait_s"], avg["batch_wait_s"])
            print(f"| {name} | {workers} | {avg['epoch_s']:.3f} | "
                  f"{base / avg['epoch_s']:.2f}x | {avg['allreduce_s']:.3f} | "
                  f"{avg['fetch_wait_s']:.3f} | {avg['batch_wait_s']:.3f} | "
                  f"{exposed / avg['epoch_s']:.0%} | {avg['remote_rows']:,.0f} | "
                  f"{avg['cache_hits']:,.0f} | {avg['bytes_recv'] / 1e6:.2f} |")
    print(f"\nrun directories: {out}")


def same_cores(args, out: Path) -> None:
    """Epoch time of K workers x 1 thread against 1 worker x K threads (the same cores)
    and 1 worker x 1 thread, each setting interleaved per seed."""
    settings = [(1, args.cores), (1, 1), (args.workers, 1)]
    runs, copies = {}, {}
    for name in args.datasets:
        for seed in args.seeds:
            for workers, threads in settings:
                runs.setdefault((name, workers, threads), []).append(
                    run_once(name, workers, seed, args.epochs, out, threads))
            copies.setdefault(name, []).append(
                run_copies(name, args.workers, seed, args.epochs, out))
    k, c = args.workers, args.cores
    print(f"\n## Same {c} cores: {k} workers x 1 thread vs 1 worker x {c} threads vs 1 x 1 "
          f"(epoch s, mean over epochs 2.., seeds {args.seeds})\n")
    print(f"| dataset | 1 x {c} s | 1 x 1 s | {k} x 1 s | {k}x1 vs 1x{c} | {k}x1 vs 1x1 "
          f"| cores busy (1x1 / {k}x1) | ceiling vs 1x1 | all-reduce s ({k}x1) "
          f"| waiting for batch s ({k}x1) | peak memory per worker GB ({k}x1) "
          f"| test ({k}x1 / 1x{c}) | {k} copies of 1x1 at once: epoch s, vs 1x1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for name in args.datasets:
        avg = {s: {key: statistics.mean(r[key] for r in runs[(name, *s)])
                   for key in ("epoch_s", "allreduce_s", "batch_wait_s", "test", "cpu_cores",
                               "peak_rss_mb")}
               for s in settings}
        wide, one, many = (avg[s] for s in settings)
        together = statistics.mean(r["epoch_s"] for r in copies[name])
        print(f"| {name} | {wide['epoch_s']:.3f} | {one['epoch_s']:.3f} | "
              f"{many['epoch_s']:.3f} | {wide['epoch_s'] / many['epoch_s']:.2f}x | "
              f"{one['epoch_s'] / many['epoch_s']:.2f}x | "
              f"{one['cpu_cores']:.2f} / {many['cpu_cores']:.2f} | "
              f"{c / one['cpu_cores']:.2f}x | {many['allreduce_s']:.3f} | "
              f"{many['batch_wait_s']:.3f} | {many['peak_rss_mb'] / k / 1024:.2f} | "
              f"{many['test']:.4f} / {wide['test']:.4f} | "
              f"{together:.3f} s, {k * one['epoch_s'] / together:.2f}x |")
    print(f"\n`cores busy`: CPU seconds / wall seconds of the epoch, summed over workers (the "
          f"loader's sampling thread runs beside the step, so 1 x 1 can keep more than one "
          f"core busy); `ceiling vs 1x1`: {c} cores / 1x1's busy cores, the most {k} x 1 can "
          f"gain over 1 x 1 on {c} cores. `{k} copies of 1x1 at once`: {k} independent "
          f"single-worker runs as separate processes with no communication at all; their "
          f"combined throughput over one 1x1 run alone ({k} x 1x1 s / their epoch s) is what "
          f"this machine gives {k} busy processes: no {k} x 1 setting can beat it.")
    print(f"\nrun directories: {out}")


if __name__ == "__main__":
    main()
