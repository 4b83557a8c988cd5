"""Boundary exchange of full-graph message passing, forward and backward.

`HaloExchanger` moves per-peer row blocks through `ctx.comm.all_to_all`, either as fp32
or stochastically quantised to the bit-widths a `BitAssignment` gives each row (see
quantize.py for the wire format). `HaloAggregate` is the autograd Function of one
layer's aggregation over a partition:

    forward:  send H[send_idx[p]] to every peer p -> halo rows
              out = [central @ H ; marginal_local @ H + marginal_halo @ halo]
    backward: grad_halo = marginal_halo^T @ grad_marginal goes back to the owners, who add
              it to the rows they sent (the reverse exchange); the local parts are
              central^T @ grad_central + marginal_local^T @ grad_marginal.

With overlap on, the exchange (quantise, all-to-all, dequantise) runs on a one-thread
executor while the main thread computes the parts that need no remote rows; the
collectives are issued only by that thread while it runs, so every rank still issues
them in the same order. Tensors live on the exchanger's device; on a GPU both threads
enqueue on the default CUDA stream (AdaQP's separate "marginal" stream is not done here).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from .halo import HaloPlan
from .quantize import decode_message, encode_message
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
    quantised row sent (the adaptive assigner's statistics)."""

    def __init__(self, plan: HaloPlan, comm, timers: EpochTimers, *,
                 assignment: BitAssignment | None = None, overlap: bool = False,
                 seed: int = 0, tracer=None, device=None):
        self.plan, self.comm, self.timers = plan, comm, timers
        self.assignment = assignment
        self.overlap = overlap
        self.tracer = tracer
        self.rank, self.world_size = plan.rank, plan.world_size
        # A private generator: quantisation noise must not shift the dropout stream,
        # and it runs on the communication thread.
        self.device = torch.device(device or "cpu")
        self.generator = torch.Generator(device=self.device).manual_seed(seed * 7919 + self.rank)
        self.send_index = [torch.from_numpy(idx.astype(np.int64)).to(self.device)
                           for idx in plan.send_idx]
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="halo-comm") if overlap else None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def submit(self, fn, *args):
        """Run fn(*args) on the communication thread (overlap) or inline; returns a getter."""
        if self._executor is None:
            value = fn(*args)
            return lambda: value
        future = self._executor.submit(fn, *args)
        return future.result

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # ----------------------------------------------------------------- the exchange
    def exchange(self, blocks: list, key: str, quantized: bool) -> list:
        """blocks[p] goes to peer p; returns the block each peer sent here (fp32)."""
        if not (quantized and self.assignment is not None):
            with self.timers.measure("comm"):
                return self.comm.all_to_all([b.contiguous() for b in blocks])
        dim = next((b.shape[1] for b in blocks if b.ndim == 2), 0)
        with self.timers.measure("quant"):
            payloads = []
            for peer, block in enumerate(blocks):
                if peer == self.rank or len(block) == 0:
                    payloads.append(torch.zeros(0, dtype=torch.uint8, device=self.device))
                    continue
                bits = self.assignment.bits(key, self.rank, peer, len(block))
                payload, row_range = encode_message(block.detach(), bits, self.generator)
                payloads.append(payload)
                if self.tracer is not None:
                    self.tracer(key, peer, row_range, dim)
        with self.timers.measure("comm"):
            received = self.comm.all_to_all(payloads)
        with self.timers.measure("quant"):
            out = []
            for peer, payload in enumerate(received):
                rows = self._incoming_rows(key, peer)
                if peer == self.rank or rows == 0:
                    out.append(torch.zeros(rows, dim, device=self.device))
                    continue
                bits = self.assignment.bits(key, peer, self.rank, rows)
                out.append(decode_message(payload, bits, dim))
        return out

    def _incoming_rows(self, key: str, peer: int) -> int:
        if key.startswith("forward"):
            return self.plan.recv_count(peer)      # peer fills my halo slots
        return len(self.plan.send_idx[peer])       # peer returns grads of rows I sent it

    def outgoing_rows(self, key: str, peer: int) -> int:
        if key.startswith("forward"):
            return len(self.plan.send_idx[peer])
        return self.plan.recv_count(peer)


# ----------------------------------------------------------------------------- autograd
def _spmm(op: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    rows, cols = op.shape
    if rows == 0 or cols == 0 or dense.shape[0] == 0:
        return dense.new_zeros(rows, dense.shape[1])
    return torch.sparse.mm(op, dense)


@dataclass
class AggregationStep:
    """Everything one layer's aggregation needs besides its input."""
    plan: HaloPlan
    exchanger: HaloExchanger
    layer: int
    quantized: bool                 # training exchange (quantised) or fp32 (evaluation)


class HaloAggregate(torch.autograd.Function):
    """out[inner] = sum over in-edges (u -> v) of w_uv * H[u], across partitions."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, step: AggregationStep):
        plan, ex, timers = step.plan, step.exchanger, step.exchanger.timers
        ctx.step = step
        h = h.contiguous()
        if not ex.distributed:
            with timers.measure("central"):
                return _spmm(plan.central.forward, h)
        blocks = [h[idx] for idx in ex.send_index]

        def receive_halo():
            received = ex.exchange(blocks, forward_key(step.layer), step.quantized)
            return torch.cat(received) if received else h.new_zeros(0, h.shape[1])

        halo_rows = ex.submit(receive_halo)
        with timers.measure("central"):      # needs no remote rows: overlaps the exchange
            central = _spmm(plan.central.forward, h)
            marginal = _spmm(plan.marginal_local.forward, h)
        with timers.measure("wait"):
            halo = halo_rows()
        if halo.shape[0] != plan.num_halo:
            raise RuntimeError(f"received {halo.shape[0]} halo rows, expected {plan.num_halo}")
        with timers.measure("marginal"):
            marginal = marginal + _spmm(plan.marginal_halo.forward, halo)
        return torch.cat([central, marginal])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        step = ctx.step
        plan, ex, timers = step.plan, step.exchanger, step.exchanger.timers
        if not ctx.needs_input_grad[0]:
            return None, None
        grad_out = grad_out.contiguous()
        if not ex.distributed:
            with timers.measure("central"):
                return _spmm(plan.central.transpose, grad_out), None
        grad_central, grad_marginal = grad_out[:plan.num_central], grad_out[plan.num_central:]
        with timers.measure("marginal"):
            grad_halo = _spmm(plan.marginal_halo.transpose, grad_marginal)
        blocks = [grad_halo[start:end] for start, end in plan.recv_ranges]
        returned = ex.submit(ex.exchange, blocks, backward_key(step.layer), step.quantized)
        with timers.measure("central"):
            grad_h = (_spmm(plan.central.transpose, grad_central)
                      + _spmm(plan.marginal_local.transpose, grad_marginal))
        with timers.measure("wait"):
            received = returned()
        with timers.measure("marginal"):
            for index, rows in zip(ex.send_index, received):
                if len(index):
                    grad_h.index_add_(0, index, rows)
        return grad_h, None


def halo_aggregate(h: torch.Tensor, step: AggregationStep) -> torch.Tensor:
    return HaloAggregate.apply(h, step)
