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
import statistics
import tempfile
from pathlib import Path

import harness
from gnnsys import runlog

# averaged over the epochs after the first (`harness.summary`)
KEYS = ("epoch_s", "grad_sync_s", "fetch_s", "batch_wait_s", "remote_rows", "cache_hits",
        "comm_bytes_recv", "cpu_cores", "peak_rss_mb")


def config_path(name: str) -> Path:
    return harness.ROOT / "configs" / f"dist-{name}.yaml"


def run_settings(args, name: str, workers: int, seed: int, threads: int | None,
                 copy: int | None = None) -> tuple[Path, list[str]]:
    """(run directory, overrides) of one run."""
    tag = f"{name}-w{workers}-t{threads or 0}-s{seed}" + ("" if copy is None else f"-copy{copy}")
    return args.out / tag, [f"cluster.workers={workers}", f"train.seed={seed}",
                            "train.progress=false", f"run.dir={args.out / tag}",
                            *([f"train.epochs={args.epochs}"] if args.epochs else []),
                            *([f"sampler.threads={threads}"] if threads else []), *args.set]


def run_once(args, name: str, workers: int, seed: int, threads: int | None) -> dict:
    """One run as its own `gnnsys train` process: a run keeps the memory it frees
    (gnnsys/allocator.py), so runs in one process would stack their peaks."""
    run_dir, overrides = run_settings(args, name, workers, seed, threads)
    # A finished run in --out is reused, so an interrupted benchmark can be resumed.
    if runlog.final(run_dir) is None:
        harness.finish(harness.start_train(config_path(name), overrides))
    return harness.summary(run_dir, KEYS)


def run_copies(args, name: str, seed: int) -> dict:
    """--workers independent 1 worker x 1 thread runs at once, as separate processes with
    no communication at all: what the machine gives two busy processes, the ceiling of
    any K x 1 setting on it. Their mean epoch time, summed cores busy."""
    runs = [run_settings(args, name, 1, seed, 1, copy=i) for i in range(args.workers)]
    for proc in [harness.start_train(config_path(name), overrides) for _, overrides in runs]:
        harness.finish(proc)
    each = [harness.summary(run_dir, ("epoch_s", "cpu_cores")) for run_dir, _ in runs]
    return {"epoch_s": statistics.mean(r["epoch_s"] for r in each),
            "cpu_cores": sum(r["cpu_cores"] for r in each)}


def fmt(values) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def mean_of(runs: list[dict]) -> dict:
    """Each number of the runs' summaries, averaged over the runs (seeds)."""
    return {k: statistics.mean(r[k] for r in runs) for k in runs[0] if k != "metric"}


