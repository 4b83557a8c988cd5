"""Boundary exchange of full-graph message passing, forward and backward.

`HaloExchanger` moves per-peer row blocks through `ctx.comm`'s all-to-all, either as fp32
or stochastically quantised to the bit-widths a `BitAssignment` gives each row (see
quantize.py for the wire format). `HaloAggregate` is the autograd Function of one
layer's aggregation over a partition:

    forward:  send H[send_idx[p]] to every peer p -> halo rows
              out = [central @ H ; marginal_local @ H + marginal_halo @ halo]
    backward: grad_halo = marginal_halo^T @ grad_marginal goes back to the owners, who add
              it to the rows they sent (the reverse exchange); the local parts are
              central^T @ grad_central + marginal_local^T @ grad_marginal.

Everything runs on the calling thread: an exchange is quantise (quantize_fast's numba
kernel on CPU, quantize_gpu's CUDA kernels on a GPU: the same bytes) -> post the
all-to-all asynchronously -> wait -> dequantise straight into the output rows. With
overlap on, the main thread computes the parts that need no remote rows between the
post and the wait while the backend (gloo's own threads, or NCCL's stream) moves the
bytes; with it off, it waits right after the post. A communication thread running the
quantiser (the first design) only competed with the central compute for the same core.
Dequantising comes after the central compute either way (AdaQP's event order, ../shared/ALGORITHMS.md
4.8). Tensors live on the exchanger's device; on a GPU every kernel runs on torch's current
stream (ordered after NCCL's receive) and AdaQP's separate "marginal" stream is not done here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .halo import HaloPlan
from . import quantize_fast
from .quantize import PARAM_BYTES_PER_ROW, SUPPORTED_BITS, message_order, packed_size
from .quantize_fast import group_counts, wire_size
from .spmm import spmm
from .timing import EpochTimers


def forward_key(layer: int) -> str:
    return f"forward{layer}"


def backward_key(layer: int) -> str:
    return f"backward{layer}"


class BitAssignment:
    """Bit-width of every message row: key -> (sender, receiver) -> int8 [rows].

    Channels without an explicit assignment use `default_bits` (uniform mode, and the
    first adaptive cycle before any statistics exist)."""

    def __init__(self, default_bits: int, per_channel: dict | None = None):
        self.default_bits = int(default_bits)
        self.per_channel = per_channel or {}

    def bits(self, key: str, sender: int, receiver: int, rows: int) -> np.ndarray:
        assigned = self.per_channel.get(key, {}).get((sender, receiver))
        if assigned is None:
            return np.full(rows, self.default_bits, dtype=np.int8)
        if len(assigned) != rows:
            raise RuntimeError(f"bit assignment for {key} {sender}->{receiver} has "
                               f"{len(assigned)} rows but the message has {rows}; the "
                               "assignment is stale (partition changed?)")
        return assigned

    def histogram(self) -> dict:
        """{key: {bits: rows}} over all channels, for the logs."""
        out = {}
        for key, channels in self.per_channel.items():
            counts = np.bincount(np.concatenate(list(channels.values()) or [np.zeros(0, int)])
                                 .astype(np.int64), minlength=9)
            out[key] = {int(b): int(counts[b]) for b in (2, 4, 8) if counts[b]}
        return out

    def state_dict(self) -> dict:
        return {"default_bits": self.default_bits,
                "per_channel": {k: {f"{s}->{r}": v.tolist() for (s, r), v in ch.items()}
                                for k, ch in self.per_channel.items()}}

    @classmethod
    def from_state_dict(cls, state: dict) -> "BitAssignment":
        per_channel = {}
        for key, channels in state["per_channel"].items():
            per_channel[key] = {tuple(int(x) for x in name.split("->")):
                                np.asarray(bits, dtype=np.int8)
                                for name, bits in channels.items()}
        return cls(state["default_bits"], per_channel)


class HaloExchanger:
    """All-to-all of per-peer row blocks, fp32 or quantised, with timing and tracing.

    quantize: None (always fp32) or a BitAssignment used for training exchanges.
    tracer: optional callable(key, peer, row_range, dim) fed the raw range of every
    quantised row sent (the adaptive assigner's statistics).

    An exchange is `start` (quantise, post the all-to-all) then `PendingExchange.finish`
    (wait, dequantise into the output rows); everything runs on the calling thread, and
    the backend moves the bytes in between. With `overlap` the caller computes between
    the two; without it the caller waits right after `start`."""

    def __init__(self, plan: HaloPlan, comm, timers: EpochTimers, *,
                 assignment: BitAssignment | None = None, overlap: bool = False,
                 seed: int = 0, tracer=None, device=None):
        self.plan, self.comm, self.timers = plan, comm, timers
        self.assignment = assignment
        self.overlap = overlap
        self.tracer = tracer
        self.rank, self.world_size = plan.rank, plan.world_size
        # A private generator: quantisation noise must not shift the dropout stream. It
        # only draws one host integer per message (the kernels' noise seed), so it lives on
        # the host on every device: CPU and GPU runs draw the same seeds.
        self.device = torch.device(device or "cpu")
        self.generator = torch.Generator().manual_seed(seed * 7919 + self.rank)
        self.codec = _codec(self.device)
        # Rows per peer: forward sends inner rows and fills halo slots; backward the reverse.
        self.send_rows = [np.asarray(idx, dtype=np.int64) for idx in plan.send_idx]
        self.halo_rows = [np.arange(a, b, dtype=np.int64) for a, b in plan.recv_ranges]
        self._index = {}           # (id of a rows array) -> the same as a device tensor
        self._layouts = {}         # (key, sender, receiver) -> WireLayout
        self.bytes_by_bits: dict[str, int] = {}    # bytes sent per bit-width (32: fp32)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def take_bytes_by_bits(self) -> dict:
        """Bytes sent since the last call, per bit-width ('2', '4', '8'; '32' unquantised)."""
        out, self.bytes_by_bits = self.bytes_by_bits, {}
        return out

    def _count(self, bits: int, nbytes: int) -> None:
        if nbytes:
            self.bytes_by_bits[str(bits)] = self.bytes_by_bits.get(str(bits), 0) + int(nbytes)

    def _rows(self, key: str):
        """(rows I send from, rows I receive into) per peer for this key."""
        if key.startswith("forward"):
            return self.send_rows, self.halo_rows
        return self.halo_rows, self.send_rows

    def _tensor(self, rows: np.ndarray) -> torch.Tensor:
        index = self._index.get(id(rows))
        if index is None:
            index = self._index[id(rows)] = torch.from_numpy(rows).to(self.device)
        return index

    def _layout(self, key: str, sender: int, receiver: int, rows: np.ndarray) -> "WireLayout":
        """The wire layout of one channel whose message carries `rows` (my rows: sent from
        or received into), recomputed only when the assignment changes."""
        slot = (key, sender, receiver)
        cached = self._layouts.get(slot)
        if cached is None or cached.assignment is not self.assignment \
                or len(cached.order) != len(rows):
            bits = self.assignment.bits(key, sender, receiver, len(rows))
            order = message_order(bits)
            wire_rows = rows[order]
            cached = self._layouts[slot] = WireLayout(
                self.assignment, order, group_counts(bits[order]),
                wire_rows if self.device.type == "cpu" else torch.from_numpy(wire_rows).to(
                    self.device), torch.from_numpy(order).to(self.device))
        return cached

    # ----------------------------------------------------------------- the exchange
    def start(self, source: torch.Tensor, key: str, quantized: bool) -> "PendingExchange":
        """Send this key's rows of `source` [*, D] to every peer; returns at once."""
        quantized = quantized and self.assignment is not None
        outgoing, incoming = self._rows(key)
        dim = source.shape[1]
        if not quantized:
            with self.timers.measure("comm"):
                blocks = [source[self._tensor(rows)] for rows in outgoing]
                self._count(32, sum(b.numel() * b.element_size()
                                    for peer, b in enumerate(blocks) if peer != self.rank))
                pending = self.comm.start_all_to_all(blocks, [len(r) for r in incoming])
            return PendingExchange(self, pending, key, False, dim)
        source = source.detach()
        with self.timers.measure("quant"):
            payloads, sizes = [], []
            for peer in range(self.world_size):
                if peer == self.rank or len(outgoing[peer]) == 0:
                    payloads.append(torch.zeros(0, dtype=torch.uint8, device=self.device))
                else:
                    payloads.append(self._encode(source, key, peer, outgoing[peer], dim))
                rows = incoming[peer]
                sizes.append(0 if peer == self.rank or len(rows) == 0
                             else wire_size(self._layout(key, peer, self.rank, rows).counts, dim))
        with self.timers.measure("comm"):
            pending = self.comm.start_all_to_all(payloads, sizes)
        return PendingExchange(self, pending, key, True, dim)

    def _encode(self, source, key, peer, rows, dim) -> torch.Tensor:
        layout = self._layout(key, self.rank, peer, rows)
        for count, width in zip(layout.counts, SUPPORTED_BITS):
            self._count(width, packed_size(int(count), dim, width) + PARAM_BYTES_PER_ROW * count)
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=self.generator))
        payload, wire_range = self.codec.encode_rows(source, layout.wire_rows, layout.counts,
                                                     seed)
        if self.tracer is not None:
            row_range = torch.empty_like(wire_range)
            row_range[layout.order_index] = wire_range
            self.tracer(key, peer, row_range, dim)
        return payload

    def _decode(self, payload, key, peer, rows, out, accumulate) -> None:
        layout = self._layout(key, peer, self.rank, rows)
        self.codec.decode_rows(payload, layout.counts, out.detach(), layout.wire_rows, accumulate)

    def outgoing_rows(self, key: str, peer: int) -> int:
        return len(self._rows(key)[0][peer])


