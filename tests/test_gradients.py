"""Batched gradient evaluation equals one-at-a-time evaluation, and matches plain autograd."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from simdist.errors import SimulationError
from simdist.training import gradients as gradients_module
from simdist.training import layer_grads as layer_grads_module
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


@pytest.fixture(autouse=True)
def fresh_stacking_trials(monkeypatch):
    """Every test tries stacking afresh (the outcomes are otherwise kept for the process)."""
    monkeypatch.setattr(gradients_module, "_STACKING_TRIED", {})


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
    if name == "nested":  # nested Sequential, a Linear without bias, Identity: still stackable
        return nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(64, 16, bias=False), nn.ReLU()), nn.Identity(),
                             nn.Linear(16, 10))
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


def test_queued_batches_are_gathered_once_at_evaluation():
    evaluator, params = _evaluator("mlp")
    tensors = {i: _batch(i, 16) for i in range(4)}
    gathered = []

    def gather(batches):
        gathered.append(list(batches))
        return [tensors[b] for b in batches]

    pending = PendingGradients(evaluator, gather=gather)
    handles = [pending.submit_batch(params, 0), pending.submit(params, *tensors[1]), pending.submit_batch(params, 2)]
    assert gathered == []
    results = [h.result() for h in handles]
    assert gathered == [[0, 2]]
    _assert_same(results, [evaluator.gradient(params, *tensors[i]) for i in (0, 1, 2)])


def test_parameters_written_in_place_before_evaluation_are_refused():
    evaluator, params = _evaluator("mlp")
    pending = PendingGradients(evaluator)
    kept = pending.submit(params.clone(), *_batch(0, 16))
    mine = params.clone()
    handle = pending.submit(mine, *_batch(1, 16))
    mine.add_(1.0)  # the rank moved on without adopting a new tensor
    with pytest.raises(SimulationError, match="written in place"):
        handle.result()
    assert not kept.ready  # nothing was evaluated on wrong weights


def test_submitting_a_batch_needs_a_gather_function():
    evaluator, params = _evaluator("mlp")
    with pytest.raises(ValueError, match="gather"):
        PendingGradients(evaluator).submit_batch(params, 0)


# -- requests at different parameters (asynchronous algorithms) -------------------------------------


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _assert_bitwise(got, expected):
    assert len(got) == len(expected)
    for (g, loss), (e, e_loss) in zip(got, expected):
        assert torch.equal(_bits(g), _bits(e))
        assert loss == e_loss


def _apart_requests(evaluator, base, k, size, seed):
    gen = torch.Generator().manual_seed(seed)
    return [(base + 0.05 * torch.randn(base.shape, generator=gen), *_batch(seed * 100 + i, size)) for i in range(k)]


def test_stack_plan_only_for_sequential_linear_models():
    assert _evaluator("mlp")[0]._stack_plan is not None and _evaluator("nested")[0]._stack_plan is not None
    for name in ("cnn", "batchnorm", "layernorm", "inplace", "shared"):
        assert _evaluator(name)[0]._stack_plan is None, name


@pytest.mark.parametrize("name, size, k", [("mlp", 32, 5), ("mlp", 24, 11), ("mlp", 7, 3), ("mlp", 1, 4),
                                           ("nested", 16, 6)])
def test_different_params_equal_one_at_a_time_bit_for_bit(name, size, k):
    evaluator, base = _evaluator(name)
    for seed in range(3):  # the first call probes the shape, the others stack it if that is exact
        requests = _apart_requests(evaluator, base, k, size, seed)
        expected = [evaluator.gradient(*r) for r in requests]
        _assert_bitwise(evaluator.gradients(requests), expected)
    assert (size, k, torch.get_num_threads()) in evaluator._stack_exact


@pytest.mark.parametrize("name, size, k", [("mlp", 16, 5), ("mlp", 7, 3), ("nested", 24, 4)])
def test_stacked_backward_is_autograds_backward_written_out(name, size, k):
    """The stacked path's hand-written backward runs the operations autograd would, bit for bit."""
    evaluator, base = _evaluator(name)
    requests = _apart_requests(evaluator, base, k, size, 0)
    stacked = torch.stack([p for p, _x, _y in requests])
    h = torch.cat([x for _p, x, _y in requests])
    zs = []
    for step in evaluator._stack_plan:
        if isinstance(step, layer_grads_module.FastLayer):
            h = layer_grads_module.stacked_linear(step, stacked, h, k)
            h = h if h.requires_grad else h.requires_grad_()
            zs.append(h)
        else:
            h = step(h)
    per_sample = F.nll_loss(F.log_softmax(h, dim=1), torch.cat([y for _p, _x, y in requests]), reduction="none")
    expected = torch.autograd.grad(per_sample.sum() / size, zs)
    grads, _losses = evaluator._stacked(requests)
    reference = torch.empty_like(grads)
    linears = [s for s in evaluator._stack_plan if isinstance(s, layer_grads_module.FastLayer)]
    inputs = [h_in.detach() for h_in in _linear_inputs(evaluator, stacked, requests, k)]
    for layer, a, delta in zip(linears, inputs, expected):
        layer_grads_module.layer_grads(layer, a, delta, k, reference)
    assert torch.equal(grads.view(torch.uint8), reference.view(torch.uint8))


