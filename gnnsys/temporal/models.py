"""Memory-based temporal GNNs for link prediction: TGN, JODIE and APAN (TGL's variants).

A model has three parts, applied per batch in this order:
1. memory update from the stored memory and pending mail(s). TGN (GRU) and JODIE (RNN)
   depend only on the vertex's stored state, so they run once per *unique* vertex (a
   saving the dedup exchange makes possible) and are expanded afterwards; APAN attends
   over its mailbox at each root's query time, so it runs per root occurrence.
2. embedding of each root occurrence (src / dst / negative) at its query time: TGN:
   1-layer temporal attention over its sampled recent neighbours; JODIE: time projection
   of the memory; APAN: the memory itself. (`forward_roots` does 1 and 2.)
3. `score`: a link logit for (source embedding, candidate embedding) pairs.

The state itself (memory, mailbox, timestamps) lives outside the model, in the owner-
partitioned `MemoryStore`; models are plain torch and replicated on every worker.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..models.registry import archs
from .batch import slot_gaps, uses_neighbors
from .memory import RowLayout
from .slot_attention import slot_attention

ARCHS = archs("temporal")


class TimeEncoder(nn.Module):
    """phi(dt) = cos(w * dt + b), w initialised to 1 / 10^linspace(0, 9) as in TGN/TGL.

    On gaps only: callers subtract times in float64 (or pass a gap the host took in
    float64 and sent as float32: 6e-8 relative, whole seconds up to 2^24 s), so absolute
    Unix times never reach it. Phase and parameters stay float64, elementwise: gaps reach
    1e6-1e7 s, where a float32 phase is off by a tenth of a radian or more and its
    w-gradient sums cancelling terms of size dt. Measured on wikipedia (TGN, 5 epochs,
    seeds 0 and 1): a float32 phase and float32 parameters cost 0.006-0.009 test AP
    (0.9710 / 0.9681 against 0.9762 / 0.9774), more than the time it saves is worth."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.weight = nn.Parameter(torch.from_numpy(1.0 / 10 ** np.linspace(0, 9, dim)))
        self.bias = nn.Parameter(torch.zeros(dim, dtype=torch.float64))

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        return _CosineTimeEncoding.apply(dt, self.weight, self.bias)


class _CosineTimeEncoding(torch.autograd.Function):
    """cos(w * dt + b) in float64, returned as float32, with a hand-written backward: the
    same float64 arithmetic as autograd's, in a third fewer passes over [slots, dim]
    (no separate negation and products). dt is data: it gets no gradient."""

    @staticmethod
    def forward(ctx, dt, weight, bias):
        dt = dt.double().unsqueeze(-1)
        phase = torch.addcmul(bias, dt, weight)
        ctx.save_for_backward(dt, phase)
        return torch.cos(phase).float()

    @staticmethod
    def backward(ctx, grad):
        dt, phase = ctx.saved_tensors
        minus_grad_phase = grad.double().mul_(torch.sin(phase))    # d cos = -sin
        flat = minus_grad_phase.reshape(-1, phase.shape[-1])
        return None, -(flat * dt.reshape(-1, 1)).sum(0), -flat.sum(0)


class RecurrentUpdater(nn.Module):
    """TGN (GRU) / JODIE (RNN): s' = cell([mail || phi(mail_ts - mem_ts)], s) if mail pending.

    The cell's input projection is applied to the mail and to phi separately (the same
    weights, split by column): the mail and the memory are data, so the backward then
    computes no gradient for the mail's 200 columns, only for phi's."""

    def __init__(self, memory_dim: int, mail_dim: int, time_dim: int, cell: str):
        super().__init__()
        self.time_encoder = TimeEncoder(time_dim)
        cls = {"gru": nn.GRUCell, "rnn": nn.RNNCell}[cell]
        self.cell = cls(mail_dim + time_dim, memory_dim)
        self.mail_dim = mail_dim

    def forward(self, memory, mem_ts, mailbox, mail_ts):
        latest = mail_ts.argmax(1)                           # the newest slot of the ring
        rows = torch.arange(len(mailbox), device=mailbox.device)
        mail, ts = mailbox[rows, latest], mail_ts[rows, latest]
        pending = ts >= 0
        dt = (ts - mem_ts).clamp(min=0)
        updated = self._cell(mail, self.time_encoder(dt), memory)
        return torch.where(pending.unsqueeze(1), updated, memory)

    def _cell(self, mail, phi, memory):
        """nn.GRUCell / nn.RNNCell (tanh) of [mail || phi] and memory, PyTorch's gate
        formulas, with the input projection split between mail and phi."""
        cell, m = self.cell, self.mail_dim
        gi = F.linear(mail, cell.weight_ih[:, :m]) + F.linear(phi, cell.weight_ih[:, m:],
                                                             cell.bias_ih)
        gh = F.linear(memory, cell.weight_hh, cell.bias_hh)
        if isinstance(cell, nn.RNNCell):
            return torch.tanh(gi + gh)
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        candidate = torch.tanh(i_n + reset * h_n)
        return candidate + update * (memory - candidate)      # (1 - z) n + z h


