"""Bad input to every public function of processes, theory, stats and linalg: a clear error, never NaN.

Each row of ``BAD_CALLS`` is one bad call and the error it must raise, with a
message naming the argument.  ``test_audit_counts`` classifies every row the
way the reliability sweep of the issue tracker did (clear error, NaN/inf
returned, internal error, accepted) so the counts can be reported.  A
hypothesis test fuzzes the main entry points with arbitrary floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from covbook import linalg, stats, theory
from covbook import processes as P

F64 = torch.float64
I2 = torch.eye(2, dtype=F64)
EMPTY = torch.zeros(0, 0, dtype=F64)
NAN2 = torch.tensor([[float("nan"), 0.0], [0.0, 1.0]], dtype=F64)
INF2 = torch.tensor([[float("inf"), 0.0], [0.0, 1.0]], dtype=F64)
GEN = torch.Generator().manual_seed(0)
TWO = P.DiscreteMixing([0.5, 1.5], [0.5, 0.5])
BIG = 10**12  # tokens per stream: 2 × 10^12 float64 values cannot fit


def _gauss() -> P.GaussianIID:
    return P.GaussianIID(I2)


# (label, call, exception type, message pattern)
BAD_CALLS: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # --- processes: constructors ---------------------------------------------------------
    ("GaussianIID empty cov", lambda: P.GaussianIID(EMPTY), ValueError, "at least 1x1"),
    ("GaussianIID NaN cov", lambda: P.GaussianIID(NAN2), ValueError, "cov must be finite"),
    ("GaussianIID inf cov", lambda: P.GaussianIID(INF2), ValueError, "cov must be finite"),
    ("GaussianIID 1-d cov", lambda: P.GaussianIID([1.0, 2.0]), ValueError, "cov must have 2 dims"),
    ("GaussianIID non-square", lambda: P.GaussianIID([[1.0, 0.0]]), ValueError, "cov must be a square"),
    ("GaussianIID asymmetric", lambda: P.GaussianIID([[1.0, 1.0], [0.0, 1.0]]), ValueError, "cov must be symmetric"),
    ("GaussianIID not PSD", lambda: P.GaussianIID([[1.0, 0.0], [0.0, -1.0]]), ValueError, "positive semi-definite"),
    ("GaussianIID string", lambda: P.GaussianIID("abc"), ValueError, "cov must"),
    ("GaussianIID bool dtype", lambda: P.GaussianIID(torch.ones(2, 2, dtype=torch.bool)), ValueError, "real numbers"),
    ("GaussianIID complex", lambda: P.GaussianIID(torch.eye(2, dtype=torch.complex128)), ValueError, "real numbers"),
    ("GaussianIID mean shape", lambda: P.GaussianIID(I2, [1.0, 2.0, 3.0]), ValueError, "mean must have shape"),
    ("GaussianIID NaN mean", lambda: P.GaussianIID(I2, [float("nan"), 0.0]), ValueError, "mean must be finite"),
    ("Replay empty 2-d", lambda: P.Replay(torch.zeros(0, 2)), ValueError, "tokens must hold at least one"),
    ("Replay empty 3-d", lambda: P.Replay(torch.zeros(1, 0, 2)), ValueError, "tokens must hold at least one"),
    ("Replay 1-d", lambda: P.Replay([1.0, 2.0]), ValueError, "tokens must have 2 or 3 dims"),
    ("Replay NaN", lambda: P.Replay([[float("nan")]]), ValueError, "tokens must be finite"),
    ("DiscreteMixing empty", lambda: P.DiscreteMixing([], []), ValueError, "values and probs must be non-empty"),
    ("DiscreteMixing mean", lambda: P.DiscreteMixing([1.0, 2.0], [0.5, 0.5]), ValueError, "E W = 1"),
    ("DiscreteMixing probs", lambda: P.DiscreteMixing([1.0], [0.5]), ValueError, "probs must be"),
    ("DiscreteMixing negative", lambda: P.DiscreteMixing([-1.0, 3.0], [0.5, 0.5]), ValueError, "values must be >= 0"),
    ("DiscreteMixing lengths", lambda: P.DiscreteMixing([1.0], [0.5, 0.5]), ValueError, "equal length"),
    ("InverseGaussianMixing 0", lambda: P.InverseGaussianMixing(0.0), ValueError, "shape must be a positive"),
    ("InverseGaussianMixing str", lambda: P.InverseGaussianMixing("a"), ValueError, "shape must be a positive"),
    ("InverseGaussianMixing inf", lambda: P.InverseGaussianMixing(math.inf), ValueError, "shape must be a positive"),
    ("mixing_law unknown", lambda: P.mixing_law("cauchy"), ValueError, "mixing law name"),
    ("ScaleMixture not a law", lambda: P.ScaleMixture(I2, 2.0), ValueError, "scale must be a MixingLaw"),
    ("ScaleMixture empty cov", lambda: P.ScaleMixture(EMPTY, TWO), ValueError, "at least 1x1"),
    ("MultivariateLaplace NaN", lambda: P.MultivariateLaplace(NAN2), ValueError, "cov must be finite"),
    ("StudentT nu 0", lambda: P.StudentT(I2, 0), ValueError, "nu must be a positive integer"),
    ("StudentT nu float", lambda: P.StudentT(I2, 2.5), ValueError, "nu must be a positive integer"),
    ("StudentT empty scale", lambda: P.StudentT(EMPTY, 3), ValueError, "at least 1x1"),
    ("VAR1 unstable", lambda: P.VAR1(2 * I2, I2), ValueError, "A must be stable"),
    ("VAR1 size mismatch", lambda: P.VAR1(0.5 * I2, torch.eye(3, dtype=F64)), ValueError, "noise_cov must be 2x2"),
    ("VAR1 empty", lambda: P.VAR1(EMPTY, EMPTY), ValueError, "at least 1x1"),
    ("VAR1 NaN A", lambda: P.VAR1(NAN2, I2), ValueError, "A must be finite"),
    ("RandomWalk empty", lambda: P.RandomWalk(EMPTY), ValueError, "at least 1x1"),
    ("NonErgodicGaussian empty list", lambda: P.NonErgodicGaussian([]), ValueError, "covs must be a non-empty"),
    ("NonErgodicGaussian sizes", lambda: P.NonErgodicGaussian([I2, torch.eye(3, dtype=F64)]), ValueError,
     r"covs\[1\] must be 2x2"),
    ("NonErgodicGaussian probs", lambda: P.NonErgodicGaussian([I2, I2], [0.2, 0.2]), ValueError, "probs must be 2"),
    ("SkewedExponential dim 0", lambda: P.SkewedExponential(0), ValueError, "dim must be a positive integer"),
    ("SkewedExponential dim float", lambda: P.SkewedExponential(2.0), ValueError, "dim must be a positive integer"),
    ("BimodalGaussian empty", lambda: P.BimodalGaussian([]), ValueError, "m must have at least one"),
    ("BimodalGaussian NaN", lambda: P.BimodalGaussian([float("nan")]), ValueError, "m must be finite"),
    ("BimodalGaussian 2-d", lambda: P.BimodalGaussian([[1.0]]), ValueError, "m must have 1 dims"),
    # --- processes: sampling ---------------------------------------------------------------
    ("sample generator None", lambda: _gauss().sample(3, None), TypeError, "generator must be a torch.Generator"),
    ("sample generator int", lambda: _gauss().sample(3, 0), TypeError, "generator must be a torch.Generator"),
    ("sample n 0", lambda: _gauss().sample(0, GEN), ValueError, "n must be a positive integer"),
    ("sample n negative", lambda: _gauss().sample(-5, GEN), ValueError, "n must be a positive integer"),
    ("sample n float", lambda: _gauss().sample(2.5, GEN), ValueError, "n must be a positive integer"),
    ("sample n too big", lambda: _gauss().sample(BIG, GEN), ValueError, "n .* asks for .* more than this machine"),
    ("sampler streams 0", lambda: _gauss().sampler(GEN, 0), ValueError, "streams must be a positive integer"),
    ("sampler generator None", lambda: _gauss().sampler(None, 2), TypeError, "generator must be a torch.Generator"),
    ("sampler draw too big", lambda: _gauss().sampler(GEN, 1000)(BIG), ValueError, "asks for .* more than"),
    ("VAR1 draw too big", lambda: P.VAR1(0.5 * I2, I2).sampler(GEN, 10)(BIG), ValueError, "asks for .* more than"),
    ("VAR1 sampler None", lambda: P.VAR1(0.5 * I2, I2).sampler(None), TypeError, "generator must be"),
    ("RandomWalk draw 0", lambda: P.RandomWalk(I2).sampler(GEN)(0), ValueError, "n must be a positive integer"),
    ("RandomWalk too big", lambda: P.RandomWalk(I2).sampler(GEN, 10)(BIG), ValueError, "asks for .* more than"),
    ("NonErgodic sampler None", lambda: P.NonErgodicGaussian([I2]).sampler(None), TypeError, "generator must be"),
    ("NonErgodic components 0", lambda: P.NonErgodicGaussian([I2]).components(GEN, 0), ValueError,
     "streams must be a positive"),
    ("NonErgodic component k", lambda: P.NonErgodicGaussian([I2]).component(3), ValueError, "k must be an integer"),
    ("NonErgodic component str", lambda: P.NonErgodicGaussian([I2]).component("0"), ValueError, "k must be an integer"),
    ("Replay overrun", lambda: P.Replay(torch.ones(3, 2)).sampler(GEN)(5), ValueError, "Replay has 3 tokens"),
    ("Replay streams", lambda: P.Replay(torch.ones(3, 2)).sampler(GEN, 2), ValueError, "Replay holds 1 stream"),
    ("Replay generator", lambda: P.Replay(torch.ones(3, 2)).sampler("gen"), TypeError, "generator must be"),
    ("mixing sample None", lambda: TWO.sample((3,), None), TypeError, "generator must be"),
    ("mixing sample shape", lambda: TWO.sample((-1,), GEN), ValueError, "shape must be a tuple of non-negative"),
    ("mixing sample str", lambda: P.ExponentialMixing().sample("3", GEN), ValueError, "shape must be a tuple"),
    ("mixing sample too big", lambda: P.ExponentialMixing().sample((BIG, BIG), GEN), ValueError, "shape asks for"),
    ("IG sample None", lambda: P.InverseGaussianMixing(2.0).sample((3,), None), TypeError, "generator must be"),
    ("mixing log_mgf NaN", lambda: TWO.log_mgf(torch.tensor(float("nan"))), ValueError, "u must be finite"),
    ("mixing tilted NaN", lambda: P.ExponentialMixing().tilted_mean(float("nan")), ValueError, "u must be finite"),
    ("IG log_mgf str", lambda: P.InverseGaussianMixing(2.0).log_mgf("x"), ValueError, "u must"),
    # --- processes: limits ---------------------------------------------------------------
    ("tilted_mean wrong dim", lambda: _gauss().tilted_mean([1.0, 2.0, 3.0]), ValueError, "a must have last dim 2"),
    ("tilted_mean NaN", lambda: _gauss().tilted_mean([float("nan"), 0.0]), ValueError, "a must be finite"),
    ("tilted_mean 3-d", lambda: _gauss().tilted_mean(torch.ones(1, 1, 2)), ValueError, "a must have 1 or 2 dims"),
    ("tilted_mean overflow", lambda: P.GaussianIID(4 * I2).tilted_mean([1e308, 1e308]), ValueError, "not finite"),
    ("tilted_mean Student-t", lambda: P.StudentT(I2, 3).tilted_mean([0.1, 0.0]), ValueError, "no limit exists"),
    ("tilted_mean walk", lambda: P.RandomWalk(I2).tilted_mean([0.1, 0.0]), ValueError, "no limit exists"),
    ("tilted_mean non-ergodic", lambda: P.NonErgodicGaussian([I2]).tilted_mean([0.1, 0.0]), ValueError,
     "own limit"),
    ("tilted_mean Laplace s=2", lambda: P.MultivariateLaplace(I2).tilted_mean([2**0.5, 0.0]), ValueError,
     "no limit exists"),
    ("tilted_mean skewed a=1", lambda: P.SkewedExponential(2).tilted_mean([1.0, 0.0]), ValueError,
     "no limit exists"),
    ("tilted_mean Replay", lambda: P.Replay(torch.ones(3, 2)).tilted_mean([0.1, 0.0]), ValueError,
     "no closed-form tilted mean"),
    # --- theory ---------------------------------------------------------------------------
    ("tilt_vector shapes", lambda: theory.tilt_vector(I2, torch.eye(3), [1.0, 0.0]), ValueError,
     "theta_q and theta_k must have the same shape"),
    ("tilt_vector q dim", lambda: theory.tilt_vector(I2, I2, [1.0]), ValueError, "q must have last dim 2"),
    ("tilt_vector NaN", lambda: theory.tilt_vector(I2, I2, [float("nan"), 1.0]), ValueError, "q must be finite"),
    ("logit_variance cov", lambda: theory.logit_variance(I2, I2, torch.eye(3), [1.0, 0.0]), ValueError,
     "cov must be 2x2"),
    ("scale_to s=0", lambda: theory.scale_to_logit_variance(I2, I2, I2, [[1.0, 0.0]], 0.0), ValueError,
     "target logit variance s"),
    ("scale_to s=nan", lambda: theory.scale_to_logit_variance(I2, I2, I2, [[1.0, 0.0]], math.nan), ValueError,
     "target logit variance s"),
    ("scale_to s=True", lambda: theory.scale_to_logit_variance(I2, I2, I2, [[1.0, 0.0]], True), ValueError,
     "target logit variance s"),
    ("scale_to zero query", lambda: theory.scale_to_logit_variance(I2, I2, I2, [[0.0, 0.0]], 1.0), ValueError,
     "zero logit variance"),
    ("covariance_readout theta_v", lambda: theory.covariance_readout(I2, I2, torch.eye(3), I2, [1.0, 0.0]),
     ValueError, "theta_v must have shape"),
    ("covariance_readout mean", lambda: theory.covariance_readout(I2, I2, I2, I2, [1.0, 0.0], [1.0]), ValueError,
     "mean must have shape"),
    ("covariance_readout empty cov", lambda: theory.covariance_readout(I2, I2, I2, EMPTY, [1.0, 0.0]), ValueError,
     "at least 1x1"),
    ("covariance_readout overflow", lambda: theory.covariance_readout(I2 * 1e200, I2 * 1e200, I2, I2, [1e200, 0.0]),
     ValueError, "not finite"),
    ("readout_mse_constant q=1e3", lambda: theory.readout_mse_constant(I2, I2, I2, I2, [1e3, 0.0]), ValueError,
     "q gives logit variance"),
    ("readout_mse_constant rows", lambda: theory.readout_mse_constant(torch.eye(3, 2), I2, I2, I2, [1.0, 0.0]),
     ValueError, "same number of rows"),
    ("readout_error_covariance q", lambda: theory.readout_error_covariance(I2, I2, I2, I2, [[1e3, 0.0]]), ValueError,
     "q gives logit variance"),
    ("normalised_error_sd q", lambda: theory.normalised_error_sd(I2, I2, I2, I2, [[1.0, 0.0, 0.0]]), ValueError,
     "q must have last dim 2"),
    ("spectral_radius empty", lambda: theory.spectral_radius(EMPTY), ValueError, "A must be at least 1x1"),
    ("spectral_radius non-square", lambda: theory.spectral_radius(torch.ones(2, 3)), ValueError,
     "A must be a square"),
    ("spectral_radius NaN", lambda: theory.spectral_radius(NAN2), ValueError, "A must be finite"),
    ("stationary_covariance unstable", lambda: theory.stationary_covariance(I2, I2), ValueError, "A must be stable"),
    ("linalg stationary empty", lambda: linalg.stationary_covariance(EMPTY, EMPTY), ValueError, "at least 1x1"),
    ("elliptical_gain s=1e6 Laplace", lambda: theory.elliptical_gain(1e6, P.ExponentialMixing()), ValueError,
     "s must be below 2"),
    ("elliptical_gain s=2 NIG", lambda: theory.elliptical_gain(2.0, "nig"), ValueError, "s must be below 2"),
    ("elliptical_gain s<0", lambda: theory.elliptical_gain(-1.0, TWO), ValueError, "non-negative"),
    ("elliptical_gain NaN", lambda: theory.elliptical_gain(math.nan, TWO), ValueError, "s must be finite"),
    ("elliptical_gain law", lambda: theory.elliptical_gain(0.5, 3), ValueError, "MixingLaw or a law name"),
    ("elliptical_gain name", lambda: theory.elliptical_gain(0.5, "cauchy"), ValueError, "mixing law name"),
    ("elliptical_kurtosis law", lambda: theory.elliptical_kurtosis(None), ValueError, "MixingLaw"),
    ("small_logit_gain s<0", lambda: theory.small_logit_gain(-1.0, TWO), ValueError, "non-negative"),
    ("small_logit_gain inf", lambda: theory.small_logit_gain(math.inf, TWO), ValueError, "s must be finite"),
    ("small_logit_remainder s<0", lambda: theory.small_logit_remainder(-1.0, TWO), ValueError, "non-negative"),
    ("tilted_mean not a process", lambda: theory.tilted_mean("gauss", [0.1]), ValueError, "process must be"),
    ("tilted_mean_expansion no cumulant", lambda: theory.tilted_mean_expansion(P.StudentT(I2, 1), [0.1, 0.0]),
     ValueError, "third cumulant"),
    ("tilted_mean_expansion dim", lambda: theory.tilted_mean_expansion(_gauss(), [0.1]), ValueError,
     "a must have last dim 2"),
    ("tilted_mean_expansion process", lambda: theory.tilted_mean_expansion(None, [0.1]), ValueError,
     "process must be"),
    ("var1_rate_constant unstable", lambda: theory.var1_rate_constant(I2, I2, I2, 1.5 * I2, I2, [0.1, 0.0]),
     ValueError, "A must be stable"),
    ("var1_rate_constant q=1e3", lambda: theory.var1_rate_constant(I2, I2, I2, 0.5 * I2, I2, [1e3, 0.0]),
     ValueError, "q gives logit variance"),
    ("student_t grid 0", lambda: theory.student_t_extreme_angle_sd(3, grid=0), ValueError, "grid must be"),
    ("student_t grid 1", lambda: theory.student_t_extreme_angle_sd(3, grid=1), ValueError, "grid must have at least"),
    ("student_t nu 0", lambda: theory.student_t_extreme_angle_sd(0), ValueError, "nu must be a positive integer"),
    ("student_t nu float", lambda: theory.student_t_extreme_angle_sd(1.5), ValueError, "nu must be a positive"),
    ("laplace_weight_tail_index 0", lambda: theory.laplace_weight_tail_index([0.0]), ValueError, "must be positive"),
    ("laplace_weight_tail_index NaN", lambda: theory.laplace_weight_tail_index([math.nan]), ValueError,
     "s must be finite"),
    ("heavy_tail alpha 1", lambda: theory.heavy_tail_mse_exponent([1.0]), ValueError, "alpha must exceed 1"),
    ("heavy_tail alpha inf", lambda: theory.heavy_tail_mse_exponent([math.inf]), ValueError, "alpha must be finite"),
    ("laplace_rate_fraction s", lambda: theory.laplace_rate_fraction(0.6, [10.0]), ValueError, "s must be below 1/2"),
    ("laplace_rate_fraction s<0", lambda: theory.laplace_rate_fraction(-0.1, [10.0]), ValueError, "s must be a"),
    ("laplace_rate_fraction t", lambda: theory.laplace_rate_fraction(0.25, [0.5]), ValueError, "t must be >= 1"),
    ("laplace_rate_fraction cut", lambda: theory.laplace_rate_fraction(0.25, [10.0], cut=0.0), ValueError,
     "cut must be a positive"),
    ("laplace_rate_fraction dim", lambda: theory.laplace_rate_fraction(0.25, [10.0], dim=0), ValueError,
     "dim must be a positive"),
    ("delta_method_reach s<0", lambda: theory.delta_method_reach([-1.0], [10.0]), ValueError, "need s >= 0"),
    ("delta_method_reach t<1", lambda: theory.delta_method_reach([1.0], [0.0]), ValueError, "t >= 1"),
    ("delta_method_reach NaN", lambda: theory.delta_method_reach([math.nan], [10.0]), ValueError, "s must be finite"),
    # --- stats ----------------------------------------------------------------------------
    ("loglog_slope lengths", lambda: stats.loglog_slope([1, 2, 3], [1, 2]), ValueError, "equal length"),
    ("loglog_slope non-positive", lambda: stats.loglog_slope([1, 2], [0, 1]), ValueError, "positive t and y"),
    ("loglog_slope NaN", lambda: stats.loglog_slope([1, 2], [math.nan, 1]), ValueError, "y must be finite"),
    ("loglog_slope strings", lambda: stats.loglog_slope(["a", "b"], [1, 2]), ValueError, "t must be array-like"),
    ("bootstrap_se one row", lambda: stats.bootstrap_se([1.0], np.mean), ValueError, "at least two"),
    ("bootstrap_se n_boot", lambda: stats.bootstrap_se([1.0, 2.0], np.mean, n_boot=0), ValueError,
     "n_boot must be a positive"),
    ("bootstrap_se seed<0", lambda: stats.bootstrap_se([1.0, 2.0], np.mean, seed=-1), ValueError,
     "seed must be a non-negative"),
    ("bootstrap_se seed str", lambda: stats.bootstrap_se([1.0, 2.0], np.mean, seed="a"), TypeError,
     "seed must be a non-negative"),
    ("bootstrap_se statistic", lambda: stats.bootstrap_se([1.0, 2.0], None), TypeError, "statistic must be"),
    ("mean_with_se one", lambda: stats.mean_with_se([1.0]), ValueError, "at least two"),
    ("intercept weights one t", lambda: stats.inverse_t_intercept_weights([4.0]), ValueError, "two distinct"),
    ("intercept weights nan", lambda: stats.inverse_t_intercept_weights([4.0, math.nan]), ValueError, "finite"),
    ("intercept weights negative", lambda: stats.inverse_t_intercept_weights([-4.0, 8.0]), ValueError, "positive"),
    ("mean_with_se inf", lambda: stats.mean_with_se([1.0, math.inf]), ValueError, "samples must be finite"),
    ("slope_with_se shape", lambda: stats.slope_with_se([1, 2], [[1.0, 2.0, 3.0]]), ValueError,
     "sq_err must have shape"),
    ("mean_loglog_slope shape", lambda: stats.mean_loglog_slope([1, 2], [[1.0, 2.0, 3.0]]), ValueError,
     "y must have shape"),
    ("mean_loglog_slope one row", lambda: stats.mean_loglog_slope([1, 2], [[1.0, 0.5]]), ValueError,
     "at least two replicates"),
    ("mean_loglog_slope zero", lambda: stats.mean_loglog_slope([1, 2], [[1.0, 0.0], [1.0, 0.5]]), ValueError,
     "positive t and y"),
    ("mean_loglog_slope one t", lambda: stats.mean_loglog_slope([3.0], [[1.0], [2.0]]), ValueError,
     "at least 2 context lengths"),
    ("mean_loglog_slope equal t", lambda: stats.mean_loglog_slope([3.0, 3.0], [[1.0, 2.0], [2.0, 1.0]]),
     ValueError, "two distinct"),
    ("mean_loglog_slope nan", lambda: stats.mean_loglog_slope([1.0, 2.0], [[1.0, math.nan], [2.0, 1.0]]),
     ValueError, "y must be finite"),
    ("slope_with_checkpoint_se few", lambda: stats.slope_with_checkpoint_se([1, 2], [[1.0, 0.5], [2.0, 1.0]]),
     ValueError, "at least 3"),
    ("slope_with_se seed<0", lambda: stats.slope_with_se([1, 10], [[1.0, 0.1], [2.0, 0.2]], seed=-3), ValueError,
     "seed must be a non-negative"),
]


@pytest.mark.parametrize("label, call, exc, match", BAD_CALLS, ids=[row[0] for row in BAD_CALLS])
def test_bad_call_raises_a_clear_error(label, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _classify(call: Callable[[], object]) -> str:
    try:
        out = call()
    except (ValueError, TypeError):
        return "clear"
    except Exception:  # noqa: BLE001 - classifying internal errors is the point
        return "internal"
    values = out if isinstance(out, (tuple, list)) else (out,)
    for v in values:
        if isinstance(v, (torch.Tensor, np.ndarray, float, int)) and not bool(np.all(np.isfinite(np.asarray(v)))):
            return "nan_inf"
    return "accepted"


def test_audit_counts(capsys):
    counts = {"clear": 0, "nan_inf": 0, "internal": 0, "accepted": 0}
    for _, call, _, _ in BAD_CALLS:
        counts[_classify(call)] += 1
    with capsys.disabled():
        print(f"\nbad-input audit (processes, theory, stats, linalg): {len(BAD_CALLS)} calls tried, {counts}")
    assert counts == {"clear": len(BAD_CALLS), "nan_inf": 0, "internal": 0, "accepted": 0}


# --- hypothesis: the main entry points answer a finite result or a clear error -----------

ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=64)


def _finite_or_clear(call: Callable[[], object]) -> None:
    try:
        out = call()
    except (ValueError, TypeError):
        return
    assert bool(torch.isfinite(torch.as_tensor(out)).all()), f"non-finite answer {out!r}"


@settings(max_examples=150, deadline=None)
@given(st.lists(ANY_FLOAT, min_size=4, max_size=4), st.lists(ANY_FLOAT, min_size=2, max_size=2))
def test_fuzz_gaussian_readout_and_constant(cov_entries, q):
    cov = torch.tensor(cov_entries, dtype=F64).reshape(2, 2)
    _finite_or_clear(lambda: theory.covariance_readout(I2, I2, I2, cov, q))
    _finite_or_clear(lambda: theory.readout_mse_constant(I2, I2, I2, cov, q))
    _finite_or_clear(lambda: P.GaussianIID(cov).tilted_mean(q))


@settings(max_examples=150, deadline=None)
@given(ANY_FLOAT, st.sampled_from(P.MIXING_LAWS))
def test_fuzz_elliptical_gain(s, law):
    _finite_or_clear(lambda: theory.elliptical_gain(s, law))
    _finite_or_clear(lambda: theory.small_logit_gain(s, law))


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY_FLOAT, min_size=2, max_size=2),
       st.sampled_from(["laplace", "skewed", "bimodal", "var1", "two_point"]))
def test_fuzz_tilted_mean_of_every_law(a, name):
    law = {"laplace": P.MultivariateLaplace(I2), "skewed": P.SkewedExponential(2),
           "bimodal": P.BimodalGaussian([1.0, 0.5]), "var1": P.VAR1(0.5 * I2, I2),
           "two_point": P.ScaleMixture(I2, TWO)}[name]
    _finite_or_clear(lambda: theory.tilted_mean(law, a))
    _finite_or_clear(lambda: theory.tilted_mean_expansion(law, a))


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), st.none(), st.text(max_size=2)))
def test_fuzz_sample_sizes(n):
    try:
        x = _gauss().sample(n, torch.Generator().manual_seed(0))
    except (ValueError, TypeError):
        return
    assert x.shape == (n, 2)
