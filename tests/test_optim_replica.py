"""Flat-tensor optimizers against torch.optim; replicas, phantoms and payload sizes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from simdist.training import (
    OptimizerConfig,
    PhantomReplica,
    PhantomTensor,
    Replica,
    make_optimizer,
    payload_nbytes,
    snapshot,
)
from simdist.runtime.payloads import Deferred, computed, resolved, sent_copy


def _flat(module: nn.Module, attr: str = "data") -> torch.Tensor:
    return torch.cat([getattr(p, attr).reshape(-1) for p in module.parameters()])


def _small_module() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def _reference(config: OptimizerConfig, module: nn.Module) -> torch.optim.Optimizer:
    if config.name == "sgd":
        return torch.optim.SGD(module.parameters(), lr=config.lr, momentum=config.momentum,
                               weight_decay=config.weight_decay, nesterov=config.nesterov)
    return torch.optim.Adam(module.parameters(), lr=config.lr, betas=config.betas, eps=config.eps,
                            weight_decay=config.weight_decay)


@pytest.mark.parametrize(
    "options",
    [
        {"name": "sgd", "lr": 0.1},
        {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
        {"name": "sgd", "lr": 0.05, "momentum": 0.5, "weight_decay": 1e-2},
        {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-3},
        {"name": "adam", "lr": 1e-2},
        {"name": "adam", "lr": 1e-2, "betas": (0.8, 0.99), "weight_decay": 1e-2, "eps": 1e-6},
    ],
)
def test_matches_torch_optim(options):
    config = OptimizerConfig(**options)
    module = _small_module()
    reference = _reference(config, module)
    optimizer = make_optimizer(config)
    params = _flat(module).clone()
    state = optimizer.init_state(params)
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        x, y = torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        reference.zero_grad()
        F.cross_entropy(module(x), y).backward()
        optimizer.step(params, _flat(module, "grad"), state)
        reference.step()
        assert torch.allclose(params, _flat(module), atol=1e-6, rtol=0)
    assert state["step"] == 6


@pytest.mark.parametrize("options", [{"name": "sgd", "lr": 0.1}, {"name": "sgd", "lr": 0.05, "momentum": 0.9},
                                     {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True,
                                      "weight_decay": 5e-3},
                                     {"name": "adam", "lr": 1e-2}])
def test_stepped_rounds_as_step_and_leaves_its_input_alone(options):
    """A parameter server's out-of-place update must give the same bits as an in-place one."""
    optimizer = make_optimizer(OptimizerConfig(**options))
    gen = torch.Generator().manual_seed(3)
    in_place = torch.randn(1000, generator=gen)
    fresh = in_place.clone()
    state_a, state_b = optimizer.init_state(in_place), optimizer.init_state(fresh)
    for _ in range(4):
        grad = torch.randn(1000, generator=gen)
        before = fresh.clone()
        optimizer.step(in_place, grad, state_a)
        stepped = optimizer.stepped(fresh, grad, state_b)
        assert torch.equal(fresh, before)
        fresh = stepped
        assert torch.equal(in_place, fresh)


def test_update_returns_the_step_and_leaves_params_alone():
    optimizer = make_optimizer(OptimizerConfig(lr=0.5, momentum=0.9))
    params = torch.ones(4)
    state = optimizer.init_state(params)
    delta = optimizer.update(params, torch.full((4,), 2.0), state)
    assert torch.equal(params, torch.ones(4))
    assert torch.allclose(delta, torch.full((4,), -1.0))
    delta = optimizer.update(params, torch.full((4,), 2.0), state, lr=0.1)  # buffer 0.9*2 + 2
    assert torch.allclose(delta, torch.full((4,), -0.38))
    optimizer.step(params, torch.zeros(4), state, lr=1.0)  # momentum keeps moving
    assert torch.allclose(params, torch.full((4,), 1 - 0.9 * 3.8))


def test_update_weight_decay_override():
    optimizer = make_optimizer(OptimizerConfig(lr=1.0, weight_decay=0.1))
    params, grad = torch.full((3,), 2.0), torch.zeros(3)
    assert torch.allclose(optimizer.update(params, grad, {"step": 0}), torch.full((3,), -0.2))
    assert torch.allclose(optimizer.update(params, grad, {"step": 0}, weight_decay=0.0), torch.zeros(3))