class MailboxAttentionUpdater(nn.Module):
    """APAN: s' = LayerNorm(s + attention(query = s, keys/values = mails + phi(t - mail_ts)))
    at each root's query time t (TGL's transformer updater), so it runs per occurrence.
    Keys and values are projections of the slots [mail || phi], applied where they are
    cheapest, as in AttentionEmbedding: W_k onto each root's query, W_v after the
    weighted sum (per root instead of per mailbox slot; the same function)."""

    def __init__(self, memory_dim: int, mail_dim: int, time_dim: int, heads: int,
                 dropout: float):
        super().__init__()
        self.time_encoder = TimeEncoder(time_dim)
        self.attention = MultiHeadAttention(memory_dim, heads, dropout)
        self.query = nn.Linear(memory_dim, memory_dim)
        # no key bias: softmax ignores a shift shared by all slots, so its gradient is 0
        self.key_value = nn.Linear(mail_dim + time_dim, 2 * memory_dim, bias=False)
        self.value_bias = nn.Parameter(torch.zeros(memory_dim))
        self.norm = nn.LayerNorm(memory_dim)

    def forward(self, memory, mailbox, mail_ts, query_time, draws=None):
        """draws: [R, m, heads] dropout draws (`MultiHeadAttention.weights`)."""
        valid = mail_ts >= 0                                 # [R, m] filled slots
        age = (query_time.unsqueeze(1) - mail_ts).clamp(min=0)
        slots = torch.cat([mailbox, self.time_encoder(age)], 2)          # [R, m, Z]
        heads, head_dim = self.attention.heads, self.attention.head_dim
        q = self.query(memory).view(-1, heads, head_dim)
        weights = self.attention.weights(
            self.attention.projected_dots(q, slots, self.key_value.weight), valid, draws)
        # sum_j a_j (W_v z_j + b) = W_v (sum_j a_j z_j) + b sum_j a_j (dropout: sum != 1)
        attended = self.attention.projected_values(weights, slots, self.key_value.weight) + \
            weights.sum(1).unsqueeze(-1) * self.value_bias.view(heads, head_dim)
        out = self.norm(memory + self.attention.project(attended, valid))
        return torch.where(valid.any(1, keepdim=True), out, memory)


