"""What mixed training negatives cost: training time per epoch of `gnnsys train` with
`temporal.train_negative_strategy` random (the baseline, TGN's protocol) and mixed.

    python scripts/bench_temporal_negatives.py       # CollegeMsg, 3 epochs, 3 rounds (BENCHMARKS.md)

mixed gives each training event three more negatives than random (a destination busy in
its batch, a historical pair, whose source is a root too, and that source with a random
destination): 8 roots per event instead of 3.
Each run is its own process on one worker; the two strategies alternate within each round
and swap order every round, so both meet the same machine load. Time is the training steps
alone (`train_s`: validation and test excluded), mean of the epochs after the first; the
ratio is given per round, as a range, not only the median.
"""
import itertools
import statistics
import tempfile
from pathlib import Path

import harness

STRATEGIES = ("mixed", "random")          # the second is the baseline
RUN_NUMBER = itertools.count()


def train_s(config: Path, strategy: str, args, out: Path) -> float:
    run_dir = out / f"{strategy}-{next(RUN_NUMBER)}"
    args.set = [*args.base_set, f"temporal.train_negative_strategy={strategy}",
                "temporal.rank_all=false"]
    harness.finish(harness.start_one_worker(config, args, run_dir))
    return harness.summary(run_dir, ["train_s"])["train_s"]


def main(argv=None) -> None:
    parser = harness.parser(__doc__, config="configs/tgn-collegemsg.yaml", epochs=3,
                            threads=2, rounds=3, set=True)
    args = parser.parse_args(argv)
    args.base_set = list(args.set)
    load_start = harness.load_average()
    seconds = {s: [] for s in STRATEGIES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = STRATEGIES if round_ % 2 == 0 else STRATEGIES[::-1]
            for strategy in order:
                seconds[strategy].append(train_s(args.config, strategy, args, Path(tmp)))
                print(f"round {round_ + 1} {strategy}: {seconds[strategy][-1]:.2f} s per "
                      "epoch", flush=True)
    ratios = [m / r for m, r in zip(seconds["mixed"], seconds["random"])]
    print(f"\n{args.config.name}, {args.epochs} epochs per run (the first not counted), "
          f"{args.threads} threads, {args.rounds} rounds; load average (1/5/15 min) at start "
          f"{load_start}, at end {harness.load_average()}\n")
    rows = [[s + (" (baseline)" if s == STRATEGIES[-1] else ""),
             f"{statistics.median(seconds[s]):.2f}", " / ".join(f"{x:.2f}" for x in seconds[s])]
            for s in STRATEGIES]
    print(harness.markdown(["training negatives", "train s / epoch (median)", "rounds"], rows,
                           align="lrl"))
    print(f"\nmixed against random: {statistics.median(ratios):.2f}x the training time per "
          f"epoch (rounds: {min(ratios):.2f}-{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
