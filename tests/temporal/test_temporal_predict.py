"""A temporal run's predictions: scores of query events (src, dst, t) replayed as the
final evaluation ran, on 1 and 2 workers, and node embeddings as of a time; a bad query
file is one line, exit 2 (gnnsys.result, TemporalMode.score_queries / embed_nodes)."""
import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.cli import main
from gnnsys.config import ConfigError
from gnnsys.distributed import WorkerContext
from gnnsys.mode import mode_class
from gnnsys.result import best_state, restored_mode
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
    return mode.predict(("test",))["test"], negatives, prepared[0]


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
