"""covbook.experiments.readout (chapter 01) at tiny sizes: shapes, determinism, closed forms, claim ids."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from covbook.experiments import readout
from covbook.rules import load_rules
from covbook.streams import Streams
from covbook.theory import logit_variance, readout_mse_constant, scale_to_logit_variance
from helpers import ROOT

RULES = set(load_rules(ROOT / "notebooks" / "rules" / "01_covariance_readout.yml"))
T, R = 2000, 16


@pytest.fixture(scope="module")
def configs() -> readout.Configurations:
    return readout.configurations(2, 2, 2, streams=Streams(0, "01"))


@pytest.fixture(scope="module")
def single(configs) -> readout.SingleStreams:
    return readout.single_streams(configs.single, T, streams=Streams(0, "01"))


@pytest.fixture(scope="module")
def rate(configs) -> readout.Rate:
    return readout.rate(configs.rate, T, R, streams=Streams(0, "01"))


@pytest.fixture(scope="module")
def causal(configs) -> readout.Causal:
    return readout.causal(configs.causal, T, R, streams=Streams(0, "01"))


def test_configurations_are_drawn_in_order_from_one_stream(configs) -> None:
    again = readout.configurations(2, 2, 2, streams=Streams(0, "01"))
    other = readout.configurations(2, 2, 2, streams=Streams(1, "01"))
    assert [h.mean is None for h in configs.single] == [True, False]
    assert configs.single[0].queries.shape == (2, 2) and configs.rate.queries.shape == (1, 2)
    assert configs.causal.queries is None and configs.causal.mean.shape == (2,)
    assert torch.equal(configs.causal.theta_v, again.causal.theta_v)
    assert not torch.equal(configs.causal.theta_v, other.causal.theta_v)
    assert bool(torch.all(torch.linalg.eigvalsh(configs.rate.cov) >= 0.2 - 1e-12))


def test_single_streams(single, configs) -> None:
    n_t = len(single.checkpoints)
    assert single.err.shape == (n_t, 2, 2) and single.C.shape == (2, 2) and single.checkpoints[-1] == T
    assert set(single.measurements) == {"stream_max_normalised_error", "stream_mean_normalised_error"}
    assert set(single.numbers) == {"n_configs", "n_queries", "t_stream", "rel_final"}
    h = configs.single[0]
    tq = scale_to_logit_variance(h.theta_q, h.theta_k, h.cov, h.queries, 1.0)
    assert torch.allclose(single.C[0], readout_mse_constant(tq, h.theta_k, h.theta_v, h.cov, h.queries))
    assert single.numbers["rel_final"] > 0 and float(single.err[-1].mean()) < float(single.err[0].mean()) / 3
    m = single.measurements["stream_mean_normalised_error"]
    assert abs(m["value"] - 1.0) < 4 * m["se"]
    assert 0 < single.measurements["stream_max_normalised_error"]["value"] < 1


def test_rate_matches_the_closed_form_constant_and_slope(rate, configs) -> None:
    assert set(rate.sq) == {0.25, 1.0, 2.0} and rate.sq[1.0].shape == (R, len(rate.t_rate))
    for s, _, slope_id, constant_id in readout.RATE_CLAIMS:
        assert rate.measurements[slope_id]["s_target"] == rate.measurements[constant_id]["s_target"] == s
        c = rate.measurements[constant_id]  # the Satterthwaite run interval of the mean, times [ρ, 1]
        assert 0 < c["lower"] < c["rho_end"] <= 1 < c["upper"] and c["nu"] > 0
        y = rate.t_rate[-1] * rate.sq[s][:, -1] / rate.C[s]  # (R,) the streams' t|err|²/C
        assert c["sd"] == max(c["sd_delta"], float(np.std(y, ddof=1)))  # the larger SD sets ν = 2R/SD²
        assert c["nu"] == pytest.approx(2 * R / c["sd"] ** 2)
        for cid in (slope_id, constant_id):
            m = rate.measurements[cid]
            assert abs(m["value"] - m["prediction"]) < 4 * m["se"] + m["allowance"], (cid, m)
    h = configs.rate
    tq = scale_to_logit_variance(h.theta_q, h.theta_k, h.cov, h.queries, 2.0)
    assert float(logit_variance(tq, h.theta_k, h.cov, h.queries)) == pytest.approx(2.0)
    assert rate.C[2.0] == pytest.approx(float(readout_mse_constant(tq, h.theta_k, h.theta_v, h.cov, h.queries)))
    assert rate.C[0.25] < rate.C[1.0] < rate.C[2.0]  # the e^s factor
    assert rate.numbers == {"t_max": T, "n_streams": R}


def test_causal(causal) -> None:
    assert causal.sq_self.shape == causal.shift.shape == (R, len(causal.t_rate))
    assert causal.measurements["causal_constant"]["value"] > 0  # pre-asymptotic at this size: no closed form yet
    for cid in ("causal_slope", "self_term_bias_slope"):
        m = causal.measurements[cid]
        assert abs(m["value"] - m["prediction"]) < 4 * m["se"] + m.get("allowance", 0.0), (cid, m)


def test_measurements_are_the_rules_ids(single, rate, causal) -> None:
    ids = [*single.measurements, *rate.measurements, *causal.measurements]
    assert len(ids) == len(set(ids)) and set(ids) == RULES


def test_deterministic_for_given_streams(configs, rate) -> None:
    again = readout.rate(configs.rate, T, R, streams=Streams(0, "01"))
    assert all(np.array_equal(rate.sq[s], again.sq[s]) for s in rate.sq)
    assert again.measurements == rate.measurements
    other = readout.rate(configs.rate, T, R, streams=Streams(1, "01"))
    assert not np.array_equal(rate.sq[1.0], other.sq[1.0])


def test_plots(single, rate, causal) -> None:
    plt.switch_backend("Agg")
    fig, ax = plt.subplots()
    single.plot(ax)
    causal.plot(ax)
    assert ax.get_legend() is not None and len(ax.lines) > 8
    fig2, axes = plt.subplots(1, 2)
    rate.plot(axes)
    assert len(axes[1].lines) == 4
    plt.close(fig)
    plt.close(fig2)


@pytest.mark.parametrize(("call", "match"), [
    (lambda c, s: readout.configurations(0, 2, 2, streams=s), "d must"),
    (lambda c, s: readout.configurations(2, 2, 1.5, streams=s), "n_queries"),
    (lambda c, s: readout.single_streams([], 1000, streams=s), "heads"),
    (lambda c, s: readout.single_streams(c.single, 100, streams=s), "t_stream"),
    (lambda c, s: readout.rate(c.causal, 1000, 4, streams=s), "fixed query"),
    (lambda c, s: readout.rate(c.rate, 1000, 1, streams=s), "n_streams"),
    (lambda c, s: readout.causal(c.causal, 50, 4, streams=s), "t_max"),
])
def test_bad_input(configs, call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(configs, Streams(0, "01"))
