"""The hashed CPU dropout (gnnsys/models/dropout.py) against a plain reference."""
import numpy as np
import pytest
import torch

from gnnsys.models import dropout as hashed
from common.rng import GOLDEN, mix64


def reference_keep(n: int, seed: int, p: float) -> np.ndarray:
    """Element i is kept when 16 bits of mix64(seed + (i // 4) * golden) >= p * 65536."""
    threshold = int(hashed.threshold_of(p))
    keep = np.empty(n, dtype=bool)
    with np.errstate(over="ignore"):           # the hash wraps around 2**64 by design
        for i in range(n):
            bits = int(mix64(np.uint64(seed) + np.uint64(i // 4) * GOLDEN))
            keep[i] = (bits >> (16 * (i % 4))) & 0xFFFF >= threshold
    return keep


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kernel_equals_the_reference_forward_and_backward(p):
    n = hashed.MIN_ELEMENTS + 3               # a partial last group of 4
    x = torch.randn(n, dtype=torch.float32, requires_grad=True)
    seed = 987654321
    out = hashed._HashDropout.apply(x, p, seed, False)
    keep = reference_keep(n, seed, p)
    scale = np.float32(1 / (1 - p))
    expected = np.where(keep, x.detach().numpy() * scale, np.float32(0))
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    grad = torch.randn(n)
    out.backward(grad)
    np.testing.assert_array_equal(x.grad.numpy(), np.where(keep, grad.numpy() * scale, 0))
    assert abs((~keep).mean() - p) < 0.01


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_relu_and_dropout_in_one_pass_equal_the_reference(p):
    n = hashed.MIN_ELEMENTS + 5
    x = torch.randn(n, dtype=torch.float32)
    x[:7] = 0.0                              # ReLU's kink: no gradient, as torch's relu
    x.requires_grad_(True)
    seed = 424242
    out = hashed._HashDropout.apply(x, p, seed, True)
    keep = reference_keep(n, seed, p)
    scale = np.float32(1 / (1 - p))
    value = x.detach().numpy()
    np.testing.assert_array_equal(out.detach().numpy(),
                                  np.where(keep, np.maximum(value, 0) * scale, np.float32(0)))
    grad = torch.randn(n)
    out.backward(grad)
    np.testing.assert_array_equal(x.grad.numpy(),
                                  np.where(keep & (value > 0), grad.numpy() * scale, 0))


def test_relu_dropout_draws_the_mask_dropout_draws():
    x = torch.randn(300, 256)
    torch.manual_seed(5)
    fused = hashed.relu_dropout(x, 0.5, True)
    torch.manual_seed(5)
    assert torch.equal(fused, hashed.dropout(torch.relu(x), 0.5, True))
    assert torch.equal(hashed.relu_dropout(x, 0.5, False), torch.relu(x))
    small = torch.randn(10, 4)                         # torch's dropout, after ReLU
    assert bool((hashed.relu_dropout(small, 0.5, True) >= 0).all())


def test_dropout_is_fixed_by_torch_seed_and_keeps_shape():
    x = torch.randn(300, 256)
    torch.manual_seed(3)
    a = hashed.dropout(x, 0.5, True)
    torch.manual_seed(3)
    b = hashed.dropout(x, 0.5, True)
    assert torch.equal(a, b) and a.shape == x.shape
    assert not torch.equal(a, hashed.dropout(x, 0.5, True))     # a new seed per call
    assert hashed.dropout(x, 0.5, False) is x and hashed.dropout(x, 0.0, True) is x


def test_small_or_other_tensors_use_torch_dropout(monkeypatch):
    calls = []
    monkeypatch.setattr(hashed.F, "dropout", lambda x, p, training: calls.append(x) or x)
    hashed.dropout(torch.randn(10, 4), 0.5, True)                        # small
    hashed.dropout(torch.randn(300, 256, dtype=torch.float64), 0.5, True)  # float64
    assert len(calls) == 2


def test_mean_is_preserved():
    x = torch.ones(400, 400)
    assert hashed.dropout(x, 0.25, True).mean().item() == pytest.approx(1.0, abs=0.01)
