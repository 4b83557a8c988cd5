"""The `gnnsys` command: a thin shell over the Python API (parse, load config, call).

    gnnsys train --config run.yaml [--resume] [--set train.epochs=3 ...]
    gnnsys datasets [--root DIR]
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
