"""Accuracy of single-machine minibatch training on real graphs, as a table.

    python scripts/bench_accuracy.py                       # cora, citeseer, tolokers
    python scripts/bench_accuracy.py --configs configs/cora-sage.yaml --seeds 0 1 2

Each config is trained once per seed with `gnnsys.Trainer`; the table shows the test
metric (mean and spread over seeds), the target from the issue, and wall time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import gnnsys

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["configs/cora-sage.yaml", "configs/citeseer-sage.yaml", "configs/tolokers-sage.yaml"]
TARGETS = {"cora": 0.78, "citeseer": 0.68, "tolokers": 0.80}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=DEFAULT)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--set", action="append", default=[], help="extra config overrides")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    rows = []
    for path in args.configs:
        scores, seconds = [], []
        for seed in args.seeds:
            cfg = gnnsys.load_config(ROOT / path, overrides=[
                f"train.seed={seed}", "train.progress=false",
                f"run.dir=runs/bench-accuracy/{Path(path).stem}-{seed}", *args.set])
            t0 = time.perf_counter()
            metrics = gnnsys.Trainer(cfg).fit()
            seconds.append(time.perf_counter() - t0)
            key = next(k for k in metrics if k.startswith("test_"))
            scores.append(metrics[key])
        name = cfg.dataset.name
        rows.append({"dataset": name, "model": cfg.model.arch, "metric": key,
                     "mean": statistics.mean(scores),
                     "std": statistics.pstdev(scores), "runs": len(scores),
                     "target": TARGETS.get(name), "seconds_per_run": statistics.mean(seconds)})

    print("\n| dataset | model | metric | test (mean ± std over seeds) | target | s/run |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        target = f">= {r['target']:.2f}" if r["target"] else "-"
        ok = "" if r["target"] is None else (" ✓" if r["mean"] >= r["target"] else " ✗")
        print(f"| {r['dataset']} | {r['model']} | {r['metric']} | {r['mean']:.4f} ± "
              f"{r['std']:.4f} ({r['runs']} seeds) | {target}{ok} | {r['seconds_per_run']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