def _linear_inputs(evaluator, stacked, requests, k):
    """Each Linear's input in the stacked forward."""
    h, inputs = torch.cat([x for _p, x, _y in requests]), []
    with torch.no_grad():
        for step in evaluator._stack_plan:
            if isinstance(step, layer_grads_module.FastLayer):
                inputs.append(h)
                h = layer_grads_module.stacked_linear(step, stacked, h, k)
            else:
                h = step(h)
    return inputs


def test_stacked_path_computes_the_gradients(monkeypatch):
    """Forced on whatever the probe says: equal within float tolerance, in request order."""
    evaluator, base = _evaluator("mlp")
    monkeypatch.setattr(GradientEvaluator, "_stacking_exact", lambda self, requests: True)
    requests = _apart_requests(evaluator, base, 6, 16, 1)
    requests[2] = (requests[2][0], *_batch(99, 8))  # another batch size: its own stack (of one)
    expected = [evaluator.gradient(*r) for r in requests]
    _assert_same(evaluator.gradients(requests), expected)


def test_stacking_is_refused_where_it_rounds_differently(monkeypatch):
    evaluator, base = _evaluator("mlp")
    stacked = GradientEvaluator._stacked

    def off_by_rounding(self, requests):
        grads, losses = stacked(self, requests)
        return grads * (1 + 2**-20), losses

    monkeypatch.setattr(GradientEvaluator, "_stacked", off_by_rounding)
    for seed in range(2):
        requests = _apart_requests(evaluator, base, 4, 16, seed)
        _assert_bitwise(evaluator.gradients(requests), [evaluator.gradient(*r) for r in requests])
    assert evaluator._stack_exact == {(16, 4, torch.get_num_threads()): False}


def test_a_shape_is_tried_once_per_process_not_once_per_evaluator(monkeypatch):
    first, base = _evaluator("mlp")
    first.gradients(_apart_requests(first, base, 4, 16, 0))
    trials = []
    agrees = GradientEvaluator._agrees
    monkeypatch.setattr(GradientEvaluator, "_agrees", lambda self, requests: trials.append(1) or agrees(self, requests))
    second, _ = _evaluator("mlp")
    requests = _apart_requests(second, base, 4, 16, 1)
    _assert_bitwise(second.gradients(requests), [second.gradient(*r) for r in requests])
    assert trials == [] and (16, 4, torch.get_num_threads()) in second._stack_exact
    other, other_base = _evaluator("nested")  # other layers: tried again
    other.gradients(_apart_requests(other, other_base, 4, 16, 0))
    assert trials


def test_probing_a_shape_leaves_the_global_random_stream_alone():
    evaluator, base = _evaluator("mlp")
    requests = _apart_requests(evaluator, base, 3, 8, 0)
    state = torch.random.get_rng_state()
    evaluator.gradients(requests)
    assert evaluator._stack_exact and torch.equal(torch.random.get_rng_state(), state)
