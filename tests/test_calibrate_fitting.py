"""Calibration fitters: known parameters come back within 2 % from synthetic data; estimator contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.calibrate.collective_fit import CollectiveFit, NcclAllreduceFit, collective_op, simulated_allreduce_s
from simdist.fitting import (AlphaBetaFit, ContentionFit, LinearTimeFit, PiecewiseAlphaBetaFit,
                                       weighted_line)

SIZES = np.array([0] + [2**k for k in range(23)], dtype=float)  # 0 B .. 4 MiB, as the MPI sweep
NCCL_SIZES = np.array([2**k for k in range(3, 34)], dtype=float)  # 8 B .. 8 GiB, as nccl-tests -b 8 -e 8G


def noisy(values: np.ndarray, level: float, seed: int = 0) -> np.ndarray:
    return values * (1 + level * np.random.default_rng(seed).standard_normal(len(values)))


# -- recovery of known parameters ------------------------------------------------------------

@settings(max_examples=40, deadline=None, derandomize=True)
@given(t0=st.floats(1e-6, 1e-2), ratio=st.floats(0.5, 10.0), seed=st.integers(0, 10_000))
def test_linear_time_fit_recovers_t0_t1(t0, ratio, seed):
    """Profiles where both terms show: the batch term at 256 samples is 0.5x to 10x the fixed cost."""
    t1 = ratio * t0 / 256
    batch = np.array([8, 16, 32, 64, 128, 256, 400, 512], dtype=float)
    fit = LinearTimeFit().fit(batch, noisy(t0 + t1 * batch, 0.002, seed))
    assert fit.t1_s_ == pytest.approx(t1, rel=0.02)
    assert fit.t0_s_ == pytest.approx(t0, rel=0.02)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(latency=st.floats(1e-7, 1e-4), crossover=st.floats(256, 2**20), seed=st.integers(0, 10_000))
def test_alpha_beta_fit_recovers_latency_and_bandwidth(latency, crossover, seed):
    """Links whose latency/bandwidth crossover (latency x bandwidth bytes) lies inside the 1 B - 4 MiB sweep."""
    bandwidth = crossover / latency
    s = SIZES[SIZES > 0]
    fit = AlphaBetaFit().fit(s, noisy(latency + s / bandwidth, 0.002, seed))
    assert fit.latency_s_ == pytest.approx(latency, rel=0.02)
    assert fit.bandwidth_Bps_ == pytest.approx(bandwidth, rel=0.02)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(a1=st.floats(1e-6, 2e-5), b1=st.floats(1e9, 2e10), jump=st.floats(1.5, 4.0), speedup=st.floats(1.3, 3.0),
       k=st.integers(12, 18))
def test_piecewise_fit_finds_the_protocol_switch(a1, b1, jump, speedup, k):
    """An eager regime, then a rendezvous regime with a higher latency and a higher bandwidth."""
    switch = 2.0**k
    a2, b2 = a1 * jump + switch / b1, b1 * speedup  # the second regime starts slower, then grows slower
    times = np.where(SIZES < switch, a1 + SIZES / b1, a2 + SIZES / b2)
    fit = PiecewiseAlphaBetaFit(max_segments=3).fit(SIZES, times)
    assert switch in fit.breakpoints_bytes_
    big = fit.regime(4 * 2**20).fit
    assert big.latency_s_ == pytest.approx(a2, rel=0.02) and big.bandwidth_Bps_ == pytest.approx(b2, rel=0.02)
    small = fit.regime(64).fit
    assert small.latency_s_ == pytest.approx(a1, rel=0.02)
    assert fit.max_relative_error_ < 1e-6


def test_piecewise_fixed_breakpoints_and_noise():
    times = np.where(SIZES < 65536, 2e-6 + SIZES / 5e9, 1e-5 + SIZES / 1e10)
    fit = PiecewiseAlphaBetaFit(breakpoints=[65536]).fit(SIZES, noisy(times, 0.003, 1))
    assert fit.breakpoints_bytes_ == [65536.0]
    assert fit.regime(1 << 20).fit.bandwidth_Bps_ == pytest.approx(1e10, rel=0.02)
    assert fit.regime(1 << 20).fit.latency_s_ == pytest.approx(1e-5, rel=0.02)
    with pytest.raises(ValueError, match="fewer than two"):
        PiecewiseAlphaBetaFit(breakpoints=[4194304]).fit(SIZES, times)


@pytest.mark.parametrize("n", [2, 8, 16, 64])
def test_nccl_allreduce_fit_recovers_hop_latency_and_bus_bandwidth(n):
    """nccl-tests times of the simulator's ring, t = 2(n-1)(a + S/(nB)), give back a and B (busbw)."""
    hop, bus = 3e-6, 150e9
    times = 2 * (n - 1) * (hop + NCCL_SIZES / (n * bus))
    fit = NcclAllreduceFit(n_ranks=n).fit(NCCL_SIZES, noisy(times, 0.003, n))
    regime = fit.regime(64 * 2**20)
    assert regime["hop_latency_s"] == pytest.approx(hop, rel=0.02)
    assert regime["bus_bandwidth_Bps"] == pytest.approx(bus, rel=0.02)
    # busbw = algbw * 2(n-1)/n approaches the fitted bus bandwidth at the largest size
    algbw = NCCL_SIZES[-1] / times[-1]
    assert algbw * 2 * (n - 1) / n == pytest.approx(bus, rel=0.01)


