"""Batched gradient evaluation equals one-at-a-time evaluation, and matches plain autograd."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from simdist.training import (
    MODELS,
    CNNConfig,
    GradientEvaluator,
    MLPConfig,
    PendingGradients,
    model_info,
)

SHAPE = (1, 8, 8)
TOL = 1e-6


def _module(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name == "mlp":
        return MODELS.get("mlp")(SHAPE, 10, MLPConfig(hidden=[32, 16]))
    if name == "cnn":
        return MODELS.get("cnn")(SHAPE, 10, CNNConfig())
    if name == "batchnorm":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))
    if name == "layernorm":  # no buffers, not all-Linear: the vmap path
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 10))
    if name == "inplace":  # in-place ReLU rewrites a captured layer output: fast path must bail out
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(inplace=True), nn.Linear(16, 10))
    if name == "shared":  # one Linear used twice: fast path must bail out
        return _Shared()
    raise AssertionError(name)


class _Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, 12)
        self.mid = nn.Linear(12, 12)
        self.out = nn.Linear(12, 10)

    def forward(self, x):
        h = torch.tanh(self.inp(x.flatten(1)))
        h = torch.tanh(self.mid(torch.tanh(self.mid(h))))
        return self.out(h)


def _evaluator(name: str) -> tuple[GradientEvaluator, torch.Tensor]:
    module = _module(name)
    evaluator = GradientEvaluator(module, model_info(module, SHAPE))
    return evaluator, evaluator._flat.clone()


def _batch(seed: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(size, *SHAPE, generator=gen), torch.randint(0, 10, (size,), generator=gen)


def _assert_same(got, expected):
    assert len(got) == len(expected)
    for (g, loss), (e, e_loss) in zip(got, expected):
        assert g.shape == e.shape
        assert float((g - e).abs().max()) <= TOL
        assert loss == pytest.approx(e_loss, abs=1e-5)


ALL = ["mlp", "cnn", "batchnorm", "layernorm", "inplace", "shared"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "batchnorm"])
def test_gradient_equals_module_backward(name):
    module = _module(name)
    reference = copy.deepcopy(module)
    evaluator = GradientEvaluator(module, model_info(module, SHAPE))
    x, y = _batch(1, 24)
    loss = F.cross_entropy(reference(x), y)
    loss.backward()
    expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    grad, value = evaluator.gradient(evaluator._flat.clone(), x, y)
    assert float((grad - expected).abs().max()) <= TOL
    assert value == pytest.approx(float(loss.detach()), abs=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_identical_params_batched_equals_per_request(name):
    evaluator, params = _evaluator(name)
    requests = [(params, *_batch(i, 32)) for i in range(6)]
    requests[3] = (params.clone(), *requests[3][1:])  # equal values, other object: same group
    expected = [evaluator.gradient(*r) for r in requests]
    _assert_same(evaluator.gradients(requests), expected)


@pytest.mark.parametrize("name", ALL)
def test_mixed_params_and_batch_sizes_keep_request_order(name):
    evaluator, base = _evaluator(name)
    a, b, c = base, base + 0.01 * torch.randn_like(base), base - 0.02 * torch.randn_like(base)
    plan = [(a, 32), (b, 16), (a, 32), (c, 16), (a, 8), (b, 16), (a, 32), (c, 8), (b, 32)]
    requests = [(p, *_batch(i, size)) for i, (p, size) in enumerate(plan)]
    expected = [evaluator.gradient(*r) for r in requests]
    _assert_same(evaluator.gradients(requests), expected)


def test_fast_path_is_used_for_linear_and_conv_models():
    for name in ("mlp", "cnn"):
        evaluator, params = _evaluator(name)
        evaluator.gradients([(params, *_batch(i, 4)) for i in range(3)])
        assert evaluator._fast_layers is not None


@pytest.mark.parametrize("name", ["inplace", "shared"])
def test_fast_path_steps_aside_for_models_it_cannot_handle(name):
    evaluator, params = _evaluator(name)
    evaluator.gradients([(params, *_batch(i, 4)) for i in range(3)])
    assert evaluator._fast_layers is None


def test_models_with_buffers_are_evaluated_one_by_one():
    evaluator, params = _evaluator("batchnorm")
    assert evaluator._fast_layers is None and not evaluator._vmap_ok


def test_evaluate_matches_direct_computation():
    evaluator, params = _evaluator("cnn")
    module = copy.deepcopy(evaluator.module).eval()
    x, y = _batch(5, 50)
    with torch.no_grad():
        logits = module(x)
    loss, accuracy = evaluator.evaluate(params, x, y, batch_size=16)
    assert loss == pytest.approx(float(F.cross_entropy(logits, y)), abs=1e-5)
    assert accuracy == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert evaluator.module.training


def test_pending_gradients_evaluate_once_for_all_handles():
    evaluator, params = _evaluator("mlp")
    calls = []
    original = evaluator.gradients
    evaluator.gradients = lambda requests: calls.append(len(requests)) or original(requests)
    pending = PendingGradients(evaluator)
    requests = [(params, *_batch(i, 16)) for i in range(5)]
    handles = [pending.submit(*r) for r in requests]
    assert calls == [] and len(pending) == 5
    results = [handles[2].result()] + [h.result() for h in handles]
    assert calls == [5] and pending.evaluations == 1 and len(pending) == 0
    _assert_same(results[1:], [evaluator.gradient(*r) for r in requests])
    assert results[0] is results[3]
    late = pending.submit(*requests[0])
    late.result()
    assert calls == [5, 1]
