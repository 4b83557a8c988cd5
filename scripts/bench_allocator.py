"""Freed memory kept for reuse (gnnsys's default) against glibc's defaults, measured: epoch
time, page faults, kernel time and peak memory of `gnnsys train` runs.

    python scripts/bench_allocator.py --epochs 3   # minibatch, temporal and full-graph configs
    python scripts/bench_allocator.py --configs configs/dist-synthetic-products.yaml \\
        --epochs 2

Each config runs once per policy per round, the policies interleaved (keep, keep with 8
arenas, system, keep, ...), one worker, in a fresh process: `keep` is what gnnsys does
(gnnsys/allocator.py: no mmap, no heap trimming, one arena for every thread, so a step
reuses the memory the last one freed); `keep, 8 arenas` the same with glibc's
per-thread arenas (`MALLOC_ARENA_MAX=8`, as gnnsys did before session 12: a thread's
blocks over 64 MB are still mmapped afresh); `system` leaves glibc's defaults (blocks
over 32 MB are mmapped and unmapped again, so every step page-faults them anew). Per
run: the epoch time of the training loop (mean of the epochs after the first), the peak
resident memory at the end of training (metrics.jsonl's `peak_rss_mb`), and for the
whole process (set-up and evaluation included) its minor page faults, kernel CPU
seconds and peak resident memory, from the kernel's accounting of the finished child
(wait4).
"""
import statistics
import tempfile
from pathlib import Path

import harness

# GNNSYS_MALLOC and glibc's arena limit per policy (None: unset)
POLICIES = {"keep": {"GNNSYS_MALLOC": "keep", "MALLOC_ARENA_MAX": None},
            "keep, 8 arenas": {"GNNSYS_MALLOC": "keep", "MALLOC_ARENA_MAX": "8"},
            "system": {"GNNSYS_MALLOC": "system", "MALLOC_ARENA_MAX": None}}
DEFAULT_CONFIGS = ["configs/quickstart.yaml", "configs/tgn-wikipedia.yaml",
                   "configs/adaqp-cora.yaml"]


def run(config: Path, policy: str, args, run_dir: Path) -> dict:
    usage = harness.finish(harness.start_one_worker(config, args, run_dir, POLICIES[policy]))
    summary = harness.summary(run_dir, ["epoch_s", "peak_rss_mb"])
    return {"epoch_s": summary["epoch_s"], "test": summary["test"],
            "train_peak_mb": summary["peak_rss_mb"], "faults": usage.ru_minflt,
            "sys_s": usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def main(argv=None) -> None:
    parser = harness.parser(__doc__, configs=DEFAULT_CONFIGS, epochs=2, threads=2, rounds=1,
                            set=True)
    parser.add_argument("--policies", nargs="+", choices=list(POLICIES), default=list(POLICIES),
                        help="which to run (default: all); the last is the baseline of the "
                             "'vs' column")
    args = parser.parse_args(argv)
    load_start = harness.load_average()
    results = {(c, p): [] for c in args.configs for p in args.policies}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for config in args.configs:
                for policy in args.policies:
                    tag = policy.replace(", ", "-").replace(" ", "")
                    row = run(config, policy, args, Path(tmp) / f"{round_}-{tag}-{config.stem}")
                    results[config, policy].append(row)
                    print(f"{config.stem} {policy}: {row}", flush=True)
    print(f"\n{args.threads} threads, 1 worker, {args.epochs} epochs (epoch s: mean of epochs "
          f"2..), {args.rounds} round(s), means over rounds; load {load_start} -> "
          f"{harness.load_average()}\n")
    rows = []
    for config in args.configs:
        mean = {p: {k: statistics.mean(r[k] for r in results[config, p])
                    for k in results[config, p][0]} for p in args.policies}
        base = mean[args.policies[-1]]
        rows += [[config.stem, policy, f"{m['epoch_s']:.3f}",
                  f"{base['epoch_s'] / m['epoch_s']:.2f}x", f"{m['faults']:,.0f}",
                  f"{m['sys_s']:.1f}", f"{m['train_peak_mb']:,.0f} / {m['peak_mb']:,.0f}",
                  f"{m['test']:.4f}"] for policy, m in mean.items()]
    print(harness.markdown(["config", "malloc", "epoch s", f"vs {args.policies[-1]}",
                            "minor page faults", "kernel CPU s",
                            "peak RSS MB: training / whole run", "test"], rows, align="llrrrrrr"))


if __name__ == "__main__":
    main()
