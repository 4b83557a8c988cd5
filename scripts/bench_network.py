#!/usr/bin/env python
"""The seed systems' savings as time: gnnsys runs on an emulated K-node cluster (network
namespaces, tbf-shaped links; see gnnsys/netcluster.py), per link setting, each saving
against its own baseline in the same cluster, variants interleaved round-robin.

    python scripts/bench_network.py --bandwidths none,400mbit,150mbit --json rows.json
    python scripts/bench_network.py --suites minibatch --mb-data products,tolokers
    python scripts/bench_network.py --suites fullgraph --fg-data tolokers,synthetic
    python scripts/bench_network.py --scaling 1,2,4 --bandwidths none

Suites (one per dataset):
  minibatch (SALIENT++): cache none (baseline) / degree / vip at cache.replication 0.5;
      products = synthetic-products scaled to 250k nodes with longer edges (so a part's
      samples reach across the cut), tolokers.
  fullgraph (AdaQP): quantization none (fp32) / uniform 8, 4, 2 bits / adaptive;
      cora, tolokers, synthetic = synthetic-products scaled to 200k nodes, longer edges.
  temporal (Sven): exchange naive / dedup; collegemsg or wikipedia, 1 epoch.
Prints one markdown table: epoch time (median over the epochs after the first), the share of
it spent waiting on the network (minibatch: waiting for a batch + the all-reduce not hidden;
the remote-row fetch itself runs beside the step), bytes sent per epoch, the metric, and the
time ratio against the baseline of the same setting. With --scaling, each suite runs only
its saving (vip, adaptive, dedup) on 1, 2, 4 ... nodes (one worker per node) and the table
is epochs per second against 1 node. Needs root and iproute2 (as the emulated cluster does).
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

import harness
from gnnsys import runlog
from gnnsys.errors import NetClusterError
from gnnsys.netcluster import NetCluster, unavailable_reason

# One core per node: a worker's threads, and the 1-node run's too (its process is not
# confined to its namespace's CPU, so left alone it would use the whole machine).
COMMON = ["train.progress=false", "run.checkpoint_every=0", "cluster.cpus_per_worker=1",
          "sampler.threads=1", "cluster.timeout_s=900"]
ADAPTIVE = ["fullgraph.quantization.mode=adaptive", "fullgraph.quantization.assign_every=10",
            "fullgraph.quantization.profile_points=5"]
FULLGRAPH = {"fp32": ["fullgraph.quantization.mode=none"],
             **{f"uniform{b}": ["fullgraph.quantization.mode=uniform",
                                f"fullgraph.quantization.uniform_bits={b}"] for b in (8, 4, 2)},
             "adaptive": ADAPTIVE}
TEMPORAL = {"naive": ["temporal.exchange=naive"], "dedup": ["temporal.exchange=dedup"]}
MINIBATCH = {policy: [f"cache.policy={policy}", "cache.replication=0.5"]
             for policy in ("none", "degree", "vip")}
# Products-like graphs scaled to what a few 1-core namespaces run in minutes, with longer
# edges (locality exponent 0.5: BENCHMARKS.md's cache section, METIS cut 2.5% at full
# size; the preset's 0.2% leaves almost nothing to send or cache).
PRODUCTS_MB = ("dataset.params={num_nodes: 250000, locality_exponent: 0.5}",
               "train.epochs=2", "train.eval_every=2")
PRODUCTS_FG = ("dataset.params={num_nodes: 200000, locality_exponent: 0.5}",
               "train.epochs=4", "train.eval_every=4", "fullgraph.quantization.assign_every=1",
               "fullgraph.quantization.profile_points=5")
DATA = {  # suite -> dataset -> (config, extra overrides)
    "minibatch": {
        "products": ("configs/dist-synthetic-small.yaml",
                     ["dataset.name=synthetic-products", *PRODUCTS_MB]),
        "tolokers": ("configs/dist-tolokers.yaml", ["train.epochs=4", "train.eval_every=4"]),
    },
    "fullgraph": {
        "cora": ("configs/adaqp-cora.yaml", []),
        "tolokers": ("configs/adaqp-tolokers.yaml", []),
        "synthetic": ("configs/adaqp-synthetic-products.yaml", list(PRODUCTS_FG)),
    },
    "temporal": {name: (f"configs/tgn-{name}.yaml", ["train.epochs=1"])
                 for name in ("collegemsg", "wikipedia")},
}
VARIANTS = {"minibatch": (MINIBATCH, "none", "vip"), "fullgraph": (FULLGRAPH, "fp32", "adaptive"),
            "temporal": (TEMPORAL, "naive", "dedup")}


def suites(args) -> dict:
    """'suite/dataset' -> (config file, extra overrides, {variant: overrides}, baseline)."""
    chosen = {"minibatch": args.mb_data, "fullgraph": args.fg_data,
              "temporal": args.temporal_data}
    out = {}
    for suite in filter(None, args.suites.split(",")):
        if suite not in DATA:
            raise SystemExit(f"bench_network: unknown suite {suite!r}; use {', '.join(DATA)}")
        variants, base, saving = VARIANTS[suite]
        for name in filter(None, chosen[suite].split(",")):
            if name not in DATA[suite]:
                raise SystemExit(f"bench_network: no {suite} dataset {name!r}; use "
                                 f"{', '.join(DATA[suite])}")
            config, extra = DATA[suite][name]
            if suite == "fullgraph" and name != "synthetic":
                extra = extra + [f"train.epochs={args.fg_epochs}"]
            if args.scaling:          # only the saving, on 1, 2, 4 ... nodes
                out[f"{suite}/{name}"] = (config, extra, {saving: variants[saving]}, saving)
            else:
                out[f"{suite}/{name}"] = (config, extra, variants, base)
    return out


def run_overrides(variant: list[str], extra: list[str], workers: int, more=()) -> list[str]:
    """One run's --set list. The dataset's settings come after the variant's: they tune
    its defaults (e.g. assign_every on a 4-epoch run); `more` (--set) last."""
    return COMMON + variant + extra + [f"cluster.workers={workers}", *more]


def train(cluster: NetCluster, config: str, overrides: list[str], run_dir: Path,
          timeout: float) -> dict:
    """One gnnsys run submitted from the head's namespace; its summary."""
    argv = harness.train_command(harness.ROOT / config, [
        f"cluster.address={cluster.address}", f"run.dir={run_dir}", *overrides])
    done = cluster.run(0, argv, timeout=timeout, cwd=harness.ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"run {' '.join(overrides)} failed: "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
    return summarise(runlog.epochs(run_dir), runlog.final(run_dir))


def summarise(epochs: list[dict], final: dict) -> dict:
    timed = harness.after_first(epochs)    # the first epoch pays warm-up (and one profile)
    metric = harness.test_metric(final)
    return {"epoch_s": statistics.median(r["epoch_s"] for r in timed),
            "comm_share": statistics.median(_exposed_wait(r) / r["epoch_s"] for r in timed),
            "bytes": statistics.median(r.get("comm_bytes_sent", 0) for r in timed),
            "metric": f"{metric} {final[metric]:.4f}" if metric else "-",
            "epochs": len(epochs),
            "exchange_s": statistics.median(_exchange_s(r) for r in timed)}


def _exposed_wait(record: dict) -> float:
    """Seconds of the epoch spent waiting on the network, slowest rank. Minibatch fetches
    remote rows in the loader's thread, beside the step, so its waits are what the step
    saw: waiting for a batch plus the all-reduce not hidden by backward (summed per rank,
    from the record's `workers`, each rank's own values). Elsewhere the Communicator's own
    waits (exchange and gradients) are on the step's path: the logged `comm_wait_s`."""
    if "batch_wait_s" not in record:
        return record["comm_wait_s"]
    return max(w["batch_wait_s"] + w.get("grad_sync_s", 0.0)
               for w in record.get("workers", [record]))


def _exchange_s(record: dict) -> float:
    """The saving's own exchange time, the slowest rank's (full-graph boundary rows,
    temporal memory rows, minibatch remote feature rows: fetched in the loader's thread,
    beside the step)."""
    return next((record[key] for key in ("comm_s", "exchange_s", "fetch_s") if key in record),
                float("nan"))


def main(argv=None) -> int:
    parser = harness.parser(__doc__, set=True, json=True)
    parser.add_argument("--bandwidths", default="none,400mbit,150mbit",
                        help="comma-separated tc rates per link; 'none' = unshaped")
    parser.add_argument("--suites", default="fullgraph,temporal",
                        help="comma list of minibatch, fullgraph, temporal")
    parser.add_argument("--variants", default="", help="only these variants (comma list)")
    parser.add_argument("--mb-data", default="products", help="minibatch datasets (comma list)")
    parser.add_argument("--fg-data", default="cora", help="full-graph datasets (comma list)")
    parser.add_argument("--fg-epochs", type=int, default=40,
                        help="full-graph epochs (cora, tolokers)")
    parser.add_argument("--temporal-data", default="collegemsg",
                        help="temporal datasets (comma list)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes = workers (savings)")
    parser.add_argument("--scaling", default="",
                        help="node counts, e.g. 1,2,4: run each suite's saving on each and "
                             "print epochs/s against the first")
    parser.add_argument("--rounds", type=int, default=1, help="round-robin repeats")
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    args = parser.parse_args(argv)
    if reason := unavailable_reason():
        print(f"bench_network: {reason}", file=sys.stderr)
        return 1
    only = set(filter(None, args.variants.split(",")))
    counts = [int(n) for n in args.scaling.split(",")] if args.scaling else [args.nodes]
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="bench_network-"))
    for bandwidth in args.bandwidths.split(","):
        rate = None if bandwidth == "none" else bandwidth
        try:
            with NetCluster(max(counts), bandwidth=rate, cpus_per_node=1) as cluster:
                for suite, (config, extra, variants, base) in suites(args).items():
                    # (label, workers, overrides); the first label is the baseline
                    runs = [(f"{n} node{'s' * (n > 1)}", n, next(iter(variants.values())))
                            for n in counts] if args.scaling else \
                        [(name, args.nodes, o) for name, o in variants.items()
                         if not only or name in only or name == base]
                    results = {}
                    for rnd in range(args.rounds):
                        for label, workers, overrides in runs:
                            t0 = time.monotonic()
                            tag = f"{suite.replace('/', '-')}-{label.replace(' ', '')}"
                            results.setdefault(label, []).append(train(
                                cluster, config, run_overrides(overrides, extra, workers,
                                                               args.set),
                                scratch / f"{bandwidth}-{tag}-{rnd}", args.timeout))
                            print(f"# {bandwidth} {suite} {label} round {rnd}: "
                                  f"{results[label][-1]} ({time.monotonic() - t0:.0f}s)",
                                  file=sys.stderr, flush=True)
                    rows += _rows(bandwidth, suite, results, runs[0][0])
        except NetClusterError as err:
            print(f"bench_network: {err}", file=sys.stderr)
            return 1
    print(_table(rows, scaling=bool(args.scaling)))
    harness.write_json(args.json, rows)
    return 0


def _rows(bandwidth, suite, results, base) -> list[dict]:
    merged = {name: {**{key: statistics.median(r[key] for r in runs)
                        for key in ("epoch_s", "comm_share", "exchange_s", "bytes")},
                     "metric": " / ".join(dict.fromkeys(r["metric"] for r in runs))}
              for name, runs in results.items()}
    base_s = merged[base]["epoch_s"]
    return [{"setting": bandwidth, "suite": suite, "variant": name, **m,
             "speedup": base_s / m["epoch_s"]} for name, m in merged.items()]


def _table(rows: list[dict], scaling: bool = False) -> str:
    return harness.markdown(
        ["setting", "suite", "variant", "epoch s", "comm share", "exchange s", "MiB sent/epoch",
         "metric", "epochs/s vs 1 node" if scaling else "speed-up vs baseline"],
        [[r["setting"], r["suite"], r["variant"], f"{r['epoch_s']:.3f}", f"{r['comm_share']:.0%}",
          f"{r['exchange_s']:.3f}", f"{r['bytes'] / 2 ** 20:.3f}", r["metric"],
          f"{r['speedup']:.2f}x"] for r in rows], align="lllrrrrlr")


if __name__ == "__main__":
    sys.exit(main())
