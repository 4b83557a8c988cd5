"""The `gnnsys` command: a thin shell over the Python API (parse, load config, call).

    gnnsys train --config run.yaml [--resume] [--set train.epochs=3 ...]
    gnnsys datasets [--root DIR]
    gnnsys partition --config run.yaml [--force] [--verify]
    gnnsys report RUN_DIR [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from .config import ConfigError, load_config


def _train(args) -> int:
    from .trainer import Trainer
    overrides = list(args.set or [])
    if args.resume:
        overrides.append("run.resume=true")
    config = load_config(args.config, overrides)
    metrics = Trainer(config).fit()
    print("final: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in metrics.items()))
    if args.json:
        print(json.dumps(metrics))
    return 0


def _datasets(args) -> int:
    from .datasets import list_datasets
    rows = list_datasets(args.root)
    width = max(len(r.name) for r in rows)
    print(f"{'name':<{width}}  {'source':<9} {'task':<20} {'local':<5}  description")
    for r in rows:
        mark = "yes" if r.available else "-"
        print(f"{r.name:<{width}}  {r.source:<9} {r.task:<20} {mark:<5}  {r.description}")
    return 0


def _partition(args) -> int:
    from .partitions import ensure_partitions, parts_dir
    config = load_config(args.config, list(args.set or []))
    parts = ensure_partitions(config, force=args.force, progress=True)
    if args.verify:
        parts.verify(checksums=True)
    q = parts.manifest["quality"]
    print(f"{parts_dir(config)}: {q['num_parts']} parts ({parts.manifest['method']}), "
          f"edge cut {q['edge_cut']:,} ({q['edge_cut_fraction']:.1%}), balance: nodes "
          f"{q['node_balance']}, training nodes {q['train_balance']}, edges {q['edge_balance']}")
    return 0


def _report(args) -> int:
    from .report import make_report
    for path in make_report(args.run_dir, args.out):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gnnsys", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model as a YAML config describes")
    train.add_argument("--config", "-c", required=True, help="path to the run's YAML config")
    train.add_argument("--resume", action="store_true",
                       help="continue from the last checkpoint in run.dir")
    train.add_argument("--set", "-s", action="append", metavar="KEY=VALUE",
                       help="override a config value, e.g. --set train.epochs=3")
    train.add_argument("--json", action="store_true", help="also print the metrics as JSON")
    train.set_defaults(func=_train)

    datasets = sub.add_parser("datasets", help="list registered datasets and which are local")
    datasets.add_argument("--root", help="data directory (default $GNNSYS_DATA or ~/.cache/gnnsys)")
    datasets.set_defaults(func=_datasets)

    part = sub.add_parser("partition", help="split a config's dataset into on-disk parts "
                                            "(done automatically by a distributed train)")
    part.add_argument("--config", "-c", required=True, help="path to the run's YAML config")
    part.add_argument("--set", "-s", action="append", metavar="KEY=VALUE",
                      help="override a config value, e.g. --set partition.method=stream")
    part.add_argument("--force", action="store_true", help="rebuild even if the parts exist")
    part.add_argument("--verify", action="store_true",
                      help="also check every file's sha256 against the manifest")
    part.set_defaults(func=_partition)

    report = sub.add_parser("report", help="draw PNG charts of a run's metrics")
    report.add_argument("run_dir", help="the run directory (run.dir of its config)")
    report.add_argument("--out", help="where to write the PNGs (default: the run directory)")
    report.set_defaults(func=_report)
    return parser


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"gnnsys: config error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as err:
        print(f"gnnsys: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gnnsys: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
