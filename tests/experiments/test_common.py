"""covbook.experiments._common: the checkpoint grid and the shared regression problem, against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from covbook.experiments._common import check_length, check_streams, log_checkpoints
from covbook.experiments.regression import RegressionProblem


@pytest.mark.parametrize("start", [10, 16, 100])
def test_log_checkpoints_is_the_logspace_grid_from_start(start: int) -> None:
    for t_end, n in ((200, 16), (12_345, 12), (10**6, 25)):
        want = np.unique(np.logspace(np.log10(start), np.log10(t_end), n).astype(int))
        np.testing.assert_array_equal(log_checkpoints(t_end, n, start=start), want)
    assert log_checkpoints(1000, 3, start=10).tolist() == [10, 100, 1000]
    # the default start, 100, is exactly the grid of np.logspace(2, ...)
    want = np.unique(np.logspace(2, np.log10(54_321), 25).astype(int))
    np.testing.assert_array_equal(log_checkpoints(54_321, 25), want)


def test_regression_problem_derived_quantities() -> None:
    cov = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)  # (2, 2)
    p = RegressionProblem(2, 0.5, 0.1, cov, torch.tensor([1.0, -1.0], dtype=torch.float64))
    assert float(p.u @ cov @ p.u) == pytest.approx(1.0)
    assert torch.allclose(p.gamma @ cov, torch.eye(2, dtype=torch.float64))
    assert p.eta_crit == pytest.approx(2 / torch.linalg.eigvalsh(cov).max().item())
    assert p.directions == {} and p.measurements == {} and p.numbers == {}


def test_checks_name_the_argument() -> None:
    with pytest.raises(ValueError, match="t_max must be at least 101"):
        check_length(100, "t_max")
    with pytest.raises(ValueError, match="n_streams must be at least 2"):
        check_streams(1)
