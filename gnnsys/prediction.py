"""Prediction over a finished run's checkpoint: its selected snapshot restored into the
run's mode on K workers (or one in-process worker, for `RunResult.model`), each rank's
share inferred and gathered, in the dataset's node order or the queries' order.

`RunResult` (gnnsys/result.py) checks what the user asked and hands over here; the
forms a mode answers are its declared members (`Mode.predicts`, `split_outputs`,
`predict_rows`, `score_queries`, `embed_nodes`). `run` below is that `RunResult`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from .errors import DatasetMismatch, PredictError, RunError


def classify(run, split: str, nodes, workers, layers: int | None = None) -> dict:
    """Node modes: {"node_id", "pred", "scores", "label"} of every node of `split` (in
    node order) or of node ids `nodes` (in their order); `layers`: "scores" holds the
    output of the model's first that many layers instead."""
    from .datasets import load_run_graph
    from .distributed import launch
    graph = wanted = None
    if nodes is not None:       # loaded here, so an unknown id is refused before inference
        graph = run._graph if run._graph is not None else load_run_graph(run.config)
    config, prepared, ids = _prepared(run, workers, graph)
    if nodes is not None:
        wanted = node_rows(np.asarray(nodes).reshape(-1), ids, graph.num_nodes)
    state = best_state(config, run.run_dir, own_data=run._own_data)
    split = "all" if nodes is not None else split
    got = launch(_predict_worker, config, state, split, layers, wanted, *prepared)[0]
    if "rows" in got:           # inferred for the wanted rows alone, in their order
        table = {"node_id": got["rows"], "pred": got["logits"].argmax(1).numpy(),
                 "scores": got["logits"].numpy(), "label": got["labels"].numpy()}
        if ids is not None:
            table["node_id"] = ids[table["node_id"]]
        return table
    order = np.argsort(got["node_id"].numpy(), kind="stable")
    scores = got["logits"][order]
    rows = got["node_id"].numpy()[order]
    table = {"node_id": rows, "pred": scores.argmax(1).numpy(),
             "scores": scores.numpy(), "label": got["labels"].numpy()[order]}
    if nodes is not None:
        table = {k: v[wanted] for k, v in table.items()}   # "all": row r is node r
        rows = table["node_id"]
    if ids is not None:
        table["node_id"] = ids[rows]
    return table


def score_queries(run, queries, workers) -> dict:
    """Event modes: the query events `queries` (a file or a mapping, temporal.queries.
    read_queries) with each event's "score" (logit) and "prob", in the queries' order."""
    from .temporal.queries import check_times, read_queries
    queries = read_queries(queries)
    config, prepared, ids = _prepared(run, workers)
    events = prepared[0]
    src, dst = (node_rows(queries[c], ids, events.num_nodes, f"queries' {c}")
                for c in ("src", "dst"))
    check_times(queries["t"], events)
    got = _run_queries(run, config, prepared, _score_worker, (src, dst, queries["t"]))
    score = got["score"].astype(np.float32)
    return {**queries, "score": score, "prob": 1 / (1 + np.exp(-score.astype(np.float64)))}


def embed_at(run, at: float, nodes, workers) -> dict:
    """Event modes: {"node_id", "embedding"} of every node (or `nodes`) as of time `at`."""
    from .temporal.queries import check_times
    config, prepared, ids = _prepared(run, workers)
    events = prepared[0]
    rows = np.arange(events.num_nodes) if nodes is None else \
        node_rows(np.asarray(nodes).reshape(-1), ids, events.num_nodes)
    check_times(np.array([at]), events, "embeddings time")
    got = _run_queries(run, config, prepared, _embed_worker, (rows, at))
    return {"node_id": rows if ids is None else ids[rows], "embedding": got["embedding"]}


def _prepared(run, workers, graph=None):
    """(the run's config on `workers`, what its mode's workers take, node ids);
    `graph`: the run's graph, already loaded here."""
    from .datasets.registry import dataset_node_ids
    from .mode import mode_class
    config = run.config
    workers = prediction_workers(config, workers)
    if workers != config.cluster.workers:
        config = dataclasses.replace(
            config, cluster=dataclasses.replace(config.cluster, workers=workers),
            partition=dataclasses.replace(config.partition, num_parts=None))
    cls = mode_class(config.mode)
    d = config.dataset
    ids = getattr(run._graph, "node_ids", None) if run._graph is not None else \
        dataset_node_ids(d.name, root=d.root, path=d.path, task=cls.task,
                         kind=cls.data_kind)
    return config, cls.prepare(config, graph if graph is not None else run._graph), ids


