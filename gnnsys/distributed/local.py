"""In-process stand-in for a process group: K ranks as K threads of one process.

For tests and examples of code that talks through a `Communicator` (the feature fetch,
evaluation gathers) without starting Ray or torch.distributed. Same interface and the
same byte/row accounting as `Communicator`; data moves through shared slots and a
barrier, so every rank must make the same calls in the same order, as with real
collectives (a rank that stops calling makes the others time out, not hang).

    group = ThreadGroup(2)
    results = group.run(lambda comm: comm.all_to_all([...]))   # one thread per rank
"""
from __future__ import annotations

import threading

import torch

from .comm import CommStats


class ThreadGroup:
    def __init__(self, world_size: int, timeout_s: float = 30.0):
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._barrier = threading.Barrier(world_size, timeout=timeout_s)
        self._slots: list = [None] * world_size

    def comm(self, rank: int) -> "ThreadComm":
        return ThreadComm(self, rank)

    def _exchange(self, rank: int, item) -> list:
        """Everyone posts `item`; returns every rank's item, in rank order."""
        self._barrier.wait()           # previous exchange fully read
        self._slots[rank] = item
        self._barrier.wait()           # all items posted
        return list(self._slots)

    def run(self, fn) -> list:
        """Run fn(comm) on every rank in its own thread; return the results in rank order;
        re-raise the first error."""
        results, errors = [None] * self.world_size, []

        def body(rank):
            try:
                results[rank] = fn(self.comm(rank))
            except BaseException as err:   # surface it in the caller
                errors.append(err)
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results


class ThreadComm:
    """The `Communicator` interface over a ThreadGroup."""

    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.world_size = group, rank, group.world_size
        self.device = torch.device("cpu")
        self.stats = CommStats()

    def reset_stats(self) -> CommStats:
        old, self.stats = self.stats, CommStats()
        return old

    def all_to_all(self, send, recv_counts=None):
        posted = self.group._exchange(self.rank, [t.clone() for t in send])
        recv = [posted[r][self.rank] for r in range(self.world_size)]
        if recv_counts is not None:
            assert [len(t) for t in recv] == list(recv_counts), "recv_counts mismatch"
        row = lambda t: t.element_size() * (t[0].numel() if len(t) else 0)
        sent = [t for r, t in enumerate(send) if r != self.rank]
        got = [t for r, t in enumerate(recv) if r != self.rank]
        self.stats.calls += 1
        self.stats.rows_sent += sum(len(t) for t in sent)
        self.stats.rows_recv += sum(len(t) for t in got)
        self.stats.bytes_sent += sum(len(t) * row(t) for t in sent)
        self.stats.bytes_recv += sum(len(t) * row(t) for t in got)
        return recv

    def all_reduce(self, tensor, op: str = "sum"):
        values = self.group._exchange(self.rank, tensor.clone())
        stacked = torch.stack(values)
        result = {"sum": stacked.sum(0), "mean": stacked.mean(0) if stacked.is_floating_point()
                  else stacked.sum(0) // self.world_size,
                  "max": stacked.max(0).values, "min": stacked.min(0).values}[op]
        tensor.copy_(result)
        return tensor

    def all_gather_object(self, obj) -> list:
        return self.group._exchange(self.rank, obj)

    def broadcast_object(self, obj, src: int = 0):
        return self.group._exchange(self.rank, obj)[src]

    def barrier(self) -> None:
        self.group._exchange(self.rank, None)
