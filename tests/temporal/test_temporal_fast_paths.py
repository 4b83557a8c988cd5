"""The fast TGN / APAN attention and time encoder against their plain formulas: phi(0)
folded into the query bias, gathers by index_select, the query projected only for the
roots, key and value projections applied per root instead of per slot, and the fused CPU
kernel (`slot_attention`) with its angle-sum time tables."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

import pytest

from gnnsys.temporal import models
from gnnsys.temporal.batch import slot_gaps
from gnnsys.temporal.models import AttentionEmbedding, MailboxAttentionUpdater, TimeEncoder
from gnnsys.temporal.slot_attention import slot_attention


def plain_attention(attention, query, key, value, mask):
    """Masked multi-head attention over per-slot keys and values, written plainly (no
    dropout: the modules under test are in eval mode or have none)."""
    n, k = mask.shape
    heads, d = attention.heads, attention.head_dim
    logits = (query.view(n, 1, heads, d) * key.reshape(n, k, heads, d)).sum(-1) / math.sqrt(d)
    logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    any_valid = mask.any(1)
    logits = torch.where(any_valid.view(n, 1, 1), logits, torch.zeros_like(logits))
    weights = torch.softmax(logits, dim=1)
    out = (weights.unsqueeze(-1) * value.reshape(n, k, heads, d)).sum(1).reshape(n, heads * d)
    return attention.out(out) * any_valid.unsqueeze(1)


def plain_attention_embedding(module: AttentionEmbedding, x, root_index, neighbors):
    """AttentionEmbedding's formula written plainly: query of [x || phi(0)] for every
    vertex, then the roots' rows; float64 time encoding; gathers by indexing."""
    n, k = neighbors["mask"].shape
    phi = module.time_encoder
    zero = phi(torch.zeros(1)).expand(len(x), -1)
    query = module.query(torch.cat([x, zero], 1))[root_index]
    filled = module.kv_vertex(x)[neighbors["row"]] + module.kv_time(phi(slot_gaps(neighbors)))
    if module.kv_edge is not None:
        filled = filled + module.kv_edge(neighbors["edge"])
    kv = filled.new_zeros(n * k, filled.shape[1]).index_copy(0, neighbors["slot"], filled)
    key, value = kv.view(n, k, -1).chunk(2, -1)
    attended = plain_attention(module.attention, query, key, value + module.value_bias,
                               neighbors["mask"])
    return module.merge(torch.cat([attended, x[root_index]], 1))


