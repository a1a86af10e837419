"""The one registry of input laws (covbook.processes.INPUT_LAWS) and every reader of it agree."""

from __future__ import annotations

import pytest
import torch

from covbook import icl, prior_work
from covbook import processes as P
from covbook.theory import elliptical_gain


def test_every_reader_lists_the_registry() -> None:
    assert icl.X_LAWS == tuple(P.INPUT_LAWS)
    assert set(P.MIXING_LAWS) == {n for n, law in P.INPUT_LAWS.items() if law.elliptical}
    assert all(law.name == name for name, law in P.INPUT_LAWS.items())


@pytest.mark.parametrize("name", list(P.INPUT_LAWS))
def test_tasks_draw_each_law_with_its_covariance_and_fourth_moment(name: str) -> None:
    d, n = 2, 200_000
    x = icl.make_regression_tasks(1, n, d, x_law=name, seed=3).x[0]  # (n, d)
    cov = x.T @ x / n
    assert torch.allclose(cov, torch.eye(d, dtype=torch.float64), atol=0.05)
    m4 = (x.pow(2).sum(-1) ** 2).mean().item()
    assert m4 == pytest.approx(P.INPUT_LAWS[name].fourth_moment_ratio(d), rel=0.08)
    assert prior_work.fourth_moment_ratio(d, name) == P.INPUT_LAWS[name].fourth_moment_ratio(d)


@pytest.mark.parametrize("name", P.MIXING_LAWS)
def test_gain_is_one_at_zero_for_every_mixing_law(name: str) -> None:
    assert elliptical_gain(torch.tensor(0.0, dtype=torch.float64), P.mixing_law(name)).item() == pytest.approx(1.0)
    assert P.mixing_law(name).tilted_mean(torch.tensor(0.0, dtype=torch.float64)).item() == pytest.approx(1.0)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: P.input_law("cauchy"), "x_law"),
    (lambda: P.input_law(3), "x_law"),
    (lambda: P.mixing_law("uniform"), "not elliptical"),
    (lambda: P.INPUT_LAWS["gaussian"].fourth_moment_ratio(0), "d"),
    (lambda: P.InputLaw("bare", "neither").fourth_moment_ratio(2), "neither"),
    (lambda: icl.make_regression_tasks(1, 4, 2, x_law="cauchy"), "x_law"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
