"""Adaptive bit-width assignment (AdaQP, ../shared/ALGORITHMS.md 4.3.4-4.3.5).

Three parts:

- `VarianceTracer`: the sender accumulates tau_u += (D/6)(M_u - m_u)^2 for every
  quantised row u, per message key and channel, over one assignment cycle;
- `profile_links`: an alpha-beta cost model (time_ms = alpha * MB + beta) of every
  ordered link, measured at start-up with dummy messages in ring-shift rounds;
- `solve_assignment`: per message key, the bi-objective MILP over groups of rows,
      minimise  lam * (variance - V_utopia)/(V_nadir - V_utopia)
              + (1 - lam) * (sum_r Z_r - T_utopia)/(T_nadir - T_utopia)
      Z_r >= alpha_ij * MB_ij(x) + beta_ij   for every link i -> j = (i + r) mod K,
  solved with scipy.optimize.milp (HiGHS).

`AdaptiveAssigner` ties them to a running job: gather the traced weights
beta_u^2 * tau_u on every rank, solve on rank 0, broadcast the bits to everyone.
The backward messages are partial gradient sums that enter the owner's gradient once,
so their aggregation score is 1; the forward score is the receiver's sum of the edge
weights leaving u (computed from the global graph, see halo.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import Bounds, LinearConstraint, milp

from ..mode_choices import MODE_CHOICES
from .exchange import BitAssignment
from .quantize import PARAM_BYTES_PER_ROW

MB = 2 ** 20
QUANTIZATION_MODES = MODE_CHOICES["fullgraph.quantization.mode"]
MAX_PROFILE_BYTES = 16 * MB      # larger dummy messages add profiling time, not accuracy


class VarianceTracer:
    """tau per (key, peer): sum over the cycle of (D/6) * row range^2, per sent row."""

    def __init__(self):
        self.tau = {}

    def __call__(self, key: str, peer: int, row_range: torch.Tensor, dim: int) -> None:
        contribution = (dim / 6.0) * row_range.detach().cpu().double() ** 2
        slot = (key, peer)
        if slot in self.tau and self.tau[slot].shape == contribution.shape:
            self.tau[slot] += contribution
        else:
            self.tau[slot] = contribution.clone()

    def reset(self) -> None:
        self.tau = {}


# ----------------------------------------------------------------------------- cost model
@dataclass
class LinkCost:
    alpha_ms_per_mb: float
    beta_ms: float

    def time_ms(self, megabytes: float) -> float:
        return self.alpha_ms_per_mb * megabytes + self.beta_ms


def profile_range(smallest: int, largest: int, cap: int = MAX_PROFILE_BYTES) -> tuple[int, int]:
    """Dummy message sizes to time: the real range, capped at `cap` bytes and spanning at
    least 8x, so that the slope (alpha) and the intercept (beta) can be told apart."""
    high = max(8, min(largest, cap))
    return max(1, min(smallest, high // 8)), high


def fit_link_cost(megabytes: np.ndarray, times_ms: np.ndarray) -> LinkCost:
    """Least-squares alpha-beta fit; noise that tilts the slope below zero (a link is
    never faster for bigger messages) falls back to a flat cost at the fastest time."""
    if len(megabytes) > 1 and np.ptp(megabytes) > 0:
        alpha, beta = np.polyfit(megabytes, times_ms, 1)
        if alpha > 0:
            return LinkCost(float(alpha), max(float(beta), 0.0))
    return LinkCost(1e-6, float(np.min(times_ms)))


def profile_links(comm, min_bytes: int, max_bytes: int, points: int,
                  warmup: int = 3) -> dict:
    """Fit time_ms = alpha * MB + beta for every ordered link (i, j); all ranks call this.

    In round r every rank i sends a dummy message to (i + r) mod K (the rounds the MILP
    models); each rank times its own send. Returns {(i, j): LinkCost} on every rank."""
    world, rank = comm.world_size, comm.rank
    sizes = np.linspace(max(min_bytes, 1), max(max_bytes, min_bytes + 1), points).astype(np.int64)
    mine = {}
    for shift in range(1, world):
        peer = (rank + shift) % world

        def send(size: int) -> float:
            blocks = [torch.zeros(0, dtype=torch.uint8, device=comm.device)
                      for _ in range(world)]
            blocks[peer] = torch.zeros(int(size), dtype=torch.uint8, device=comm.device)
            start = time.perf_counter()
            comm.all_to_all(blocks)
            if comm.device.type == "cuda":      # NCCL returns before the bytes have moved
                torch.cuda.synchronize(comm.device)
            return (time.perf_counter() - start) * 1e3

        for _ in range(warmup):
            send(sizes[-1])
        times = np.array([send(s) for s in sizes])
        mine[(rank, peer)] = fit_link_cost(sizes / MB, times)
    links = {}
    for part in comm.all_gather_object(mine):
        links.update(part)
    return links


# ----------------------------------------------------------------------------- the MILP
@dataclass
class ChannelStats:
    """What the solver needs about one link's messages under one key."""
    weights: np.ndarray      # beta_u^2 * tau_u per row, in the sender's row order
    dim: int                 # message width D


