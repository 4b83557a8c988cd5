"""The fast TGN / APAN attention and time encoder against their plain formulas: phi(0)
folded into the query bias, gathers by index_select, the query projected only for the
roots, key and value projections applied per root instead of per slot."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

from gnnsys.temporal.models import AttentionEmbedding, MailboxAttentionUpdater, TimeEncoder


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
    filled = module.kv_vertex(x)[neighbors["row"]] + module.kv_time(phi(neighbors["dt"]))
    kv = filled.new_zeros(n * k, filled.shape[1]).index_copy(0, neighbors["slot"], filled)
    key, value = kv.view(n, k, -1).chunk(2, -1)
    attended = plain_attention(module.attention, query, key, value + module.value_bias,
                               neighbors["mask"])
    return module.merge(torch.cat([attended, x[root_index]], 1))


def test_attention_embedding_matches_the_plain_formula():
    torch.manual_seed(1)
    module = AttentionEmbedding(memory_dim=6, edge_dim=0, time_dim=8, out_dim=6, heads=2,
                                dropout=0.1).eval()
    with torch.no_grad():
        module.time_encoder.bias.normal_()
        module.value_bias.normal_()
    vertices, roots, k = 7, 5, 3
    mask = torch.rand(roots, k) > 0.3
    mask[2] = False                                  # a root without neighbours
    slot = torch.from_numpy(np.flatnonzero(mask.numpy()))
    neighbors = dict(mask=mask, slot=slot, row=torch.randint(0, vertices, (len(slot),)),
                     dt=(torch.rand(len(slot)) * 1e6).float(), edge=None)
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