def test_collective_fit_recovers_regimes_and_other_ops():
    n, switch = 16, 2.0**20
    small = 30 * 1.5e-6 + 1.875 * NCCL_SIZES / 20e9
    large = 30 * 2.5e-6 + 1.875 * NCCL_SIZES / 160e9
    times = np.where(NCCL_SIZES < switch, small, large)
    fit = CollectiveFit("all_reduce", n).fit(NCCL_SIZES, times)
    assert fit.regime(2**26)["bus_bandwidth_Bps"] == pytest.approx(160e9, rel=0.02)
    assert fit.regime(2**26)["hop_latency_s"] == pytest.approx(2.5e-6, rel=0.02)
    assert fit.regime(1024)["hop_latency_s"] == pytest.approx(1.5e-6, rel=0.02)
    gather = CollectiveFit("all_gather", 8).fit(NCCL_SIZES, 7 * 2e-6 + (7 / 8) * NCCL_SIZES / 100e9)
    assert gather.regime(2**30)["bus_bandwidth_Bps"] == pytest.approx(100e9, rel=0.02)
    assert collective_op("allreduce").factor(16) == pytest.approx(1.875)
    with pytest.raises(ValueError, match="unknown collective"):
        collective_op("allscatter")


def test_simulator_reproduces_the_collective_model():
    """The fitted link values put back into a platform give the same ring time in the simulator."""
    hop, bus = 2.5e-6, 165e9
    platform = {"nodes": 2, "node": {"devices": 8, "device": {"kind": "a100"}, "nics": 1,
                                     "intra_link": {"kind": "nvswitch"},
                                     "nic_link": {"kind": "ethernet-100g", "latency": hop, "bandwidth": bus}}}
    sizes = np.array([2**20, 2**26, 2**29], dtype=float)
    simulated = simulated_allreduce_s(platform, sizes)
    expected = NcclAllreduceFit(n_ranks=16).predict_with(sizes, hop, bus)
    assert simulated == pytest.approx(expected, rel=1e-9)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(phi=st.floats(1.0, 2.0), t1=st.floats(1e-5, 1e-2), seed=st.integers(0, 1000))
def test_contention_fit_recovers_the_factor(phi, t1, seed):
    ks = np.array([1, 2, 4, 1, 2, 3, 4, 8])
    cs = np.array([1, 1, 1, 2, 2, 2, 2, 2])
    times = t1 * np.maximum(1, ks / cs) * np.where(ks >= 2, phi, 1.0)
    fit = ContentionFit().fit(ks, cs, noisy(times, 0.002, seed), np.full(len(ks), t1))
    assert fit.contention_factor_ == pytest.approx(phi, rel=0.02)
    assert fit.predict([4], [2], [t1])[0] == pytest.approx(2 * t1 * phi, rel=0.02)


def test_contention_fit_of_pure_processor_sharing_is_one():
    fit = ContentionFit().fit([1, 2, 4], [2, 2, 2], [1.0, 1.0, 2.0], [1.0, 1.0, 1.0])
    assert fit.contention_factor_ == pytest.approx(1.0) and fit.r2_ == pytest.approx(1.0)
    assert fit.export()["undersubscribed_factor"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two or more"):
        ContentionFit().fit([1], [1], [1.0], [1.0])


# -- the estimator contract --------------------------------------------------------------------

ESTIMATORS = [
    (LinearTimeFit(weighting="absolute"), ([8, 16, 32], [1.0, 1.5, 2.5]), {"weighting": "absolute"}),
    (AlphaBetaFit(), (SIZES[1:], 1e-6 + SIZES[1:] / 1e9), {"weighting": "relative"}),
    (PiecewiseAlphaBetaFit(max_segments=2), (SIZES, 1e-6 + SIZES / 1e9), {"max_segments": 2, "min_points": 3}),
    (CollectiveFit("all_reduce", 4), (NCCL_SIZES, 6e-6 + 1.5 * NCCL_SIZES / 1e11), {"op": "all_reduce", "n_ranks": 4}),
]


@pytest.mark.parametrize("estimator,data,params", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_estimator_contract(estimator, data, params):
    for name, value in params.items():
        assert getattr(estimator, name) == value  # the constructor only stores its arguments
    assert not [a for a in vars(estimator) if a.endswith("_")]  # nothing fitted before fit
    with pytest.raises(RuntimeError, match="not fitted"):
        estimator.predict(data[0])
    assert estimator.fit(*data) is estimator
    fitted = [a for a in vars(estimator) if a.endswith("_") and not a.startswith("_")]
    assert fitted
    assert estimator.score(*data) == pytest.approx(1.0, abs=1e-6)
    exported = estimator.export()
    assert isinstance(exported, dict) and "r2" in exported


def test_weighted_line_keeps_parameters_physical():
    a, b = weighted_line([1, 2, 3], [1.0, 2.5, 4.0])  # exact line has a negative intercept
    assert a == 0.0 and b > 0
    a, b = weighted_line([1, 2, 3], [3.0, 2.0, 1.0])  # falling times: a flat latency regime
    assert b == 0.0 and a > 0
    assert math.isinf(AlphaBetaFit().fit([1, 2, 3], [3.0, 2.0, 1.0]).bandwidth_Bps_)
    with pytest.raises(ValueError, match="two different"):
        weighted_line([4, 4], [1.0, 2.0])
