"""A temporal run's predictions: scores of query events (src, dst, t) replayed as the
final evaluation ran, on 1 and 2 workers, and node embeddings as of a time; a bad query
file is one line, exit 2 (gnnsys.prediction, gnnsys.temporal.queries,
TemporalMode.score_queries / embed_nodes)."""
import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.cli import main
from gnnsys.config import ConfigError
from gnnsys.distributed import WorkerContext
from gnnsys.mode import mode_class
from gnnsys.prediction import best_state, restored_mode
from gnnsys.temporal.metrics import link_metrics
from samplers.temporal import batch_number

from gnnsys.testing import tiny_temporal_graph as make_tiny_graph


def temporal_run(tmp_path, arch="tgn", bundle=None, **temporal):
    """A finished run on the tiny event stream (in memory, or the `bundle` file)."""
    data = {"mode": "temporal", "model": {"arch": arch, "heads": 2, "dropout": 0.0},
            "sampler": {"batch_size": 100, "prefetch": 1, "threads": 1},
            "train": {"epochs": 2, "lr": 0.003, "progress": False, "seed": 0},
            "run": {"dir": str(tmp_path / "run")}, "cluster": {"launcher": "threads"},
            "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                         "num_neighbors": 5, "eval_negatives": 4, **temporal}}
    graph = make_tiny_graph()
    if bundle is None:
        return gnnsys.Trainer(data, data=graph).fit(), graph
    data["dataset"] = {"path": str(bundle)}
    return gnnsys.Trainer(data).fit(), graph


def own_bundle(tmp_path):
    """The tiny stream as a bundle of one's own whose node ids are not 0..N-1."""
    graph = make_tiny_graph()
    ids = 1000 + 7 * np.random.default_rng(1).permutation(graph.num_nodes)
    path = tmp_path / "stream.npz"
    np.savez(path, src=graph.src, dst=graph.dst, t=graph.t, node_ids=ids)
    return path, ids


def final_evaluation(result, graph):
    """The final test evaluation, run again: its positive and negative logits, events,
    and the negatives it drew."""
    prepared = mode_class("temporal").prepare(result.config, graph)
    mode = restored_mode(WorkerContext.single(torch.device("cpu")), result.config,
                         best_state(result.config, result.run_dir), *prepared)
    negatives = np.concatenate([b.negatives for b in mode.planner.epoch(
        "test", result.config.train.epochs, result.config.temporal.eval_negatives)])
    return mode.split_outputs(("test",))["test"], negatives, prepared[0]


@pytest.mark.parametrize("arch, pair_history", [("tgn", False), ("jodie", False),
                                                ("apan", True)])
def test_query_events_score_as_the_evaluation_did(tmp_path, arch, pair_history):
    result, graph = temporal_run(tmp_path, arch, pair_history=pair_history)
    evaluated, negatives, events = final_evaluation(result, graph)
    lo, hi = events.test
    test = {"src": graph.src[lo:hi], "dst": graph.dst[lo:hi], "t": graph.t[lo:hi]}
    for workers in (1, 2):
        scored = result.predict(queries=test, workers=workers)
        np.testing.assert_allclose(scored["score"], evaluated["pos"], rtol=1e-5, atol=1e-5)
    # the run's test AP from query scores alone: each test event and its first negative
    negative = {**test, "dst": negatives[:, 0]}
    pos, neg = (result.predict(queries=q)["score"] for q in (test, negative))
    batch = batch_number(np.arange(lo, hi), lo, result.config.sampler.batch_size)
    assert link_metrics(pos, neg[:, None], "test", batch=batch)["test_ap"] == \
        pytest.approx(result["test_ap"], abs=1e-6)


def test_query_file_and_embeddings_from_the_command_line(tmp_path, capsys):
    """Own data whose node ids are not rows: queries and output are in the user's ids."""
    bundle, ids = own_bundle(tmp_path)
    result, graph = temporal_run(tmp_path, bundle=bundle)
    run, end = str(result.run_dir), float(graph.t[-1]) + 5
    rows = [(1, 2), (3, 4), (1, 2), (59, 0)]
    queries = tmp_path / "q.csv"
    queries.write_text("t,src,dst\n" + "".join(f"{end},{ids[s]},{ids[d]}\n" for s, d in rows))
    assert main(["predict", run, "--queries", str(queries), "--out",
                 str(tmp_path / "s.npz")]) == 0
    assert "4 query events" in capsys.readouterr().out
    assert main(["predict", run, "--embeddings-at", str(end), "--out",
                 str(tmp_path / "e.npz")]) == 0
    with np.load(tmp_path / "s.npz") as s, np.load(tmp_path / "e.npz") as e:
        assert s["src"].tolist() == [ids[r[0]] for r in rows] and s["score"][0] == s["score"][2]
        assert e["node_id"].tolist() == ids.tolist()       # row r is the user's node ids[r]
        # the scorer on two embeddings as of a time gives the query's score at that time
        h = torch.from_numpy(e["embedding"])
        model = gnnsys.load_run(run).model
        src, dst = (np.array(side) for side in zip(*rows))
        with torch.no_grad():
            expected = model.score(h[src], h[dst]).numpy()
        np.testing.assert_allclose(s["score"], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s["prob"], 1 / (1 + np.exp(-s["score"])), rtol=1e-6)
    some = gnnsys.load_run(run).embeddings(end, nodes=[ids[5], ids[2]])
    assert some["node_id"].tolist() == [ids[5], ids[2]]
    np.testing.assert_allclose(some["embedding"], h.numpy()[[5, 2]], rtol=1e-5, atol=1e-6)


def test_bad_queries_are_one_line(tmp_path, capsys):
    result, graph = temporal_run(tmp_path, bundle=own_bundle(tmp_path)[0])
    run, end = str(result.run_dir), float(graph.t[-1])
    cases = {"src,dst\n1000,1007\n": "has no column 't'",
             "src,dst,t\n1000.5,1007,{end}\n": "column 'src' must hold integer node ids",
             "src,dst,t\n1000,1001,{end}\n": "queries' dst 1001 is not in the run's dataset",
             "src,dst,t\n1000,1007,0\n": "is before the end of the run's validation events",
             "src,dst,t\n1000,1007\n": "is not a readable query file",
             "src,dst,t\n": "must be equally long and not empty"}
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"q{i}.csv"
        path.write_text(text.format(end=end))
        assert main(["predict", run, "--queries", str(path), "--out",
                     str(tmp_path / "x.npz")]) == 2, text
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["predict", run, "--out", str(tmp_path / "x.npz")]) == 2
    assert "a temporal run predicts query events" in capsys.readouterr().err
    assert main(["predict", run, "--queries", str(tmp_path / "none.csv"), "--out",
                 str(tmp_path / "x.npz")]) == 2
    assert "no such query file" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()
    with pytest.raises(ConfigError, match="query files are .csv"):
        (tmp_path / "q.txt").write_text("src,dst,t\n")
        result.predict(queries=tmp_path / "q.txt")


