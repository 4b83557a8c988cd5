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
import itertools
import statistics
import tempfile
from pathlib import Path

import harness

RUN_NUMBER = itertools.count()   # concurrent runs start before either creates its run dir
DEFAULT_CONFIGS = ["configs/tgn-wikipedia.yaml", "configs/dist-synthetic-small.yaml"]


def start(config: Path, spins: int, args, out: Path) -> tuple:
    run_dir = out / f"{config.stem}-spin{spins}-{next(RUN_NUMBER)}"
    return harness.start_one_worker(config, args, run_dir, {"GOMP_SPINCOUNT": str(spins)}), run_dir


def epoch_s(proc, run_dir: Path) -> float:
    harness.finish(proc)
    return harness.summary(run_dir, ["epoch_s"])["epoch_s"]


def main(argv=None) -> None:
    parser = harness.parser(__doc__, configs=DEFAULT_CONFIGS, epochs=2, threads=2, rounds=1,
                            set=True)
    parser.add_argument("--spins", type=int, nargs="+", default=[0, 3000, 10000])
    args = parser.parse_args(argv)
    load_start = harness.load_average()
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
                    pair[config, spins].append(statistics.mean([epoch_s(*r) for r in runs]))
                    print(f"{config.stem} spin {spins}: alone {alone[config, spins][-1]:.3f} s, "
                          f"two at once {pair[config, spins][-1]:.3f} s", flush=True)
    print(f"\n{args.threads} threads per run, {args.epochs} epochs (mean epoch_s of epochs "
          f"2..), {args.rounds} round(s); load {load_start} -> {harness.load_average()}\n")
    base_spins, rows = args.spins[0], []
    for config in args.configs:
        base = statistics.mean(alone[config, base_spins])
        for spins in args.spins:
            a, p = statistics.mean(alone[config, spins]), statistics.mean(pair[config, spins])
            rows.append([config.stem, spins, f"{a:.3f}", f"{base / a:.2f}x", f"{p:.3f}",
                         f"{2 * base / p:.2f}x"])
    print(harness.markdown(["config", "GOMP_SPINCOUNT", "epoch s alone", f"vs spin {base_spins}",
                            "two at once: epoch s each", "two at once: throughput vs one "
                            f"alone at spin {base_spins}"], rows, align="lrrrrr"))


if __name__ == "__main__":
    main()
