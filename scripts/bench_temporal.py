"""Sven benchmark: memory-exchange traffic of the naive exchange (one row per occurrence,
as TGL's MFG) against the deduplicated one, per-worker balance of range / hash / balanced
vertex ownership, and measured epoch time on K workers.

    python scripts/bench_temporal.py --config configs/tgn-wikipedia.yaml \
        --simulate 2,4,8 --measure 2

Part 1 replays one training epoch of the workers' exact batches (same negatives and
neighbours) and counts what the exchange would send, byte for byte as the communicator
counts it, for any worker count without starting any. Part 2 trains --epochs epochs on K
workers per setting (Ray actors, or threads with --set cluster.launcher=threads) and
reports what was measured (it should equal the prediction).
"""
import json
import sys
import tempfile
import time

import harness
from gnnsys.config import from_dict, load_config
from gnnsys.datasets import load_run_graph
from gnnsys.temporal.data import prepare_events
from gnnsys.temporal.placement import simulate_exchange, vertex_ownership
from samplers.temporal import NEGATIVE_STRATEGIES as STRATEGIES


def mib(x: float) -> str:
    return f"{x / 2 ** 20:,.1f}"


def part_simulated(config, events, worker_counts) -> None:
    traffic_rows, balance_rows = [], []
    for K in worker_counts:
        results = {}
        for kind in ("range", "hash", "balanced"):
            cfg = from_dict(config.to_dict(), [f"cluster.workers={K}",
                                               f"temporal.ownership={kind}"])
            t0 = time.perf_counter()
            owner = vertex_ownership(cfg, events, K)
            placed_s = time.perf_counter() - t0
            results[kind] = (simulate_exchange(cfg, events, K, owner), placed_s)
        sim, _ = results["range"]
        naive, dedup = sim["naive"], sim["dedup"]
        traffic_rows.append([K, "range", f"{sim['redundancy']:.2f}",
                             f"{naive['rows']:,}", f"{dedup['rows']:,}",
                             mib(naive["sent"].sum()), mib(dedup["sent"].sum()),
                             f"{naive['sent'].sum() / max(dedup['sent'].sum(), 1):.2f}x"])
        base_max = None
        for kind, (sim, placed_s) in results.items():
            per_worker = sim["dedup"]["sent"] + sim["dedup"]["recv"]
            base_max = base_max or per_worker.max()
            balance_rows.append([K, kind, mib(per_worker.max()), mib(per_worker.mean()),
                                 f"{per_worker.max() / per_worker.mean():.3f}",
                                 f"{100 * (1 - per_worker.max() / base_max):.1f}%",
                                 f"{placed_s:.1f}"])
    print("\n### Simulated training epoch: naive vs deduplicated exchange (range ownership)\n")
    print(harness.markdown(["workers", "ownership", "occurrences/unique", "rows naive",
                            "rows dedup", "MiB sent naive", "MiB sent dedup",
                            "bytes naive/dedup"], traffic_rows, align="rlrrrrrr"))
    print("\n### Simulated per-worker traffic (dedup, MiB sent+received per epoch)\n")
    print(harness.markdown(["workers", "ownership", "max", "mean", "max/mean",
                            "max vs range", "placement s"], balance_rows, align="rlrrrrr"))