def test_query_files_as_users_write_them(tmp_path, capsys):
    """.parquet (written by pyarrow), a CSV header after a byte order mark and in quotes,
    and node ids past 2^63 - 1 (uint64, queried as given, not wrapped to negative)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    graph = make_tiny_graph()
    perm = np.random.default_rng(1).permutation(graph.num_nodes).astype(np.uint64)
    ids = np.uint64(2 ** 63 - 100) + np.uint64(7) * perm      # both sides of 2^63
    bundle = tmp_path / "stream.npz"
    np.savez(bundle, src=graph.src, dst=graph.dst, t=graph.t, node_ids=ids)
    result, graph = temporal_run(tmp_path, bundle=bundle)
    run, end = str(result.run_dir), float(graph.t[-1]) + 5
    rows = np.array([(1, 2), (3, 4), (59, 0), (int(np.argmax(ids)), int(np.argmin(ids)))])
    src, dst = ids[rows[:, 0]], ids[rows[:, 1]]
    t = np.full(len(rows), end)
    pq.write_table(pa.table({"t": t, "src": src, "dst": dst}), tmp_path / "q.parquet")
    (tmp_path / "q.csv").write_text('\ufeff"src", "dst","t"\n' + "".join(
        f'{s},"{d}",{end}\n' for s, d in zip(src, dst)), encoding="utf-8")
    np.savez(tmp_path / "q.npz", src=src, dst=dst, t=t)
    h = torch.from_numpy(result.embeddings(end)["embedding"])
    with torch.no_grad():
        expected = result.model.score(h[rows[:, 0]], h[rows[:, 1]]).numpy()
    for name in ("q.parquet", "q.csv", "q.npz"):
        out = tmp_path / f"{name}.out.npz"
        assert main(["predict", run, "--queries", str(tmp_path / name), "--out", str(out)]) \
            == 0, capsys.readouterr().err
        with np.load(out) as s:
            assert s["src"].dtype == np.uint64 and s["src"].tolist() == src.tolist(), name
            assert s["dst"].tolist() == dst.tolist(), name
            np.testing.assert_allclose(s["score"], expected, rtol=1e-5, atol=1e-5)
    assert result.embeddings(end, nodes=ids[[59, 3]])["node_id"].tolist() == ids[[59, 3]].tolist()


@pytest.mark.timeout(300)       # a FIFO opened for reading would block: fail, not hang
def test_query_files_that_cannot_be_read_as_meant_are_one_line(tmp_path, capsys):
    """Repeated columns (which is meant?), a directory or a FIFO in place of the file
    (neither is "no such query file"; a FIFO must not block), and times no model clock
    holds: one line, exit 2."""
    import os
    import pyarrow as pa
    import pyarrow.parquet as pq
    result, graph = temporal_run(tmp_path, bundle=own_bundle(tmp_path)[0])
    run, end = str(result.run_dir), float(graph.t[-1])
    (tmp_path / "twice.csv").write_text(f"src,src,dst,t\n1000,1007,1014,{end}\n")
    pq.write_table(pa.Table.from_arrays([pa.array([1000]), pa.array([1007]), pa.array([1014]),
                                         pa.array([end])], names=["src", "dst", "dst", "t"]),
                   tmp_path / "twice.parquet")
    (tmp_path / "far.csv").write_text("src,dst,t\n1000,1007,1e308\n")
    (tmp_path / "dir.csv").mkdir()
    os.mkfifo(tmp_path / "fifo.csv")
    cases = {"twice.csv": "has 2 columns named 'src'", "twice.parquet": "columns named 'dst'",
             "dir.csv": "dir.csv is a directory, not a query file",
             "fifo.csv": "fifo.csv is not a regular file (a pipe or a device)",
             "far.csv": "query time t=1e+308 (row 0) is past the latest time the models' "
                        "float32 clocks hold"}
    for name, message in cases.items():
        assert main(["predict", run, "--queries", str(tmp_path / name), "--out",
                     str(tmp_path / "x.npz")]) == 2, name
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "no such" not in err, err
    for at, message in (("nan", "t=nan is not a finite number"),
                        ("inf", "t=inf is not a finite number"),
                        ("1e308", "t=1e+308 is past the latest time")):
        assert main(["predict", run, "--embeddings-at", at, "--out",
                     str(tmp_path / "x.npz")]) == 2, at
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.npz").exists()


def test_the_earliest_query_time_prints_exactly():
    from types import SimpleNamespace
    from gnnsys.temporal.queries import check_times
    events = SimpleNamespace(t0=2_000_000.0, t=np.array([0.0, 218_290.0, 218_290.25]),
                             val=(0, 3))
    with pytest.raises(ConfigError, match=r"query time t=2218290 \(row 1\) is before the end "
                                          r"of the run's validation events \(t=2218290.25\)"):
        check_times(np.array([2_218_291.0, 2_218_290.0]), events)


def test_queries_are_scored_in_bounded_chunks(tmp_path, monkeypatch):
    """A query file's size sets no batch's: queries go through the model at most
    `TemporalMode.query_chunk` per forward on each rank, and score as unchunked."""
    from gnnsys.temporal.batch import BatchPlanner
    from gnnsys.temporal.mode import TemporalMode
    result, graph = temporal_run(tmp_path)
    val_end = mode_class("temporal").prepare(result.config, graph)[0].val[1]
    rng = np.random.default_rng(0)
    n = 1500            # during the test stream and after it, many due at the same batch
    queries = {"src": rng.integers(0, graph.num_nodes, n),
               "dst": rng.integers(0, graph.num_nodes, n),
               "t": np.sort(rng.uniform(graph.t[val_end - 1], graph.t[-1] + 50, n))}
    whole = result.predict(queries=queries)["score"]
    sizes = []
    planned = BatchPlanner.query_batch

    def recorded(self, src, *args):
        sizes.append(len(src))
        return planned(self, src, *args)

    monkeypatch.setattr(BatchPlanner, "query_batch", recorded)
    monkeypatch.setattr(TemporalMode, "query_chunk", 7)
    for workers in (1, 2):
        sizes.clear()
        chunked = result.predict(queries=queries, workers=workers)["score"]
        np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-6)
        assert max(sizes) == 7 and sum(sizes) == n, (workers, max(sizes), sum(sizes))
    sizes.clear()
    embedded = result.embeddings(float(graph.t[-1]) + 5)["embedding"]
    assert max(sizes) == 7 and sum(sizes) == graph.num_nodes and len(embedded) == graph.num_nodes
