"""The book as a reader holds it, without a kernel or a build (fast stage).

The command line (``--version``, defaults in the help, ``build`` before any run, ``sweep``
that would replace a larger calibration), the slim install (runtime apart from the ``[book]``
and ``[dev]`` extras, Binder's CPU torch), a reader's ``profile = "smoke"`` taking effect, the
published edition of a notebook (roles resolved, no papermill cell), and citing the book.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import requires, version

import pytest
import yaml

from covbook.book.standalone import SETUP_CELL, bib_labels, fill_setup_source, standalone
from covbook.claims import Claim
from covbook.session import apply_profile, profile_sizes
from helpers import ROOT, covbook

VERSION = version("covbook")
REQUIRES = requires("covbook") or []  # "name>=x" and "name>=x; extra == 'book'"


def _names(extra: str | None) -> list[str]:
    tag = f'extra == "{extra}"'
    chosen = [r for r in REQUIRES if (tag in r.replace("'", '"') if extra else "extra ==" not in r)]
    return [re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in chosen]


# ----------------------------------------------------------------------------- the command line


def test_version_and_every_option_shows_its_default(project):
    res = covbook(project, "--version")
    assert res.returncode == 0 and res.stdout.strip() == f"covbook {VERSION}"
    for command in ("run", "sweep"):
        out = covbook(project, command, "--help").stdout
        options = re.findall(r"^\s+(--[a-z-]+)", out, re.MULTILINE)
        assert {"--profile", "--device", "--jobs"} <= set(options), out
        assert "(default: " in out and "(default: auto)" in out, out
    assert "(default: quick)" in covbook(project, "run", "--help").stdout


def test_build_before_any_run_says_run_first(project):
    res = covbook(project, "build")
    assert res.returncode == 1 and "run `covbook run` first" in res.stderr, res.stderr
    assert "01_alpha" in res.stderr and "WARNING" not in res.stdout + res.stderr  # no Sphinx ran
    assert not (project / "_build").exists()


# ----------------------------------------------------------------------------- slim installs


def test_runtime_is_apart_from_the_book_and_dev_extras():
    runtime, book, dev = _names(None), _names("book"), _names("dev")
    assert 5 <= len(runtime) <= 15, runtime
    for tool in ("jupyter-book", "papermill", "jupytext", "ipykernel", "django-static-mathjax", "sphinx-proof"):
        assert tool not in runtime and tool in book, tool
    assert not set(runtime) & set(dev)


def test_binder_runs_the_torch_a_checkout_runs_on_the_cpu_and_no_extras():
    """Binder's torch is the CPU build of the version `make setup` pins (so a reader there gets the numbers of a
    checkout), covbook's own requirement admits it, and Binder installs no [book] or [dev] extra."""
    from packaging.requirements import Requirement

    req = (ROOT / "binder" / "requirements.txt").read_text(encoding="utf-8")
    lines = [x.strip() for x in req.splitlines() if x.strip() and not x.startswith("#")]
    pinned = re.search(r'"torch==([0-9.]+)"', (ROOT / "Makefile").read_text(encoding="utf-8")).group(1)
    assert f"torch=={pinned}+cpu" in lines
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    torch_req = next(Requirement(r) for r in requires("covbook") if Requirement(r).name == "torch")
    assert torch_req.specifier.contains(pinned) and not torch_req.marker
    assert "." in lines and not any("[" in x for x in lines)


def test_setup_cell_shows_pips_error_when_the_install_fails():
    filled = fill_setup_source(SETUP_CELL, "file:///nonexistent/covbook-source")
    # -I -S: covbook is not importable, so the cell runs pip, which fails at once (offline) on the missing source
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", filled], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "pip could not install covbook" in proc.stderr
    assert "nonexistent/covbook-source" in proc.stderr.split("RuntimeError")[0]  # pip's own message, shown


# ----------------------------------------------------------------------------- a reader's profile


def test_packaged_profiles_are_the_checkouts():
    packaged = ROOT / "src" / "covbook" / "profiles.yml"
    assert packaged.read_text(encoding="utf-8") == (ROOT / "notebooks" / "profiles.yml").read_text(encoding="utf-8")


def test_a_readers_profile_sets_that_profiles_sizes(monkeypatch):
    monkeypatch.delenv("COVBOOK_NOTEBOOK", raising=False)
    smoke = yaml.safe_load((ROOT / "notebooks" / "profiles.yml").read_text())["01_covariance_readout"]["smoke"]
    params = {"profile": "smoke", "t_max": 200_000, "n_streams": 200, "n_configs": 4, "t_stream": 10_000_000,
              "d": 3}
    assert apply_profile("01_covariance_readout", "smoke", params) == smoke
    assert params["t_max"] == smoke["t_max"] and params["d"] == 3
    assert profile_sizes("01_covariance_readout", "quick") == {}
    with pytest.raises(ValueError, match="notebook must be a chapter"):
        profile_sizes("99_nope", "smoke")
    with pytest.raises(ValueError, match="profile must be one of"):
        profile_sizes("01_covariance_readout", "huge")
    monkeypatch.setenv("COVBOOK_NOTEBOOK", "01_covariance_readout")  # under `covbook run`: the runner's values
    kept = {"t_max": 7}
    assert apply_profile("01_covariance_readout", "smoke", kept) == {} and kept == {"t_max": 7}


