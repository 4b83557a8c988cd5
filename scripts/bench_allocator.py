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
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_distributed import summarise   # scripts/ is on sys.path
from bench_omp_wait import add_train_arguments, train_command

POLICIES = {"keep": {"GNNSYS_MALLOC": "keep"},
            "keep, 8 arenas": {"GNNSYS_MALLOC": "keep", "MALLOC_ARENA_MAX": "8"},
            "system": {"GNNSYS_MALLOC": "system"}}
DEFAULT_CONFIGS = ["configs/quickstart.yaml", "configs/tgn-wikipedia.yaml",
                   "configs/adaqp-cora.yaml"]


def run(config: str, policy: str, args, run_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env.update(POLICIES[policy], OMP_WAIT_POLICY="PASSIVE")
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(train_command(config, args, run_dir), stdout=subprocess.DEVNULL,
                                stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"a run failed ({config}, {policy}):\n{err.read()[-2000:]}")
    summary = summarise(run_dir)
    return {"epoch_s": summary["epoch_s"], "test": summary["test"],
            "train_peak_mb": summary["peak_rss_mb"],
            "faults": usage.ru_minflt, "sys_s": usage.ru_stime,
            "peak_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_arguments(parser, DEFAULT_CONFIGS)
    parser.add_argument("--policies", nargs="+", choices=list(POLICIES), default=list(POLICIES),
                        help="which to run (default: all); the last is the baseline of the "
                             "'vs' column")
    args = parser.parse_args()
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: the first epoch (warm-up) is not counted")
    load_start = os.getloadavg()
    results = {(c, p): [] for c in args.configs for p in args.policies}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for config in args.configs:
                for policy in args.policies:
                    tag = policy.replace(", ", "-").replace(" ", "")
                    row = run(config, policy, args,
                              Path(tmp) / f"{round_}-{tag}-{Path(config).stem}")
                    results[config, policy].append(row)
                    print(f"{config} {policy}: {row}", flush=True)
    load_end = os.getloadavg()
    print(f"\n{args.threads} threads, 1 worker, {args.epochs} epochs (epoch s: mean of epochs "
          f"2..), {args.rounds} round(s), means over rounds; load {load_start[0]:.2f} -> "
          f"{load_end[0]:.2f}\n")
    print(f"| config | malloc | epoch s | vs {args.policies[-1]} | minor page faults | "
          "kernel CPU s | peak RSS MB: training / whole run | test |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for config in args.configs:
        mean = {p: {k: statistics.mean(r[k] for r in results[config, p])
                    for k in results[config, p][0]} for p in args.policies}
        base = mean[args.policies[-1]]
        for policy in args.policies:
            m = mean[policy]
            print(f"| {Path(config).stem} | {policy} | {m['epoch_s']:.3f} | "
                  f"{base['epoch_s'] / m['epoch_s']:.2f}x | {m['faults']:,.0f} | "
                  f"{m['sys_s']:.1f} | {m['train_peak_mb']:,.0f} / {m['peak_mb']:,.0f} | "
                  f"{m['test']:.4f} |")


if __name__ == "__main__":
    main()
