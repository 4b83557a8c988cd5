"""The one communication layer: torch.distributed collectives with byte/row/wait accounting.

Every mode exchanges data through `Communicator`, so every trainer reports bytes and
rows sent and received per step the same way. With world_size 1 every call is a local
no-op, so single-process code paths need no special cases.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist


BACKENDS = ("auto", "gloo", "nccl")     # cluster.backend: the process groups' transport


@dataclass
class CommStats:
    bytes_sent: int = 0
    bytes_recv: int = 0
    rows_sent: int = 0
    rows_recv: int = 0
    wait_s: float = 0.0        # time blocked inside collectives
    calls: int = 0

    def as_dict(self, prefix: str = "comm_") -> dict:
        return {prefix + k: (round(v, 6) if isinstance(v, float) else v)
                for k, v in asdict(self).items()}


class Communicator:
    """Collectives over one process group (default: the global one; gloo on CPU, NCCL on
    GPU). Give each concurrent stream of collectives its own group and Communicator: the
    feature fetch runs in a loader thread on its own group, so it overlaps DDP's gradient
    all-reduce on the default group instead of queueing behind it (or deadlocking by
    interleaving differently on different ranks)."""

    def __init__(self, rank: int = 0, world_size: int = 1, device=None, group=None):
        self.rank, self.world_size = rank, world_size
        self.device = torch.device(device or "cpu")
        self.group = group
        self.stats = CommStats()

    def reset_stats(self) -> CommStats:
        old, self.stats = self.stats, CommStats()
        return old

    def _timed(self, fn):
        t0 = time.perf_counter()
        out = fn()
        self.stats.wait_s += time.perf_counter() - t0
        self.stats.calls += 1
        return out

    # --------------------------------------------------------------- all-to-all
    def all_to_all(self, send: list[torch.Tensor],
                   recv_counts: list[int] | None = None) -> list[torch.Tensor]:
        """send[r] goes to rank r (rows of any count, same trailing shape and dtype on every
        rank); returns recv[r] from rank r. Counts are exchanged first, then the rows in one
        `all_to_all_single`; pass `recv_counts` when they are already known (a reply to a
        request) to skip the counts round. The self part is not counted as traffic."""
        assert len(send) == self.world_size, "all_to_all needs one tensor per rank"
        if self.world_size == 1:
            return [send[0]]
        send_counts = [len(t) for t in send]
        counts_bytes = 0
        if recv_counts is None:
            counts = torch.tensor(send_counts, dtype=torch.int64, device=self.device)
            received = torch.empty_like(counts)
            self._timed(lambda: self._all_to_all_single(received, counts, None, None))
            recv_counts = received.tolist()
            # the counts message is traffic too: 8 bytes per peer each way
            counts_bytes = 8 * (self.world_size - 1)
        return self.start_all_to_all(send, recv_counts, extra_bytes=counts_bytes).wait()

    def start_all_to_all(self, send: list[torch.Tensor], recv_counts: list[int],
                         extra_bytes: int = 0) -> "PendingAllToAll":
        """Post the rows of an all_to_all whose `recv_counts` are known and return at once;
        `.wait()` gives recv[r]. The backend moves the bytes (gloo: its own threads) while
        the caller computes. Issue no other collective on this group before waiting."""
        assert len(send) == self.world_size, "all_to_all needs one tensor per rank"
        trailing, dtype = send[0].shape[1:], send[0].dtype
        send_counts = [len(t) for t in send]
        rc = [int(c) for c in recv_counts]
        flat = torch.cat([t.reshape(len(t), *trailing) for t in send]).to(self.device)
        out = torch.empty((sum(rc), *trailing), dtype=dtype, device=self.device)
        work = None
        if self.world_size > 1:
            work = self._timed(lambda: self._all_to_all_single(
                out, flat, rc, send_counts, async_op=True))
        else:
            out.copy_(flat)
        row_bytes = flat.element_size() * (int(torch.tensor(trailing).prod()) if trailing else 1)
        sent = sum(c for r, c in enumerate(send_counts) if r != self.rank)
        got = sum(c for r, c in enumerate(rc) if r != self.rank)
        self.stats.rows_sent += sent
        self.stats.rows_recv += got
        self.stats.bytes_sent += sent * row_bytes + extra_bytes
        self.stats.bytes_recv += got * row_bytes + extra_bytes
        return PendingAllToAll(self, work, out, rc)

    # --------------------------------------------------------------- reductions
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place; op in sum | mean | max | min."""
        if self.world_size == 1:
            return tensor
        self._timed(lambda: self._all_reduce(tensor, "sum" if op == "mean" else op))
        nbytes = tensor.numel() * tensor.element_size()
        self.stats.bytes_sent += nbytes
        self.stats.bytes_recv += nbytes
        if op == "mean":
            tensor /= self.world_size
        return tensor

    def start_all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> "PendingAllReduce":
        """all_reduce (sum | mean) posted without waiting; `.wait()` gives the tensor,
        reduced in place. Issue the same posts in the same order on every rank."""
        work = None
        if self.world_size > 1:
            work = self._timed(lambda: self._all_reduce(tensor, "sum", async_op=True))
            nbytes = tensor.numel() * tensor.element_size()
            self.stats.bytes_sent += nbytes
            self.stats.bytes_recv += nbytes
        return PendingAllReduce(self, work, tensor, self.world_size if op == "mean" else 1)

    def gradient_sync(self, parameters, op: str = "mean", bucket_bytes: int = 4 << 20,
                      overlap: bool = True) -> "GradientSync":
        """The one gradient sync of every mode (see GradientSync)."""
        return GradientSync(self, parameters, op, bucket_bytes, overlap)

    def all_reduce_gradients(self, parameters, op: str = "mean") -> None:
        """All-reduce the gradients already computed (no overlap), in one call."""
        self.gradient_sync(parameters, op, overlap=False).finish()

    def all_gather_object(self, obj) -> list:
        if self.world_size == 1:
            return [obj]
        return self._timed(lambda: self._all_gather_object(obj))

    def broadcast_object(self, obj, src: int = 0):
        if self.world_size == 1:
            return obj
        return self._timed(lambda: self._broadcast_object(obj, src))

    def barrier(self) -> None:
        if self.world_size > 1:
            self._timed(self._barrier)

    # --------------------------------------------------------------- transport
    # The only methods that move bytes; a stand-in transport (gnnsys.distributed.local:
    # ranks as threads) overrides these and keeps every bit of the accounting above.
    def _all_to_all_single(self, out, flat, out_splits, in_splits, async_op=False):
        return dist.all_to_all_single(out, flat, output_split_sizes=out_splits,
                                      input_split_sizes=in_splits, group=self.group,
                                      async_op=async_op)

    def _all_reduce(self, tensor, op: str, async_op: bool = False):
        reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                     "min": dist.ReduceOp.MIN}[op]
        return dist.all_reduce(tensor, op=reduce_op, group=self.group, async_op=async_op)

    def _all_gather_object(self, obj) -> list:
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _broadcast_object(self, obj, src: int):
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def _barrier(self) -> None:
        dist.barrier(group=self.group)


