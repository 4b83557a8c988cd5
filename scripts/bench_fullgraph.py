"""Distributed full-graph training (AdaQP): bytes, epoch-time breakdown and accuracy of
vanilla / uniform 8, 4, 2 bits / adaptive bits, with and without overlap.

For each dataset and worker count, every variant runs the dataset's
`configs/adaqp-<name>.yaml` (or `--config`) with one override set, in one process (one
Ray session), and the table compares it with vanilla fp32 without overlap measured in
the same run:

    variant        quantisation       overlap   (AdaQP's names)
    vanilla        none               off       Vanilla
    overlap        none               on        AdaQP-p
    uniform8/4/2   uniform b bits     on
    adaptive-q     adaptive 2/4/8     off       AdaQP-q
    adaptive       adaptive 2/4/8     on        AdaQP

Bytes are boundary messages per training epoch summed over workers (mean over epochs,
including the first, 8-bit, adaptive cycle; "steady" is the last epoch). Times are the
slowest rank's seconds per epoch (the run log's epoch records), then the median over the
epochs after the first (a median, because a busy neighbour on a shared machine adds long
outliers): `comm` is the main thread's time in communication calls (gather, post, wait,
scatter), `wait` the part of it blocked on the peers. `--repeat N` runs the whole sweep N
times, variants round-robin, and pools the epochs of all rounds, so slow drifts of the
machine's load hit every variant alike. Test accuracy (ROC-AUC for Tolokers) is at the best validation epoch and
at the last epoch. Each finished run is appended to --out (JSON lines), so a long sweep
can be split into several calls and the table printed from all of them with --table-only.

`--paired` measures the overlap alone, free of run-to-run noise: one run per dataset,
worker count and quantisation (fp32 = the vanilla/overlap pair, adaptive = the
adaptive-q/adaptive pair) in which epochs alternate overlap off and on (off on on off
...), so each pair of epochs trains the same model at nearly the same moment; it prints
the median per-pair difference with a bootstrap 95% interval.

    python scripts/bench_fullgraph.py --datasets cora --workers 2 4
    python scripts/bench_fullgraph.py --datasets cora tolokers --paired --epochs 300
    python scripts/bench_fullgraph.py --datasets synthetic-products --workers 4 --epochs 3 \
        --variants vanilla adaptive
"""
import itertools
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import harness
from gnnsys.config import load_config

VARIANTS = {
    "vanilla": ["fullgraph.quantization.mode=none", "fullgraph.overlap=false"],
    "overlap": ["fullgraph.quantization.mode=none", "fullgraph.overlap=true"],
    **{f"uniform{b}": ["fullgraph.quantization.mode=uniform",
                       f"fullgraph.quantization.uniform_bits={b}", "fullgraph.overlap=true"]
       for b in (8, 4, 2)},
    "adaptive-q": ["fullgraph.quantization.mode=adaptive", "fullgraph.overlap=false"],
    "adaptive": ["fullgraph.quantization.mode=adaptive", "fullgraph.overlap=true"],
}
TIMES = ("step_s", "comm_s", "wait_s", "quant_s", "central_s", "marginal_s", "grad_sync_s")


def load(dataset: str, workers: int, variant: str, args, run_dir: Path):
    """The config of one run: the dataset's config, the variant's overrides, then --set."""
    path = harness.ROOT / "configs" / f"adaqp-{dataset}.yaml"
    path = args.config or (path if path.exists() else harness.ROOT / "configs/adaqp-cora.yaml")
    return load_config(path, [
        f"dataset.name={dataset}", f"cluster.workers={workers}", "train.progress=false",
        f"run.dir={run_dir}", "run.checkpoint_every=0", f"train.seed={args.seed}",
        *VARIANTS[variant], *([f"train.epochs={args.epochs}"] if args.epochs else []), *args.set])


def run_variant(dataset, workers, variant, args, scratch: Path) -> dict:
    config = load(dataset, workers, variant, args, scratch / f"{dataset}-w{workers}-{variant}")
    start = time.perf_counter()
    final, records = harness.train(config)
    wall = time.perf_counter() - start
    metric = harness.test_metric(final)
    row = {"dataset": dataset, "workers": workers, "variant": variant, "seed": args.seed,
           "epochs": final["epochs"], "metric": metric,
           "test": final[metric], "test_last": final[f"{metric}_last"],
           "bytes_per_epoch": float(np.mean([r["bytes_sent"] for r in records])),
           "bytes_steady": records[-1]["bytes_sent"],
           # Communicator bytes beyond the boundary messages: the gradient all-reduce
           "bytes_reduce": float(np.mean([r["comm_bytes_sent"] - r["bytes_sent"]
                                          for r in records])),
           "assign_solve_s": sum(r.get("assign_solve_s", 0.0) for r in records), "wall_s": wall,
           "bits": next((r["bits"] for r in reversed(records) if "bits" in r), None),
           "partition": final["partition"]}
    # the first epoch pays one-off warm-up costs
    row["epoch_times"] = {key: [r[key] for r in harness.after_first(records)] for key in TIMES}
    return summarise_times(row)


