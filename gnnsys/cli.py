"""The `gnnsys` command: a thin shell over the Python API (parse, load config, call).

    gnnsys train --config run.yaml [--resume] [--set train.epochs=3 ...]
    gnnsys datasets [--root DIR]
    gnnsys partition --config run.yaml [--force] [--verify]
    gnnsys report RUN_DIR [--out DIR]
    gnnsys predict RUN_DIR --out FILE [--split S | --nodes ID ...] [--layer L]
                   [--set dataset.path=OTHER.npz]
    gnnsys predict RUN_DIR --out FILE --queries FILE | --embeddings-at T   (temporal)
    gnnsys predict RUN_DIR --out FILE --pairs FILE | --topk K --nodes ID ... | --embeddings
                                                                   (static link)
    gnnsys export RUN_DIR --out model.pt

A failure is one line on stderr (exit 2 for bad input); --debug or GNNSYS_DEBUG=1 adds
the traceback.
"""
from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import re
import signal
import sys
import threading
import traceback

from .config import load_config
from .errors import ConfigError, DatasetError, NoSpaceForOutput, WorkerFailure


def _train(args) -> int:
    from .trainer import Trainer
    overrides = list(args.set or [])
    if args.resume:
        overrides.append("run.resume=true")
    config = load_config(args.config, overrides)
    metrics = Trainer(config).fit()
    print(final_line(metrics))
    if args.json:
        from .runlog import json_line
        print(json_line(metrics))            # strict JSON: a NaN metric prints as null
    return 0


def final_line(metrics: dict) -> str:
    """The run's one readable summary: its scalar figures (nested per-rank tables and
    counters that stayed 0 are left to --json and metrics.jsonl, which count epochs from 1
    as this line does)."""
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))}
    return "final: " + ", ".join(f"{k} {_number(v)}" for k, v in shown.items()
                                 if not (type(v) is int and v == 0))


def _number(value) -> str:
    """A metric for the final line: 4 decimals for scores and seconds, 1 for large
    amounts (megabytes, bytes), so no figure prints digits it does not have."""
    if not isinstance(value, float):
        return str(value)
    if not math.isfinite(value):
        return "n/a"                         # e.g. an AP over no inductive test events
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.4f}"


def _datasets(args) -> int:
    from .datasets import list_datasets
    rows = list_datasets(args.root)
    width = max(len(r.name) for r in rows)
    print(f"{'name':<{width}}  {'source':<9} {'task':<4} {'kind':<8} {'local':<5}  description")
    for r in rows:
        mark = "yes" if r.available else "-"
        print(f"{r.name:<{width}}  {r.source:<9} {r.task:<4} {r.kind:<8} {mark:<5}  {r.description}")
    return 0


def _partition(args) -> int:
    from .partition_cache import ensure_partitions, parts_dir
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


def _predict(args) -> int:
    from .result import load_run
    from .temporal_graph import exact_time
    result = load_run(args.run_dir, overrides=args.set or ())
    if args.embeddings_at is not None or args.layer is not None or args.embeddings:
        table = result.embeddings(args.embeddings_at, args.layer, nodes=args.nodes,
                                  split=args.split, out=args.out, workers=args.workers)
        print(f"{args.out}: {len(table['node_id'])} embeddings of dimension "
              f"{table['embedding'].shape[1]} " + (f"as of t={exact_time(args.embeddings_at)}"
                                                   if args.embeddings_at is not None else
                                                   (f"from layer {args.layer}" if args.layer else "from the last layer")))
        return 0
    if args.topk is not None:
        table = result.topk(args.nodes, args.topk, out=args.out)
        print(f"{args.out}: the {args.topk} best partners of {len(table['node_id'])} nodes")
        return 0
    if args.pairs is not None:
        table = result.predict(out=args.out, pairs=args.pairs)
        print(f"{args.out}: scores of {len(table['score'])} node pairs (mean probability "
              f"{table['prob'].mean():.4f})")
        return 0
    if args.queries is not None:
        table = result.predict(out=args.out, workers=args.workers, queries=args.queries)
        print(f"{args.out}: scores of {len(table['score'])} query events (mean probability "
              f"{table['prob'].mean():.4f})")
        return 0
    table = result.predict(args.split, out=args.out, workers=args.workers, nodes=args.nodes)
    labelled = table["label"] >= 0
    correct = (table["pred"] == table["label"])[labelled].mean() if labelled.any() else None
    which = "listed" if args.nodes else args.split
    print(f"{args.out}: {len(table['node_id'])} predictions ({which} nodes)"
          + (f", accuracy {correct:.4f} on the {labelled.sum()} labelled" if correct is not None
             else ""))
    return 0


