"""Stale gradients of the parameter-server algorithms replayed independently (docs/algorithms.md §2, §3).

A run of asgd or n-softsync with four workers of different speeds (device overrides of 0.5 and 2
CPUs, and compute noise) is simulated through the public path; its ``update`` rows (one per
applied gradient, in the order the server applied them: ``worker``, ``version`` after the update,
``staleness``, ``batch_size``, ``loss``) are then replayed with plain PyTorch, without simdist's
gradient evaluator or optimizer:

* **which version each gradient read** follows from the protocol alone, not from the recorded
  staleness. The k-th gradient of a worker was computed on the (k − 1)-th reply to it: its first
  on version 0 (the initial pull), every later one on the version of the reply to its previous
  push. A server replies once it has handled a push: asgd after applying it (the row's version);
  n-softsync with ``pull: immediate`` after the update if the push completed its group of
  c = ⌊N/n⌋ (the row's version), otherwise at once, before the update that will apply it (the
  row's version − 1); with ``pull: after_update`` after that update (the row's version). The
  staleness is then s = version − 1 − v_read (the version the update is applied to, minus the
  version read), and the recorded value must be exactly that;
* **the batch** is the k-th batch of that worker's :class:`~simdist.training.data.ShardIterator`
  over the run's :class:`~simdist.training.data.EpochSharder`;
* **the gradient** is the model's forward, ``F.cross_entropy`` and ``torch.autograd.grad`` at the
  flat parameters of version v_read, loaded into a copy of the module;
* **the update** (asgd) w ← w − η_s·g with η_s = η, or η / max(1, s) with ``staleness_aware``;
  (n-softsync) the gradients of one version, summed in the order the server applied them, divided
  by their count, w ← w − η·(1/c)·Σ g_j, each g_j first damped by 1/max(1, s_j) with
  ``staleness_aware``; the step is ``torch.optim.SGD`` on the flat parameters (with momentum 0.9
  in two cases: the momentum buffer lives on the server and carries across updates).

What is exact and why. Final server parameters are compared with ``torch.equal``: the simulator
evaluates gradients in batches (``simdist/training/gradients.py``), but requests at different
weights are stacked only where a trial showed the stacked kernels equal to one-at-a-time
evaluation bit for bit, and requests at identical weights give the same gradient bits as a single
evaluation on this model. Two arithmetic details are the implementation's and the replay follows
them: the staleness damping multiplies by the reciprocal 1/max(1, s) (``async_math.staleness_scale``;
dividing by max(1, s), as the docs word it, differs in the last bit for s = 3, 5, 6, ...), and
the average divides the sum by c. Recorded losses are bit-exact too: requests at identical weights
evaluated together (``GradientEvaluator._fast_batched``) reduce each request's loss over its own
rows, as a single evaluation does.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from simdist.scenario import scenario_from_dict
from simdist.simulate import Simulation
from simdist.training.data import EpochSharder, ShardIterator
from simdist.training.workload import build_workload

PROFILE = str((Path(__file__).parent / "data" / "tiny_profile.yaml").resolve())
WORKERS, BATCH, EPOCHS, LR = 4, 16, 2, 0.05
SGD = {"name": "sgd", "lr": LR}
MOMENTUM = {"name": "sgd", "lr": LR, "momentum": 0.9}

CASES = {
    "asgd": ("asgd", SGD, {}),
    "asgd-staleness-aware": ("asgd", SGD, {"staleness_aware": True}),
    "asgd-momentum": ("asgd", MOMENTUM, {}),
    "nsoftsync-n1": ("nsoftsync", SGD, {"n": 1}),
    "nsoftsync-n2": ("nsoftsync", SGD, {"n": 2}),
    "nsoftsync-n2-staleness-aware": ("nsoftsync", SGD, {"n": 2, "staleness_aware": True}),
    "nsoftsync-n1-staleness-aware-momentum": ("nsoftsync", MOMENTUM, {"n": 1, "staleness_aware": True}),
    "nsoftsync-n2-after-update": ("nsoftsync", SGD, {"n": 2, "pull": "after_update"}),
}


def scenario(name: str, optimizer: dict, options: dict):
    """Four workers (rank 0 at half a CPU, rank 2 at two) and a server on rank 4; 2 epochs of 7 batches."""
    return scenario_from_dict({
        "name": f"replay-{name}",
        "seed": 3,
        "platform": {"preset": "laptop-cpu", "node": {"devices": WORKERS + 1},
                     "device_overrides": [{"ranks": [0], "cpus": 0.5}, {"ranks": [2], "cpus": 2.0}]},
        "workers": WORKERS,
        "workload": {"model": {"name": "mlp", "hidden": [16]},
                     "dataset": {"name": "synthetic", "samples": 500, "features": 8, "classes": 3},
                     "batch_size": BATCH, "optimizer": optimizer},
        "algorithm": {"name": name, **options},
        "stop": {"epochs": EPOCHS},
        "evaluation": {"every_steps": 10**6},
        "compute": {"profiles": [PROFILE], "noise_sigma": 0.2},
    })


# -- the protocol: which version each gradient read ---------------------------------------------


def versions_read(rows: list[dict], reply_after_update: bool) -> list[int]:
    """v_read of every row from the protocol alone (module docstring), not from its staleness."""
    closing = {max(i for i, r in enumerate(rows) if r["version"] == v) for v in {r["version"] for r in rows}}
    last_reply: dict[int, int] = {}
    reads = []
    for i, row in enumerate(rows):
        reads.append(last_reply.get(row["worker"], 0))
        waits_for_update = reply_after_update or i in closing
        last_reply[row["worker"]] = row["version"] if waits_for_update else row["version"] - 1
    return reads


# -- the replay -----------------------------------------------------------------------------------


@dataclass
class Replay:
    final_params: torch.Tensor
    losses: list[float]
    stalenesses: list[int]
    batch_sizes: list[int]
    group_sizes: list[int]


class PlainModel:
    """The scenario's model as a plain module: loss and gradient at a flat parameter vector."""

    def __init__(self, s):
        w = s.workload
        workload = build_workload(w.model.name, w.model.options, w.dataset.name, w.dataset.options, w.optimizer,
                                  s.seed)
        self.module = copy.deepcopy(workload.module).train()
        self.params = list(self.module.parameters())
        self.initial = torch.cat([p.detach().reshape(-1) for p in self.params]).clone()
        self.x, self.y = workload.dataset.train_x, workload.dataset.train_y
        self.train_size = workload.dataset.train_size

    def gradient(self, flat: torch.Tensor, indices) -> tuple[torch.Tensor, float]:
        torch.nn.utils.vector_to_parameters(flat.clone(), self.params)
        index = torch.from_numpy(indices.copy())
        loss = F.cross_entropy(self.module(self.x[index]), self.y[index])
        grads = torch.autograd.grad(loss, self.params)
        return torch.cat([g.reshape(-1) for g in grads]), float(loss.detach())