def main(argv=None) -> None:
    parser = harness.parser(__doc__, epochs=True, set=True)
    parser.add_argument("--datasets", nargs="+", default=["cora", "tolokers"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2)
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
    args.out = args.out or Path(tempfile.mkdtemp(prefix="bench-dist-"))
    if args.cores:
        return same_cores(args)
    k = args.workers
    results = {(name, workers): [run_once(args, name, workers, s, args.threads) for s in args.seeds]
               for name in args.datasets for workers in (1, k)}

    print(f"\n## Accuracy: 1 worker vs {k} (seeds {args.seeds})\n")
    rows = []
    for name in args.datasets:
        one = [r["test"] for r in results[name, 1]]
        many = [r["test"] for r in results[name, k]]
        diff = 100 * (statistics.mean(many) - statistics.mean(one))
        rows.append([name, results[name, 1][0]["metric"], fmt(one), fmt(many), f"{diff:+.2f}"])
    print(harness.markdown(["dataset", "metric", "1 worker", f"{k} workers",
                            "difference (points)"], rows))

    threads = f"{args.threads} thread(s) per worker" if args.threads else "default threads"
    print(f"\n## Epoch time: 1 vs {k} CPU workers, {threads} (mean over epochs 2.., seeds)\n")
    rows = []
    for name in args.datasets:
        one, many = mean_of(results[name, 1]), mean_of(results[name, k])
        # Blocking communication: the all-reduce plus the part of the fetch the
        # loader thread could not hide (bounded by the time the step waited).
        exposed = many["grad_sync_s"] + min(many["fetch_s"], many["batch_wait_s"])
        rows += [[name, 1, f"{one['epoch_s']:.3f}", "1.00x", *["-"] * 7],
                 [name, k, f"{many['epoch_s']:.3f}", f"{one['epoch_s'] / many['epoch_s']:.2f}x",
                  f"{many['grad_sync_s']:.3f}", f"{many['fetch_s']:.3f}",
                  f"{many['batch_wait_s']:.3f}", f"{exposed / many['epoch_s']:.0%}",
                  f"{many['remote_rows']:,.0f}", f"{many['cache_hits']:,.0f}",
                  f"{many['comm_bytes_recv'] / 1e6:.2f}"]]
    print(harness.markdown(["dataset", "workers", "epoch s", "speed-up", "all-reduce s",
                            "fetch collectives s", "waiting for batch s", "comm share",
                            "remote rows", "cache hits", "MB received"], rows))
    print(f"\nrun directories: {args.out}")


def same_cores(args) -> None:
    """Epoch time of K workers x 1 thread against 1 worker x K threads (the same cores)
    and 1 worker x 1 thread, each setting interleaved per seed."""
    settings = [(1, args.cores), (1, 1), (args.workers, 1)]
    runs, copies = {}, {}
    for name in args.datasets:
        for seed in args.seeds:
            for workers, threads in settings:
                runs.setdefault((name, workers, threads), []).append(
                    run_once(args, name, workers, seed, threads))
            copies.setdefault(name, []).append(run_copies(args, name, seed))
    k, c = args.workers, args.cores
    print(f"\n## Same {c} cores: {k} workers x 1 thread vs 1 worker x {c} threads vs 1 x 1 "
          f"(epoch s, mean over epochs 2.., seeds {args.seeds})\n")
    rows = []
    for name in args.datasets:
        wide, one, many = (mean_of(runs[(name, *s)]) for s in settings)
        together = statistics.mean(r["epoch_s"] for r in copies[name])
        rows.append([name, f"{wide['epoch_s']:.3f}", f"{one['epoch_s']:.3f}",
                     f"{many['epoch_s']:.3f}", f"{wide['epoch_s'] / many['epoch_s']:.2f}x",
                     f"{one['epoch_s'] / many['epoch_s']:.2f}x",
                     f"{one['cpu_cores']:.2f} / {many['cpu_cores']:.2f}",
                     f"{c / one['cpu_cores']:.2f}x", f"{many['grad_sync_s']:.3f}",
                     f"{many['batch_wait_s']:.3f}", f"{many['peak_rss_mb'] / k / 1024:.2f}",
                     f"{many['test']:.4f} / {wide['test']:.4f}",
                     f"{together:.3f} s, {k * one['epoch_s'] / together:.2f}x"])
    print(harness.markdown(
        ["dataset", f"1 x {c} s", "1 x 1 s", f"{k} x 1 s", f"{k}x1 vs 1x{c}", f"{k}x1 vs 1x1",
         f"cores busy (1x1 / {k}x1)", "ceiling vs 1x1", f"all-reduce s ({k}x1)",
         f"waiting for batch s ({k}x1)", f"peak memory per worker GB ({k}x1)",
         f"test ({k}x1 / 1x{c})", f"{k} copies of 1x1 at once: epoch s, vs 1x1"],
        rows, align="lrrrrrrrrrrll"))
    print(f"\n`cores busy`: CPU seconds / wall seconds of the epoch, summed over workers (the "
          f"loader's sampling thread runs beside the step, so 1 x 1 can keep more than one "
          f"core busy); `ceiling vs 1x1`: {c} cores / 1x1's busy cores, the most {k} x 1 can "
          f"gain over 1 x 1 on {c} cores. `{k} copies of 1x1 at once`: {k} independent "
          f"single-worker runs as separate processes with no communication at all; their "
          f"combined throughput over one 1x1 run alone ({k} x 1x1 s / their epoch s) is what "
          f"this machine gives {k} busy processes: no {k} x 1 setting can beat it.")
    print(f"\nrun directories: {args.out}")


if __name__ == "__main__":
    main()
