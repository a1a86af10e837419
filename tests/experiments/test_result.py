"""covbook.experiments.Result and covbook.claims.record: measurements and numbers handed to the chapter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from covbook import claims
from covbook.experiments import Result


def test_measure_and_glue_keep_order_and_plain_numbers() -> None:
    r = Result()
    r.measure("b", np.float64(2.0), prediction=torch.tensor(2.0), se=0.1, k=np.int64(3))
    r.measure("a", 1.0)
    r.glue("n", np.int64(5))
    assert list(r.measurements) == ["b", "a"]
    assert r.measurements["b"] == {"value": 2.0, "prediction": 2.0, "se": 0.1, "k": 3}
    assert type(r.measurements["b"]["prediction"]) is float and r.numbers == {"n": 5}


def test_nan_is_recorded_with_a_reason() -> None:
    r = Result()
    r.measure("x", float("nan"))
    assert "NaN" in r.measurements["x"]["reason"]


@pytest.mark.parametrize(("call", "match"), [
    (lambda r: r.measure("bad id", 1.0), "id"),
    (lambda r: r.measure(3, 1.0), "id"),
    (lambda r: (r.measure("x", 1.0), r.measure("x", 2.0)), "twice"),
    (lambda r: r.glue("", 1.0), "name"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(Result())


def test_merge() -> None:
    a, b = Result(), Result()
    a.measure("x", 1.0)
    b.measure("y", 2.0, se=0.5)
    b.glue("n", 3)
    a.merge(b)
    assert a.measurements["y"] == {"value": 2.0, "se": 0.5} and a.numbers == {"n": 3}
    with pytest.raises(ValueError, match="twice"):
        a.merge(b)


def test_record_measures_every_claim(monkeypatch) -> None:
    monkeypatch.delenv(claims.CLAIMS_FILE_ENV, raising=False)
    r = Result()
    r.measure("alpha", 1.0, prediction=1.0, se=0.1)
    judged = claims.record(r, show=False)
    assert list(judged) == ["alpha"] and judged["alpha"].measured == 1.0
    with pytest.raises(ValueError, match="Result"):
        claims.record({"alpha": 1.0})
