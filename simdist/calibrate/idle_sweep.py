"""What a rank's calls cost right after it waited: the platform's after-wait tables.

A rank blocked in the runtime's waiting loop (test, sleep, test again) leaves its core idle.
While it idles, what its next calls need leaves the core's caches (the core drops to a sleep
state, other work runs there), so they run slower than back to back, by more the longer the
wait. A parameter server waits about one worker step between two gradients; its next turn,
its optimizer step and its send of the new weights all meet that state.

``--path runtime`` of ``simdist calibrate network`` times it on rank 0 through simdist's MPI
runtime, in the order a server meets it: rank 0 waits for a gradient-sized message (a
blocking ``recv`` through the driver, in the runtime's own waiting loop) that its peer sends
once the idle time has passed; then it times, one after another, the driver's next turn (a request of no
work), one update of a parameter vector as the work of a request (a server's apply), the
driver's turn after it, and a send back to the peer: of 8 B in one round, of the parameter
vector in the next (a server's send of the weights). While rank 0
waits, the peer runs training steps of the scenario given (``--after-compute``) as long as
another fits, as a server's workers compute meanwhile, and sleeps the rest. Rounds cycle
through :data:`IDLES_S`, the first with no idle, so a burst of other work on the host hits
one round of every idle time. Per idle time the medians are kept against the time rank 0
measured it waited: the turn's, the small send's and the large send's rise per byte over it
are the platform's ``calls.overhead_after_wait``, ``messages.send_overhead_after_wait`` and
``messages.send_overhead_per_byte_after_wait`` (:func:`after_idle_section`); the turn after
the update, in the rounds with no idle, is ``calls.overhead_after_work``; the update's is kept
in the sweep's document.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

__all__ = ["IDLES_S", "IDLE_ROUNDS", "idle_update", "after_idle", "after_idle_section"]

IDLES_S = (0.0, 1e-3, 3e-3, 10e-3, 30e-3)  # the first with no idle: the wait is the runtime's round trip
IDLE_ROUNDS = 24  # rounds per idle time
DEFAULT_IDLE_PARAMS = 1 << 18  # the vector updated without a scenario (3 MiB read and written)
SMALL_SEND = 8  # bytes of the small send: its cost is the call's own (o_s); the large one's rise is per byte
_WAKE_TAG, _DONE_TAG = 21, 22


def idle_update(after_compute: str | None) -> tuple[Callable[[], None], int, str]:
    """The update timed after each idle: (the call, its parameters, what it is). With a scenario
    file, its optimizer step on its own parameter vector (as a server applies a gradient);
    without, ``w ← w − η·g`` on :data:`DEFAULT_IDLE_PARAMS` float32 parameters."""
    import torch

    if after_compute is None:
        weights, grad = torch.zeros(DEFAULT_IDLE_PARAMS), torch.full((DEFAULT_IDLE_PARAMS,), 1e-3)
        return (lambda: weights.add_(grad, alpha=-1e-3)), DEFAULT_IDLE_PARAMS, "w <- w - lr * g (float32)"
    from ..training.replica import Replica
    from .compute_scenario import plan_scenario

    workload = plan_scenario(after_compute, "cpu").workload
    params = int(workload.param_count)
    replica = Replica(workload.initial_params().detach().clone().float(), workload.optimizer)
    grad = torch.randn(params) * 1e-3
    return (lambda: replica.apply_gradient(grad)), params, \
        f"the optimizer step ({workload.optimizer_config.name}) of {after_compute}"


def after_idle(path: Any, peer: int, update: tuple[Callable[[], None], int, str] | None,
               busy: tuple[Callable[[], None], str] | None = None, idles_s: tuple[float, ...] = IDLES_S,
               rounds: int = IDLE_ROUNDS) -> dict[str, Any] | None:
    """Rank 0's calls right after waiting each of ``idles_s`` (a :class:`~.runtime_sweep.RuntimePath`
    ``path``; see the module doc), woken by ``peer``, which runs ``busy`` (its call and what it
    is; both ranks are given it) while the idle passes, else sleeps. ``update``: what rank 0
    updates (:func:`idle_update`). The document on rank 0, None elsewhere."""
    rt, driver, rank = path.rt, path.driver, path.world.rank
    schedule = [(idle, large) for _ in range(rounds) for idle in idles_s for large in (False, True)]
    work, params, described = update
    token = path.torch.zeros(SMALL_SEND, dtype=path.torch.uint8)
    if rank == peer:
        gradient = path.torch.zeros(params, dtype=path.torch.float32)  # what wakes a server: a gradient
        call, took_s = (None, 0.0) if busy is None else (busy[0], _pace(busy[0]))
        for idle, _large in schedule:
            took_s = _pass(idle, call, took_s)
            rt.send(0, gradient, _WAKE_TAG)
            driver.wait(rt.recv(0, _DONE_TAG))
        return None
    if rank != 0:
        return None
    weights = path.torch.zeros(params, dtype=path.torch.float32)  # what a server sends back
    payloads = {False: token, True: weights}
    timed: list[tuple] = []
    stamps: list[float] = []

    def stamped() -> None:  # the update, its start and end stamped
        stamps.append(time.perf_counter())
        work()
        stamps.append(time.perf_counter())

    def rounds_of_work():
        for idle, large in schedule:
            asked = time.perf_counter()
            yield rt.recv(peer, _WAKE_TAG)  # idles in the runtime's waiting loop until the gradient comes
            woke = time.perf_counter()
            yield path.turn()  # the driver's next turn
            turned = time.perf_counter()
            yield rt.busy(0.0, "update", run=stamped)  # a server's apply, and the turn after it
            resumed = time.perf_counter()
            rt.send(peer, payloads[large], _DONE_TAG)
            sent = time.perf_counter()
            began, ended = stamps[-2:]
            timed.append((idle, large, woke - asked, turned - woke, ended - began, resumed - ended, sent - resumed))
            path.forget()

    driver.drive(rounds_of_work())
    return {**_summary(timed, idles_s, rounds), "update_params": params, "update": described,
            "large_send_bytes": 4 * params,
            "peer": "asleep" if busy is None else f"running {busy[1]} while another fitted, asleep for the rest"}


def _pace(call: Callable[[], None]) -> float:
    """How long ``call`` takes: the second of two calls (the first allocates what the others reuse)."""
    call()
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _pass(idle_s: float, busy: Callable[[], None] | None, took_s: float) -> float:
    """Let ``idle_s`` pass on the waking rank: calling ``busy`` (the latest call took ``took_s``)
    while another call fits, asleep for the rest (all of it without ``busy``); how long the
    latest call took."""
    until = time.perf_counter() + idle_s
    while busy is not None and time.perf_counter() + took_s < until:
        start = time.perf_counter()
        busy()
        took_s = time.perf_counter() - start
    left = until - time.perf_counter()
    if left > 0:
        time.sleep(left)
    return took_s


def _summary(timed: list[tuple], idles_s: tuple[float, ...], rounds: int) -> dict[str, Any]:
    """Per idle time the medians of the measured wait, the turn, the update, the turn after it,
    the small send and the large one (each kind of round timing one send)."""
    rows = []
    for idle in idles_s:
        small = np.array([row[2:] for row in timed if row[0] == idle and not row[1]])
        large = np.array([row[2:] for row in timed if row[0] == idle and row[1]])
        both = np.concatenate([small, large])
        waited, turn, update, turn_after_update = (float(np.median(both[:, i])) for i in range(4))
        rows.append({"idle_s": idle, "waited_s": waited, "turn_s": turn, "update_s": update,
                     "turn_after_update_s": turn_after_update, "send_s": float(np.median(small[:, 4])),
                     "large_send_s": float(np.median(large[:, 4]))})
    return {"rows": rows, "rounds": rounds}


def after_idle_section(document: dict[str, Any]) -> dict[str, Any] | None:
    """The after-wait tables of a runtime-path sweep (None without its rounds): ``turn`` and
    ``send`` rows of ``[waited, seconds]`` (``calls.overhead_after_wait``,
    ``messages.send_overhead_after_wait``), one per idle time at the time rank 0 measured it
    waited, and ``source``, the words saying how. A row whose wait is not above the row
    before's (a noisy short idle) is left out: the tables' waits must increase."""
    measured = document.get("after_idle")
    if not measured:
        return None
    turn, send, per_byte, last = [], [], [], 0.0
    extra_bytes = measured["large_send_bytes"] - SMALL_SEND
    for row in measured["rows"]:
        if row["waited_s"] > last:
            turn.append([row["waited_s"], row["turn_s"]])
            send.append([row["waited_s"], row["send_s"]])
            per_byte.append([row["waited_s"], max(row["large_send_s"] - row["send_s"], 0.0) / extra_bytes])
            last = row["waited_s"]
    idles_ms = ", ".join(f"{row['idle_s'] * 1e3:g}" for row in measured["rows"])
    return {"turn": turn, "send": send, "send_per_byte": per_byte,
            "turn_after_work": measured["rows"][0]["turn_after_update_s"], "source": (
        f"after a blocking wait: rank 0 waited in the runtime's waiting loop for a peer that let each of "
        f"{idles_ms} ms pass ({measured['peer']}), then timed the driver's next turn, {measured['update']} (as "
        f"the work of a request), the turn after it and a send, of {SMALL_SEND} B in one round and of "
        f"{measured['large_send_bytes']} B (the parameters) in the next; "
        f"medians of {measured['rounds']} rounds of each, against the time it waited; per byte: the large send's "
        f"rise over the small one's")}