def summarise_times(row: dict) -> dict:
    for key, values in row["epoch_times"].items():
        row[key] = float(np.median(values))
    return row


def renamed(row: dict) -> dict:
    """A row an older version wrote, its phase times under today's names (runlog's map)."""
    from gnnsys.runlog import RENAMED_KEYS
    row = {RENAMED_KEYS.get(k, k): v for k, v in row.items()}
    if isinstance(row.get("epoch_times"), dict):
        row["epoch_times"] = {RENAMED_KEYS.get(k, k): v for k, v in row["epoch_times"].items()}
    return row


def load_rows(path: Path) -> list[dict]:
    """One row per (dataset, workers, variant): the latest sweep's, with the epoch times
    of all its rounds pooled (an earlier sweep of the same cell is replaced)."""
    rows = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = renamed(json.loads(line))
        key = (row["dataset"], row["workers"], row["variant"])
        old = rows.get(key)
        if old is not None and old.get("sweep") == row.get("sweep") and "epoch_times" in row:
            for name, values in row["epoch_times"].items():
                old["epoch_times"][name] += values
            old["rounds"] = old.get("rounds", 1) + 1
            summarise_times(old)
        else:
            rows[key] = row
    return list(rows.values())


# ----------------------------------------------------------------------------- paired
PAIRED = {"fp32": "vanilla", "adaptive": "adaptive"}      # name -> variant it quantises like


def paired_epochs(loop) -> list:
    """Train with overlap toggled per epoch (off on on off ...); (overlap, s, wait s)."""
    out = []
    for epoch in range(loop.config.train.epochs):
        loop.mode.exchanger.overlap = epoch % 4 in (1, 2)
        rec = loop.train_epoch(epoch)
        out.append((loop.mode.exchanger.overlap, rec["step_s"], rec["wait_s"]))
    return out


def run_paired(dataset, workers, name, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_fullgraph_") as run_dir:
        config = load(dataset, workers, PAIRED[name], args, Path(run_dir))
        epochs = harness.on_loop(config, paired_epochs)[0]    # times: the slowest rank's
    pairs = [(a, b) if a[0] else (b, a) for a, b in zip(epochs[2::2], epochs[3::2])]
    on = np.array([p[0][1] for p in pairs])
    off = np.array([p[1][1] for p in pairs])
    diff = on - off
    rng = np.random.default_rng(0)
    boot = np.median(rng.choice(diff, (2000, len(diff))), axis=1)
    return {"dataset": dataset, "workers": workers, "paired": name, "pairs": len(pairs),
            "off_s": float(np.median(off)), "on_s": float(np.median(on)),
            "diff_s": float(np.median(diff)), "ci_s": [float(np.percentile(boot, 2.5)),
                                                        float(np.percentile(boot, 97.5))],
            "on_faster": float(np.mean(diff < 0)),
            "wait_off_s": float(np.median([p[1][2] for p in pairs])),
            "wait_on_s": float(np.median([p[0][2] for p in pairs]))}


def print_paired(rows: list[dict]) -> None:
    header = (f"{'dataset':<18}{'K':>2} {'quant':<9}{'pairs':>6}{'off ms':>8}{'on ms':>8}"
              f"{'on-off ms':>10}{'95% CI':>16}{'change':>8}{'on faster':>10}"
              f"{'wait off':>9}{'wait on':>8}")
    print(header)
    print("-" * len(header))
    for r in sorted(rows, key=lambda r: (r["dataset"], r["workers"], r["paired"])):
        lo, hi = r["ci_s"]
        print(f"{r['dataset']:<18}{r['workers']:>2} {r['paired']:<9}{r['pairs']:>6}"
              f"{1e3 * r['off_s']:>8.2f}{1e3 * r['on_s']:>8.2f}{1e3 * r['diff_s']:>+10.2f}"
              f"{f'[{1e3 * lo:+.2f}, {1e3 * hi:+.2f}]':>16}"
              f"{100 * r['diff_s'] / r['off_s']:>+7.1f}%{100 * r['on_faster']:>9.0f}%"
              f"{1e3 * r['wait_off_s']:>9.2f}{1e3 * r['wait_on_s']:>8.2f}")
    print("epochs alternate overlap off/on within one run; off/on: median epoch time (the "
          "slowest rank's); on-off: median of per-pair differences (negative: overlap "
          "faster) with a bootstrap 95% interval; on faster: share of pairs; wait: median "
          "blocked time per epoch (the slowest rank's)")


# ----------------------------------------------------------------------------- table
def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.2f}"


