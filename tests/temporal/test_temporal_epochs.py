"""Temporal mode over several epochs, and the write side of the deduplicated exchange.

K thread workers (real loop, real exchange) end three epochs in the state of one process,
which needs every rank to reset its memory at the start of every epoch. Write-side dedup
sends each owner one row per vertex, the latest, and leaves the state naive leaves."""
from __future__ import annotations

import threading

import numpy as np
import torch

from gnnsys.distributed.local import ThreadGroup
from gnnsys.temporal.data import prepare_events
from gnnsys.temporal.exchange import MemoryExchange
from gnnsys.temporal.memory import MemoryStore, RowLayout, merge_states
from gnnsys.temporal.placement import vertex_ownership
from gnnsys.training import fit, run_worker
from tests.temporal.conftest import checkpoint_state


def test_workers_reproduce_single_process_over_several_epochs(graph_factory, tiny_config,
                                                              threaded_workers, tmp_path):
    graph = graph_factory()
    epochs = {"epochs": 3, "lr": 0.003, "progress": False, "seed": 0}
    fit(tiny_config(train=epochs, run={"dir": str(tmp_path / "single")}), graph)
    cfg = tiny_config(train=epochs, run={"dir": str(tmp_path / "two")},
                      cluster={"workers": 2})
    events = prepare_events(graph)
    threaded_workers(run_worker, 2, cfg, "", events, vertex_ownership(cfg, events))
    single, two = checkpoint_state(tmp_path / "single"), checkpoint_state(tmp_path / "two")
    for name, value in single["model"].items():
        torch.testing.assert_close(two["model"][name], value, rtol=1e-4, atol=1e-5, msg=name)
    for name in ("memory", "mailbox"):
        torch.testing.assert_close(two["memory"][name], single["memory"][name],
                                   rtol=1e-4, atol=1e-5, msg=name)
    for name in ("mem_ts", "mail_ts", "next_slot"):
        assert torch.equal(two["memory"][name], single["memory"][name]), name


LAYOUT = RowLayout(memory_dim=3, mail_dim=2, mailbox_size=2, node_feat_dim=0)
OWNER = np.array([0, 1, 0, 1, 0, 1])


def written_state(mode: str):
    """Both ranks write back a batch that repeats vertices of both owners; returns the
    merged memory state and the (vertex, sender) pairs each owner received."""
    received, lock = [], threading.Lock()

    def rank(comm):
        store = MemoryStore(np.flatnonzero(OWNER == comm.rank), len(OWNER), LAYOUT)
        apply = store.apply_writes

        def recording(rows):
            with lock:
                w = LAYOUT.unpack_write(rows)     # key % 10 is the sender's rank
                received.append(list(zip(w["vertex"].numpy().astype(int).tolist(),
                                         (w["key"].numpy() % 10).astype(int).tolist())))
            apply(rows)
        store.apply_writes = recording
        exchange = MemoryExchange(comm, OWNER, store, mode)
        vertex = np.array([1, 3, 1, 0, 1, 3, 2]) if comm.rank == 0 else np.array([0, 0, 5, 4, 0])
        key = np.arange(len(vertex), dtype=np.float64) * 10 + comm.rank   # later = larger
        n = len(vertex)
        memory = torch.arange(n * 3, dtype=torch.float32).view(n, 3) + 100 * comm.rank
        exchange.fetch(vertex)
        exchange.write_back(vertex, key, memory, torch.from_numpy(key + 0.5), memory[:, :2],
                            torch.from_numpy(key + 0.25))
        return store.state()
    return merge_states(ThreadGroup(2).run(rank)), received


def test_write_side_dedup_sends_one_latest_row_per_vertex_and_keeps_the_state():
    dedup, received = written_state("dedup")
    naive, naive_received = written_state("naive")
    for rows in received:
        assert len(rows) == len(set(rows)), f"a sender sent a vertex twice: {rows}"
    assert sum(map(len, received)) < sum(map(len, naive_received))
    for name in ("memory", "mem_ts", "mailbox", "mail_ts", "next_slot"):
        assert torch.equal(dedup[name], naive[name]), name
    # vertex 1 was written 3 times by rank 0 (keys 0, 20, 40): the last one is kept
    row = int(np.flatnonzero(dedup["vertex"] == 1)[0])
    assert dedup["mem_ts"][row].item() == 40.5
    assert torch.equal(dedup["memory"][row], torch.tensor([12.0, 13.0, 14.0]))