def _export(args) -> int:
    from .result import load_run
    saved = load_run(args.run_dir).export_pyg(args.out)
    kwargs = ", ".join(f"{k}={v!r}" for k, v in saved["kwargs"].items())
    print(f"{args.out}: the state_dict of torch_geometric.nn.{saved['class']}({kwargs})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of a failure (or set GNNSYS_DEBUG=1)")
    parser = argparse.ArgumentParser(prog="gnnsys", description=__doc__.splitlines()[0],
                                     parents=[common])
    parser.set_defaults(debug=False)
    from . import __version__
    parser.add_argument("--version", action="version", version=f"gnnsys {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", parents=[common],
                           help="train a model as a YAML config describes")
    train.add_argument("--config", "-c", required=True, help="path to the run's YAML config")
    train.add_argument("--resume", action="store_true",
                       help="continue from the last checkpoint in run.dir")
    train.add_argument("--set", "-s", action="append", metavar="KEY=VALUE",
                       help="override a config value, e.g. --set train.epochs=3")
    train.add_argument("--json", action="store_true", help="also print the metrics as JSON")
    train.set_defaults(func=_train)

    datasets = sub.add_parser("datasets", parents=[common],
                              help="list registered datasets and which are local")
    datasets.add_argument("--root", help="data directory (default $GNNSYS_DATA or ~/.cache/gnnsys)")
    datasets.set_defaults(func=_datasets)

    part = sub.add_parser("partition", parents=[common],
                          help="split a config's dataset into on-disk parts "
                               "(done automatically by a distributed train)")
    part.add_argument("--config", "-c", required=True, help="path to the run's YAML config")
    part.add_argument("--set", "-s", action="append", metavar="KEY=VALUE",
                      help="override a config value, e.g. --set partition.method=stream")
    part.add_argument("--force", action="store_true", help="rebuild even if the parts exist")
    part.add_argument("--verify", action="store_true",
                      help="also check every file's sha256 against the manifest")
    part.set_defaults(func=_partition)

    report = sub.add_parser("report", parents=[common], help="draw PNG charts of a run's metrics")
    report.add_argument("run_dir", help="the run directory (run.dir of its config)")
    report.add_argument("--out", help="where to write the PNGs (default: the run directory)")
    report.set_defaults(func=_report)

    predict = sub.add_parser("predict", parents=[common],
                             help="write a finished run's class scores and predicted classes, or a "
                             "temporal run's query scores or node embeddings")
    predict.add_argument("run_dir", help="the run directory (run.dir of its config)")
    predict.add_argument("--out", required=True, help="a .parquet, .npz or .csv file to write")
    predict.add_argument("--split", default="all", choices=("all", "train", "val", "test"),
                         help="which nodes (default: every node)")
    predict.add_argument("--nodes", type=int, nargs="+", metavar="ID",
                         help="these node ids instead, in this order")
    predict.add_argument("--queries", metavar="FILE",
                         help="temporal runs: score these events (.csv / .npz / .parquet with "
                         "columns src, dst, t)")
    predict.add_argument("--embeddings-at", type=float, metavar="T",
                         help="temporal runs: every node's embedding (or --nodes') as of time T")
    predict.add_argument("--pairs", metavar="FILE",
                         help="link runs: score these node pairs (.csv / .npz / .parquet with "
                         "columns src, dst)")
    predict.add_argument("--topk", type=int, metavar="K",
                         help="link runs: the K best partners of each of --nodes, none it is "
                         "linked to already")
    predict.add_argument("--embeddings", action="store_true",
                         help="link runs: every node's embedding (or --nodes'), the vectors "
                         "pairs are scored by")
    predict.add_argument("--layer", type=int, metavar="L",
                         help="node runs: write the output of the model's first L layers "
                         "(node embeddings) instead of class scores")
    predict.add_argument("--workers", type=int,
                         help="infer on this many workers (default: one process for a run "
                         "trained on this machine, else the run's cluster.workers)")
    predict.add_argument("--set", "-s", action="append", metavar="dataset.KEY=VALUE",
                         help="node runs: predict on another graph of the same features and "
                         "classes, e.g. --set dataset.path=new.npz")
    predict.set_defaults(func=_predict)

    export = sub.add_parser("export", parents=[common], help="write a finished minibatch run's "
                            "model as a torch_geometric GraphSAGE / GCN / GAT state_dict")
    export.add_argument("run_dir", help="the run directory (run.dir of its config)")
    export.add_argument("--out", required=True, help="the .pt file to write")
    export.set_defaults(func=_export)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so the same cleanup runs (workers stopped,
    lock freed)."""


# exit code and what to say per signal handled; the one received is remembered, since a
# library may turn the exception raised into a plain KeyboardInterrupt (Ray's ray.get does)
STOP_SIGNALS = {signal.SIGTERM: (143, "terminated (SIGTERM)"),
                signal.SIGHUP: (129, "hung up (SIGHUP: the terminal closed)")}
_received: list = []


def _on_stop_signal(signum, frame):
    _received.append(signum)
    raise Terminated()


def explain(err: BaseException) -> tuple[int, str]:
    """(exit code, one line) for a failure: 2 for bad input (config, dataset files, paths)."""
    from partition.format import PartitionError
    text = " ".join(str(err).split())
    if isinstance(err, KeyboardInterrupt) and _received:
        code, what = STOP_SIGNALS[_received[-1]]
        return code, f"{what}; a train run continues with --resume"
    if isinstance(err, KeyboardInterrupt):
        return 130, "interrupted; a train run continues with --resume"
    if isinstance(err, ConfigError):
        return 2, f"{err.label}: {text}"
    if isinstance(err, DatasetError):
        return 2, f"dataset error: {text}"
    if isinstance(err, PartitionError):
        return 2, f"partition error: {text}"
    if isinstance(err, FloatingPointError):
        return 1, f"training stopped: {text}"
    if isinstance(err, WorkerFailure):
        return 1, f"training failed: {text}"
    if type(err).__name__ == "OutOfMemoryError" and "Ray killed" in text:   # Ray's, ~3 kB
        used = re.search(r"was ([\d.]+GB used / [\d.]+GB limit)", text)
        return 1, ("out of memory: Ray killed the workers as the machine ran low"
                   + (f" ({used.group(1)})" if used else "") + "; free memory, lower "
                   "sampler.batch_size or cluster.workers, and --resume")
    if isinstance(err, NoSpaceForOutput):
        return 1, text
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return 1, (f"no space left on the device holding {err.filename or 'a file being written'}"
                   "; free space (or point run.dir / $GNNSYS_DATA elsewhere) and --resume")
    if isinstance(err, OSError) and err.filename:
        return 2, f"{err.filename}: {err.strerror or text}"
    return 1, (f"{type(err).__name__}: {text} (run with --debug or GNNSYS_DEBUG=1 "
               "for the traceback)")


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("GNNSYS_DEBUG", "") not in ("", "0")
    if threading.current_thread() is threading.main_thread():
        for stop in STOP_SIGNALS:
            signal.signal(stop, _on_stop_signal)
    try:
        return args.func(args)
    except BrokenPipeError:             # `gnnsys datasets | head`: the reader has what it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (Exception, KeyboardInterrupt) as err:
        if debug:
            traceback.print_exc()
        code, line = explain(err)
        print(f"gnnsys: {line}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
