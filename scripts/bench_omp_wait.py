"""How long idle OpenMP threads spin before they sleep (GOMP_SPINCOUNT), measured: epoch
time of `gnnsys train` runs, alone and two at once on the same cores.

    python scripts/bench_omp_wait.py          # TGN on wikipedia and synthetic-small, spins
                                              # 0 / 3000 / 10000, 2 epochs (BENCHMARKS.md)

Between parallel regions libgomp's threads spin GOMP_SPINCOUNT times, then sleep on a
futex. 0 is OMP_WAIT_POLICY=PASSIVE (every region pays a wake-up); 300000 is libgomp's
default when no policy is set (an idle thread keeps its core busy for milliseconds, which
a second process, or the sampler's numba pool in the same process, needed). Each config
runs once per spin count, the spin counts interleaved within each round; then two copies
at once per spin count (each with --threads threads: 2x oversubscribed on a 2-core box),
the case the spinning can hurt. Epoch time is the training loop (`epoch_s`), mean of the
epochs after the first. Every run gets OMP_WAIT_POLICY=PASSIVE plus its GOMP_SPINCOUNT
(libgomp's explicit spin count overrides the policy's), whatever the caller's shell says.
TGN's wikipedia batches (under 800 events) train on one torch thread whatever --threads
says (TemporalMode.training_torch_threads), so its row no longer measures torch's pool
in training; session 9's and 14's TGN rows predate that.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_distributed import gnnsys_train_command, summarise   # scripts/ on sys.path

ROOT = Path(__file__).resolve().parents[1]
RUN_NUMBER = itertools.count()   # concurrent runs start before either creates its run dir
DEFAULT_CONFIGS = ["configs/tgn-wikipedia.yaml", "configs/dist-synthetic-small.yaml"]


def train_command(config: str, args, run_dir: Path) -> list[str]:
    """`gnnsys train` of `config` with one worker, --epochs and --threads, into run_dir."""
    return gnnsys_train_command(ROOT / config, [
        f"train.epochs={args.epochs}", f"sampler.threads={args.threads}", "cluster.workers=1",
        "train.progress=false", f"run.dir={run_dir}", *args.set])


def add_train_arguments(parser, configs: list[str]) -> None:
    """The options of a benchmark of whole `gnnsys train` runs (`train_command`)."""
    parser.add_argument("--configs", nargs="+", default=configs)
    parser.add_argument("--epochs", type=int, default=2,
                        help="epochs per run (>= 2: the first, warm-up, is not counted)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="extra config override")


def start(config: str, spins: int, args, out: Path) -> tuple[subprocess.Popen, Path]:
    run_dir = out / f"{Path(config).stem}-spin{spins}-{next(RUN_NUMBER)}"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(spins)}
    return subprocess.Popen(train_command(config, args, run_dir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, text=True), run_dir


def epoch_s(proc: subprocess.Popen, run_dir: Path) -> float:
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"a run failed ({run_dir}):\n{err[-2000:]}")
    return summarise(run_dir)["epoch_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_train_arguments(parser, DEFAULT_CONFIGS)
    parser.add_argument("--spins", type=int, nargs="+", default=[0, 3000, 10000])
    args = parser.parse_args()
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: the first epoch (warm-up) is not counted")
    load_start = os.getloadavg()
    alone = {(c, s): [] for c in args.configs for s in args.spins}
    pair = {(c, s): [] for c in args.configs for s in args.spins}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for _ in range(args.rounds):
            for config in args.configs:
                for spins in args.spins:
                    alone[config, spins].append(epoch_s(*start(config, spins, args, out)))
                for spins in args.spins:
                    runs = [start(config, spins, args, out) for _ in range(2)]
                    pair[config, spins].append(statistics.mean(epoch_s(*r) for r in runs))
                    print(f"{config} spin {spins}: alone {alone[config, spins][-1]:.3f} s, "
                          f"two at once {pair[config, spins][-1]:.3f} s", flush=True)
    load_end = os.getloadavg()
    print(f"\n{args.threads} threads per run, {args.epochs} epochs (mean epoch_s of epochs "
          f"2..), {args.rounds} round(s); load {load_start[0]:.2f} -> {load_end[0]:.2f}\n")
    base_spins = args.spins[0]
    print(f"| config | GOMP_SPINCOUNT | epoch s alone | vs spin {base_spins} | two at once: "
          f"epoch s each | two at once: throughput vs one alone at spin {base_spins} |")
    print("|---|---:|---:|---:|---:|---:|")
    for config in args.configs:
        base = statistics.mean(alone[config, base_spins])
        for spins in args.spins:
            a, p = statistics.mean(alone[config, spins]), statistics.mean(pair[config, spins])
            print(f"| {Path(config).stem} | {spins} | {a:.3f} | {base / a:.2f}x | {p:.3f} | "
                  f"{2 * base / p:.2f}x |")


if __name__ == "__main__":
    main()