class MultiHeadAttention(nn.Module):
    """The steps of multi-head attention of one projected query over k masked slots, with
    an output projection; a query with no valid slot gets zero (TGN zeroes neighbourless
    nodes' attention output). Callers compose them so that each projection is applied
    where it is cheapest (per unique vertex, or per root instead of per slot)."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention width {dim} is not divisible by {heads} heads; "
                             "change model.heads or the temporal dims")
        self.heads, self.head_dim = heads, dim // heads
        self.out = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def key_onto_query(self, q, weight):
        """W_k^T q per head, W_k the key half of `weight` [2 * dim, Z] (key rows, then
        value rows): q [n, heads, head_dim] -> [n, heads, Z], so that q . (W_k z) =
        (W_k^T q) . z for any slot z."""
        w_key = weight.view(2, self.heads, self.head_dim, -1)[0]
        return torch.einsum("nhd,hdz->nhz", q, w_key)

    def value_after_sum(self, summed, weight):
        """W_v applied per head to weighted sums of slots [n, heads, Z], W_v the value half
        of `weight`: sum_j a_j W_v z_j = W_v (sum_j a_j z_j) -> [n, heads, head_dim]."""
        w_value = weight.view(2, self.heads, self.head_dim, -1)[1]
        return torch.einsum("nhz,hdz->nhd", summed, w_value)

    def projected_dots(self, q, slots, weight):
        """q . (W_k z_j) for every slot z_j, computed as (W_k^T q) . z_j, so W_k meets each
        query once instead of every slot. q [n, heads, head_dim], slots [n, k, Z] ->
        [n, k, heads]."""
        return torch.einsum("nkz,nhz->nkh", slots, self.key_onto_query(q, weight))

    def projected_values(self, weights, slots, weight):
        """sum_j a_j W_v z_j per head, computed as W_v (sum_j a_j z_j), so W_v meets each
        query once instead of every slot. weights [n, k, heads], slots [n, k, Z] ->
        [n, heads, head_dim]."""
        return self.value_after_sum(torch.einsum("nkh,nkz->nhz", weights, slots), weight)

    def weights(self, dots, mask, draws=None):
        """Attention weights [n, k, heads] from query-key dot products [n, k, heads]:
        scaled, masked, softmaxed over the slots, dropped out (by `draws` [n, k, heads]
        where given, else by torch's generator)."""
        n = mask.shape[0]
        logits = (dots / math.sqrt(self.head_dim)).masked_fill(~mask.unsqueeze(-1), float("-inf"))
        # rows without any valid slot would softmax to NaN: give them a dummy zero row
        logits = torch.where(mask.any(1).view(n, 1, 1), logits, torch.zeros_like(logits))
        weights = torch.softmax(logits, dim=1)
        return self.dropout(weights) if draws is None else weights * self.keep(draws)

    def keep(self, draws: torch.Tensor) -> torch.Tensor:
        """Dropout's multipliers from uniform draws in [0, 1): 0 where a draw is below p,
        else 1 / (1 - p), as nn.Dropout; the caller chooses the draws (`dropout_draws`:
        the same for any worker count). Draws are given in training only."""
        p = self.dropout.p
        return (draws >= p).to(draws.dtype) / (1 - p)

    def project(self, attended, mask):
        """Output projection of the per-head weighted sums [n, heads, head_dim]; a query
        without valid slots gets zero."""
        out = self.out(attended.reshape(len(attended), self.heads * self.head_dim))
        return out * mask.any(1).unsqueeze(1)


class AttentionEmbedding(nn.Module):
    """TGN's graph attention layer: attend from [x_r || phi(0)] to the sampled neighbours
    [x_n || e_rn || phi(t - t_rn)], then merge with x_r through a 2-layer MLP.

    The key/value projection of a concatenation is a sum of projections of its parts, and
    each part is applied where it is cheapest (the same function, summed in another order):
    - the vertex part once per unique vertex, gathered per slot;
    - the time part never per slot: a key's time part enters only through q . W_k phi =
      (W_k^T q) . phi, so W_k goes onto the root's query; a value's through
      sum_j a_j W_v phi_j = W_v sum_j a_j phi_j, so W_v goes after the weighted sum.
      Per batch that is ~600 roots instead of ~6,000 slots through each projection.
    On CPU the per-slot part is one fused kernel that never evaluates phi per slot
    (`slot_attention`); on other devices the same function runs as tensor operations."""

    def __init__(self, memory_dim: int, edge_dim: int, time_dim: int, out_dim: int, heads: int,
                 dropout: float):
        super().__init__()
        self.time_encoder = TimeEncoder(time_dim)
        self.query = nn.Linear(memory_dim + time_dim, out_dim)
        # no key bias: softmax ignores a shift shared by all slots, so its gradient is 0
        # (only float noise, which Adam would blow up into real steps)
        self.kv_vertex = nn.Linear(memory_dim, 2 * out_dim, bias=False)
        self.value_bias = nn.Parameter(torch.zeros(out_dim))
        self.kv_time = nn.Linear(time_dim, 2 * out_dim, bias=False)
        self.kv_edge = nn.Linear(edge_dim, 2 * out_dim, bias=False) if edge_dim else None
        self.attention = MultiHeadAttention(out_dim, heads, dropout)
        self.merge = nn.Sequential(nn.Linear(out_dim + memory_dim, out_dim), nn.ReLU(),
                                   nn.Linear(out_dim, out_dim))

    def forward(self, x, root_index, neighbors, draws=None):
        """neighbors: the filled slots only (`batch.to_device`); an empty slot is never
        projected: it stays zero and the attention masks it out. draws: [n, k, heads]
        dropout draws (`MultiHeadAttention.weights`)."""
        mask = neighbors["mask"]
        n = mask.shape[0]
        heads, head_dim = self.attention.heads, self.attention.head_dim
        x_root = x.index_select(0, root_index)     # index_select: its backward is index_add
        # query of [x || phi(0)]: the phi(0) part is one vector shared by every root
        m = x.shape[1]
        zero = self.time_encoder(torch.zeros(1, dtype=torch.float64, device=x.device))
        query = F.linear(x_root, self.query.weight[:, :m]) + \
            F.linear(zero, self.query.weight[:, m:], self.query.bias)
        q = query.view(n, heads, head_dim)
        kv, row = self.kv_vertex(x), neighbors["row"]
        if self.kv_edge is not None:               # per slot: each slot has its own edge
            kv, row = kv.index_select(0, row) + self.kv_edge(neighbors["edge"]), None
        attend = self._fused if fused_kernel_on(x.device) else self._tensor_ops
        attended = attend(q, kv, row, neighbors, draws)
        return self.merge(torch.cat([self.attention.project(attended, mask), x_root], 1))

    def _fused(self, q, kv, row, neighbors, draws):
        heads, head_dim = self.attention.heads, self.attention.head_dim
        if row is None:
            row = torch.arange(len(kv), device=kv.device)
        qt = self.attention.key_onto_query(q, self.kv_time.weight)
        keep = self.attention.dropout(q.new_ones(len(row), heads)) if draws is None else \
            self.attention.keep(draws.reshape(-1, heads)[neighbors["slot"]])
        out_v, phisum, wsum = slot_attention(q.contiguous(), qt.contiguous(), kv.contiguous(),
                                             self.time_encoder, neighbors["root_tau"],
                                             neighbors["neighbor_tau"], neighbors["indptr"], row,
                                             neighbors["tidx"], neighbors["ridx"], keep)
        return out_v + wsum.unsqueeze(-1) * self.value_bias.view(heads, head_dim) + \
            self.attention.value_after_sum(phisum, self.kv_time.weight)

    def _tensor_ops(self, q, kv, row, neighbors, draws):
        mask = neighbors["mask"]
        n, k = mask.shape
        heads, head_dim = self.attention.heads, self.attention.head_dim

        def dense(filled):                         # [filled slots, ...] -> [n, k, ...]
            return filled.new_zeros(n * k, *filled.shape[1:]) \
                .index_copy(0, neighbors["slot"], filled).view(n, k, *filled.shape[1:])

        vertex = kv if row is None else kv.index_select(0, row)
        key, value = dense(vertex).view(n, k, 2, heads, head_dim).unbind(2)
        phi = dense(self.time_encoder(slot_gaps(neighbors)))             # [n, k, T]
        weights = self.attention.weights(
            (q.unsqueeze(1) * key).sum(-1)
            + self.attention.projected_dots(q, phi, self.kv_time.weight), mask, draws)
        value = value + self.value_bias.view(heads, head_dim)
        return (weights.unsqueeze(-1) * value).sum(1) + \
            self.attention.projected_values(weights, phi, self.kv_time.weight)


def fused_kernel_on(device: torch.device) -> bool:
    """Whether TGN's attention runs as `slot_attention`'s kernel (numba, CPU only)."""
    return device.type == "cpu"


class TimeProjection(nn.Module):
    """JODIE: h = s * (1 + w * dt / time_scale), dt = query time - last update."""

    def __init__(self, memory_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(memory_dim) / math.sqrt(memory_dim))

    def forward(self, root_memory, dt_scaled):
        return root_memory * (1 + dt_scaled.float().unsqueeze(1) * self.weight)


class PairHistoryEncoder(nn.Module):
    """What the pair itself did before (`temporal.pair_history`): [log(1 + count) || met ||
    log(1 + events of each end since they last met) || phi(gap since then)], all but met
    zero if they never met. Memory and attention embed each endpoint on its own, so
    without it the scorer cannot ask "did these two meet before, and when", the question
    EdgeBank's memorisation answers on graphs made mostly of repeated pairs; the events
    since ask "has either moved on", on the ends' own clocks (0: this pair was the
    source's latest event), where a gap in seconds means one thing for a busy node and
    another for a quiet one."""

    def __init__(self, time_dim: int):
        super().__init__()
        self.time_encoder = TimeEncoder(time_dim)
        self.dim = time_dim + 4

    def forward(self, count, gap, since_src, since_dst):
        met = (count > 0).float().unsqueeze(-1)
        return torch.cat([torch.log1p(count).unsqueeze(-1), met,
                          torch.log1p(since_src).unsqueeze(-1) * met,
                          torch.log1p(since_dst).unsqueeze(-1) * met,
                          self.time_encoder(gap) * met], -1)


class LinkPredictor(nn.Module):
    """TGN's merge layer: logit = W2 relu(W1 [h_src || h_dst (|| pair history)])."""

    def __init__(self, dim: int, pair_dim: int = 0):
        super().__init__()
        self.hidden = nn.Linear(2 * dim + pair_dim, dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, h_src, h_dst, pair=None):
        parts = [h_src, h_dst] if pair is None else [h_src, h_dst, pair]
        return self.out(F.relu(self.hidden(torch.cat(parts, -1)))).squeeze(-1)


class TemporalLinkModel(nn.Module):
    """One of TGN / JODIE / APAN; the memory state is passed in, never held."""

    def __init__(self, arch: str, memory_dim: int, mail_dim: int, edge_dim: int, time_dim: int,
                 embedding_dim: int, heads: int, dropout: float, node_feat_dim: int = 0,
                 time_scale: float = 1.0, pair_history: bool = False):
        super().__init__()
        self.arch = arch
        self.time_scale = float(time_scale)
        self.uses_neighbors = uses_neighbors(arch)
        if arch == "apan":
            self.updater = MailboxAttentionUpdater(memory_dim, mail_dim, time_dim, heads, dropout)
        else:
            self.updater = RecurrentUpdater(memory_dim, mail_dim, time_dim,
                                            "gru" if arch == "tgn" else "rnn")
        # static node features join the memory through a projection (TGL adds them)
        self.node_proj = nn.Linear(node_feat_dim, memory_dim) if node_feat_dim else None
        if arch == "tgn":
            self.embedding = AttentionEmbedding(memory_dim, edge_dim, time_dim, embedding_dim,
                                                heads, dropout)
            out_dim = embedding_dim
        else:
            self.embedding = TimeProjection(memory_dim) if arch == "jodie" else None
            out_dim = memory_dim
        self.pair_encoder = PairHistoryEncoder(time_dim) if pair_history else None
        self.predictor = LinkPredictor(out_dim, self.pair_encoder.dim if pair_history else 0)

    def node_input(self, memory, node_feat):
        if self.node_proj is None or node_feat is None:
            return memory
        return memory + self.node_proj(node_feat)

    def forward_roots(self, state: dict, root_index: torch.Tensor, root_time: torch.Tensor,
                      neighbors: dict | None, num_written: int, dropout_draws=None):
        """Embeddings of the roots and the new memory of the first `num_written` roots.

        state: unpacked rows of the batch's unique vertices (memory, mem_ts, mailbox,
        mail_ts, node_feat); root_index: row of each root; root_time: float64 seconds;
        neighbors: TGN's filled slots (`batch.to_device`) plus their edge features `edge`;
        dropout_draws: in training, [R, slots, heads] uniform draws for the attention's
        dropout (`batch.dropout_draws`; slots: TGN's neighbours, APAN's mailbox), None:
        torch's generator draws.
        Returns (h [R, D], memory [num_written, M], memory_ts [num_written])."""
        if self.arch == "apan":
            memory = self.updater(state["memory"][root_index], state["mailbox"][root_index],
                                  state["mail_ts"][root_index], root_time, dropout_draws)
            feat = None if state["node_feat"] is None else state["node_feat"][root_index]
            return (self.node_input(memory, feat), memory[:num_written],
                    root_time[:num_written])
        # TGN / JODIE: the update depends only on stored state: once per unique vertex
        memory = self.updater(state["memory"], state["mem_ts"], state["mailbox"],
                              state["mail_ts"])
        newest = state["mail_ts"].amax(1)
        # the time the updated memory is "as of": its newest mail, else the old stamp
        memory_ts = torch.where(newest >= 0, newest, state["mem_ts"])
        x = self.node_input(memory, state["node_feat"])
        if self.arch == "tgn":
            h = self.embedding(x, root_index, neighbors, dropout_draws)
        else:
            dt = (root_time - memory_ts[root_index]).clamp(min=0) / self.time_scale
            h = self.embedding(x[root_index], dt)
        written = root_index[:num_written]
        return h, memory[written], memory_ts[written]

    def score(self, h_src, h_dst, pair=None):
        """pair: `encode_pairs` of the scored pairs, with `temporal.pair_history`."""
        return self.predictor(h_src, h_dst, pair)

    def score_all(self, h_src: torch.Tensor, h_cand: torch.Tensor, met: tuple | None = None,
                  max_elements: int = 1 << 22) -> torch.Tensor:
        """Logits [b, C] of every pair (source i, candidate c): what `score` gives it, by the
        merge layer's first matrix in parts (W [h_s || h_c || p] = W_s h_s + W_c h_c + W_p p),
        candidates in chunks so that no [b, chunk, hidden] tensor exceeds `max_elements`.
        With pair history, a pair that never met has the zero pair feature (count 0), so
        only the pairs in `met` = (rows, cols, count, gap) that met add their own."""
        hidden, out = self.predictor.hidden, self.predictor.out
        d, w = h_src.shape[1], hidden.weight
        a = h_src @ w[:, :d].T + hidden.bias
        c = h_cand @ w[:, d:2 * d].T
        scores = torch.empty(len(a), len(c), dtype=a.dtype, device=a.device)
        step = max(1, max_elements // max(1, len(a) * a.shape[1]))
        for lo in range(0, len(c), step):
            scores[:, lo:lo + step] = out(F.relu(a[:, None] + c[None, lo:lo + step])).squeeze(-1)
        if met is not None and self.pair_encoder is not None and len(met[0]):
            rows, cols = met[:2]
            p = self.pair_encoder(*met[2:]) @ w[:, 2 * d:].T
            scores[rows, cols] = out(F.relu(a[rows] + c[cols] + p)).squeeze(-1)
        return scores

    def encode_pairs(self, pairs: tuple | None):
        """(count, gap) of the batch's scored pairs -> their features (None if not used)."""
        if self.pair_encoder is None or pairs is None:
            return None
        return self.pair_encoder(*pairs)


def row_layout(config, events) -> RowLayout:
    """What one vertex's memory / mailbox row holds for this config and event stream."""
    tc = config.temporal
    mailbox = tc.mailbox_size or (10 if config.model.arch == "apan" else 1)
    return RowLayout(memory_dim=tc.memory_dim, mail_dim=2 * tc.memory_dim + events.edge_dim,
                     mailbox_size=mailbox, node_feat_dim=events.node_feat_dim)


def dropout_draw_shape(config, layout: RowLayout) -> tuple[int, int] | None:
    """(slots, heads) of each root's attention dropout draws in a training step
    (`batch.dropout_draws`): TGN attends over its sampled neighbours, APAN over its
    mailbox; None without dropout or attention (JODIE)."""
    arch, tc = config.model.arch, config.temporal
    if not config.model.dropout or arch == "jodie":
        return None
    return (tc.num_neighbors if arch == "tgn" else layout.mailbox_size), config.model.heads


def build_model(config, events) -> TemporalLinkModel:
    tc = config.temporal
    return TemporalLinkModel(config.model.arch, tc.memory_dim, 2 * tc.memory_dim + events.edge_dim,
                             events.edge_dim, tc.time_dim, tc.embedding_dim, config.model.heads,
                             config.model.dropout, node_feat_dim=events.node_feat_dim,
                             time_scale=events.time_scale, pair_history=tc.pair_history)