def _run_queries(run, config, prepared, worker, args: tuple) -> dict:
    """`worker` (`_score_worker`, `_embed_worker`) on the run's workers, in the
    queries' order."""
    from .distributed import launch
    state = best_state(config, run.run_dir, own_data=run._own_data)
    got = launch(worker, config, state, args, *prepared)[0]
    order = np.argsort(got.pop("query"), kind="stable")
    return {k: v[order] for k, v in got.items()}


def prediction_workers(config, workers: int | None) -> int:
    """How many workers infer: `workers`, else one process for a run trained on this
    machine (its ranks held the whole graph here at once, so one process fits it, with
    no cluster to start), else the run's cluster.workers."""
    if workers is None:
        return 1 if config.cluster.address is None else config.cluster.workers
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise PredictError(f"workers {workers!r}: infer on 1 or more workers (--workers N; "
                           "default one process for a run trained on this machine)")
    return int(workers)


def load_model(config, run_dir: Path, device, graph=None, own_data=True) -> torch.nn.Module:
    """The run's best-validation model, built by its mode for one in-process worker on
    `device` from the run's dataset (or `graph`): a model's shape follows its data.
    `own_data`: the config's dataset is the run's own (its files are checked)."""
    return mode_here(config, run_dir, device, graph, own_data).model.eval()


def mode_here(config, run_dir: Path, device, graph=None, own_data=True):
    """The run's mode as one in-process worker on `device`, its selected snapshot loaded."""
    from .distributed import WorkerContext
    from .mode import mode_class
    state = best_state(config, run_dir, own_data=own_data and graph is None)
    one = dataclasses.replace(  # one worker here, whatever the run trained on
        config, cluster=dataclasses.replace(config.cluster, workers=1),
        partition=dataclasses.replace(config.partition, num_parts=None),
        train=dataclasses.replace(config.train, device=device.type, progress=False))
    prepared = mode_class(one.mode).prepare(one, graph)
    return restored_mode(WorkerContext.single(device), one, state, *prepared)


def link_pairs(run, pairs) -> dict:
    """Link modes: {"src", "dst", "score" (logit), "prob"} of the node pairs `pairs` (a
    file or a mapping with columns src, dst), in their order."""
    from .tables import read_columns
    pairs = read_columns(pairs, ("src", "dst"), "pair")
    mode, ids = _link_mode(run)
    src, dst = (node_rows(pairs[c], ids, mode.data.graph.num_nodes, f"pairs' {c}")
                for c in ("src", "dst"))
    score = mode.pair_scores(src, dst).astype(np.float32)
    return {**pairs, "score": score, "prob": 1 / (1 + np.exp(-score.astype(np.float64)))}


def link_partners(run, nodes, k: int) -> dict:
    """Link modes: {"node_id", "partner" [n, k], "score" [n, k]}: for each of `nodes` the
    k nodes it scores highest with, best first, none it is already linked to."""
    mode, ids = _link_mode(run)
    n = mode.data.graph.num_nodes
    rows = node_rows(np.asarray(nodes).reshape(-1), ids, n)
    partners, scores = mode.top_partners(rows, k)
    as_ids = (lambda r: r) if ids is None else (lambda r: ids[r])
    return {"node_id": as_ids(rows), "partner": as_ids(partners), "score": scores}


def link_embeddings(run, nodes, layers: int) -> dict:
    """Link modes: {"node_id", "embedding"} of every node (or `nodes`): the encoder's first
    `layers` layers over the training edges (all of them: the vectors pairs are scored by)."""
    mode, ids = _link_mode(run)
    n = mode.data.graph.num_nodes
    rows = np.arange(n) if nodes is None else node_rows(np.asarray(nodes).reshape(-1), ids, n)
    h = mode.embeddings(layers)[torch.from_numpy(rows)].numpy()
    return {"node_id": rows if ids is None else ids[rows], "embedding": h}


def _link_mode(run):
    """(the run's link mode restored here, each row's node id or None)."""
    from .datasets.registry import dataset_node_ids
    d = run.config.dataset
    ids = getattr(run._graph, "node_ids", None) if run._graph is not None else \
        dataset_node_ids(d.name, root=d.root, path=d.path, task=d.task, kind="static")
    return mode_here(run.config, run.run_dir, run.device, run._graph, run._own_data), ids