def replay(s, rows: list[dict], reads: list[int]) -> Replay:
    """Recompute every applied gradient and update from the rows' order and ``reads`` (v_read)."""
    name, config = s.algorithm_name, s.algorithm_config()
    aware = config.staleness_aware
    model = PlainModel(s)
    sharder = EpochSharder(model.train_size, s.worker_count, s.seed)
    shards = [ShardIterator(sharder, i, s.stop.epochs) for i in range(s.worker_count)]
    server = torch.nn.Parameter(model.initial.clone())
    optimizer = torch.optim.SGD([server], lr=LR, momentum=s.workload.optimizer.momentum)
    weights = [server.detach().clone()]  # weights[v]: the server's parameters at version v
    by_version: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_version[row["version"]].append(i)
    out = Replay(server, [], [], [], [])
    for version in sorted(by_version):
        assert version == len(weights), "versions must count updates 1, 2, 3, ..."
        total, lr = None, LR
        for i in by_version[version]:
            s_i = version - 1 - reads[i]
            assert s_i >= 0, f"row {i} would read version {reads[i]}, not applied before version {version}"
            batch = shards[rows[i]["worker"]].next_batch(s.workload.batch_size)
            grad, loss = model.gradient(weights[reads[i]], batch.indices)
            out.losses.append(loss)
            out.stalenesses.append(s_i)
            out.batch_sizes.append(batch.size)
            if name == "asgd":
                lr = LR / max(1, s_i) if aware else LR
            elif aware and max(1, s_i) > 1:
                grad = grad * (1.0 / max(1, s_i))
            total = grad if total is None else total + grad
        count = len(by_version[version])
        out.group_sizes.append(count)
        optimizer.param_groups[0]["lr"] = lr
        server.grad = total / count if count > 1 else total
        optimizer.step()
        weights.append(server.detach().clone())
    out.final_params = weights[-1]
    return out


