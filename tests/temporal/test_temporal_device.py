"""Temporal mode on the worker's device (`ctx.device`), proved without a GPU where possible.

- On torch's `meta` device a CPU tensor mixed into an op raises, so running the mode's step
  there catches any tensor the model or the batch assembly creates on the CPU by default.
- The host/device boundary (numpy <-> torch) is kept to a few named functions; a
  conversion or a device-less tensor factory anywhere else in gnnsys/temporal fails here.
- On a real GPU (marked gpu: skipped without one) the store and exchange give the CPU's
  rows, and a tiny run trains with train.device cuda like it does on the CPU.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.distributed import Communicator, WorkerContext
from gnnsys.temporal.data import prepare_events
from gnnsys.temporal.exchange import MemoryExchange
from gnnsys.temporal.memory import MemoryStore, RowLayout
from gnnsys.temporal.mode import TemporalMode
from gnnsys.temporal.placement import vertex_ownership

META = torch.device("meta")
TEMPORAL = Path(__file__).resolve().parents[2] / "gnnsys" / "temporal"


def meta_mode(config, graph) -> TemporalMode:
    events = prepare_events(graph)
    mode = TemporalMode(WorkerContext.single(META), config, events,
                        vertex_ownership(config, events))
    mode.build_model()

    def fetch(needed, writes_back=True):   # meta rows: the ownership check needs values
        ids, inverse = np.unique(needed, return_inverse=True)
        return ids, torch.zeros(len(ids), mode.layout.read_width, device=META), inverse
    mode.exchange.fetch = fetch
    return mode


@pytest.mark.parametrize("arch", ["tgn", "jodie", "apan"])
def test_a_step_runs_on_the_device_it_is_given(arch, graph_factory, tiny_config):
    mode = meta_mode(tiny_config(model={"arch": arch}),
                     graph_factory(edge_dim=3, node_dim=4))
    assert all(p.device == META for p in mode.model.parameters())
    assert mode.store.memory.device == META and mode.store.node_feat.device == META
    batch = mode.planner.batch("train", 0, 0, *mode.planner.batches("train")[3], 1)
    loss, memory, memory_ts, moved, (pos, neg) = mode._forward(batch, train=True)
    loss.backward()
    assert {t.device for t in (loss, memory, memory_ts, pos, neg, moved.root_index,
                               moved.root_time, moved.events)} == {META}
    if arch == "tgn":
        assert {t.device for t in moved.neighbors.values()} == {META}
    assert all(p.grad is None or p.grad.device == META for p in mode.model.parameters())


def test_gaps_keep_whole_seconds_at_unix_scale():
    """Neighbour times travel as float64 seconds after the batch's first event: at
    Unix-second times (1.7e9, where float32 steps by 128 s) a 1 s gap stays 1 s, a 1e7 s
    gap stays exact; equal neighbour times share one table row; empty slots do not travel."""
    from gnnsys.temporal.batch import PreparedBatch, slot_gaps, to_device
    from samplers.temporal import PAD, SampledNeighbors
    t = 1.7e9
    nodes = np.full((3, 2), PAD)
    nodes[0] = [4, 5]
    nodes[1, 0] = 6
    times = np.zeros((3, 2))
    times[0] = [t - 1e7, t - 1]
    times[1, 0] = t - 1
    batch = PreparedBatch(index=0, global_size=1, events=np.array([9]), src=np.array([0]),
                          dst=np.array([1]), time=np.array([t]), negatives=np.array([[2]]),
                          neighbors=SampledNeighbors(nodes=nodes, times=times,
                                                     events=np.where(nodes == PAD, PAD, 7),
                                                     count=np.array([2, 1, 0])))
    inverse = np.unique(batch.needed, return_inverse=True)[1]
    moved = to_device(batch, inverse, "cpu")
    n = moved.neighbors
    assert slot_gaps(n).dtype == torch.float64 and slot_gaps(n).tolist() == [1e7, 1.0, 1.0]
    assert n["neighbor_tau"].tolist() == [-1e7, -1.0] and n["tidx"].tolist() == [0, 1, 1]
    assert n["root_tau"].tolist() == [0.0] and n["ridx"].tolist() == [0, 0, 0]
    assert n["indptr"].tolist() == [0, 2, 3, 3]
    assert n["slot"].tolist() == [0, 1, 2] and n["event"].tolist() == [7, 7, 7]
    assert n["mask"].tolist() == [[True, True], [True, False], [False, False]]
    assert moved.root_time.dtype == torch.float64 and moved.root_time.tolist() == [t] * 3


def test_store_state_lives_on_its_device():
    layout = RowLayout(memory_dim=3, mail_dim=4, mailbox_size=2, node_feat_dim=1)
    store = MemoryStore(np.array([1, 3]), 5, layout, node_feat=np.ones((5, 1)), device=META)
    store.reset()
    for name in ("memory", "mem_ts", "mailbox", "mail_ts", "next_slot", "node_feat", "local"):
        assert getattr(store, name).device == META, name


# ----------------------------------------------------------------------------- the boundary
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint",
             "tensor", "as_tensor", "linspace"}
# where host arrays become tensors (and back): the planner's batch, the exchange's ids and
# write plan, the store's setup and checkpoints, the evaluation's scores and one-vs-all
# ranks, the event stream
BOUNDARY = {"batch.py": {"to_device"}, "exchange.py": {"fetch", "write_back"},
            "memory.py": {"__init__", "load_state", "merge_states"},
            "mode.py": {"_eval_phase", "score_queries", "embed_nodes", "_ranks_against_all"},
            "data.py": {"prepare_events"},
            # the CPU kernel's op hands its tensors to numba
            "slot_attention.py": {"_np", "_time_tables", "_slot_attention",
                                  "_slot_attention_backward"}}


def boundary_violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def enclosing(node, kinds):
        while node in parents:
            node = parents[node]
            if isinstance(node, kinds):
                return node
        return None

    def in_parameter(node):       # nn.Parameter(...) is moved with the model
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Parameter":
                return True
        return False

    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        function = enclosing(node, (ast.FunctionDef,))
        where = f"{path.name}:{node.lineno} ({function.name if function else 'module'})"
        is_torch = isinstance(owner, ast.Name) and owner.id == "torch"
        if is_torch and name in FACTORIES and not in_parameter(node) and not any(
                k.arg in ("device", None) for k in node.keywords):
            found.append(f"{where}: torch.{name} without device=")
        if (is_torch and name == "from_numpy") or name in ("numpy", "cpu"):
            if not in_parameter(node) and (function is None or
                                           function.name not in BOUNDARY.get(path.name, ())):
                found.append(f"{where}: .{name} outside the host/device boundary")
    return found


def test_host_device_conversions_stay_at_the_boundary():
    found = [v for path in sorted(TEMPORAL.glob("*.py")) for v in boundary_violations(path)]
    assert not found, "\n".join(found)


def test_the_boundary_check_finds_a_cpu_only_tensor(tmp_path):
    planted = tmp_path / "mode.py"
    planted.write_text("import torch\n"
                       "def _forward(x):\n"
                       "    t = torch.zeros(3)\n"
                       "    return torch.from_numpy(x.numpy())\n")
    found = boundary_violations(planted)
    assert len(found) == 3 and "torch.zeros without device=" in found[0], found


# ----------------------------------------------------------------------------- a real GPU
def needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU seen by torch")
    return torch.device("cuda", torch.cuda.current_device())


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["dedup", "naive"])
def test_store_and_exchange_on_the_gpu_equal_the_cpu(mode):
    device = needs_cuda()
    layout = RowLayout(memory_dim=3, mail_dim=4, mailbox_size=2, node_feat_dim=1)
    feat = np.arange(6.0).reshape(6, 1)
    results = []
    for where in ("cpu", device):
        store = MemoryStore(np.arange(6), 6, layout, node_feat=feat, device=where)
        exchange = MemoryExchange(Communicator(0, 1, where), np.zeros(6, dtype=np.int64),
                                  store, mode)
        exchange.fetch(np.array([5, 1, 5, 2]))
        t = torch.tensor([1_098_777_142.5, 7.0, 9.0], dtype=torch.float64, device=where)
        exchange.write_back(np.array([5, 5, 1]), np.array([4.0, 6.0, 1.0]),
                            torch.arange(9.0, device=where).view(3, 3), t,
                            torch.ones(3, 4, device=where), t + 1)
        ids, rows, inverse = exchange.fetch(np.array([1, 5, 2]))
        assert rows.device == torch.device(where)
        results.append((ids[inverse], rows.cpu()))
    (ids_cpu, rows_cpu), (ids_gpu, rows_gpu) = results
    assert np.array_equal(ids_cpu, ids_gpu) and torch.equal(rows_cpu, rows_gpu)


@pytest.mark.gpu
def test_tiny_run_trains_on_the_gpu(tiny_graph, tiny_config, tmp_path):
    from gnnsys.training import fit
    needs_cuda()
    runs = {device: fit(tiny_config(train={"device": device, "epochs": 2},
                                    run={"dir": str(tmp_path / device)}), tiny_graph)
            for device in ("cpu", "cuda")}
    assert runs["cuda"]["val_ap"] > 0.7, runs["cuda"]
    # same seeds and batches; only float rounding of other kernels differs
    assert runs["cuda"]["test_ap"] == pytest.approx(runs["cpu"]["test_ap"], abs=0.02)