@pytest.mark.parametrize(
    "bad",
    [{"lr": 0.0}, {"momentum": 1.0}, {"weight_decay": -1.0}, {"nesterov": True}, {"name": "rmsprop"},
     {"betas": (0.9, 1.0)}, {"learning_rate": 0.1}],
)
def test_optimizer_config_rejects(bad):
    with pytest.raises(ValueError):
        OptimizerConfig(**bad)


def test_replica_steps_loads_and_clones():
    replica = Replica(torch.zeros(3), make_optimizer(OptimizerConfig(lr=0.5)))
    replica.apply_gradient(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.allclose(replica.params, torch.tensor([-0.5, -1.0, -1.5]))
    copy = replica.clone_params()
    replica.load(torch.ones(3))
    assert torch.equal(replica.params, torch.ones(3)) and torch.allclose(copy, torch.tensor([-0.5, -1.0, -1.5]))
    assert replica.nbytes == 12 and replica.numel == 3


def test_phantom_tensor_arithmetic_keeps_sizes():
    p = PhantomTensor(1000)
    assert p.numel() == 1000 and p.nbytes == 4000 and p.shape == (1000,) and p.dtype == torch.float32
    half = p.to(torch.bfloat16)
    assert half.nbytes == 2000 and half.float().nbytes == 4000
    for result in (p + 1, 2 * p, p - p, p / 3.0, p * torch.ones(1000), half + half, 1 - p, p.clone()):
        assert isinstance(result, PhantomTensor) and result.numel() == 1000
    assert (half * 2.0).dtype == torch.bfloat16 and (half + p).dtype == torch.float32
    assert p.add_(1) is p and p.mul_(p) is p and p.div_(2) is p and p.sub_(p) is p and p.copy_(p) is p
    assert p.norm() == 0.0
    assert p[100:250].numel() == 150 and p[990:2000].nbytes == 40


def test_phantom_replica_does_nothing():
    replica = PhantomReplica(10_000, make_optimizer(OptimizerConfig()))
    replica.apply_gradient(PhantomTensor(10_000))
    replica.load(PhantomTensor(10_000))
    assert replica.nbytes == 40_000 and isinstance(replica.clone_params(), PhantomTensor)


def test_payload_nbytes():
    t = torch.zeros(10)
    assert payload_nbytes(t) == 40
    assert payload_nbytes(t.to(torch.bfloat16)) == 20
    assert payload_nbytes(PhantomTensor(10, torch.float16)) == 20
    assert payload_nbytes(np.zeros(3)) == 24
    assert payload_nbytes({"grad": t, "step": 3, "meta": [1.0, True, None, "abc"]}) == 40 + 8 + 8 + 8 + 0 + 3
    assert payload_nbytes((t, (t, [t]))) == 120
    with pytest.raises(TypeError):
        payload_nbytes(object())


def test_snapshot_isolates_tensors():
    t = torch.zeros(3)
    phantom = PhantomTensor(3)
    message = {"grad": t, "parts": [t, (t, 5)], "phantom": phantom, "array": np.zeros(2)}
    copy = snapshot(message)
    t.add_(1.0)
    message["array"][0] = 7
    assert torch.equal(copy["grad"], torch.zeros(3))
    assert torch.equal(copy["parts"][1][0], torch.zeros(3)) and copy["parts"][1][1] == 5
    assert copy["phantom"] is phantom and copy["array"][0] == 0
    assert isinstance(copy["parts"][1], tuple)


@pytest.mark.parametrize("options", [
    {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True},
    {"name": "adam", "lr": 0.01, "weight_decay": 0.1},
])
def test_fresh_steps_equal_in_place_steps_and_leave_the_old_tensor(options):
    optimizer = make_optimizer(OptimizerConfig(**options))
    torch.manual_seed(0)
    start = torch.randn(50)
    in_place, fresh = Replica(start.clone(), optimizer), Replica(start.clone(), optimizer)
    for _ in range(3):
        grad = torch.randn(50)
        before, values = fresh.params, fresh.params.clone()
        in_place.apply_gradient(grad)
        fresh.apply_gradient_fresh(grad)
        assert fresh.params is not before and torch.equal(before, values)
        assert torch.equal(fresh.params.view(torch.uint8), in_place.params.view(torch.uint8))


def test_adopt_shares_the_tensor_and_load_copies():
    replica = Replica(torch.zeros(4), make_optimizer(OptimizerConfig()))
    weights = torch.ones(4)
    replica.adopt(weights)
    assert replica.params is weights
    replica.load(torch.full((4,), 2.0))
    assert replica.params is weights and torch.equal(weights, torch.full((4,), 2.0))
    phantom = PhantomReplica(4, make_optimizer(OptimizerConfig()))
    phantom.adopt(PhantomTensor(4))
    phantom.apply_gradient_fresh(PhantomTensor(4))
    assert phantom.params.numel() == 4


def test_a_handover_keeps_the_tensors_uncopied_and_copies_the_rest():
    t, times = torch.zeros(10), [1.0, 2.0]
    message = {"grad": t, "step": 3, "parts": [t, (t, times)]}
    sent = snapshot(message, handover=True)
    assert sent["grad"] is t and sent["parts"][0] is t and sent["parts"][1][0] is t
    assert sent["parts"] is not message["parts"] and sent["parts"][1][1] is not times and sent["parts"][1][1] == times
    assert snapshot(t, handover=True) is t and snapshot(t) is not t
    assert payload_nbytes(message) == 40 + 8 + 40 + 40 + 16


def test_work_on_deferred_inputs_is_evaluated_now_or_deferred_when_lazy():
    calls = []

    def evaluate():
        calls.append(1)
        return torch.arange(3.0)

    assert computed(lambda a, b: a + b, (1, 2)) == 3 and computed(lambda: 5) == 5  # plain inputs: at once
    lazy = computed(lambda total, grad: total + grad, (torch.ones(3), Deferred(evaluate, 12)), lazy=True)
    assert type(lazy) is Deferred and calls == []
    assert payload_nbytes(lazy) == 12 and calls == [1]  # sized by its value, which evaluates it
    assert resolved(lazy).tolist() == [1.0, 2.0, 3.0]
    assert computed(lambda grad: grad * 2, (Deferred(evaluate, 12),)).tolist() == [0.0, 2.0, 4.0]  # not lazy: now
    assert calls == [1, 1]


def test_a_deferred_is_sized_and_sent_unevaluated_and_evaluated_once():
    calls = []

    def evaluate():
        calls.append(1)
        return torch.arange(3.0)

    deferred = Deferred(evaluate, 12)
    message = {"grad": deferred, "version": 4}
    assert payload_nbytes(message) == 12 + 8
    assert snapshot(message)["grad"] is deferred and sent_copy(message)[0]["grad"] is deferred
    assert calls == []
    assert resolved(deferred).tolist() == [0.0, 1.0, 2.0] and resolved(deferred) is resolved(deferred)
    assert calls == [1]
    assert resolved(7) == 7  # anything else is its own value


def test_a_deferred_pickles_as_its_value():
    """The MPI runtime pickles payloads: the receiver gets the evaluated value."""
    message = pickle.loads(pickle.dumps({"loss": Deferred(lambda: 0.5, 8), "grad": Deferred(lambda: torch.ones(2), 8)}))
    assert message["loss"] == 0.5 and torch.equal(message["grad"], torch.ones(2))


@pytest.mark.parametrize("payload", [
    {"grad": Deferred(lambda: torch.zeros(10), 40), "step": 3, "meta": [1.0, None, "abc"], "w": torch.ones(2)},
    {"params": None, "version": 2, "reference_times_s": [0.1, 0.2]},
    torch.arange(5.0), [torch.ones(3), 4], "text", 2.5,
])
@pytest.mark.parametrize("handover", [False, True])
def test_sent_copy_is_the_snapshot_and_the_size_in_one_pass(payload, handover):
    data, nbytes = sent_copy(payload, handover)
    assert nbytes == payload_nbytes(payload)
    expected = snapshot(payload, handover)
    assert repr(data) == repr(expected) and type(data) is type(expected)
    if isinstance(payload, dict) and "w" in payload:
        assert (data["w"] is payload["w"]) == handover and data["grad"] is payload["grad"]  # copied unless handed over