def random_slots(roots: int, k: int, vertices: int, fill: float = 0.7, seed: int = 0):
    """Neighbour slots as `batch.to_device` ships them, with gaps up to ~1e6 s and
    neighbour times shared between slots (as repeated pairs make them)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(roots, k, generator=g) < fill
    mask[2] = False                                  # a root without neighbours
    slot = torch.from_numpy(np.flatnonzero(mask.numpy()))
    events = max(roots // 2, 1)
    neighbor_tau = -torch.rand(max(len(slot) // 2, 1), generator=g,
                               dtype=torch.float64).mul(1e6).round()
    return dict(mask=mask, slot=slot, row=torch.randint(0, vertices, (len(slot),), generator=g),
                indptr=torch.cat([torch.zeros(1, dtype=torch.long), mask.sum(1).cumsum(0)]),
                ridx=torch.randint(0, events, (roots,), generator=g),
                tidx=torch.randint(0, len(neighbor_tau), (len(slot),), generator=g),
                root_tau=torch.rand(events, generator=g, dtype=torch.float64).mul(3e3).round(),
                neighbor_tau=neighbor_tau, edge=None)


@pytest.mark.parametrize("edge_dim", [0, 4], ids=["no-edge-features", "edge-features"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused-kernel", "tensor-ops"])
def test_attention_embedding_matches_the_plain_formula(fused, edge_dim, monkeypatch):
    monkeypatch.setattr(models, "fused_kernel_on", lambda device: fused)
    torch.manual_seed(1)
    module = AttentionEmbedding(memory_dim=6, edge_dim=edge_dim, time_dim=8, out_dim=6,
                                heads=2, dropout=0.1).eval()
    with torch.no_grad():
        module.time_encoder.bias.normal_()
        module.value_bias.normal_()
    vertices, roots, k = 7, 5, 3
    neighbors = random_slots(roots, k, vertices)
    if edge_dim:
        neighbors["edge"] = torch.randn(len(neighbors["slot"]), edge_dim)
    root_index = torch.tensor([0, 3, 3, 6, 1])
    outs, grads = [], []
    for fn in (module.forward, lambda *a: plain_attention_embedding(module, *a)):
        x = torch.randn(vertices, 6, generator=torch.Generator().manual_seed(2),
                        requires_grad=True)
        module.zero_grad()
        out = fn(x, root_index, neighbors)
        F.mse_loss(out, torch.ones_like(out)).backward()
        outs.append(out.detach())
        grads.append([x.grad] + [p.grad.clone() for p in module.parameters()])
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    for fast, plain in zip(*grads):
        assert torch.allclose(fast, plain, atol=1e-5, rtol=1e-4)


def test_dropout_draws_drop_the_same_weights_on_both_paths(monkeypatch):
    """In training, the caller's draws (`batch.dropout_draws`, per root, slot and head)
    decide what is dropped, on the fused kernel's filled slots as on the dense weights."""
    torch.manual_seed(1)
    module = AttentionEmbedding(memory_dim=6, edge_dim=0, time_dim=8, out_dim=6, heads=2,
                                dropout=0.3).train()
    vertices, roots, k = 7, 5, 3
    neighbors = random_slots(roots, k, vertices)
    root_index = torch.tensor([0, 3, 3, 6, 1])
    x = torch.randn(vertices, 6, generator=torch.Generator().manual_seed(2))
    draws = torch.rand(roots, k, 2, generator=torch.Generator().manual_seed(3))
    outs = []
    for fused in (True, False):
        monkeypatch.setattr(models, "fused_kernel_on", lambda device: fused)
        outs.append(module(x, root_index, neighbors, draws))
        outs.append(module(x, root_index, neighbors, draws))      # no generator in it
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        kept = module(x, root_index, neighbors, torch.ones_like(draws))
    assert not torch.allclose(outs[0], kept, atol=1e-3)        # some weights were dropped


def plain_slot_attention(q, qt, kv, encoder, neighbors, keep):
    """`slot_attention`'s contract written per slot: phi(gap) by the encoder's own formula,
    masked softmax over each root's slots, dropped-out weights."""
    n, heads, dim = q.shape
    k = neighbors["mask"].shape[1]
    phi = torch.cos(slot_gaps(neighbors).unsqueeze(-1) * encoder.weight + encoder.bias)
    root = torch.div(neighbors["slot"], k, rounding_mode="floor")
    key, value = kv[neighbors["row"]].view(-1, 2, heads, dim).unbind(1)
    logits = ((q[root] * key).sum(-1) + (qt[root] * phi.unsqueeze(1)).sum(-1)) / math.sqrt(dim)
    dense = torch.full((n * k, heads), float("-inf"), dtype=q.dtype)
    dense[neighbors["slot"]] = logits
    prob = torch.softmax(dense.view(n, k, heads), 1).view(n * k, heads)[neighbors["slot"]]
    weight = prob.nan_to_num() * keep                       # rows without slots: 0
    out_v = torch.zeros(n, heads, dim, dtype=q.dtype).index_add(0, root, weight.unsqueeze(-1) * value)
    phisum = torch.zeros_like(qt).index_add(0, root, weight.unsqueeze(-1) * phi.unsqueeze(1))
    wsum = torch.zeros(n, heads, dtype=q.dtype).index_add(0, root, weight)
    return out_v, phisum, wsum


