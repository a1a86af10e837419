"""Tests of covbook.icl.alignment: how close a layer is to the GD construction."""

from __future__ import annotations

import pytest
import torch

from covbook import icl
from covbook.icl import stacked_gd_transformer


def test_alignment_of_the_construction_is_perfect():
    model = stacked_gd_transformer(3, 0.4, 1)
    form = icl.bilinear_forms(model)[0]
    al = icl.construction_alignment(form["B"], form["V"])
    assert al["cos_identity"] == pytest.approx(1.0)
    assert al["eta_eff"] == pytest.approx(0.4) and al["eta_attn"] == pytest.approx(0.4)
    assert al["y_key_weight"] == 0.0 and al["v_y_other"] == 0.0


def test_alignment_refuses_a_form_whose_row_norm_underflows():
    # a subnormal B: |B_xx|_F > 0 but |B_{x,.}|_F underflows to 0, which gave y_key_weight = 0/0 = NaN
    b = torch.tensor([[5e-324, 0.0], [0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="non-zero x-block"):
        icl.construction_alignment(b, v)
