"""The key of a stored run: the book's one cache key, code in a form every Python reads alike (fast stage)."""

from __future__ import annotations

from covbook.book import edition
from covbook.book.cache import portable
from covbook.book.config import Paths

A = 'def f(x):\n    """Doc."""\n    # a comment\n    return x + 1\n'


def test_portable_source_ignores_comments_docstrings_and_formatting():
    same = "def f(x):   return (x+1)  # terse\n"
    assert portable(A) == portable(same) == "def f(x):\n    return x + 1"
    assert portable(A) != portable(A.replace("x + 1", "x + 2"))
    assert "type_params" not in portable(A) and "lineno" not in portable(A)  # not ast.dump's form
    assert portable("%timeit f(1)\n") == "%timeit f(1)\n"  # not Python: as it is


def test_a_stored_run_is_keyed_as_the_books_own_runs_are(project):
    """One key (issue 49): the stored run's key is the runner's, with the device and environment its record names;
    the notebook's text (prose too), its parameters at the stored profile and the environment change it."""
    from covbook.book.cache import environment
    from covbook.book.plan import plan_jobs
    from covbook.book.records import RunRecord

    paths = Paths(project)
    job = plan_jobs(paths, ["01"], profile="smoke", device="cpu", seed=0, resolved_device="cpu")[0]
    rec = RunRecord({"parameters": job.params, "key_device": "cpu", "environment": environment(), "hash": job.digest})
    assert edition.stored_key(paths, "01_alpha", rec) == job.digest
    assert edition.stored_key(paths, "01_alpha", RunRecord({**rec, "environment": {"torch": "0.1"}})) != job.digest
    nb = project / "notebooks" / "01_alpha.md"
    nb.write_text(nb.read_text().replace("# Demo", "# Demo, with more prose"))
    assert edition.stored_key(paths, "01_alpha", rec) != job.digest
    nb.write_text(nb.read_text().replace("# Demo, with more prose", "# Demo"))
    (project / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 4}\n")
    assert edition.stored_key(paths, "01_alpha", rec) != job.digest


def test_edition_usage_errors_exit_2_before_any_kernel(project):
    from helpers import covbook

    bad = covbook(project, "edition", "huge")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    unknown = covbook(project, "edition", "smoke", "07")
    assert unknown.returncode == 2 and "unknown notebook '07'" in unknown.stderr
    assert not (project / "book" / "edition").exists() and not (project / ".covbook" / "edition").exists()