class PendingAllToAll:
    """An all_to_all in flight (Communicator.start_all_to_all)."""

    def __init__(self, comm: Communicator, work, out: torch.Tensor, recv_counts: list[int]):
        self._comm, self._work, self._out, self._counts = comm, work, out, recv_counts

    def wait(self) -> list[torch.Tensor]:
        if self._work is not None:
            work, self._work = self._work, None
            t0 = time.perf_counter()
            work.wait()
            self._comm.stats.wait_s += time.perf_counter() - t0
        return list(self._out.split(self._counts))


class PendingAllReduce:
    """An all_reduce in flight (Communicator.start_all_reduce)."""

    def __init__(self, comm: Communicator, work, tensor: torch.Tensor, divisor: int):
        self._comm, self._work, self._tensor, self._divisor = comm, work, tensor, divisor

    def wait(self) -> torch.Tensor:
        if self._work is not None:
            work, self._work = self._work, None
            t0 = time.perf_counter()
            work.wait()
            self._comm.stats.wait_s += time.perf_counter() - t0
        if self._divisor > 1:
            self._tensor /= self._divisor
            self._divisor = 1
        return self._tensor


class GradientSync:
    """Gradients all-reduced in buckets while backward still runs (as DDP does).

    Parameters are grouped, in reverse order (backward produces the last layers'
    gradients first), into buckets of about `bucket_bytes` of one dtype. A hook on each
    parameter notes its gradient is ready; a bucket whose gradients are all ready is
    posted at once, but only after every earlier bucket, so all ranks post the same
    buckets in the same order even when a parameter is unused on one of them.
    `finish()` (after backward) posts what is left (a missing gradient counts as zeros),
    waits, and writes the reduced gradients back. op: `mean` of per-rank means or `sum`
    of shares of a global mean. `overlap=False` sets no hooks: everything is posted in
    `finish()` (for a backward that runs collectives of its own on the same group, whose
    order against the hooks' posts is not pinned). One backward per `finish()`: a bucket
    goes out as soon as its gradients exist, so gradients accumulated over several
    backward passes need `overlap=False`. With one worker it does nothing.

        sync = comm.gradient_sync(model.parameters(), "mean")
        loss.backward()          # buckets go out as their gradients appear
        sync.finish()            # then optimizer.step()
    """

    def __init__(self, comm: Communicator, parameters, op: str, bucket_bytes: int,
                 overlap: bool = True):
        self.comm, self.op = comm, op
        self.buckets: list[list] = []
        self._hooks: list = []
        self._reset()
        if comm.world_size == 1:
            return
        params = [p for p in parameters if p.requires_grad][::-1]
        for dtype in dict.fromkeys(p.dtype for p in params):
            bucket, size = [], 0
            for p in (q for q in params if q.dtype == dtype):
                bucket.append(p)
                size += p.numel() * p.element_size()
                if size >= bucket_bytes:
                    self.buckets.append(bucket)
                    bucket, size = [], 0
            if bucket:
                self.buckets.append(bucket)
        self._bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        if overlap:
            self._hooks = [p.register_post_accumulate_grad_hook(self._ready)
                           for b in self.buckets for p in b]
        self._reset()

    def _reset(self) -> None:
        self._missing = [len(b) for b in self.buckets]
        self._posted: list = []            # (bucket, flat, pending) in posting order

    def _ready(self, param) -> None:
        self._missing[self._bucket_of[id(param)]] -= 1
        while len(self._posted) < len(self.buckets) and not self._missing[len(self._posted)]:
            self._post(len(self._posted))

    def _post(self, index: int) -> None:
        bucket = self.buckets[index]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in bucket])
        self._posted.append((bucket, flat, self.comm.start_all_reduce(flat, self.op)))

    def finish(self) -> None:
        """Post the buckets backward left (unused parameters), wait, write back."""
        for index in range(len(self._posted), len(self.buckets)):
            self._post(index)
        for bucket, flat, pending in self._posted:
            reduced = pending.wait()
            for p, g in zip(bucket, reduced.split([p.numel() for p in bucket])):
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.copy_(g.view_as(p))
        self._reset()

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