def test_every_chapter_passes_its_name_and_parameters_to_setup():
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.md")):
        text = nb.read_text(encoding="utf-8")
        assert f'chapter="{nb.stem[:2]}", parameters=globals()' in re.sub(r"\s+", " ", text), nb.name
        assert "\n  name: covbook\n" in text.split("---")[1], f"{nb.name}: kernelspec not covbook"


# ----------------------------------------------------------------------------- the published edition


def _nb() -> dict:
    prefix = "application/papermill.record/"  # covbook.claims.glue's (not displayed where it runs)
    glue = {"output_type": "display_data", "metadata": {"scrapbook": {"name": "t_max", "mime_prefix": prefix}},
            "data": {f"{prefix}text/plain": "20000"}}
    glue2 = {"output_type": "display_data", "metadata": {"scrapbook": {"name": "rho", "mime_prefix": ""}},
             "data": {"text/plain": "0.123456"}}
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "covbook"}, "papermill": {"parameters": {}}},
            "cells": [
                {"cell_type": "code", "source": "profile = 'quick'", "metadata": {"tags": ["parameters"]},
                 "outputs": []},
                {"cell_type": "code", "source": "profile = 'smoke'\n",
                 "metadata": {"tags": ["injected-parameters", "remove-cell"]}, "outputs": []},
                {"cell_type": "code", "source": "plot()", "outputs": [glue, glue2],
                 "metadata": {"mystnb": {"figure": {"name": "fig-01-rate"}}}},
                {"cell_type": "markdown", "metadata": {}, "source":
                    "As {cite:t}`xu2026covariance` show, {numref}`fig-01-rate` at {glue:text}`t_max:,.0f` "
                    "tokens gives {glue:text}`rho:.2f` and slope {claim}`slope` ({prf:ref}`thm-01-readout`; "
                    "{cite:p}`xu2026covariance`)."},
            ]}


def test_published_notebook_has_its_roles_resolved_and_no_papermill_cell():
    slope = Claim(id="slope", notebook="01_covariance_readout", statement="the slope is -1", measured=-0.98765,
                  expected=-1.0, tolerance=0.05, lower=None, upper=None, passed=True)
    claims = {"01_covariance_readout": {"slope": slope}}
    bib = bib_labels((ROOT / "book" / "references.bib").read_text(encoding="utf-8"))
    assert bib["akyurek2023what"] == ("Akyürek et al.", "2023")  # LaTeX accents as text
    out = standalone(_nb(), "01_covariance_readout", claims=claims, bib=bib, book_url="https://o.github.io/r/")
    assert [c["source"] for c in out["cells"] if "injected-parameters" in c["metadata"].get("tags", [])] == []
    text = out["cells"][-1]["source"]
    assert not re.search(r"\{[a-z:]+\}`", text), text
    assert "[Xu and Fang (2026)](https://o.github.io/r/bibliography.html)" in text
    assert "[Figure 1](https://o.github.io/r/generated/01_covariance_readout.html#fig-01-rate)" in text
    assert "20,000 tokens gives 0.12" in text
    assert "[**-0.9877** ✓](https://o.github.io/r/generated/reproduction.html#claim-01-slope)" in text
    assert out["metadata"]["kernelspec"]["name"] == "python3" and "papermill" not in out["metadata"]
    offline = standalone(_nb(), "01_covariance_readout", claims=claims, bib=bib)
    assert "](" not in offline["cells"][-1]["source"]  # no address known: text without links
    assert "(Xu and Fang, 2026)" in offline["cells"][-1]["source"]


def test_published_citations_are_the_runs_measurements_judged_by_their_rules(tmp_path):
    from claims_fixtures import claim, fake_project
    from covbook.book.standalone import book_context

    fake_project(tmp_path, {"01_alpha": [claim("x_is_x", "01_alpha", measured=1.23456),
                                         claim("off", "01_alpha", passed=False, measured=7.0)]})
    claims, bib = book_context(tmp_path)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "{claim}`x_is_x` and {claim}`01:off`"}]}
    text = standalone(nb, "01_alpha", claims=claims, bib=bib)["cells"][0]["source"]
    assert text == "**1.235** ✓ and **7** ✗" and bib == {}


# ----------------------------------------------------------------------------- citing the book


def test_the_book_is_citable_with_one_version_everywhere():
    version = VERSION
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["version"] == version
    assert cff["preferred-citation"]["version"] == version
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    bibtex = re.search(r"```bibtex\n(.*?)```", intro, re.DOTALL)
    assert bibtex and f"version = {{{version}}}" in bibtex.group(1)
    assert 'href="covbook.pdf"' in intro


def test_pairing_with_jupytext_leaves_the_tracked_notebook_as_it_is(tmp_path):
    import shutil

    shutil.copy(ROOT / "jupytext.toml", tmp_path / "jupytext.toml")
    (tmp_path / "notebooks").mkdir()
    md = tmp_path / "notebooks" / "01_covariance_readout.md"
    shutil.copy(ROOT / "notebooks" / md.name, md)
    before = md.read_bytes()
    jupytext = [sys.executable, "-m", "jupytext", "--sync", str(md)]
    subprocess.run(jupytext, cwd=tmp_path, check=True, capture_output=True)
    assert md.with_suffix(".ipynb").is_file() and md.read_bytes() == before
    paired = json.loads(md.with_suffix(".ipynb").read_text())
    assert paired["metadata"]["kernelspec"]["name"] == "covbook"
