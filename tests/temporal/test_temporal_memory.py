"""Owner-partitioned memory rows, the latest-wins write-back and the exchange's guards."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.distributed import Communicator
from gnnsys.temporal.exchange import MemoryExchange
from gnnsys.temporal.memory import (NO_MAIL, MemoryStore, RowLayout, f64_to_words,
                                    latest_per_vertex, merge_states, words_to_f64)

LAYOUT = RowLayout(memory_dim=3, mail_dim=4, mailbox_size=2, node_feat_dim=1)


def write_rows(vertex, key, value, ts):
    n = len(vertex)
    return LAYOUT.pack_write(torch.tensor(vertex, dtype=torch.float64),
                             torch.tensor(key, dtype=torch.float64),
                             torch.full((n, 3), 0.0) + torch.tensor(value).view(-1, 1),
                             torch.tensor(ts, dtype=torch.float64),
                             torch.full((n, 4), 0.0) + torch.tensor(value).view(-1, 1),
                             torch.tensor(ts, dtype=torch.float64))


def test_timestamps_survive_float32_rows_bit_exactly():
    t = torch.tensor([1_098_777_142.123456, 0.5, 2.0 ** 52 + 1], dtype=torch.float64)
    assert torch.equal(words_to_f64(f64_to_words(t)), t)


def test_latest_per_vertex_is_by_key_not_order():
    vertex = torch.tensor([4, 2, 4, 4, 2])
    key = torch.tensor([7.0, 3.0, 9.0, 8.0, 1.0], dtype=torch.float64)
    keep = latest_per_vertex(vertex, key)
    assert list(zip(vertex[keep].tolist(), key[keep].tolist())) == [(2, 3.0), (4, 9.0)]
    # the largest key wins wherever it stands; the result is sorted by vertex
    vertex = torch.tensor([5, 1, 5, 1, 5])
    key = torch.tensor([3.0, 4.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    assert latest_per_vertex(vertex, key).tolist() == [1, 0]


def test_store_applies_latest_write_and_fills_the_mailbox_ring():
    store = MemoryStore(np.array([1, 3]), 5, LAYOUT, node_feat=np.arange(5.0).reshape(5, 1))
    rows = write_rows([3, 1, 3], [5.0, 2.0, 9.0], [10.0, 20.0, 30.0], [100.0, 7.0, 300.0])
    store.apply_writes(rows[torch.tensor([2, 0, 1])])        # arrival order must not matter
    got = LAYOUT.unpack_read(store.read(np.array([3, 1])))
    assert got["memory"][:, 0].tolist() == [30.0, 20.0]
    assert got["mem_ts"].tolist() == [300.0, 7.0]
    assert got["mail_ts"].tolist() == [[300.0, NO_MAIL], [7.0, NO_MAIL]]
    assert got["node_feat"][:, 0].tolist() == [3.0, 1.0]
    store.apply_writes(write_rows([3], [11.0], [40.0], [400.0]))
    assert LAYOUT.unpack_read(store.read(np.array([3])))["mail_ts"].tolist() == [[300.0, 400.0]]
    with pytest.raises(RuntimeError, match="does not own"):
        store.read(np.array([2]))


def test_state_round_trip_under_other_ownership():
    a = MemoryStore(np.array([0, 2]), 4, LAYOUT, node_feat=np.zeros((4, 1)))
    b = MemoryStore(np.array([1, 3]), 4, LAYOUT, node_feat=np.zeros((4, 1)))
    a.apply_writes(write_rows([0, 2], [1.0, 1.0], [1.0, 2.0], [1.0, 2.0]))
    b.apply_writes(write_rows([3], [1.0], [3.0], [3.0]))
    merged = merge_states([a.state(), b.state()])
    c = MemoryStore(np.array([3, 2]), 4, LAYOUT, node_feat=np.zeros((4, 1)))
    c.load_state(merged)
    assert LAYOUT.unpack_read(c.read(np.array([2, 3])))["memory"][:, 0].tolist() == [2.0, 3.0]


@pytest.mark.parametrize("mode", ["dedup", "naive"])
def test_single_worker_exchange_round_trip(mode):
    store = MemoryStore(np.arange(6), 6, LAYOUT, node_feat=np.zeros((6, 1)))
    exchange = MemoryExchange(Communicator(), np.zeros(6, dtype=np.int64), store, mode)
    needed = np.array([5, 1, 5, 5, 2])
    ids, rows, inverse = exchange.fetch(needed)
    assert np.array_equal(ids[inverse], needed) and len(rows) == 3
    with pytest.raises(RuntimeError, match="write_back"):
        exchange.fetch(needed)
    exchange.write_back(np.array([5, 5]), np.array([4.0, 6.0]), torch.ones(2, 3),
                        torch.tensor([1.0, 2.0], dtype=torch.float64), torch.ones(2, 4),
                        torch.tensor([1.0, 2.0], dtype=torch.float64))
    _, rows, _ = exchange.fetch(np.array([5]))
    assert LAYOUT.unpack_read(rows)["mem_ts"].tolist() == [2.0]
    assert exchange.stats.occurrences == 6 and exchange.stats.unique == 4


def test_two_worker_fetch_is_three_rounds_and_returns_the_owners_rows():
    """Counts, ids, rows: the replies' counts are the requests' own, so they are not sent
    again. Each rank gets its needed vertices' rows from their owners, whatever the order."""
    from gnnsys.distributed.local import ThreadGroup
    owner = np.array([0, 1, 0, 1, 0, 1])

    def rank_fetch(comm):
        store = MemoryStore(np.flatnonzero(owner == comm.rank), 6, LAYOUT,
                            node_feat=np.zeros((6, 1)))
        store.apply_writes(write_rows(store.owned.tolist(), [1.0] * len(store.owned),
                                      [10.0 + v for v in store.owned],
                                      [1.0] * len(store.owned)))
        exchange = MemoryExchange(comm, owner, store, "dedup")
        before = comm.stats.calls
        needed = np.array([5, 0, 3, 0] if comm.rank == 0 else [2, 1, 2])
        ids, rows, inverse = exchange.fetch(needed)
        memory = LAYOUT.unpack_read(rows)["memory"][:, 0]
        return comm.stats.calls - before, ids[inverse].tolist(), memory[inverse].tolist()

    rounds, ids, memory = zip(*ThreadGroup(2).run(rank_fetch))
    assert rounds == (3, 3)
    assert ids == ([5, 0, 3, 0], [2, 1, 2])
    assert memory == ([15.0, 10.0, 13.0, 10.0], [12.0, 11.0, 12.0])