def test_slot_attention_kernel_matches_the_plain_formula():
    """The numba kernel pair (time encoding by the angle sum) against the per-slot formula
    in float64 (the kernels are dtype-generic), with dropout's keep mask, repeated vertices and
    neighbour times, and a root without slots: outputs and the gradients of q, qt, the
    vertex keys / values and the encoder's w and b."""
    torch.manual_seed(4)
    heads, dim, t_dim, roots, k, vertices = 2, 3, 5, 6, 4, 5
    neighbors = random_slots(roots, k, vertices, seed=3)
    encoder = TimeEncoder(t_dim)
    with torch.no_grad():
        encoder.bias.normal_()
    keep = (torch.rand(len(neighbors["slot"]), heads) > 0.3).double() / 0.7
    upstream = [torch.randn(roots, heads, dim, dtype=torch.float64),
                torch.randn(roots, heads, t_dim, dtype=torch.float64),
                torch.randn(roots, heads, dtype=torch.float64)]
    results = []
    for fused in (True, False):
        g = torch.Generator().manual_seed(5)
        q, qt, kv = (torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
                     for shape in [(roots, heads, dim), (roots, heads, t_dim),
                                   (vertices, 2 * heads * dim)])
        encoder.zero_grad()
        if fused:
            outs = slot_attention(q, qt, kv, encoder, neighbors["root_tau"],
                                  neighbors["neighbor_tau"], neighbors["indptr"],
                                  neighbors["row"], neighbors["tidx"], neighbors["ridx"], keep)
        else:
            outs = plain_slot_attention(q, qt, kv, encoder, neighbors, keep)
        sum((o * u).sum() for o, u in zip(outs, upstream)).backward()
        results.append([o.detach() for o in outs] +
                       [q.grad, qt.grad, kv.grad, encoder.weight.grad, encoder.bias.grad])
    assert results[0][2][2].abs().sum() == 0             # root 2 has no slots
    for fast, plain in zip(*results):
        assert torch.allclose(fast, plain, rtol=1e-9, atol=1e-9 * plain.abs().max()), \
            (fast - plain).abs().max()


def test_slot_attention_op_passes_torch_opcheck():
    """The custom op's registrations (fake shapes for torch.compile, autograd) are sound."""
    from gnnsys.temporal.slot_attention import _slot_attention
    neighbors = random_slots(4, 3, 5, seed=6)
    q, qt = torch.randn(4, 2, 3, requires_grad=True), torch.randn(4, 2, 5, requires_grad=True)
    kv = torch.randn(5, 12, requires_grad=True)
    encoder = TimeEncoder(5)
    torch.library.opcheck(_slot_attention, (q, qt, kv, neighbors["root_tau"],
                                            neighbors["neighbor_tau"], encoder.weight,
                                            encoder.bias, neighbors["indptr"], neighbors["row"],
                                            neighbors["tidx"], neighbors["ridx"],
                                            torch.ones(len(neighbors["row"]), 2)))


def test_time_encoder_matches_autograd_on_the_plain_formula():
    """The hand-written backward against autograd through cos(w * dt + b) in float64,
    for a vector of gaps (memory, attention) and a matrix of them (APAN's mailbox)."""
    torch.manual_seed(3)
    encoder = TimeEncoder(16)
    with torch.no_grad():
        encoder.bias.normal_()
    for shape in [(50,), (7, 4)]:
        dt = (torch.rand(shape) * 1e6).float()
        upstream = torch.randn(*shape, 16)
        results = []
        for fn in (encoder, lambda d: torch.cos(d.double().unsqueeze(-1) * encoder.weight
                                                + encoder.bias).float()):
            encoder.zero_grad()
            out = fn(dt)
            (out * upstream).sum().backward()
            results.append((out.detach(), encoder.weight.grad.clone(), encoder.bias.grad.clone()))
        (out, *grads), (plain_out, *plain_grads) = results
        assert out.dtype == torch.float32
        assert torch.allclose(out, plain_out, atol=1e-6)
        for fast, plain in zip(grads, plain_grads):   # float64: only the summation order differs
            assert torch.allclose(fast, plain, rtol=1e-9, atol=1e-9 * plain.abs().max())


def plain_mailbox_update(module: MailboxAttentionUpdater, memory, mailbox, mail_ts, query_time):
    """APAN's update written plainly: keys and values projected per mailbox slot."""
    valid = mail_ts >= 0
    age = (query_time.unsqueeze(1) - mail_ts).clamp(min=0)
    key, value = module.key_value(torch.cat([mailbox, module.time_encoder(age)], 2)).chunk(2, -1)
    attended = plain_attention(module.attention, module.query(memory), key,
                               value + module.value_bias, valid)
    return torch.where(valid.any(1, keepdim=True), module.norm(memory + attended), memory)