def print_table(rows: list[dict]) -> None:
    header = (f"{'dataset':<18}{'K':>2} {'variant':<11}{'MB/ep':>10}{'steady':>10}{'x less':>7}"
              + "".join(f"{name:>9}" for name in ("epoch ms", "comm", "wait", "quant", "central",
                                                  "marginal", "reduce"))
              + f"{'solve s':>8}{'test':>7}{'Δ':>6}{'last':>7}{'Δ':>6}{'t/van':>6} rounds")
    print(header)
    print("-" * len(header))
    base = {(r["dataset"], r["workers"]): r for r in rows if r["variant"] == "vanilla"}
    order = {v: i for i, v in enumerate(VARIANTS)}
    for r in sorted(rows, key=lambda r: (r["dataset"], r["workers"], order[r["variant"]])):
        b = base.get((r["dataset"], r["workers"]))
        ratio = b["bytes_per_epoch"] / r["bytes_per_epoch"] if b and r["bytes_per_epoch"] else 0
        d_test = 100 * (r["test"] - b["test"]) if b else float("nan")
        d_last = 100 * (r["test_last"] - b["test_last"]) if b else float("nan")
        speed = r["step_s"] / b["step_s"] if b else float("nan")
        print(f"{r['dataset']:<18}{r['workers']:>2} {r['variant']:<11}"
              f"{r['bytes_per_epoch'] / 2**20:>10.3f}{r['bytes_steady'] / 2**20:>10.3f}{ratio:>7.1f}"
              + "".join(f"{_ms(r[key]):>9}" for key in TIMES)
              + f"{r['assign_solve_s']:>8.2f}{100 * r['test']:>7.2f}"
              f"{d_test:>+6.2f}{100 * r['test_last']:>7.2f}{d_last:>+6.2f}{speed:>6.3f} "
              f"{r.get('rounds', 1)}x{len(r.get('epoch_times', {}).get('step_s', []))}")
    print("MB/ep: boundary-message MiB per epoch (all workers, mean); steady: last epoch; "
          "x less: vanilla bytes / these bytes; times: the slowest rank's ms per epoch, "
          "median over the epochs after the first; "
          "test: best-val epoch, last: final epoch (accuracy or ROC-AUC, %); "
          "Δ: points vs vanilla; t/van: epoch time / vanilla's; rounds: rounds x epochs timed")


def main(argv=None) -> None:
    parser = harness.parser(__doc__, epochs=True, seed=0, set=True)
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "tolokers"])
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole sweep")
    parser.add_argument("--config", type=harness.config_file, help="config for every dataset "
                        "(default: configs/adaqp-<dataset>.yaml, else adaqp-cora.yaml)")
    parser.add_argument("--out", default="bench_fullgraph.jsonl", help="results, appended")
    parser.add_argument("--table-only", action="store_true", help="print --out, run nothing")
    parser.add_argument("--paired", action="store_true",
                        help="overlap off/on in alternating epochs of one run (see above)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.paired and args.table_only:
        print_paired([json.loads(line) for line in out.read_text().splitlines()
                      if '"paired"' in line])
        return
    if args.paired:
        rows = []
        for dataset, workers, name in itertools.product(args.datasets, args.workers, PAIRED):
            rows.append(run_paired(dataset, workers, name, args))
            with open(out, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
            print(f"done paired {dataset} K={workers} {name}", flush=True)
        print_paired(rows)
        return
    if not args.table_only:
        sweep = time.strftime("%Y%m%d-%H%M%S")
        runs = itertools.product(range(args.repeat), args.datasets, args.workers, args.variants)
        with tempfile.TemporaryDirectory(prefix="bench_fullgraph_") as scratch:
            for round_, dataset, workers, variant in runs:
                row = run_variant(dataset, workers, variant, args, Path(scratch))
                row.update(sweep=sweep, round=round_)
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"done {dataset} K={workers} {variant} (round {round_}): "
                      f"{row['bytes_per_epoch'] / 2**20:.3f} MiB/epoch, "
                      f"{row['step_s']:.3f} s/epoch, test {row['test']:.4f}", flush=True)
    print_table(load_rows(out))


if __name__ == "__main__":
    main()
