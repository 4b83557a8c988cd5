"""Every script in scripts/: it imports, its --help works, and it runs end to end
on a tiny graph in seconds, its printed table (or JSON) checked, so a script cannot rot
unnoticed. `test_every_script_has_an_end_to_end_test` makes a new script bring its test;
the last section checks details of single scripts (bench_accuracy's table of datasets,
bench_network's runs) without running them.

Most scripts run in this process through `main(argv)`; those whose runs are processes
of their own anyway, and gpu_check (which runs bench_gpu_sampler as its own), run as
`python scripts/<name>.py` (CHILDREN), started together before the first test. Data:
synthetic graphs and partitions go to a temporary $GNNSYS_DATA; two tiny bundles (an event
stream, a graph with CSR features) are written there and named by `dataset.path`. Runs,
JSON and tables go to temporary directories, the current directory of every test.
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import gnnsys
from gnnsys.config import load_config
from gnnsys.datasets.registry import registry
from gnnsys.testing import shared_data_dir, tiny_graph, tiny_temporal_graph

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
# As `python scripts/<name>.py` has it: the scripts import their harness from there.
sys.path.insert(0, str(SCRIPTS))
NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py") if p.stem != "harness")
needs_shared_data = pytest.mark.skipif(shared_data_dir() is None,
                                       reason="shared/data bundles are not present")
MINIBATCH = ["dataset.name=synthetic-tiny", "model.hidden=16", "sampler.fanouts=[5,5]"]
TINY_NODES = 2000                     # synthetic-tiny's (datasets.yaml)


def sets(*overrides) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def rows(text: str, first: str) -> list[list[str]]:
    """The cells of the Markdown rows whose first cell is `first`."""
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines()
             if line.startswith("|")]
    return [row for row in cells if row[0] == first]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A temporary data root, a tiny event stream and a tiny CSR-feature graph, and the
    overrides that train a temporal config small on the events."""
    root = tmp_path_factory.mktemp("data")
    events = tiny_temporal_graph(num_nodes=60, num_events=1200)
    np.savez(root / "tiny_events.npz", src=events.src, dst=events.dst, t=events.t,
             num_nodes=events.num_nodes)
    graph, rng = tiny_graph(num_nodes=300), np.random.default_rng(0)
    words = [np.sort(rng.choice(200, 5, replace=False)) for _ in range(graph.num_nodes)]
    src = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    np.savez(root / "tiny_words.npz", edge_index=np.stack([src, graph.indices]), y=graph.y,
             x_indptr=np.arange(0, 5 * graph.num_nodes + 1, 5), x_indices=np.concatenate(words),
             x_data=np.ones(5 * graph.num_nodes, np.float32), x_shape=[graph.num_nodes, 200])
    temporal = [f"dataset.path={root / 'tiny_events.npz'}", "sampler.batch_size=100",
                "temporal.memory_dim=16", "temporal.time_dim=8", "temporal.embedding_dim=16",
                "temporal.num_neighbors=5", "temporal.eval_negatives=4"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GNNSYS_DATA", str(root))
        yield SimpleNamespace(root=root, words=root / "tiny_words.npz", temporal=temporal)


@pytest.fixture(autouse=True)
def isolated(data, tmp_path, monkeypatch, threads_restored):
    """Each test in its own directory (scripts' relative defaults land there), with the
    thread pools and the temporal attention switch put back afterwards."""
    from gnnsys.temporal import models
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(models, "fused_kernel_on", models.fused_kernel_on)


@pytest.fixture
def run(capsys):
    """run(name, *argv): the script's main(argv) here; its stdout."""
    def run(name: str, *argv) -> str:
        capsys.readouterr()
        importlib.import_module(name).main([str(a) for a in argv])
        return capsys.readouterr().out
    return run


BLOCKED_PATH = os.pathsep.join(filter(None, [str(REPO / "tests" / "blocked_imports"),
                                             os.environ.get("PYTHONPATH")]))


# Scripts whose runs are child processes anyway (`gnnsys train` per run), and gpu_check
# (numba's CUDA simulator must be on before numba.cuda is imported): each runs as
# `python scripts/<name>.py ARGS` in a directory of its own, all started before this
# module's first test so that they run beside the tests here (each is 10-40 s of mostly
# imports in its children). {out}: that directory.
CHILDREN = {
    # the GPU machine's situation as far as a CPU machine can build it: numba's CUDA
    # simulator, and no ray or pymetis (importing them fails)
    "gpu_check": (["--simulate", "--out", "{out}"], {"NUMBA_ENABLE_CUDASIM": "1",
                                                     "PYTHONPATH": BLOCKED_PATH}),
    "bench_allocator": (["--configs", "configs/quickstart.yaml", "--policies", "keep",
                         "--epochs", "2", "--threads", "1", *sets(*MINIBATCH)], {}),
    "bench_distributed": (["--datasets", "synthetic-small", "--seeds", "0", "--epochs", "2",
                           "--out", "{out}/runs", *sets(
                               "dataset.name=synthetic-tiny", "model.hidden=16",
                               "sampler.fanouts=[5,5,5]", "cluster.launcher=threads")], {}),
    "bench_omp_wait": (["--configs", "configs/quickstart.yaml", "--spins", "0", "--epochs", "2",
                        "--threads", "1", *sets(*MINIBATCH)], {}),
}


@pytest.fixture(scope="module", autouse=True)
def children(request, data, tmp_path_factory):
    """name -> (process, its directory) of the CHILDREN whose tests were selected."""
    selected = {item.name for item in request.session.items if item.path == request.path}
    if "test_bench_gpu_sampler" in selected:           # it reads gpu_check's run
        selected.add("test_gpu_check")
    started = {}
    for name, (args, env) in CHILDREN.items():
        if f"test_{name}" not in selected:
            continue
        out = tmp_path_factory.mktemp(name)
        with open(out / "output.txt", "w") as output:
            started[name] = subprocess.Popen(
                [sys.executable, str(SCRIPTS / f"{name}.py"), *(a.format(out=out) for a in args)],
                cwd=out, env={**os.environ, **env}, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True), out
    yield started
    for child, _ in started.values():
        if child.poll() is None:                  # the session stopped early
            os.killpg(child.pid, signal.SIGKILL)  # its group: the script and its children
            child.wait()


@pytest.fixture(scope="module")
def finished(children):
    """finished(name): a child's output (stdout and stderr) and directory, once it is done."""
    def wait(name: str) -> tuple[str, Path]:
        child, out = children[name]
        code = child.wait(timeout=600)
        output = (out / "output.txt").read_text()
        assert code == 0, output[-6000:]
        return output, out
    return wait


# ----------------------------------------------------------------------------- every script
@pytest.mark.parametrize("name", NAMES)
def test_script_imports_and_prints_its_help(name, capsys):
    module = importlib.import_module(name)
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: ") and " ".join(module.__doc__.split()[:6]) in out


def test_every_script_has_an_end_to_end_test():
    assert NAMES and [n for n in NAMES if f"test_{n}" not in globals()] == []


def test_scripts_import_only_the_harness_of_scripts():
    for name in NAMES:
        source = (SCRIPTS / f"{name}.py").read_text()
        assert not re.findall(r"^\s*(?:from|import) (?:bench_|gpu_check|netcluster)", source,
                              re.M), name
        for hand_built in ("WorkerContext(", "Communicator(", "ThreadGroup(", "read_metrics("):
            assert hand_built not in source, (name, hand_built)


# ----------------------------------------------------------------------------- the harness
def test_harness_table_options_and_epochs(tmp_path):
    import harness
    table = harness.markdown(["name", "seconds"], [["a", 1.5], ["b", 2]], align="lr")
    assert table.splitlines() == ["| name | seconds |", "|---|---:|", "| a | 1.5 |", "| b | 2 |"]
    assert harness.after_first([3, 1, 2]) == [1, 2] and harness.after_first([3]) == [3]
    assert harness.median_after_first([100.0, 1.0, 3.0, 2.0]) == 2.0
    args = harness.parser(__doc__, config="configs/quickstart.yaml", epochs=2, set=True,
                          json=True).parse_args(["--set", "a=1", "--set", "b=2"])
    assert args.config == REPO / "configs/quickstart.yaml" and args.config.exists()
    assert (args.epochs, args.set, args.json) == (2, ["a=1", "b=2"], None)
    harness.write_json(tmp_path / "out" / "x.json", {"a": [1, 2]})
    assert json.loads((tmp_path / "out" / "x.json").read_text()) == {"a": [1, 2]}
    from gnnsys.runlog import RunDir
    log = RunDir(tmp_path / "run")
    log.log("start", {"setup": [{"table_bytes": 10}, {"table_bytes": 20}]})
    for epoch, seconds in enumerate([9.0, 1.0, 3.0]):
        log.log("epoch", {"epoch": epoch, "epoch_s": seconds})
    log.log("final", {"test_auc": 0.75, "test_auc_last": 0.5})
    summary = harness.summary(log.path, ["epoch_s", "fetch_s"], average=max)
    assert math.isnan(summary.pop("fetch_s"))                    # no epoch logs it
    assert summary == {"metric": "test_auc", "test": 0.75, "epoch_s": 3.0}   # not epoch 0's
    assert harness.feature_memory(log.path) == 30


# ----------------------------------------------------------------------------- in this process
@needs_shared_data
def test_bench_accuracy(run, tmp_path):
    out = run("bench_accuracy", "--datasets", "texas", "--splits", "1", "--epochs", "1",
              "--json", tmp_path / "rows.json", *sets("model.hidden=16"))
    [row] = json.loads((tmp_path / "rows.json").read_text())
    assert row["runs"] == 1 and len(row["scores"]) == 1 and 0.0 <= row["mean"] <= 1.0
    assert row["reference"] is not None and "H2GCN" in row["source"]
    [cells] = rows(out, "texas")
    assert cells[:4] == ["texas", "acc", f"{row['mean']:.4f} ± 0.0000", "1 splits"]
    assert cells[5] == f"{row['mean'] - row['reference']:+.4f}"


@needs_shared_data
def test_bench_accuracy_archs(run, tmp_path):
    out = run("bench_accuracy", "--datasets", "texas", "--archs", "linkx", "mlp", "--splits",
              "1", "--epochs", "1", "--json", tmp_path / "rows.json", *sets("model.hidden=16"))
    got = {r["arch"]: r for r in json.loads((tmp_path / "rows.json").read_text())}
    assert set(got) == {"linkx", "mlp"} and all(len(r["scores"]) == 1 for r in got.values())
    [cells] = rows(out, "texas")
    best = max(got, key=lambda arch: got[arch]["mean"])
    assert cells == ["texas", "acc", "1 splits", f"{got['linkx']['mean']:.4f} ± 0.0000",
                     f"{got['mlp']['mean']:.4f} ± 0.0000", "no published figure", best]


@needs_shared_data
def test_bench_accuracy_tune(run, tmp_path):
    out = run("bench_accuracy", "--tune", "linkx", "--datasets", "texas", "--json",
              tmp_path / "rows.json", *sets("train.epochs=1", "model.hidden=16"))
    bench = importlib.import_module("bench_accuracy")
    got = json.loads((tmp_path / "rows.json").read_text())
    assert len(got) == math.prod(len(v) for v in bench.GRID.values())
    assert [r["val"] for r in got] == sorted((r["val"] for r in got), reverse=True)
    assert {tuple(r["setting"].items()) for r in got} == {
        tuple(zip(bench.GRID, values)) for values in itertools.product(*bench.GRID.values())}
    assert rows(out, "texas")[0][-2:] == [f"{got[0]['val']:.4f}", f"{got[0]['test']:.4f}"]


def test_bench_link(run, tmp_path, repo_root):
    """Each heuristic against a plain count over neighbour sets, and the script end to end
    on a seeded edge split, a link-mode run beside the heuristics."""
    bench = importlib.import_module("bench_link")
    rng = np.random.default_rng(0)
    from gnnsys.datasets.edges import symmetric_csr
    indptr, indices = symmetric_csr(*rng.integers(0, 40, (2, 200)), 40)
    neighbours = [set(indices[a:b].tolist()) for a, b in zip(indptr[:-1], indptr[1:])]
    pairs = rng.integers(0, 40, (2, 60))
    weight = {"cn": lambda d: 1.0, "aa": lambda d: 1 / math.log(d), "ra": lambda d: 1 / d}
    for kind, w in weight.items():
        plain = [sum(w(len(neighbours[z])) for z in neighbours[u] & neighbours[v])
                 for u, v in pairs.T]
        np.testing.assert_allclose(bench.heuristic_scores(indptr, indices, 40, pairs, kind),
                                   plain, rtol=1e-6)
    out = run("bench_link", "--datasets", "synthetic-tiny", "--seeds", "0", "1",
              "--configs", repo_root / "configs" / "link-cora.yaml", "--set", "train.epochs=2",
              "--set", f"run.dir={tmp_path / 'run'}", "--set", "dataset.normalize_features=none",
              "--json", tmp_path / "rows.json")
    saved = json.loads((tmp_path / "rows.json").read_text())
    assert [(r["seed"], r["method"]) for r in saved] == [
        (s, h) for s in (0, 1) for h in ("cn", "aa", "ra", "gcn (link-cora, dot)")]
    assert all(0 <= r[f"test_{m}"] <= 1 for r in saved for m in ("auc", "mrr", "hits20"))
    assert rows(out, "synthetic-tiny")[0][:3] == ["synthetic-tiny", "0", "cn"]


def test_bench_cache(run):
    out = run("bench_cache", "--datasets", "synthetic-tiny", "--parts", "2", "--method",
              "random", "--fanouts", "5", "5", "--batch-size", "128", "--replication", "0.1",
              "0.5", "--empirical", "1")
    assert "2 parts (random; edge cut" in out
    small, large = (rows(out, alpha)[0] for alpha in ("0.1", "0.5"))   # the first table's
    none, degree, vip = (int(c.replace(",", "")) for c in large[1:4])
    assert 0 < vip < none and degree < none
    assert small[1] == large[1] and int(small[3].replace(",", "")) > vip  # more cache: fewer
    assert len(rows(out, "0.5")) == 2 and "Spearman" in out               # + the sampled table


def test_bench_precision(run, tmp_path):
    out = run("bench_precision", "--configs", "configs/quickstart.yaml", "--rounds", "1",
              "--json", tmp_path / "p.json",
              *sets(*MINIBATCH, "train.epochs=2", "model.layers=2"))
    saved = json.loads((tmp_path / "p.json").read_text())
    assert sorted(key.split("|")[1] for key in saved) == ["bf16", "fp32"]
    [fp32], [bf16] = rows(out, "quickstart.yaml")[:1], rows(out, "quickstart.yaml")[1:]
    assert (fp32[1], fp32[-1], bf16[1]) == ("fp32", "1.00x", "bf16")
    assert all(0 < r["test"] <= 1 and r["epoch_s"] > 0 for rs in saved.values() for r in rs)


def test_bench_feature_dtype(run):
    out = run("bench_feature_dtype", "--config", "configs/quickstart.yaml", "--workers", "1",
              "2", "--epochs", "1", *sets(*MINIBATCH))
    table = {(r[0], r[1]): r for r in (line.split() for line in out.splitlines())
             if len(r) == 8 and r[0] in ("1", "2")}
    assert set(table) == {(w, d) for w in ("1", "2") for d in ("float32", "float16")}
    number = lambda w, d, column: float(table[w, d][column].replace(",", ""))   # noqa: E731
    for workers in ("1", "2"):
        assert number(workers, "float32", 2) == 2 * number(workers, "float16", 2)
        assert f"{workers} worker(s): float16 memory 2.00x smaller" in out
    assert number("1", "float32", 3) == 0 and number("2", "float32", 3) > 0   # remote rows
    assert number("2", "float32", 3) == pytest.approx(2 * number("2", "float16", 3), rel=0.05)


def test_bench_fullgraph(run, tmp_path):
    # synthetic-tiny has no configs/adaqp-*.yaml: adaqp-cora.yaml's settings
    common = ["--datasets", "synthetic-tiny", "--workers", "2", "--out", tmp_path / "rows.jsonl",
              *sets("cluster.launcher=threads", "model.hidden=16")]
    out = run("bench_fullgraph", *common, "--variants", "vanilla", "adaptive", "--epochs", "3")
    vanilla, adaptive = (json.loads(line) for line in (tmp_path / "rows.jsonl").open())
    assert (vanilla["variant"], adaptive["variant"]) == ("vanilla", "adaptive")
    assert adaptive["bytes_per_epoch"] < vanilla["bytes_per_epoch"]
    for row in (vanilla, adaptive):
        assert len(row["epoch_times"]["step_s"]) == 2                  # epochs 2 and 3
        assert 0 < row["comm_s"] <= row["step_s"] < row["wall_s"] / 3
    assert "the slowest rank's ms per epoch" in out and "mean over workers" not in out
    assert re.search(r"^synthetic-tiny\s+2 adaptive\s+[\d.]+\s+[\d.]+\s+[\d.]+", out, re.M)
    out = run("bench_fullgraph", *common, "--paired", "--epochs", "6",
              "--out", tmp_path / "paired.jsonl")
    paired = [json.loads(line) for line in (tmp_path / "paired.jsonl").open()]
    assert [(r["paired"], r["pairs"]) for r in paired] == [("fp32", 2), ("adaptive", 2)]
    assert all(r["off_s"] > 0 and r["on_s"] > 0 for r in paired)
    assert re.search(r"^synthetic-tiny\s+2 fp32\s+2\s", out, re.M)
    assert "(the slowest rank's)" in out


def test_bench_epoch(run, tmp_path):
    """Every variant steps the real loop's batches; every phase of every counted step is
    timed, the layers' FLOPs counted, and the model is left as shipped."""
    from gnnsys.models import base, sage
    from gnnsys.models.dropout import relu_dropout
    shipped_mean = sage._sage_mean_csr
    out = run("bench_epoch", "--config", "configs/quickstart.yaml", "--steps", "2",
              "--warmup", "1", "--json", tmp_path / "e.json",
              *sets(*MINIBATCH, f"run.dir={tmp_path / 'run'}"))
    saved = json.loads((tmp_path / "e.json").read_text())
    assert list(saved["results"]) == ["pyg+torch-dropout", "pyg+hashed-dropout",
                                      "csr+hashed-dropout", "fused-relu-dropout", "gnnsys"]
    for steps in saved["results"].values():
        assert len(steps) == 2
        for step in steps:
            assert len(step["forward"]) == len(step["backward"]) == 2
            assert all(t > 0 for t in step["forward"] + step["backward"])
            assert sum(step["forward"]) + sum(step["backward"]) < step["step"]
    assert len(saved["flops"]) == 2 and all(f > 0 for f in saved["flops"])
    [first] = rows(out, "pyg+torch-dropout")
    assert first[-1] == "1.00x"
    assert base.relu_dropout is relu_dropout and sage._sage_mean_csr is shipped_mean


@pytest.mark.parametrize("peer, bench", [("dgl_epoch", "bench_epoch"),
                                         ("dgl_link_epoch", "bench_link_epoch")])
def test_the_dgl_peer_compiles_and_takes_what_its_bench_passes(peer, bench):
    """scripts/peers/*.py run in DGL's own venv (not installable here): at least each
    compiles, and every option its bench gives it is one it declares."""
    source = (SCRIPTS / "peers" / f"{peer}.py").read_text()
    compile(source, f"{peer}.py", "exec")
    passed = set(re.findall(r'"(--[a-z-]+)"', (SCRIPTS / f"{bench}.py").read_text()
                            .split("def dgl_run", 1)[1].split("def ", 1)[0]))
    declared = set(re.findall(r'add_argument\("(--[a-z-]+)"', source))
    assert passed and passed <= declared, passed - declared


def test_bench_epoch_against_a_peer(run, tmp_path):
    """--peer dgl: gnnsys train and the peer's loop on the same arrays, rounds alternating,
    the table of both (the peer here a stand-in python that checks what it is given)."""
    peer = tmp_path / "peer-python"
    peer.write_text(f"""#!{sys.executable}
import json, os, sys
import numpy as np
args = sys.argv[2:]
assert sys.argv[1].endswith("peers/dgl_epoch.py") and os.path.isfile(sys.argv[1])
arrays = json.loads(args[args.index("--arrays") + 1])
assert np.load(arrays["indptr"], mmap_mode="r").shape == ({TINY_NODES + 1},)
assert args[args.index("--fanouts") + 1:args.index("--fanouts") + 3] == ["5", "5"]
test = "--no-test" not in args
print(json.dumps({{"epochs": [{{"epoch_s": 2.0, "steps": 3, "loss": 1.0}}] * 2,
                  "test_acc": 0.5 if test else None, "peak_rss_mb": 100.0,
                  "versions": {{"dgl": "stand-in"}}}}))
""")
    peer.chmod(0o755)
    out = run("bench_epoch", "--config", "configs/quickstart.yaml", "--peer", "dgl",
              "--peer-python", peer, "--epochs", "2", "--rounds", "2", "--json", tmp_path / "p.json",
              *sets(*MINIBATCH, f"run.dir={tmp_path / 'run'}"))
    saved = json.loads((tmp_path / "p.json").read_text())
    assert [len(saved["runs"][side]) for side in ("gnnsys", "dgl")] == [2, 2]
    assert [r["test_acc"] for r in saved["runs"]["dgl"]] == [0.5, None]   # tests once
    [gnnsys], [dgl] = rows(out, "gnnsys"), rows(out, "dgl")
    assert dgl[2] == "2.00" and dgl[5] == "0.5000 / -"
    assert all(0 < float(a) <= 1 for a in gnnsys[5].split(" / "))
    with pytest.raises(SystemExit, match="needs --peer-python"):
        run("bench_epoch", "--config", "configs/quickstart.yaml", "--peer", "dgl",
            *sets(*MINIBATCH))


def test_bench_link_epoch(run, tmp_path):
    """gnnsys's link mode and the peer's loop on the same training graph and each epoch's
    positives (the stand-in peer checks the pairs are training edges, as many as an epoch
    takes), rounds alternating, the table of both; a config DGL's loop is not is refused."""
    peer = tmp_path / "peer-python"
    peer.write_text(f"""#!{sys.executable}
import json, sys
import numpy as np
args = sys.argv[2:]
assert sys.argv[1].endswith("peers/dgl_link_epoch.py")
arrays = json.loads(args[args.index("--arrays") + 1])
indptr, indices = (np.load(arrays[k]) for k in ("indptr", "indices"))
for epoch in (0, 1):
    pairs = np.load(arrays[f"pairs_{{epoch}}"])
    assert pairs.shape == (2, 96)
    for u, v in pairs.T:
        assert u in indices[indptr[v]:indptr[v + 1]]
print(json.dumps({{"epochs": [{{"epoch_s": 2.0, "steps": 3, "loss": 1.0}}] * 2,
                  "peak_rss_mb": 100.0, "versions": {{"dgl": "stand-in"}}}}))
""")
    peer.chmod(0o755)
    link = ("dataset.name=synthetic-tiny", "link.val=0.1", "link.test=0.1",
            "sampler.batch_size=32", "link.epoch_pairs=96", "sampler.fanouts=[5,5]",
            "model.layers=2", "model.hidden=16")
    out = run("bench_link_epoch", "--peer-python", peer, "--epochs", "2", "--rounds", "2",
              "--json", tmp_path / "p.json", *sets(*link, f"run.dir={tmp_path / 'run'}"))
    saved = json.loads((tmp_path / "p.json").read_text())
    assert [len(saved[side]) for side in ("gnnsys", "dgl")] == [2, 2]
    [gnnsys], [dgl] = rows(out, "gnnsys"), rows(out, "dgl")
    assert dgl[2] == "2.00" and dgl[4] == "1.0000 / 1.0000"
    assert all(0 < float(v) < 5 for v in gnnsys[4].split(" / "))
    with pytest.raises(SystemExit, match="the DGL loop is SAGE with the mlp decoder"):
        run("bench_link_epoch", "--peer-python", peer, *sets(*link, "link.decoder=dot"))


def test_bench_predict(run, tmp_path, monkeypatch):
    out = run("bench_predict", "--config", "configs/quickstart.yaml", "--launchers", "threads",
              "--repeats", "2", "--json", tmp_path / "p.json", *sets(*MINIBATCH))
    saved = {r["key"]: r for r in json.loads((tmp_path / "p.json").read_text())["rows"]}
    assert list(saved) == ["gnnsys-1", "gnnsys-2-threads", "pyg-edge_index", "pyg-adj_t"]
    for row in saved.values():          # every side predicts every node, the same scores
        assert row["nodes"] == 2000 and len(row["seconds"]) == 2 and row["max_diff"] < 1e-5
    names = {"gnnsys-1": "gnnsys predict", "gnnsys-2-threads": "gnnsys predict (threads)",
             "pyg-edge_index": "PyG GraphSAGE, edge_index (README)",
             "pyg-adj_t": "PyG GraphSAGE, sparse adj_t"}
    rate = {key: 2000 / np.median(saved[key]["seconds"]) for key in saved}
    for key, name in names.items():
        [cells] = rows(out, name)
        assert cells[1:3] == ["2" if "-2-" in key else "1" if key == "gnnsys-1" else "-",
                              "2,000"]
        assert cells[4] == f"{rate[key]:,.0f}"
        assert cells[5] == f"{rate[key] / rate['gnnsys-1']:.2f}x"
    # one side in a process of its own is --only on a finished run (what --alone starts);
    # a PyG forward estimated larger than the memory available is not run
    gnnsys.Trainer(load_config(REPO / "configs/quickstart.yaml", overrides=[
        *MINIBATCH, "train.epochs=1", "train.progress=false", f"run.dir={tmp_path / 'run'}"])).fit()
    monkeypatch.setattr(importlib.import_module("bench_predict"), "available_memory", lambda: 0)
    for key in ("gnnsys-1", "pyg-edge_index"):
        run("bench_predict", "--run-dir", tmp_path / "run", "--only", key, "--repeats", "1",
            "--json", tmp_path / f"{key}.json")
        [row] = json.loads((tmp_path / f"{key}.json").read_text())["rows"]
        assert row["key"] == key
        if key == "gnnsys-1":
            assert row["nodes"] == 2000 and len(row["seconds"]) == 1
        else:
            assert row["skipped"].startswith("does not fit: needs ~") and row["seconds"] == []


def test_bench_pyg_loader(run, tmp_path):
    out = run("bench_pyg_loader", "--dataset", "synthetic-tiny", "--epochs", "2", "--fanouts",
              "5", "5", "--hidden", "16", "--batch-size", "256", "--workers", "0",
              "--json", tmp_path / "rows.json")
    saved = json.loads((tmp_path / "rows.json").read_text())["rows"]
    for name in ("gnnsys.pyg.NeighborLoader + PyG GraphSAGE", "gnnsys trainer (minibatch mode)"):
        [cells] = rows(out, name)
        assert len(saved[name]["epoch_s"]) == 2 and 0 <= saved[name]["test_acc"] <= 1
        assert cells[3] == f"{saved[name]['test_acc']:.4f}" and float(cells[1]) > 0
    [pyg] = rows(out, "torch_geometric NeighborLoader")
    assert pyg[1].startswith("skipped: needs pyg-lib") or float(pyg[1]) > 0


def test_bench_sampler(run, tmp_path):
    out = run("bench_sampler", "--nodes", "2000", "--degree", "8", "--features", "8",
              "--batches", "2", "--warmup", "1", "--threads", "1", "--json", tmp_path / "s.json")
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["config"]["nodes"] == 2000 and saved["config"]["batches"] == 2
    [fused] = rows(out, "fused sample+gather (default)")
    assert float(fused[1]) == round(saved["median_s"]["fused"] * 1e3, 1)
    assert "floor, float16: sampling without features" in out


def test_bench_sparse_features(run, data):
    out = run("bench_sparse_features", "--epochs", "1", "--fullgraph-epochs", "2",
              *sets(f"dataset.path={data.words}", "cluster.launcher=threads"))
    runs = {(r[0], r[1]): r for r in (line.split() for line in out.splitlines())
            if len(r) == 6 and r[1] in ("sparse", "dense")}
    number = lambda cells, i: float(cells[i].replace(",", ""))              # noqa: E731
    for workers in ("1", "2"):
        sparse, dense = runs[workers, "sparse"], runs[workers, "dense"]
        assert number(sparse, 2) * 4 < number(dense, 2)          # 2.5% of the matrix is set
        assert sparse[5] == dense[5]                              # the same training either way
    assert number(runs["1", "sparse"], 3) == 0 < number(runs["2", "sparse"], 3)
    graph = {r[0]: r for r in (line.split() for line in out.splitlines())
             if len(r) == 6 and r[0] in ("sparse", "dense")}
    assert number(graph["sparse"], 1) * 4 < number(graph["dense"], 1)
    assert number(graph["sparse"], 2) < number(graph["dense"], 2)  # a CSR layer sends less


def test_bench_temporal(run, data):
    out = run("bench_temporal", "--config", "configs/tgn-collegemsg.yaml", "--simulate", "2",
              "--measure", "2", "--edgebank", *sets(*data.temporal, "cluster.launcher=threads"))
    simulated = next(r for r in rows(out, "2") if r[1] == "range" and len(r) == 8)
    measured = {(r[1], r[2]): r for r in rows(out, "2") if len(r) == 11}
    assert set(measured) == {("naive", "range"), ("dedup", "range"), ("dedup", "balanced")}
    # the replayed epoch predicts the exchange's rows exactly
    assert measured["naive", "range"][3] == simulated[3]
    assert measured["dedup", "range"][3] == simulated[4]
    assert len(rows(out, "unlimited")) == 2 and len(rows(out, "time window")) == 2
    # EdgeBank's test under every negative strategy and ranked against every destination
    assert "test AP historical" in out and "test MRR all" in out
    for cells in rows(out, "unlimited") + rows(out, "time window"):
        assert len(cells) == 12 and all(0 <= float(c) <= 1 for c in cells[2:])


def test_bench_temporal_pyg(run, data, tmp_path):
    out = run("bench_temporal_pyg", "--config", "configs/tgn-collegemsg.yaml", "--epochs", "1",
              "--threads", "2", "--run-dir", tmp_path / "run", *sets(*data.temporal))
    assert "2 threads (torch trains on 1 in gnnsys, 2 in PyG)" in out     # batch 100 < 800
    for name in ("gnnsys temporal TGN", "PyG examples/tgn.py"):
        [cells] = rows(out, name)
        assert float(cells[1].replace(",", "")) > 0
        assert all(0 <= float(c) <= 1 for c in cells[2:])
    assert "gnnsys / PyG events/s:" in out


def test_bench_temporal_step(run, data):
    out = run("bench_temporal_step", "--config", "configs/tgn-collegemsg.yaml", "--batches", "2",
              "--rounds", "2", "--warmup", "1", "--compare", "threads", "--threads", "2",
              *sets(*data.temporal))
    for name in ("1 torch thread", "2 torch threads (baseline)"):
        [cells] = rows(out, name)
        assert float(cells[1]) > 0 and len(cells[5].split(" / ")) == 2     # 2 rounds
    assert "1 torch thread against the baseline:" in out


def test_bench_temporal_negatives(run, data):
    out = run("bench_temporal_negatives", "--config", "configs/tgn-collegemsg.yaml",
              "--epochs", "2", "--rounds", "1", *sets(*data.temporal))
    for name in ("mixed", "random (baseline)"):
        [cells] = rows(out, name)
        assert float(cells[1]) > 0 and len(cells[2].split(" / ")) == 1     # 1 round
    assert "mixed against random:" in out


def test_bench_network(run, data, tmp_path, monkeypatch):
    """The emulated cluster needs root and network namespaces: here a stand-in runs the
    `gnnsys train` command it gets in this process (K workers: the threads launcher)."""
    from gnnsys import cli
    bench = importlib.import_module("bench_network")

    class LocalCluster:
        address = ""

        def __init__(self, nodes, **kw):
            assert nodes == 2 and kw["bandwidth"] is None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def run(self, k, argv, timeout, cwd):
            assert argv[1:4] == ["-m", "gnnsys.cli", "train"] and cwd == REPO
            on_sigterm = signal.getsignal(signal.SIGTERM)     # the CLI sets its own
            try:
                return subprocess.CompletedProcess(argv, cli.main(argv[3:]), "", "")
            finally:
                signal.signal(signal.SIGTERM, on_sigterm)

    monkeypatch.setattr(bench, "NetCluster", LocalCluster)
    monkeypatch.setattr(bench, "unavailable_reason", lambda: None)
    out = run("bench_network", "--suites", "temporal", "--scaling", "2", "--bandwidths", "none",
              "--json", tmp_path / "rows.json", *sets(*data.temporal, "cluster.launcher=threads"))
    [row] = json.loads((tmp_path / "rows.json").read_text())
    assert (row["suite"], row["variant"], row["speedup"]) == ("temporal/collegemsg", "2 nodes", 1)
    assert row["bytes"] > 0 and row["exchange_s"] > 0 and row["metric"].startswith("test_ap ")
    assert rows(out, "none")[0][:3] == ["none", "temporal/collegemsg", "2 nodes"]


def test_netcluster(run, capsys):
    from gnnsys.netcluster import unavailable_reason
    if unavailable_reason():
        pytest.skip(unavailable_reason())
    netcluster = importlib.import_module("netcluster")
    assert netcluster.main(["down", "bogus"]) == 1
    assert "'bogus' is not an emulated cluster's name" in capsys.readouterr().err
    prefix = f"gns{os.getpid()}z"                  # none such: tearing it down is a no-op
    assert netcluster.main(["down", prefix]) == 0
    assert capsys.readouterr().out == f"removed {prefix}\n"
    with pytest.raises(SystemExit):
        netcluster.main(["run", "2"])                # no command after --
    assert "run needs a command after --" in capsys.readouterr().err


# ----------------------------------------------------------------------------- child processes
def test_bench_allocator(finished):
    out, _ = finished("bench_allocator")
    [cells] = rows(out, "quickstart")
    assert cells[1:4] == ["keep", cells[2], "1.00x"] and float(cells[2]) > 0
    assert int(cells[4].replace(",", "")) > 0 and 0 <= float(cells[7]) <= 1


def test_bench_distributed(finished):
    out, directory = finished("bench_distributed")
    [accuracy] = rows(out, "synthetic-small")[:1]
    assert accuracy[1] == "test_acc" and 0 <= float(accuracy[2]) <= 1
    one, two = [r for r in rows(out, "synthetic-small") if len(r) == 11]
    assert one[1:4] == ["1", one[2], "1.00x"] and one[4:] == ["-"] * 7
    assert two[1] == "2" and float(two[4]) >= 0 and float(two[10]) > 0    # MB received
    assert len(list((directory / "runs").iterdir())) == 2


def test_bench_omp_wait(finished):
    out, _ = finished("bench_omp_wait")
    [cells] = rows(out, "quickstart")
    assert cells[1] == "0" and cells[3] == "1.00x" and float(cells[4]) > 0
    assert "quickstart spin 0: alone" in out


@pytest.fixture(scope="module")
def gpu_check(finished):
    """gpu_check's report, the sampler benchmark's JSON and the markdown."""
    _, out = finished("gpu_check")
    return SimpleNamespace(report=json.loads((out / "gpu_check.json").read_text()),
                           sampler=json.loads((out / "sampler.json").read_text()),
                           text=(out / "gpu_check.md").read_text())


def test_gpu_check(gpu_check):
    """Every step succeeds in the simulator, every mode trains and reports a metric, and no
    target claims a verdict: simulated times say nothing about a GPU."""
    report = gpu_check.report
    assert report["machine"]["simulated"] is True
    for step in ("preflight", "tests", "races", "sampler", "modes"):
        assert report[step]["ok"] and not report[step].get("skipped"), \
            f"{step}: {report[step].get('error') or report[step].get('skipped')}"
    assert all(probe["ok"] for probe in report["preflight"]["result"].values())
    assert report["races"]["result"]["compare"]["equal"] is True
    # ... with ray and pymetis unimportable, as on the GPU machine
    for blocked in ("ray", "pymetis"):
        child = subprocess.run([sys.executable, "-c", f"import {blocked}"], capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": BLOCKED_PATH})
        assert child.returncode and "blocked" in child.stderr, blocked
    # the GPU-marked tests were found (and skip without a real GPU)
    assert report["tests"]["result"]["counts"].get("skipped", 0) > 0
    assert "tests/samplers/test_fused_gpu.py" in report["tests"]["result"]["files"]
    modes = report["modes"]["result"]
    assert set(modes) == {"minibatch", "temporal", "fullgraph"}
    for name, result in modes.items():
        assert result["epoch_s"] > 0 and 0.0 <= result["value"] <= 1.0, (name, result)
    assert [t["met"] for t in report["targets"]] == [None] * len(report["targets"])
    verdicts = [line for line in gpu_check.text.splitlines()
                if line.endswith("| not yet measured on hardware |")]
    assert len(verdicts) == len(report["targets"])
    assert "| minibatch | sage |" in gpu_check.text


def test_gpu_probes():
    """Its own command (what compute-sanitizer runs on the device) in the simulator, with
    ray and pymetis blocked: one JSON line, every probe ok, and what the simulator cannot
    check said so."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": BLOCKED_PATH}
    for probe in ("preflight", "races"):
        child = subprocess.run([sys.executable, str(SCRIPTS / "gpu_probes.py"), probe, "--small"],
                               capture_output=True, text=True, env=env, timeout=300)
        assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-2000:]
        results = json.loads(child.stdout.strip().splitlines()[-1])
        assert all(r["ok"] for r in results.values()), results
    assert results["races"]["result"]["equal"] is True


def test_bench_gpu_sampler(gpu_check):
    """Its own process under gpu_check: every method timed on the simulated device, its
    table and targets in its JSON and in gpu_check's report."""
    result = gpu_check.sampler
    for method in ("fused", "fused_graph_host", "fused_all_host", "fused_tiered",
                   "sample_only", "index_select"):
        assert result["median_s"][method] > 0, method
    assert result["machine"]["gpu"] == "numba CUDA simulator"
    assert re.search(r"^\| a\. fused, graph \+ features on the GPU +\| +[\d.]+ \|",
                     result["table"], re.M)
    assert result["table"] in gpu_check.text
    assert [t["met"] for t in result["targets"]] == [None] * 4


# ----------------------------------------------------------------------------- one script's details
def shared_static_bundles() -> dict:
    """Registry name -> file, for static bundles the shared manifest lists."""
    manifest = (shared_data_dir() / "MANIFEST.md").read_text()
    listed = set(re.findall(r"static/(\w+)\.npz", manifest))
    return {name: entry["file"] for name, entry in registry().items()
            if entry.get("source") == "bundle" and entry.get("file", "").startswith("static/")
            and entry["file"].removeprefix("static/").removesuffix(".npz") in listed}


@needs_shared_data
def test_bench_accuracy_table_covers_every_shared_static_bundle():
    bench = importlib.import_module("bench_accuracy")
    bundles = shared_static_bundles()
    assert len(bundles) >= 13
    assert set(bench.CONFIGS) == set(bundles)
    assert set(bench.REFERENCES) == set(bundles)


@needs_shared_data
def test_bench_accuracy_protocols_fit_their_files():
    bench = importlib.import_module("bench_accuracy")
    for name, file in shared_static_bundles().items():
        spec = bench.CONFIGS[name]
        with np.load(shared_data_dir() / file, allow_pickle=False) as arrays:
            masks = arrays["train_mask"] if "train_mask" in arrays.files else None
        if spec["protocol"] == "splits":        # one run per standard split
            assert masks is not None and masks.ndim == 2 and masks.shape[0] >= spec["runs"], name
        elif spec["protocol"] == "random":      # stratified random splits: the file has none
            assert masks is None, name
        else:                                   # seeds over one public split
            assert spec["protocol"] == "seeds" and masks is not None, name
        assert spec["runs"] >= 3, name
        assert len(spec["fanouts"]) == spec["layers"], name


@needs_shared_data
def test_bench_accuracy_archs_fit_every_dataset():
    bench = importlib.import_module("bench_accuracy")
    assert set(bench.LINKX_REFERENCES) <= set(bench.CONFIGS)
    for name in bench.CONFIGS:
        for arch in bench.ARCHS:
            spec = bench.arch_spec(name, arch)
            config = bench.run_config(name, spec, 0, None, Path("runs"))
            assert config.model.arch == arch, (name, arch)
            assert len(config.sampler.fanouts) == config.model.layers, (name, arch)
            if bench.ARCHS[arch].get("fanouts", "as the row") is None:    # reads no neighbour
                assert config.sampler.fanouts == [1] * config.model.layers, (name, arch)


def network_args(**kw):
    """The arguments by which bench_network chooses its suites."""
    base = dict(suites="minibatch,fullgraph,temporal", mb_data="products,tolokers",
                fg_data="cora,tolokers,synthetic", temporal_data="collegemsg,wikipedia",
                fg_epochs=40, scaling="")
    return argparse.Namespace(**{**base, **kw})


def test_bench_network_runs_are_valid_configs():
    bench = importlib.import_module("bench_network")
    chosen = bench.suites(network_args())
    assert len(chosen) == 7
    for name, (config, extra, variants, base) in chosen.items():
        assert base in variants
        for overrides in variants.values():
            cfg = load_config(REPO / config,
                              overrides=bench.run_overrides(overrides, extra, 2))
            assert cfg.mode == name.split("/")[0]
    # the dataset's overrides come last, so they can tune a variant's defaults
    config, extra, variants, _ = chosen["fullgraph/synthetic"]
    adaptive = load_config(REPO / config, overrides=bench.run_overrides(
        variants["adaptive"], extra, 2))
    assert adaptive.fullgraph.quantization.assign_every == 1 and adaptive.train.epochs == 4
    products = load_config(REPO / chosen["minibatch/products"][0],
                           overrides=chosen["minibatch/products"][1])
    assert products.dataset.name == "synthetic-products"
    assert products.dataset.params == {"num_nodes": 250000, "locality_exponent": 0.5}


def test_bench_network_scaling_runs_only_the_saving():
    bench = importlib.import_module("bench_network")
    chosen = bench.suites(network_args(scaling="1,2,4"))
    assert {name: list(v[2]) for name, v in chosen.items()}["minibatch/products"] == ["vip"]
    assert {v[3] for v in chosen.values()} == {"vip", "adaptive", "dedup"}
    with pytest.raises(SystemExit, match="no fullgraph dataset 'karate'"):
        bench.suites(network_args(fg_data="karate"))


def test_bench_network_summary_uses_the_slowest_rank_and_the_baseline():
    bench = importlib.import_module("bench_network")
    final = {"kind": "final", "test_acc": 0.5}

    def epochs(epoch_s, waits, fetch):     # per-rank values, and their maxima as logged
        return [{"kind": "epoch", "epoch": e, "epoch_s": epoch_s, "comm_wait_s": max(waits),
                 "comm_bytes_sent": 100, "fetch_s": max(fetch),
                 "workers": [{"rank": r, "comm_wait_s": w, "fetch_s": f}
                             for r, (w, f) in enumerate(zip(waits, fetch))]}
                for e in range(3)]
    none = bench.summarise(epochs(4.0, [1.0, 2.0], [0.5, 1.5]), final)
    assert none["comm_share"] == 0.5 and none["exchange_s"] == 1.5
    assert none["metric"] == "test_acc 0.5000" and none["epochs"] == 3
    vip = bench.summarise(epochs(2.0, [0.2, 0.4], [0.1, 0.3]), final)
    rows = bench._rows("150mbit", "minibatch/products", {"none": [none], "vip": [vip]}, "none")
    assert [(r["variant"], r["speedup"]) for r in rows] == [("none", 1.0), ("vip", 2.0)]
    minibatch = epochs(4.0, [3.0, 3.0], [0.5, 1.5])
    for epoch in minibatch:             # the step's own waits count, not the loader's
        for w, (batch, sync) in zip(epoch["workers"], [(0.4, 0.2), (0.1, 0.3)]):
            w.update(batch_wait_s=batch, grad_sync_s=sync)
        epoch["batch_wait_s"] = 0.4
    assert bench.summarise(minibatch, final)["comm_share"] == pytest.approx(0.15)
    table = bench._table(rows)
    assert "| 150mbit | minibatch/products | vip | 2.000 | 20% | 0.300 |" in table
    assert "epochs/s vs 1 node" in bench._table(rows, scaling=True)
