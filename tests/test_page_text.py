"""tests/page_text.py: what a reader must never meet in an article, judged on strings (fast, no browser)."""

from __future__ import annotations

import pytest

from page_text import text_problems


@pytest.mark.parametrize("text", [
    "The slope is −1.0 at 12 steps; after 1 step the error is 0.5.",
    "Greedy runs end in a cycle for 32 of 32 prompts, and 1 of 8 models has 2 cycles.",
    "2 step sizes, 3 layer models and 4 cycle lengths: a noun that modifies the next word.",
    "1 distinct cycle; 0 cycles; 1.5 steps; 10/32 prompts; −1 steps is a slope; 1,000 tokens.",
    "The query-x/key-x block, and/or, x_qᵀw_1 and λ_max are notation, not keys.",
    "Gaussian and Laplace inputs; the two-point mixture.",
])
def test_clean_text_has_no_problems(text: str) -> None:
    assert text_problems(text, keys={"nope", "rotary", "two_point", "laplace", "gaussian"}) == []


@pytest.mark.parametrize(("text", "found"), [
    ("the slope $-1$ holds", "raw TeX (a dollar sign"),
    ("a ratio \\frac{1}{2} shows", "raw TeX (a TeX command)"),
    ("with step \\eta small", "raw TeX (a TeX command)"),
    ("the weight e^{uW} grows", "raw TeX (a TeX sub- or superscript group)"),
    ("see (thm-05-elliptical) for", "raw label: 'thm-05-elliptical'"),
    ("Remark rem-03-reach says", "raw label: 'rem-03-reach'"),
    ("as in fig-06-tracking", "raw label: 'fig-06-tracking'"),
    ("for gaussian/two_point/laplace inputs", "raw registry keys joined by slashes: 'gaussian/two_point/laplace'"),
    ("the nope/rotary contrast", "raw registry keys joined by slashes: 'nope/rotary'"),
    ("the claim stream_mean_normalised_error lacks power", "raw registry key: 'stream_mean_normalised_error'"),
    ("two_point inputs", "raw registry key: 'two_point'"),
    ("laplace inputs converge", "raw registry key: 'laplace' (the name is Laplace)"),
    ("median entry time 1 steps", "wrong number: '1 … steps': 1 takes the singular (step)"),
    ("there are 1 distinct cycles", "wrong number: '1 … cycles': 1 takes the singular (cycle)"),
    ("we saw 2 cycle.", "wrong number: '2 … cycle': 2 takes the plural (cycles)"),
    ("after 3 layer, the error", "wrong number: '3 … layer': 3 takes the plural (layers)"),
    ("64 query in all", "wrong number: '64 … query': 64 takes the plural (queries)"),
])
def test_each_problem_is_found_and_named(text: str, found: str) -> None:
    problems = text_problems(text, keys={"nope", "rotary"})
    assert len(problems) == 1 and problems[0].startswith(found), problems


def test_every_problem_is_listed() -> None:
    problems = text_problems("After 1 steps $x$ (thm-01-a) with n_max_value.")
    assert len(problems) == 4, problems  # the formula, the label, the key, the number


def test_a_dotted_library_name_is_a_citation_not_a_registry_key() -> None:
    assert text_problems("the SD of the limit (covbook.theory.normalised_error_sd, its t → ∞ value)") == []
    assert text_problems("the SD (normalised_error_sd)") == ["raw registry key: 'normalised_error_sd'"]