def test_mailbox_attention_matches_the_plain_formula():
    torch.manual_seed(5)
    # float64 throughout: the w-gradient of the time encoder sums terms of size gap that
    # cancel, so float32 rounding of either summation order would swamp the comparison
    module = MailboxAttentionUpdater(memory_dim=6, mail_dim=10, time_dim=4, heads=2,
                                     dropout=0.0).double()
    with torch.no_grad():
        module.value_bias.normal_()
    roots, slots = 5, 3
    mail_ts = torch.rand(roots, slots, dtype=torch.float64) * 1e5
    mail_ts[1, 1:] = -1                              # partly empty mailbox
    mail_ts[3] = -1                                  # no mail at all: memory kept
    mailbox = torch.randn(roots, slots, 10, dtype=torch.float64)
    query_time = torch.full((roots,), 2e5, dtype=torch.float64)
    outs, grads = [], []
    for fn in (module.forward, lambda *a: plain_mailbox_update(module, *a)):
        memory = torch.randn(roots, 6, generator=torch.Generator().manual_seed(2),
                             dtype=torch.float64, requires_grad=True)
        module.zero_grad()
        out = fn(memory, mailbox, mail_ts, query_time)
        F.mse_loss(out, torch.ones_like(out)).backward()
        outs.append(out.detach())
        grads.append([memory.grad] + [p.grad.clone() for p in module.parameters()])
    assert torch.allclose(outs[0], outs[1], rtol=1e-9, atol=1e-12)
    for fast, plain in zip(*grads):
        assert torch.allclose(fast, plain, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("cell", ["gru", "rnn"])
def test_recurrent_update_matches_torch_cell_on_the_concatenation(cell):
    """The split input projection against nn.GRUCell / nn.RNNCell on [mail || phi]: the
    same outputs and parameter gradients; a vertex without mail keeps its memory."""
    from gnnsys.temporal.models import RecurrentUpdater
    torch.manual_seed(7)
    updater = RecurrentUpdater(memory_dim=8, mail_dim=12, time_dim=6, cell=cell)
    memory = torch.randn(20, 8)
    mem_ts = torch.rand(20, dtype=torch.float64) * 100
    mailbox = torch.randn(20, 1, 12)
    mail_ts = mem_ts.unsqueeze(1) + torch.rand(20, 1, dtype=torch.float64) * 50
    mail_ts[3] = -1
    results = []
    for fast in (True, False):
        updater.zero_grad()
        if fast:
            out = updater(memory, mem_ts, mailbox, mail_ts)
        else:
            phi = updater.time_encoder((mail_ts[:, 0] - mem_ts).clamp(min=0))
            out = updater.cell(torch.cat([mailbox[:, 0], phi], 1), memory)
            out = torch.where((mail_ts[:, 0] >= 0).unsqueeze(1), out, memory)
        F.mse_loss(out, torch.ones_like(out)).backward()
        results.append([out.detach()] + [p.grad.clone() for p in updater.parameters()])
    assert torch.equal(results[0][0][3], memory[3])
    for fast, plain in zip(*results):
        assert torch.allclose(fast, plain, atol=1e-6, rtol=1e-5)


def test_time_tables_are_float32_exact_at_large_gaps():
    """The kernel's cos / sin tables against float64 cos / sin of the float64 phases, for
    gaps up to 1e7 s and a frequency grown to 2 rad/s: within 2.5e-7 (float32's own rounding
    is 6e-8; the reduced angle is rounded to float32 once)."""
    from gnnsys.temporal.slot_attention import _time_tables
    encoder = TimeEncoder(100)
    with torch.no_grad():
        encoder.weight[0] = 2.0
        encoder.bias.normal_()
    root_tau = torch.tensor([0.0, 17.0, 3600.0], dtype=torch.float64)
    neighbor_tau = -torch.tensor([1.0, 86_400.0, 9_999_999.0, 1e7], dtype=torch.float64)
    a, b, c, s = _time_tables(root_tau, neighbor_tau, encoder.weight.detach(),
                              encoder.bias.detach(), torch.float32)
    root_phase = root_tau.unsqueeze(-1) * encoder.weight.detach() + encoder.bias.detach()
    neighbor_phase = neighbor_tau.unsqueeze(-1) * encoder.weight.detach()
    for table, exact in [(a, torch.cos(root_phase)), (b, torch.sin(root_phase)),
                         (c, torch.cos(neighbor_phase)), (s, torch.sin(neighbor_phase))]:
        assert table.dtype == torch.float32
        assert (table.double() - exact).abs().max() < 2.5e-7
