#!/usr/bin/env python
"""The seed systems' savings as time: gnnsys runs on an emulated 2-node cluster (network
namespaces, tbf-shaped links; see gnnsys/netcluster.py), per link setting, each saving
against its own baseline in the same cluster, variants interleaved round-robin.

    python scripts/bench_network.py --bandwidths none,400mbit,150mbit --json rows.json

Full-graph (AdaQP, cora): quantization none (fp32) / uniform 8, 4, 2 bits / adaptive.
Temporal (Sven, collegemsg, 1 epoch): exchange naive / dedup.
Prints one markdown table: epoch time (median over the epochs after the first), the share
of it spent communicating, bytes sent per epoch, the metric, and the time ratio against
the baseline of the same setting. Needs root and iproute2 (as the emulated cluster does).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gnnsys.netcluster import NetCluster, NetClusterError, unavailable_reason

REPO = Path(__file__).resolve().parent.parent
COMMON = ["train.progress=false", "run.checkpoint_every=0", "cluster.workers=2",
          "cluster.cpus_per_worker=1"]
ADAPTIVE = ["fullgraph.quantization.mode=adaptive", "fullgraph.quantization.assign_every=10",
            "fullgraph.quantization.profile_points=5"]
FULLGRAPH = {"fp32": ["fullgraph.quantization.mode=none"],
             **{f"uniform{b}": ["fullgraph.quantization.mode=uniform",
                                f"fullgraph.quantization.uniform_bits={b}"] for b in (8, 4, 2)},
             "adaptive": ADAPTIVE}
TEMPORAL = {"naive": ["temporal.exchange=naive"], "dedup": ["temporal.exchange=dedup"]}


def suites(args) -> dict:
    """suite name -> (config file, extra overrides, {variant: overrides}, baseline)."""
    out = {}
    if "fullgraph" in args.suites:
        out["fullgraph"] = ("configs/adaqp-cora.yaml", [f"train.epochs={args.fg_epochs}"],
                            FULLGRAPH, "fp32")
    if "temporal" in args.suites:
        out["temporal"] = (f"configs/tgn-{args.temporal_data}.yaml",
                           ["train.epochs=1"], TEMPORAL, "naive")
    return out


def train(cluster: NetCluster, config: str, overrides: list[str], run_dir: Path,
          timeout: float) -> list[dict]:
    """One gnnsys run submitted from the head's namespace; its metrics.jsonl records."""
    argv = [sys.executable, "-m", "gnnsys.cli", "train", "--config", str(REPO / config),
            "--set", f"cluster.address={cluster.address}", "--set", f"run.dir={run_dir}"]
    for item in overrides:
        argv += ["--set", item]
    done = cluster.run(0, argv, timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"run {' '.join(overrides)} failed: "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()]


def summarise(records: list[dict]) -> dict:
    epochs = [r for r in records if "epoch_s" in r and not r.get("final")]
    final = next(r for r in reversed(records) if r.get("final"))
    timed = epochs[1:] or epochs           # the first epoch pays warm-up (and one profile)
    epoch_s = statistics.median(r["epoch_s"] for r in timed)

    def share(r):                          # the slowest rank's waits: exchange + gradients
        return _max_rank(r, "comm_wait_s") / r["epoch_s"]
    metric = next((k for k in ("test_acc", "test_ap", "test_auc") if k in final), None)
    return {"epoch_s": epoch_s, "comm_share": statistics.median(share(r) for r in timed),
            "bytes": statistics.median(r.get("comm_bytes_sent", 0) for r in timed),
            "metric": f"{metric} {final[metric]:.4f}" if metric else "-",
            "epochs": len(epochs),
            "exchange_s": statistics.median(_exchange_s(r) for r in timed)}


def _exchange_s(record: dict) -> float:
    """The saving's own exchange time (full-graph boundary rows, temporal memory rows)."""
    key = "time_comm" if "time_comm" in record else "exchange_s"
    return _max_rank(record, key) if key in record else float("nan")


def _max_rank(record: dict, key: str) -> float:
    """The slowest rank's value when the per-rank detail is logged, else the logged one."""
    ranks = [w[key] for w in record.get("workers", []) if isinstance(w, dict) and key in w]
    return max(ranks) if ranks else record[key]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bandwidths", default="none,400mbit,150mbit",
                        help="comma-separated tc rates per link; 'none' = unshaped")
    parser.add_argument("--suites", default="fullgraph,temporal")
    parser.add_argument("--variants", default="", help="only these variants (comma list)")
    parser.add_argument("--fg-epochs", type=int, default=40)
    parser.add_argument("--temporal-data", default="collegemsg")
    parser.add_argument("--rounds", type=int, default=1, help="round-robin repeats")
    parser.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    parser.add_argument("--json", help="also write the raw rows here")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"bench_network: {reason}", file=sys.stderr)
        return 1
    only = set(filter(None, args.variants.split(",")))
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="bench_network-"))
    for bandwidth in args.bandwidths.split(","):
        rate = None if bandwidth == "none" else bandwidth
        try:
            with NetCluster(2, bandwidth=rate, cpus_per_node=1) as cluster:
                for suite, (config, extra, variants, base) in suites(args).items():
                    results = {}
                    for rnd in range(args.rounds):
                        for name, overrides in variants.items():
                            if only and name not in only and name != base:
                                continue
                            t0 = time.monotonic()
                            run_dir = scratch / f"{bandwidth}-{suite}-{name}-{rnd}"
                            records = train(cluster, config, COMMON + extra + overrides,
                                            run_dir, args.timeout)
                            results.setdefault(name, []).append(summarise(records))
                            print(f"# {bandwidth} {suite} {name} round {rnd}: "
                                  f"{results[name][-1]} ({time.monotonic() - t0:.0f}s)",
                                  file=sys.stderr, flush=True)
                    rows += _rows(bandwidth, suite, results, base)
        except NetClusterError as err:
            print(f"bench_network: {err}", file=sys.stderr)
            return 1
    print(_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _rows(bandwidth, suite, results, base) -> list[dict]:
    merged = {name: {"epoch_s": statistics.median(r["epoch_s"] for r in runs),
                     "comm_share": statistics.median(r["comm_share"] for r in runs),
                     "exchange_s": statistics.median(r["exchange_s"] for r in runs),
                     "bytes": statistics.median(r["bytes"] for r in runs),
                     "metric": " / ".join(dict.fromkeys(r["metric"] for r in runs))}
              for name, runs in results.items()}
    base_s = merged[base]["epoch_s"]
    return [{"setting": bandwidth, "suite": suite, "variant": name, **m,
             "speedup": base_s / m["epoch_s"]} for name, m in merged.items()]


def _table(rows: list[dict]) -> str:
    lines = ["| setting | suite | variant | epoch s | comm share | exchange s | MiB sent/epoch "
             "| metric | speed-up vs baseline |", "|---|---|---|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['suite']} | {r['variant']} | {r['epoch_s']:.3f} "
                     f"| {r['comm_share']:.0%} | {r['exchange_s']:.3f} | {r['bytes'] / 2 ** 20:.3f} | {r['metric']} "
                     f"| {r['speedup']:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
