"""Tests of covbook._validate: the one argument check per concept that every module shares."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from covbook import icl, prior_work
from covbook._devices import DEVICES
from covbook._validate import (
    ArgTypeError,
    as_array,
    check_checkpoints,
    check_nonnegative_float,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
    check_positive_ints,
    check_seed,
)
from covbook.attention import readout_path
from covbook.processes import GaussianIID


def test_a_wrong_type_is_both_a_type_error_and_a_value_error():
    assert issubclass(ArgTypeError, TypeError) and issubclass(ArgTypeError, ValueError)
    for call in (lambda: check_seed("a"), lambda: check_seed(1.5), lambda: check_nonnegative_float("1", "noise"),
                 lambda: check_positive_float(True, "eta"), lambda: check_positive_float(None, "eta")):
        with pytest.raises(ArgTypeError):
            call()


@pytest.mark.parametrize("seed", [0, 7, np.int64(3), 2**63 - 1])
def test_check_seed_accepts_integers_in_range(seed):
    out = check_seed(seed)
    assert out == int(seed) and type(out) is int


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (2**63, ValueError), (True, TypeError),
                                         ("a", TypeError), (None, TypeError)])
def test_check_seed_names_the_argument(seed, error):
    with pytest.raises(error, match="my_seed must be a non-negative integer"):
        check_seed(seed, "my_seed")


def test_integer_checks():
    assert check_nonnegative_int(0, "steps") == 0 and check_positive_int(np.int32(4), "n") == 4
    with pytest.raises(ValueError, match="steps must be a non-negative integer, got -1"):
        check_nonnegative_int(-1, "steps")
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        check_positive_int(0, "n")
    for bad in (1.0, "1", True, None):
        with pytest.raises(ArgTypeError, match="n must be a positive integer"):
            check_positive_int(bad, "n")


def test_positive_ints_name_the_first_offender():
    check_positive_ints(n_models=1, n_prompts=np.int64(3))
    with pytest.raises(ValueError, match="n_prompts must be a positive integer, got 0"):
        check_positive_ints(n_models=2, n_prompts=0, t_greedy=-1)
    with pytest.raises(ArgTypeError, match="t_greedy"):
        check_positive_ints(t_greedy=2.0)


def test_real_checks_accept_numbers_and_refuse_bad_values():
    assert check_nonnegative_float(0, "noise") == 0.0
    assert check_nonnegative_float(np.float32(0.5), "noise") == 0.5
    assert check_positive_float(2, "eta") == 2.0
    with pytest.raises(ValueError, match="eta must be a positive finite number, got 0"):
        check_positive_float(0, "eta")
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="noise must be a finite number >= 0"):
            check_nonnegative_float(bad, "noise")


def test_as_array_is_a_finite_float64_array():
    a = as_array([1, 2], "t")
    assert a.dtype == np.float64 and a.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="t must be array-like of real numbers, got str"):
        as_array("a", "t")
    with pytest.raises(ValueError, match="eta must be a step size, got list"):
        as_array([[1.0], [1.0, 2.0]], "eta", "a step size")
    with pytest.raises(ValueError, match=r"t must be finite \(no NaN or inf\)"):
        as_array([1.0, math.nan], "t")


def test_the_science_and_the_pipeline_know_the_same_devices():
    from covbook.book.config import DEVICES as PIPELINE_DEVICES  # one list, covbook._devices (no torch)

    assert DEVICES is PIPELINE_DEVICES


def test_check_checkpoints_is_the_one_checkpoint_check():
    assert check_checkpoints([1, 10, 100]) == [1, 10, 100]
    assert check_checkpoints(np.array([5.0, 50.0])) == [5, 50]  # integer-valued floats
    for bad, match in (([], "non-empty"), ([10, 5], "increasing"), ([0, 5], "increasing"), (["a"], "checkpoints"),
                       ([1.5], "checkpoints must be integers"), ([True], "checkpoints"), (None, "checkpoints")):
        with pytest.raises(ValueError, match=match):
            check_checkpoints(bad)


def test_every_streaming_path_uses_it():
    # the streaming readout, the ICL prediction paths and the prior-work head paths refused 1.5 in three ways
    # (one truncated it to 1); now all name the argument the same way
    eye = torch.eye(2, dtype=torch.float64)
    calls = [lambda: readout_path(GaussianIID(eye), eye, eye, eye, eye, [1.5]),
             lambda: icl.icl_prediction_paths([1.0, 0.5], [[0.1, 0.2]], 0.5, [1.5])]
    model = icl.stacked_gd_transformer(2, 0.5, 1)
    calls.append(lambda: prior_work.head_paths(model, torch.ones(1, 2), torch.ones(1, 2), [1.5]))
    for call in calls:
        with pytest.raises(ValueError, match="checkpoints must be integers"):
            call()
