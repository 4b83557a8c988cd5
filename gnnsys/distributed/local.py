"""In-process stand-in for a process group: K ranks as K threads of one process.

For tests and examples of code that talks through a `Communicator` (the feature fetch,
evaluation gathers, the temporal exchange) without starting Ray or torch.distributed.
`ThreadComm` is a `Communicator` whose transport methods move data through shared slots
and a barrier, so the byte/row/wait accounting is the real one. Every rank must make the
same calls in the same order, as with real collectives (a rank that stops calling makes
the others time out, not hang).

    group = ThreadGroup(2)
    results = group.run(lambda comm: comm.all_to_all([...]))       # one thread per rank

`gnnsys.distributed.launch` runs K workers this way under `cluster.launcher: threads`.
"""
from __future__ import annotations

import copy
import threading

import torch

from .. import allocator
from .comm import Communicator


class ThreadGroup:
    def __init__(self, world_size: int, timeout_s: float = 120.0):
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._barrier = threading.Barrier(world_size, timeout=timeout_s)
        self._slots: list = [None] * world_size

    def comm(self, rank: int) -> "ThreadComm":
        return ThreadComm(self, rank)

    def exchange(self, rank: int, item) -> list:
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
            except BaseException as err:   # a failed rank must not leave the others waiting
                errors.append(err)
                self._barrier.abort()

        # before the threads exist: a thread keeps the malloc arena it first allocates from
        # (one arena, or each rank's large blocks are mmapped afresh: gnnsys/allocator.py)
        allocator.keep_freed_memory()
        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results


class ThreadComm(Communicator):
    """A `Communicator` over a ThreadGroup: only the transport differs."""

    def __init__(self, group: ThreadGroup, rank: int):
        super().__init__(rank, group.world_size)
        self.thread_group = group

    def _all_to_all_single(self, out, flat, out_splits, in_splits, async_op=False):
        in_splits = in_splits or [len(flat) // self.world_size] * self.world_size
        out_splits = out_splits or [len(out) // self.world_size] * self.world_size
        posted = self.thread_group.exchange(self.rank, list(flat.clone().split(in_splits)))
        torch.cat([posted[r][self.rank] for r in range(self.world_size)], out=out)
        assert [len(posted[r][self.rank]) for r in range(self.world_size)] == list(out_splits)
        return None                        # already done: nothing to wait for

    def _all_reduce(self, tensor, op: str, async_op: bool = False):
        stacked = torch.stack(self.thread_group.exchange(self.rank, tensor.clone()))
        tensor.copy_({"sum": stacked.sum(0), "max": stacked.amax(0),
                      "min": stacked.amin(0)}[op])
        return None                        # already done: nothing to wait for

    # Objects arrive as copies, as over a wire: ranks must not share mutable state.
    def _all_gather_object(self, obj) -> list:
        items = self.thread_group.exchange(self.rank, obj)
        return [item if r == self.rank else copy.deepcopy(item) for r, item in enumerate(items)]

    def _broadcast_object(self, obj, src: int):
        item = self.thread_group.exchange(self.rank, obj)[src]
        return item if src == self.rank else copy.deepcopy(item)

    def _barrier(self) -> None:
        self.thread_group.exchange(self.rank, None)