def message_megabytes(bits: int, dim: int, rows) -> np.ndarray:
    return (bits * dim * np.asarray(rows, dtype=np.float64) / 8
            + PARAM_BYTES_PER_ROW * np.asarray(rows, dtype=np.float64)) / MB


def solve_assignment(channels: dict, links: dict, world_size: int, bits=(2, 4, 8),
                     group_size: int = 100, lam: float = 0.5,
                     time_limit_s: float = 30.0) -> tuple[dict, dict]:
    """Bits for every row of every channel {(i, j): ChannelStats} of one message key.

    Returns ({(i, j): int8 bits per row}, info) where info has the solver status and the
    modelled variance and round time of the chosen assignment."""
    bits = sorted(bits)
    levels = np.array([(2 ** b - 1) ** 2 for b in bits], dtype=np.float64)
    channel_keys = [c for c in sorted(channels) if len(channels[c].weights)]
    groups = []                     # (channel, row indices, group variance, group rows)
    for channel in channel_keys:
        weights = channels[channel].weights
        order = np.argsort(-weights, kind="stable")
        for start in range(0, len(order), group_size):
            rows = order[start:start + group_size]
            groups.append((channel, rows, float(weights[rows].sum()), len(rows)))
    result = {c: np.full(len(channels[c].weights), bits[-1], dtype=np.int8) for c in channels}
    if not groups:
        return result, {"status": "no messages"}

    n_groups, n_bits = len(groups), len(bits)
    rounds = sorted({(j - i) % world_size for i, j in channel_keys})
    round_col = {r: n_groups * n_bits + k for k, r in enumerate(rounds)}
    n_vars = n_groups * n_bits + len(rounds)
    variance = np.array([[g[2] / lv for lv in levels] for g in groups])         # [G, B]
    megabytes = np.array([[message_megabytes(b, channels[g[0]].dim, g[3]) for b in bits]
                          for g in groups])                                    # [G, B]

    def round_times(bit_index: int) -> float:
        per_round = {}
        for channel in channel_keys:
            mb = sum(megabytes[k, bit_index] for k, g in enumerate(groups) if g[0] == channel)
            r = (channel[1] - channel[0]) % world_size
            per_round[r] = max(per_round.get(r, 0.0), links[channel].time_ms(mb))
        return sum(per_round.values())

    v_utopia, v_nadir = variance[:, -1].sum(), variance[:, 0].sum()
    t_utopia, t_nadir = round_times(0), round_times(n_bits - 1)
    v_span = v_nadir - v_utopia if v_nadir - v_utopia > 0 else 1.0
    t_span = t_nadir - t_utopia if t_nadir - t_utopia > 0 else 1.0

    cost = np.zeros(n_vars)
    cost[:n_groups * n_bits] = lam * variance.reshape(-1) / v_span
    for col in round_col.values():
        cost[col] = (1 - lam) / t_span
    one_bit_each = sp.csr_matrix(
        (np.ones(n_groups * n_bits), (np.repeat(np.arange(n_groups), n_bits),
                                      np.arange(n_groups * n_bits))),
        shape=(n_groups, n_vars))
    rows, cols, vals, upper = [], [], [], []
    for c_index, channel in enumerate(channel_keys):
        link = links[channel]
        members = [k for k, g in enumerate(groups) if g[0] == channel]
        for k in members:
            for b in range(n_bits):
                rows.append(c_index)
                cols.append(k * n_bits + b)
                vals.append(link.alpha_ms_per_mb * megabytes[k, b])
        rows.append(c_index)
        cols.append(round_col[(channel[1] - channel[0]) % world_size])
        vals.append(-1.0)
        upper.append(-link.beta_ms)
    round_bound = sp.csr_matrix((vals, (rows, cols)), shape=(len(channel_keys), n_vars))
    integrality = np.r_[np.ones(n_groups * n_bits), np.zeros(len(rounds))]
    bounds = Bounds(np.zeros(n_vars), np.r_[np.ones(n_groups * n_bits),
                                            np.full(len(rounds), np.inf)])
    start = time.perf_counter()
    solution = milp(cost, integrality=integrality, bounds=bounds,
                    constraints=[LinearConstraint(one_bit_each, 1, 1),
                                 LinearConstraint(round_bound, -np.inf, upper)],
                    options={"time_limit": time_limit_s, "mip_rel_gap": 1e-4})
    info = {"status": solution.message, "solve_s": time.perf_counter() - start,
            "groups": n_groups, "variables": n_vars}
    if solution.x is None:           # no feasible point within the limit: keep max bits
        return result, info
    choice = solution.x[:n_groups * n_bits].reshape(n_groups, n_bits).argmax(axis=1)
    for k, (channel, rows_of_group, _, _) in enumerate(groups):
        result[channel][rows_of_group] = bits[choice[k]]
    info["variance_normalised"] = float((variance[np.arange(n_groups), choice].sum() - v_utopia)
                                        / v_span)
    info["modelled_round_ms"] = float(solution.x[n_groups * n_bits:].sum())
    return result, info