def best_state(config, run_dir: Path, own_data: bool = True) -> dict:
    """The checkpoint's selected snapshot ({"model", "mode"}), checked to be this run's;
    `own_data`: the config reads the run's own dataset, whose files must hold what they
    held in training (checked as --resume checks them), else another graph."""
    from .config import resumable
    from .datasets.registry import dataset_files
    from .runlog import RunDir
    from .training import changed_settings, check_dataset_files
    state = RunDir(run_dir, writer=False).load_checkpoint()
    if state is None or state.get("best") is None:
        raise RunError(f"{run_dir} holds no checkpoint of a selected model (run.checkpoint_"
                       "every: 0, or no epoch evaluated); train again with checkpoints")
    foreign = [k for k in changed_settings(state["config"], config.to_dict())
               if not resumable(k) and (own_data or not k.startswith("dataset."))]
    if foreign:
        raise RunError(f"{run_dir / 'checkpoint.pt'} was written by another run than its "
                       f"config.yaml says (they differ at {', '.join(foreign)}); restore the "
                       "run directory as training left it")
    if own_data:
        d = config.dataset
        check_dataset_files(state.get("dataset_files", ""), dataset_files(d.name, d.root, d.path),
                            f"the run in {run_dir} trained",
                            "restore them, or predict on that graph knowingly with --set "
                            "dataset.path=FILE")
    return state["best"]


def node_rows(nodes: np.ndarray, ids: np.ndarray | None, num_nodes: int,
              what: str = "node id") -> np.ndarray:
    """The dataset rows of node ids `nodes` (`ids`: each row's id; None: rows are ids);
    an unknown id is one line."""
    nodes = np.asarray(nodes)
    if nodes.size == 0:
        raise PredictError(f"no {what}s given; name at least one (or none at all, for every "
                           "node)")
    if nodes.dtype.kind not in "iu":
        raise PredictError(f"{what}s must be integers, got {nodes.dtype}")
    if ids is None:
        rows, known = nodes.astype(np.int64), (nodes >= 0) & (nodes < num_nodes)
        span = f"0..{num_nodes - 1}"
    else:
        # compared in the ids' own type (int64 or uint64: numpy would compare the two
        # as float64, inexact past 2^53); an id that type cannot hold is unknown
        fits = nodes >= 0 if ids.dtype.kind == "u" else nodes <= np.iinfo(np.int64).max
        same = np.where(fits, nodes, 0).astype(ids.dtype)
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids, same, sorter=order), len(ids) - 1)
        rows = order[at]
        known = fits & (ids[rows] == same)
        span = f"{ids.min()}..{ids.max()}, not contiguous" if len(ids) else "none"
    unknown = nodes[~known]
    if len(unknown):
        raise PredictError(f"{what} {unknown[0]} is not in the run's dataset ({num_nodes} "
                           f"nodes, ids {span}); {len(unknown)} of the {len(nodes)} ids given "
                           "are unknown")
    return rows


def restored_mode(ctx, config, state: dict, *prepared):
    """This rank's mode with the selected snapshot `state` loaded into its model (`.model`)
    and its own state; a model the run's data no longer fits is one line."""
    from .allocator import keep_freed_memory
    from .mode import mode_class
    keep_freed_memory()     # inference frees and allocates each batch's rows as training does
    mode = mode_class(config.mode)(ctx, config, *prepared)
    try:
        mode.build_model().load_state_dict(state["model"])
    except RuntimeError as err:
        detail = ' '.join(str(err).split())[:200]
        if older := mode.version_mismatch(state):
            raise RunError(f"the run in {config.run.dir} was trained by {older}, whose "
                              f"model this one cannot load ({detail}); train it again, or "
                              "use the gnnsys that trained it") from None
        raise DatasetMismatch(f"the dataset {config.dataset.name!r} no longer matches the model "
                              f"of the run in {config.run.dir} ({detail}): its feature width "
                              "and class count must be the training data's; restore the data "
                              "it was trained on, or give a graph of those widths (a bundle "
                              "may set num_classes)") from None
    mode.load_state_dict(state["mode"])
    return mode


def _predict_worker(ctx, config, state, split, layers, rows, *prepared) -> dict:
    """One rank of `RunResult.predict` (or of a layer's `embeddings`): every rank's
    outputs of `split` gathered; or, where the mode can, those of dataset rows `rows`
    alone ({"rows", "logits", "labels"})."""
    from .distributed.ranks import gather_outputs
    mode = restored_mode(ctx, config, state, *prepared)
    if rows is not None and ctx.world_size == 1 and \
            (got := mode.predict_rows(rows, layers)) is not None:
        return got
    return gather_outputs(ctx.comm, mode.split_outputs((split,), layers))[split]


def _score_worker(ctx, config, state, args, *prepared) -> dict:
    """One rank of `Mode.score_queries(*args)`: every rank's share gathered."""
    mode = restored_mode(ctx, config, state, *prepared)
    return _gathered(ctx, mode.score_queries(*args))


def _embed_worker(ctx, config, state, args, *prepared) -> dict:
    """One rank of `Mode.embed_nodes(*args)`: every rank's share gathered."""
    mode = restored_mode(ctx, config, state, *prepared)
    return _gathered(ctx, mode.embed_nodes(*args))


def _gathered(ctx, share: dict) -> dict:
    from .distributed.ranks import gather_outputs
    return gather_outputs(ctx.comm, {"q": share})["q"]