@dataclass
class WireLayout:
    """How one channel's rows travel under one assignment (see quantize.message_order)."""
    assignment: BitAssignment
    order: np.ndarray               # wire position -> position in the channel's row list
    counts: np.ndarray              # rows at 2, 4, 8 bits
    wire_rows: object               # my rows in wire order: numpy (CPU) or a device tensor
    order_index: torch.Tensor       # `order` on the exchanger's device


def _codec(device: torch.device):
    """The quantise/dequantise kernels for tensors on `device` (the same bytes on each)."""
    if device.type == "cpu":
        return quantize_fast
    if device.type == "cuda":
        from . import quantize_gpu       # imports numba.cuda: only when a GPU is used
        return quantize_gpu
    raise ValueError(f"full-graph mode runs on cpu or cuda devices, not {device.type}")


class PendingExchange:
    """An exchange between `start` and `finish`."""

    def __init__(self, exchanger: HaloExchanger, pending, key: str, quantized: bool, dim: int):
        self.ex, self.pending, self.key, self.quantized, self.dim = \
            exchanger, pending, key, quantized, dim
        self.received = None

    def wait(self) -> None:
        """Block until the bytes are here (time counted as comm and as wait)."""
        if self.received is None:
            timers = self.ex.timers
            with timers.measure("comm"), timers.measure("wait"):
                self.received = self.pending.wait()

    def finish(self, out: torch.Tensor, accumulate: bool) -> torch.Tensor:
        """Write (or add) every received row into its row of `out` [*, D]; returns out."""
        self.wait()
        ex = self.ex
        incoming = ex._rows(self.key)[1]
        with ex.timers.measure("quant" if self.quantized else "comm"):
            for peer, block in enumerate(self.received):
                rows = incoming[peer]
                if peer == ex.rank or len(rows) == 0:
                    continue
                if self.quantized:
                    ex._decode(block, self.key, peer, rows, out, accumulate)
                else:       # the communicator's device (gloo: the CPU) to the model's
                    _put(out, ex._tensor(rows), block.to(out.device), accumulate)
        return out