@dataclass
class Case:
    scenario: object
    rows: list[dict]
    server_params: torch.Tensor
    reads: list[int]
    replay: Replay


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request) -> Case:
    s = scenario(*CASES[request.param])
    simulation = Simulation(s)
    result = simulation.execute()
    assert result.status == "completed"
    rows = list(result.recorder.updates)
    config = s.algorithm_config()
    reads = versions_read(rows, getattr(config, "pull", "immediate") == "after_update")
    server_params = simulation.algorithm.servers_[0].replica.params
    return Case(s, rows, server_params, reads, replay(s, rows, reads))


# -- the tests ------------------------------------------------------------------------------------


def test_staleness_is_really_stale_and_varies(case):
    stalenesses = [row["staleness"] for row in case.rows]
    assert len(case.rows) == EPOCHS * WORKERS * 7  # 100 samples per worker and epoch, batches of 16
    assert max(stalenesses) >= 2 and len(set(stalenesses)) >= 3


def test_recorded_staleness_counts_the_versions_since_the_read(case):
    """s = v_applied − 1 − v_read for every row, with v_read from the protocol (module docstring)."""
    assert [row["staleness"] for row in case.rows] == case.replay.stalenesses
    assert [row["version"] - 1 - row["staleness"] for row in case.rows] == case.reads


def test_staleness_distribution_equals_the_replays(case):
    assert Counter(row["staleness"] for row in case.rows) == Counter(case.replay.stalenesses)


def test_updates_hold_c_gradients_and_the_batches_are_the_shards(case):
    config = case.scenario.algorithm_config()
    c = WORKERS // config.n if case.scenario.algorithm_name == "nsoftsync" else 1
    sizes = case.replay.group_sizes
    assert sum(sizes) == len(case.rows) and all(1 <= size <= c for size in sizes)
    # a group smaller than c is applied only once no further gradient can arrive: after a worker's
    # last gradient (with pull: after_update a lone last worker's every gradient; otherwise the last group)
    first_final_version = min(max(row["version"] for row in case.rows if row["worker"] == w) for w in range(WORKERS))
    assert all(size == c for size in sizes[:first_final_version - 1])
    if getattr(config, "pull", "immediate") == "immediate":
        assert all(size == c for size in sizes[:-1])
    assert [row["batch_size"] for row in case.rows] == case.replay.batch_sizes


def test_final_server_parameters_equal_the_replay_bit_for_bit(case):
    assert torch.equal(case.server_params, case.replay.final_params)


def test_every_recorded_loss_is_the_replays(case):
    for row, loss in zip(case.rows, case.replay.losses, strict=True):
        assert row["loss"] == loss, row


def test_a_replay_reading_one_version_off_does_not_match(case):
    """The comparison has power: reading the version before the right one for every stale
    gradient changes the final parameters (and the losses of those gradients)."""
    off = [read - 1 if read > 0 else read for read in case.reads]
    wrong = replay(case.scenario, case.rows, off)
    assert not torch.equal(case.server_params, wrong.final_params)
    assert any(row["loss"] != loss for row, loss in zip(case.rows, wrong.losses))


def test_recorded_losses_are_bit_exact():
    mismatched = 0
    for key in ("asgd", "nsoftsync-n1", "nsoftsync-n2"):
        s = scenario(*CASES[key])
        rows = list(Simulation(s).execute().recorder.updates)
        losses = replay(s, rows, versions_read(rows, False)).losses
        mismatched += sum(row["loss"] != loss for row, loss in zip(rows, losses))
    assert mismatched == 0