def part_measured(args, graph, workers: int) -> None:
    rows = []
    for exchange, ownership in [("naive", "range"), ("dedup", "range"),
                                ("dedup", "balanced")]:
        with tempfile.TemporaryDirectory() as run_dir:
            config = load_config(args.config, [
                *args.set, f"cluster.workers={workers}", f"temporal.exchange={exchange}",
                f"temporal.ownership={ownership}", f"train.epochs={args.epochs}",
                "train.progress=false", f"run.dir={run_dir}", "run.checkpoint_every=0"])
            t0 = time.perf_counter()
            final, epochs = harness.train(config, graph)
            wall, last = time.perf_counter() - t0, epochs[-1]
        rows.append([workers, exchange, ownership, f"{final['rows_sent']:,}",
                     mib(final["bytes_sent"]), mib(final["worker_bytes_max"]),
                     f"{final['worker_bytes_max'] / max(final['worker_bytes_mean'], 1):.3f}",
                     f"{last['epoch_s']:.1f}", f"{last['exchange_s']:.1f}",
                     f"{final['val_ap']:.4f}", f"{wall:.0f}"])
        print(json.dumps({"exchange": exchange, "ownership": ownership,
                          "epoch_s": last["epoch_s"], "exchange_s": last["exchange_s"], **{
                              k: final[k] for k in ("rows_sent", "bytes_sent", "worker_bytes_max",
                                                    "worker_bytes_mean", "val_ap")}}),
              file=sys.stderr, flush=True)
    print(f"\n### Measured on {workers} workers (last training epoch)\n")
    print(harness.markdown(["workers", "exchange", "ownership", "rows sent", "MiB sent",
                            "worker MiB max", "max/mean", "epoch s", "exchange s", "val AP",
                            "run s"], rows, align="rllrrrrrrrr"))


def main(argv=None) -> int:
    parser = harness.parser(__doc__, config="configs/tgn-wikipedia.yaml", epochs=1, set=True)
    parser.add_argument("--simulate", default="2,4,8",
                        help="worker counts to simulate (comma list; empty = skip)")
    parser.add_argument("--measure", type=int, default=0,
                        help="train on this many workers per setting (0 = skip)")
    parser.add_argument("--edgebank", action="store_true",
                        help="EdgeBank (unlimited, time window) on the model's val/test batches")
    args = parser.parse_args(argv)
    config = load_config(args.config, args.set)
    if config.mode != "temporal":
        parser.error(f"{args.config} is a '{config.mode}' config; pass a temporal one")
    graph = load_run_graph(config)
    events = prepare_events(graph, config.temporal.edge_feat_dim)
    print(f"## bench_temporal: {events.name}, {len(events.src):,} events, "
          f"{events.num_nodes:,} nodes, model {config.model.arch}, global batch "
          f"{config.sampler.batch_size}, {config.temporal.num_neighbors} neighbours")
    if counts := [int(k) for k in args.simulate.split(",") if k.strip()]:
        part_simulated(config, events, counts)
    if args.measure:
        part_measured(args, graph, args.measure)
    if args.edgebank:
        part_edgebank(config, events)
    return 0


def part_edgebank(config, events) -> None:
    """The memorisation baseline on the model's own evaluation batches and negatives
    (those of a run with this config's train.epochs and eval_negative_strategy), the test
    under every strategy and ranked against every possible destination."""
    from gnnsys.temporal.edgebank import edgebank_metrics
    rows = []
    for per_event in (False, True):
        for window in (False, True):
            m = {**edgebank_metrics(config, events, "val", window, per_event),
                 **edgebank_metrics(config, events, "test", window, per_event)}
            rows.append(["time window" if window else "unlimited",
                         "each event" if per_event else "batch start", f"{m['val_ap']:.4f}",
                         *[f"{m[f'test_ap_neg_{s}']:.4f}" for s in STRATEGIES],
                         *[f"{m[f'test_auc_neg_{s}']:.4f}" for s in STRATEGIES],
                         f"{m['test_mrr']:.4f}", f"{m['test_mrr_all']:.4f}",
                         f"{m['test_hits10_all']:.4f}"])
            print(json.dumps({"edgebank": rows[-1][0], "bank_as_of": rows[-1][1], **m}),
                  file=sys.stderr, flush=True)
    print("\n### EdgeBank on the model's evaluation batches\n")
    print("(bank as of the batch start: the standard baseline; as of each event: every "
          f"earlier event, as temporal.pair_history sees; val AP and test MRR under "
          f"{config.temporal.eval_negative_strategy} negatives)\n")
    print(harness.markdown(["EdgeBank", "bank as of", "val AP",
                            *[f"test AP {s}" for s in STRATEGIES],
                            *[f"test AUC {s}" for s in STRATEGIES],
                            "test MRR", "test MRR all", "test Hits@10 all"], rows,
                           align="llrrrrrrrrrr"))


if __name__ == "__main__":
    sys.exit(main())
