"""The edition's science key: what makes a chapter's results, in a form every Python reads alike (fast stage)."""

from __future__ import annotations

import json

import pytest

from covbook.book import edition
from covbook.book.cache import portable
from covbook.book.config import Paths, UsageError
from helpers import make_notebook

A = 'def f(x):\n    """Doc."""\n    # a comment\n    return x + 1\n'


def test_portable_source_ignores_comments_docstrings_and_formatting():
    same = "def f(x):   return (x+1)  # terse\n"
    assert portable(A) == portable(same) == "def f(x):\n    return x + 1"
    assert portable(A) != portable(A.replace("x + 1", "x + 2"))
    assert "type_params" not in portable(A) and "lineno" not in portable(A)  # not ast.dump's form
    assert portable("%timeit f(1)\n") == "%timeit f(1)\n"  # not Python: as it is


def test_the_key_follows_code_and_parameters_not_prose(project):
    paths = Paths(project)
    key = edition.science_key(paths, "01_alpha", "smoke")
    assert key == edition.science_key(paths, "01_alpha", "smoke")
    assert key != edition.science_key(paths, "01_alpha", "quick")  # smoke sets x: 3
    nb = project / "notebooks" / "01_alpha.md"
    nb.write_text(nb.read_text().replace("# Demo", "# Demo, with more prose"))
    assert edition.science_key(paths, "01_alpha", "smoke") == key
    nb.write_text(make_notebook("from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)  # same"))
    assert edition.science_key(paths, "01_alpha", "smoke") == key
    nb.write_text(make_notebook("from covbook import claims\nclaims.measure('x_is_x', 2 * x, prediction=x)"))
    assert edition.science_key(paths, "01_alpha", "smoke") != key
    with pytest.raises(UsageError, match="unknown notebook"):
        edition.science_key(paths, "09_gone", "smoke")


def test_the_editions_run_times_join_this_machines_timings(tmp_path):
    from covbook._jsonio import write_json_atomic

    main, scratch = Paths(tmp_path / "main"), Paths(tmp_path / "scratch")
    write_json_atomic(main.timings, {"01_a": {"cpu": {"quick": {"seconds": 5.0}}}})
    write_json_atomic(scratch.timings, {"01_a": {"cuda": {"full": {"seconds": 50.0}}}, "02_b": {"cuda": {}}})
    edition._merge_timings(main, scratch)
    got = json.loads(main.timings.read_text())
    assert got["01_a"] == {"cpu": {"quick": {"seconds": 5.0}}, "cuda": {"full": {"seconds": 50.0}}}


def test_edition_usage_errors_exit_2_before_any_kernel(project):
    from helpers import covbook

    bad = covbook(project, "edition", "huge")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    unknown = covbook(project, "edition", "smoke", "07")
    assert unknown.returncode == 2 and "unknown notebook '07'" in unknown.stderr
    assert not (project / "book" / "edition").exists() and not (project / ".covbook" / "edition").exists()