def _put(out: torch.Tensor, index: torch.Tensor, rows: torch.Tensor, accumulate: bool) -> None:
    if accumulate:
        out.index_add_(0, index, rows)
    else:
        out[index] = rows


# ----------------------------------------------------------------------------- autograd
@dataclass
class AggregationStep:
    """Everything one layer's aggregation needs besides its input."""
    plan: HaloPlan
    exchanger: HaloExchanger
    layer: int
    quantized: bool                 # training exchange (quantised) or fp32 (evaluation)


class HaloAggregate(torch.autograd.Function):
    """out[inner] = sum over in-edges (u -> v) of w_uv * H[u], across partitions.

    Per direction: start the exchange, compute the part that needs no remote rows
    (overlap: while the bytes travel; no overlap: after they arrived), then decode the
    received rows and add their part."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, step: AggregationStep):
        plan, ex, timers = step.plan, step.exchanger, step.exchanger.timers
        ctx.step = step
        h = h.contiguous()
        if not ex.distributed:
            with timers.measure("central"):
                return spmm(plan.central.forward, h)
        pending = ex.start(h, forward_key(step.layer), step.quantized)
        if not ex.overlap:
            pending.wait()
        out = h.new_empty(plan.num_inner, h.shape[1])
        central, marginal = out[:plan.num_central], out[plan.num_central:]
        with timers.measure("central"):      # needs no remote rows
            spmm(plan.central.forward, h, central)
            spmm(plan.marginal_local.forward, h, marginal)
        halo = pending.finish(h.new_empty(plan.num_halo, h.shape[1]), accumulate=False)
        with timers.measure("marginal"):
            spmm(plan.marginal_halo.forward, halo, marginal, accumulate=True)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        step = ctx.step
        plan, ex, timers = step.plan, step.exchanger, step.exchanger.timers
        if not ctx.needs_input_grad[0]:
            return None, None
        grad_out = grad_out.contiguous()
        if not ex.distributed:
            with timers.measure("central"):
                return spmm(plan.central.transpose, grad_out), None
        grad_central, grad_marginal = grad_out[:plan.num_central], grad_out[plan.num_central:]
        with timers.measure("marginal"):
            grad_halo = spmm(plan.marginal_halo.transpose, grad_marginal)
        pending = ex.start(grad_halo, backward_key(step.layer), step.quantized)
        if not ex.overlap:
            pending.wait()
        with timers.measure("central"):
            grad_h = spmm(plan.central.transpose, grad_central)
            spmm(plan.marginal_local.transpose, grad_marginal, grad_h, accumulate=True)
        # the owners' partial sums for the rows I sent them
        return pending.finish(grad_h, accumulate=True), None


def halo_aggregate(h: torch.Tensor, step: AggregationStep) -> torch.Tensor:
    return HaloAggregate.apply(h, step)
