"""Bad input to every public function of covbook.icl: a clear ValueError/TypeError naming the argument.

The table lists one bad call per row (wrong shapes, NaN/inf, empty, zero/negative sizes, wrong dtype,
mismatched shapes); :func:`classify` sorts the outcome into clear errors, NaN/inf answers, internal
errors and silently accepted input.  A hypothesis test fuzzes the main entry points.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covbook import icl

NAN, INF = float("nan"), float("inf")
T = icl.make_regression_tasks(4, 6, 2, seed=0)
EYE3 = torch.eye(3, dtype=torch.float64)
GOOD = icl.construct_gd_head(2, 0.5)
MODEL = icl.stacked_gd_transformer(2, 0.5, 2)
X, Y = T.x, T.y


def _tasks(**kw):
    return icl.make_regression_tasks(2, 3, 2, **kw)


def _paths(**kw):
    args = dict(w=[1.0, 0.5], queries=[[0.1, 0.2]], eta=0.5, checkpoints=[5, 10])
    args.update(kw)
    return icl.icl_prediction_paths(args.pop("w"), args.pop("queries"), args.pop("eta"), args.pop("checkpoints"),
                                    **args)


def _train(**kw):
    args = dict(n_examples=4, steps=1, batch=2)
    args.update(kw)
    model = args.pop("model", icl.random_icl_transformer(2, 1, seed=0))
    return icl.train_icl(model, **args)


# (label, call, the argument name the message must contain)
BAD_CALLS = [
    # tasks
    ("tasks n_tasks=0", lambda: icl.make_regression_tasks(0, 3, 2), "n_tasks"),
    ("tasks n_tasks=1.5", lambda: icl.make_regression_tasks(1.5, 3, 2), "n_tasks"),
    ("tasks n_examples=-1", lambda: icl.make_regression_tasks(2, -1, 2), "n_examples"),
    ("tasks d=0", lambda: icl.make_regression_tasks(2, 3, 0), "d"),
    ("tasks cov_x shape", lambda: _tasks(cov_x=EYE3), "cov_x"),
    ("tasks cov_x not PSD", lambda: _tasks(cov_x=-torch.eye(2)), "cov_x"),
    ("tasks cov_x NaN", lambda: _tasks(cov_x=torch.full((2, 2), NAN)), "cov_x"),
    ("tasks noise=-1", lambda: _tasks(noise=-1.0), "noise"),
    ("tasks noise=nan", lambda: _tasks(noise=NAN), "noise"),
    ("tasks noise='a'", lambda: _tasks(noise="a"), "noise"),
    ("tasks x_law", lambda: _tasks(x_law="cauchy"), "x_law"),
    ("tasks x_law=None", lambda: _tasks(x_law=None), "x_law"),
    ("tasks mean_x shape", lambda: _tasks(mean_x=[1.0]), "mean_x"),
    ("tasks w shape", lambda: _tasks(w=[1.0, 2.0, 3.0]), "w"),
    ("tasks w NaN", lambda: _tasks(w=[NAN, 1.0]), "w"),
    ("tasks seed='a'", lambda: _tasks(seed="a"), "seed"),
    ("tasks seed=-1", lambda: _tasks(seed=-1), "seed"),
    ("tasks device", lambda: _tasks(device="tpu"), "device"),
    ("tasks dtype='float'", lambda: _tasks(dtype="float"), "dtype"),
    ("tasks dtype=int64", lambda: _tasks(dtype=torch.int64), "dtype"),
    ("tasks getitem 'a'", lambda: T["a"], "idx"),
    ("tasks with_query shape", lambda: T.with_query([1.0]), "x_query"),
    ("tasks with_query NaN", lambda: T.with_query([NAN, 1.0]), "x_query"),
    ("token_covariance w mismatch", lambda: icl.token_covariance(torch.eye(2), [1.0]), "w"),
    ("token_covariance cov_x", lambda: icl.token_covariance(torch.ones(2, 3), [1.0, 1.0]), "cov_x"),
    ("token_covariance noise", lambda: icl.token_covariance(torch.eye(2), [1.0, 1.0], noise=-1), "noise"),
    ("RegressionTokens []", lambda: icl.RegressionTokens([]), "w"),
    ("RegressionTokens NaN", lambda: icl.RegressionTokens([NAN]), "w"),
    ("RegressionTokens cov_x", lambda: icl.RegressionTokens([1.0, 2.0], EYE3), "cov_x"),
    ("RegressionTokens noise", lambda: icl.RegressionTokens([1.0], noise=NAN), "noise"),
    ("RegressionTokens x_law", lambda: icl.RegressionTokens([1.0], x_law="t"), "x_law"),
    ("elliptical_gain s<0", lambda: icl.elliptical_gain(-1.0, "two_point"), "s"),
    ("elliptical_gain s=nan", lambda: icl.elliptical_gain(NAN, "two_point"), "s"),
    ("elliptical_gain law", lambda: icl.elliptical_gain(0.5, "t"), "x_law"),
    ("elliptical_gain laplace s=3", lambda: icl.elliptical_gain(3.0, "laplace"), "s"),
    ("elliptical_gain s=1e6", lambda: icl.elliptical_gain(1e6, "laplace"), "s"),
    ("mixing_law 3", lambda: icl.mixing_law(3), "x_law"),
    # construction
    ("construct d=0", lambda: icl.construct_gd_head(0, 0.5), "d"),
    ("construct eta=0", lambda: icl.construct_gd_head(2, 0.0), "eta"),
    ("construct eta=nan", lambda: icl.construct_gd_head(2, NAN), "eta"),
    ("construct eta='a'", lambda: icl.construct_gd_head(2, "a"), "eta"),
    ("construct precondition shape", lambda: icl.construct_gd_head(2, 0.5, EYE3), "precondition"),
    ("construct precondition not PSD", lambda: icl.construct_gd_head(2, 0.5, -torch.eye(2)), "precondition"),
    ("head_predict tasks=None", lambda: icl.head_predict(None, *GOOD), "tasks"),
    ("head_predict theta shape", lambda: icl.head_predict(T, torch.eye(2), GOOD[1], GOOD[2]), "theta_q"),
    ("head_predict theta_v shape", lambda: icl.head_predict(T, GOOD[0], GOOD[1], torch.eye(4)), "theta_v"),
    ("head_predict theta NaN", lambda: icl.head_predict(T, GOOD[0], torch.full((3, 3), NAN), GOOD[2]), "theta_k"),
    ("linear_attention tasks", lambda: icl.linear_attention_predict("x", 0.5), "tasks"),
    ("linear_attention eta", lambda: icl.linear_attention_predict(T, -1.0), "eta"),
    ("construction_predict eta_a=0", lambda: icl.construction_predict(T, 0.0), "eta_a"),
    ("construction_predict c=nan", lambda: icl.construction_predict(T, 0.5, NAN), "c"),
    ("construction_predict tasks", lambda: icl.construction_predict(None, 0.5), "tasks"),
    ("risk_curve grid 0", lambda: icl.construction_risk_curve(T, [0.0]), "eta_grid"),
    ("risk_curve grid empty", lambda: icl.construction_risk_curve(T, []), "eta_grid"),
    ("risk_curve grid 'a'", lambda: icl.construction_risk_curve(T, ["a"]), "eta_grid"),
    ("risk_curve tasks", lambda: icl.construction_risk_curve(None, [0.5]), "tasks"),
    # streaming
    ("paths w []", lambda: _paths(w=[]), "w"),
    ("paths queries shape", lambda: _paths(queries=[[0.1, 0.2, 0.3]]), "queries"),
    ("paths queries NaN", lambda: _paths(queries=[[NAN, 0.2]]), "queries"),
    ("paths eta", lambda: _paths(eta=0.0), "eta"),
    ("paths checkpoints []", lambda: _paths(checkpoints=[]), "checkpoints"),
    ("paths checkpoints decreasing", lambda: _paths(checkpoints=[10, 5]), "checkpoints"),
    ("paths checkpoints 0", lambda: _paths(checkpoints=[0, 5]), "checkpoints"),
    ("paths checkpoints 'a'", lambda: _paths(checkpoints=["a"]), "checkpoints"),
    ("paths streams", lambda: _paths(streams=0), "streams"),
    ("paths chunk", lambda: _paths(chunk=-1), "chunk"),
    ("paths noise", lambda: _paths(noise=-1.0), "noise"),
    ("paths x_law", lambda: _paths(x_law="t"), "x_law"),
    ("paths seed", lambda: _paths(seed=-3), "seed"),
    # model
    ("ICLTransformer thetas None", lambda: icl.ICLTransformer(2, None), "thetas"),
    ("ICLTransformer thetas []", lambda: icl.ICLTransformer(2, []), "thetas"),
    ("ICLTransformer d=0", lambda: icl.ICLTransformer(0, [GOOD]), "d"),
    ("ICLTransformer theta shape", lambda: icl.ICLTransformer(3, [GOOD]), "theta_q"),
    ("ICLTransformer not triples", lambda: icl.ICLTransformer(2, [GOOD[:2]]), "thetas"),
    ("ICLTransformer not tensors", lambda: icl.ICLTransformer(2, [("a", "b", "c")]), "thetas"),
    ("ICLTransformer forward shape", lambda: MODEL(torch.zeros(2, 3)), "input"),
    ("ICLTransformer predict None", lambda: MODEL.predict(None), "tasks"),
    ("ICLTransformer predict_by_depth", lambda: MODEL.predict_by_depth("x"), "tasks"),
    ("stacked layers=0", lambda: icl.stacked_gd_transformer(2, 0.5, 0), "layers"),
    ("stacked eta", lambda: icl.stacked_gd_transformer(2, INF, 2), "eta"),
    ("random init_scale", lambda: icl.random_icl_transformer(2, 1, init_scale=0.0), "init_scale"),
    ("random layers", lambda: icl.random_icl_transformer(2, 0), "layers"),
    ("random dtype", lambda: icl.random_icl_transformer(2, 1, dtype="x"), "dtype"),
    ("random seed", lambda: icl.random_icl_transformer(2, 1, seed="a"), "seed"),
    ("attention_matrix 1-D", lambda: icl.causal_attention_matrix(torch.ones(3), GOOD[0], GOOD[1]), "tokens"),
    ("attention_matrix NaN", lambda: icl.causal_attention_matrix(torch.full((1, 2, 3), NAN), *GOOD[:2]), "tokens"),
    ("attention_matrix theta", lambda: icl.causal_attention_matrix(T.sequence(), torch.eye(2), GOOD[1]), "theta_q"),
    ("power_identity tasks", lambda: icl.power_identity_predictions(None, 0.5, 2), "tasks"),
    ("power_identity layers", lambda: icl.power_identity_predictions(T, 0.5, 0), "layers"),
    ("power_identity eta", lambda: icl.power_identity_predictions(T, -0.5, 2), "eta"),
    # gradient descent and risks
    ("max_stable_step zeros", lambda: icl.max_stable_step(torch.zeros(2, 2)), "cov_x"),
    ("max_stable_step empty", lambda: icl.max_stable_step(torch.zeros(0, 0)), "cov_x"),
    ("max_stable_step shape", lambda: icl.max_stable_step(torch.ones(2, 3)), "cov_x"),
    ("population_gd steps", lambda: icl.population_gd(torch.eye(2), [1.0, 1.0], 0.5, -1), "steps"),
    ("population_gd w", lambda: icl.population_gd(torch.eye(2), [1.0], 0.5, 2), "w"),
    ("population_gd eta", lambda: icl.population_gd(torch.eye(2), [1.0, 1.0], NAN, 2), "eta"),
    ("population_gd unstable", lambda: icl.population_gd(torch.eye(2), [1.0, 1.0], 3.0, 2, check_stable=True),
     "eta"),
    ("empirical_gd x 2-D", lambda: icl.empirical_gd(X[0], Y, 0.5), "x"),
    ("empirical_gd y", lambda: icl.empirical_gd(X, Y[:, :2], 0.5), "y"),
    ("empirical_gd steps", lambda: icl.empirical_gd(X, Y, 0.5, 0), "steps"),
    ("empirical_gd n=0", lambda: icl.empirical_gd(X[:, :0], Y[:, :0], 0.5), "x"),
    ("ols n=0", lambda: icl.ols(X[:, :0], Y[:, :0]), "x"),
    ("ols ridge", lambda: icl.ols(X, Y, ridge=-1.0), "ridge"),
    ("ols ridge 'a'", lambda: icl.ols(X, Y, ridge="a"), "ridge"),
    ("ols x NaN", lambda: icl.ols(torch.full_like(X, NAN), Y), "x"),
    ("gd_one_step_risk eta nan", lambda: icl.gd_one_step_risk(10, 2, NAN), "eta"),
    ("gd_one_step_risk eta inf", lambda: icl.gd_one_step_risk(10, 2, INF), "eta"),
    ("gd_one_step_risk n=0", lambda: icl.gd_one_step_risk(0, 2, 0.5), "n"),
    ("gd_one_step_risk d=0", lambda: icl.gd_one_step_risk(10, 0, 0.5), "d"),
    ("gd_one_step_risk noise", lambda: icl.gd_one_step_risk(10, 2, 0.5, noise=-1), "noise"),
    ("gd_optimal_step n nan", lambda: icl.gd_optimal_step(NAN, 2), "n"),
    ("gd_optimal_risk noise", lambda: icl.gd_optimal_risk(5, 2, NAN), "noise"),
    ("ols_risk noise 1e154", lambda: icl.ols_risk(1, 1, 1.3407807929942597e154), "noise"),  # σ² overflowed
    ("averaging_risk n", lambda: icl.averaging_risk(-2, 2), "n"),
    ("ols_risk n 'a'", lambda: icl.ols_risk("a", 2), "n"),
    ("ols_risk d", lambda: icl.ols_risk(5, 2.5), "d"),
    ("risk_mc n_mc", lambda: icl.empirical_gd_risk_mc(5, 2, 0.5, 1, n_mc=0), "n_tasks"),
    ("risk_mc steps", lambda: icl.empirical_gd_risk_mc(5, 2, 0.5, 0), "steps"),
    # training and alignment
    ("train model None", lambda: _train(model=None), "model"),
    ("train n_examples", lambda: _train(n_examples=0), "n_examples"),
    ("train steps", lambda: _train(steps=0), "steps"),
    ("train lr", lambda: _train(lr=0.0), "lr"),
    ("train batch", lambda: _train(batch=-1), "batch"),
    ("train final_lr_fraction", lambda: _train(final_lr_fraction=2.0), "final_lr_fraction"),
    ("train noise", lambda: _train(noise=-1.0), "noise"),
    ("train device", lambda: _train(device="tpu"), "device"),
    ("train log_every", lambda: _train(log_every=0), "log_every"),
    ("bilinear_forms None", lambda: icl.bilinear_forms(None), "model"),
    ("alignment zeros", lambda: icl.construction_alignment(torch.zeros(3, 3), torch.zeros(3, 3)), "b"),
    ("alignment mismatched", lambda: icl.construction_alignment(torch.eye(3), torch.eye(4)), "v"),
    ("alignment 1-D", lambda: icl.construction_alignment(torch.ones(3), torch.eye(3)), "b"),
    ("alignment NaN", lambda: icl.construction_alignment(torch.full((3, 3), NAN), torch.eye(3)), "b"),
    ("alignment 1x1", lambda: icl.construction_alignment(torch.eye(1), torch.eye(1)), "b"),
]


def _has_nonfinite(out: object) -> bool:
    if isinstance(out, torch.Tensor):
        return out.is_floating_point() and not bool(torch.isfinite(out).all())
    if isinstance(out, np.ndarray):
        return out.dtype.kind == "f" and not bool(np.isfinite(out).all())
    if isinstance(out, float):
        return not math.isfinite(out)
    if isinstance(out, dict):
        return any(_has_nonfinite(v) for v in out.values())
    if isinstance(out, (tuple, list)):
        return any(_has_nonfinite(v) for v in out)
    return False


def classify(call, arg: str) -> str:
    """'clear' (ValueError/TypeError naming ``arg``), 'nan', 'internal' or 'accepted'."""
    try:
        out = call()
    except (ValueError, TypeError) as err:
        return "clear" if arg in str(err) else "internal"
    except Exception:  # noqa: BLE001 - any other exception is an internal error by definition
        return "internal"
    return "nan" if _has_nonfinite(out) else "accepted"


@pytest.mark.parametrize("label, call, arg", BAD_CALLS, ids=[row[0] for row in BAD_CALLS])
def test_bad_call_raises_a_clear_error(label, call, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        call()


def test_every_public_function_is_in_the_table():
    exercised = " ".join(label for label, _, _ in BAD_CALLS)
    short = {"make_regression_tasks": "tasks", "RegressionTasks": "tasks", "X_LAWS": None, "TrainLog": None,
             "construct_gd_head": "construct", "linear_attention_predict": "linear_attention",
             "construction_risk_curve": "risk_curve", "icl_prediction_paths": "paths",
             "stacked_gd_transformer": "stacked", "random_icl_transformer": "random",
             "causal_attention_matrix": "attention_matrix", "power_identity_predictions": "power_identity",
             "empirical_gd_risk_mc": "risk_mc", "train_icl": "train", "construction_alignment": "alignment"}
    missing = [n for n in icl.__all__ if short.get(n, n) is not None and short.get(n, n) not in exercised]
    assert not missing


# ----------------------------------------------------------------------------- fuzzing

finite = st.floats(-1e6, 1e6, allow_nan=False)
anything = st.one_of(st.none(), st.text(max_size=3), st.booleans(), st.integers(-5, 5),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_tasks=anything, n=anything, d=anything, noise=anything, law=anything)
def test_fuzz_make_regression_tasks(n_tasks, n, d, noise, law):
    try:
        t = icl.make_regression_tasks(n_tasks, n, d, noise=noise, x_law=law)
    except (ValueError, TypeError):
        return
    assert bool(torch.isfinite(t.tokens).all())


@settings(max_examples=150, deadline=None)
@given(n=anything, d=anything, eta=anything, noise=anything)
def test_fuzz_closed_form_risks(n, d, eta, noise):
    for fn, args in ((icl.gd_one_step_risk, (n, d, eta, noise)), (icl.ols_risk, (n, d, noise)),
                     (icl.gd_optimal_risk, (n, d, noise))):
        try:
            out = fn(*args)
        except (ValueError, TypeError):
            continue
        assert fn is icl.ols_risk or bool(np.isfinite(out).all())   # ols_risk is +inf at n ∈ {d−1, d, d+1}
        assert not bool(np.isnan(out).any())


@settings(max_examples=60, deadline=None)
@given(eta=anything, layers=anything, scale=st.one_of(finite, anything))
def test_fuzz_heads(eta, layers, scale):
    try:
        model = icl.stacked_gd_transformer(2, eta, layers)
    except (ValueError, TypeError):
        pass
    else:
        assert bool(torch.isfinite(model.predict(T)).all())
    try:
        out = icl.construction_predict(T, eta, scale)
    except (ValueError, TypeError):
        return
    assert bool(torch.isfinite(out).all())


@settings(max_examples=60, deadline=None)
@given(b=st.lists(finite, min_size=0, max_size=16), v=st.lists(finite, min_size=0, max_size=16))
def test_fuzz_construction_alignment(b, v):
    def square(x):
        k = int(math.isqrt(len(x)))
        return torch.tensor(x[: k * k], dtype=torch.float64).reshape(k, k)

    try:
        out = icl.construction_alignment(square(b), square(v))
    except (ValueError, TypeError):
        return
    assert all(math.isfinite(x) for x in out.values())


if __name__ == "__main__":  # the counts for the report: python tests/test_errors_icl.py
    from collections import Counter

    counts = Counter(classify(call, arg) for _, call, arg in BAD_CALLS)
    print(f"calls tried {len(BAD_CALLS)}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for label, call, arg in BAD_CALLS:
        c = classify(call, arg)
        if c != "clear":
            print(f"  {c:9s} {label}")