# ----------------------------------------------------------------------------- coordination
class AdaptiveAssigner:
    """Trace statistics during a cycle, then re-solve the bits of every message key."""

    def __init__(self, exchanger, comm, key_dims: dict, qcfg, links: dict):
        self.exchanger, self.comm = exchanger, comm
        self.key_dims = key_dims                   # message key -> width D
        self.qcfg, self.links = qcfg, links
        self.tracer = VarianceTracer()

    def _local_channels(self) -> dict:
        plan, rank = self.exchanger.plan, self.comm.rank
        out = {}
        for key, dim in self.key_dims.items():
            channels = {}
            for peer in range(self.comm.world_size):
                rows = self.exchanger.outgoing_rows(key, peer)
                if peer == rank or rows == 0:
                    continue
                tau = self.tracer.tau.get((key, peer))
                tau = np.zeros(rows) if tau is None else tau.numpy()
                score = plan.send_scores[peer] if key.startswith("forward") else np.ones(rows)
                channels[(rank, peer)] = ChannelStats(score ** 2 * tau, dim)
            out[key] = channels
        return out

    def reassign(self) -> tuple[BitAssignment, dict]:
        """Collective: every rank calls it; returns the new assignment and solve info."""
        gathered = self.comm.all_gather_object(self._local_channels())
        self.tracer.reset()
        solved = None
        if self.comm.rank == 0:
            per_key, infos = {}, {}
            for key in self.key_dims:
                channels = {}
                for part in gathered:
                    channels.update(part.get(key, {}))
                per_key[key], infos[key] = solve_assignment(
                    channels, self.links, self.comm.world_size, bits=self.qcfg.bits,
                    group_size=self.qcfg.group_size, lam=self.qcfg.lam,
                    time_limit_s=self.qcfg.solver_time_limit_s)
            solved = (per_key, infos)
        per_key, infos = self.comm.broadcast_object(solved, src=0)
        return BitAssignment(max(self.qcfg.bits), per_key), infos
