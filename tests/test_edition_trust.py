"""A stored run (``book/edition``) is trusted only when it is what it claims to be (issue 50).

One smoke edition of a tiny project is made once (two chapters, real kernels); each test works on a copy.  A
stored run is current by the book's one cache key (notebook, parameters, the science it imports), taken when
the run starts; its files are checked against its run record's digests by ``check`` and ``build``; a failed
edition run stores nothing and is a problem; usage is checked before any kernel.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from covbook.book import edition
from covbook.book.config import Paths
from helpers import covbook, make_notebook

pytestmark = pytest.mark.notebooks

OK = "from covbook import claims\nclaims.measure('x_is_x', x, prediction=x)"
X_IS_X = "x_is_x: {kind: identity, statement: x equals itself, window: tolerance, tolerance: 0.0}\n"
SMOKE = ("--device", "cpu", "--no-progress")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("edition") / "p"
    (root / "notebooks" / "rules").mkdir(parents=True)
    (root / "book").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "_config.yml", root / "_config.yml")
    (root / "notebooks" / "01_alpha.md").write_text(make_notebook(OK))
    (root / "notebooks" / "02_beta.md").write_text(make_notebook(OK, "x = 2"))
    (root / "notebooks" / "profiles.yml").write_text("01_alpha:\n  smoke: {x: 3}\n")
    for name in ("01_alpha", "02_beta"):
        (root / "notebooks" / "rules" / f"{name}.yml").write_text(X_IS_X)
    covbook(root, "edition", "smoke", *SMOKE, check=True)
    covbook(root, "run", "--profile", "smoke", *SMOKE, check=True)
    return root


@pytest.fixture
def stored(made, tmp_path) -> Path:
    shutil.copytree(made, tmp_path / "p", symlinks=True)
    return tmp_path / "p"


def _states(root: Path) -> dict[str, str]:
    return {n: s.state for n, s in edition.status(Paths(root)).items()}


def test_a_stored_run_is_current_by_the_one_key(stored):
    assert _states(stored) == {"01_alpha": "current", "02_beta": "current"}
    for f in ("01_alpha.ipynb", "claims/01_alpha.json", "runs/01_alpha.json"):
        assert (stored / "book" / "edition" / f).is_file()
    assert covbook(stored, "check").returncode == 0


def test_a_failed_edition_run_stores_nothing_and_check_says_so(stored):
    """Defects 1 and 6: a failed run kept the previous results under the new code's key; check said nothing."""
    (stored / "notebooks" / "01_alpha.md").write_text(make_notebook("raise RuntimeError('broken science')"))
    res = covbook(stored, "edition", "smoke", "01", *SMOKE)
    assert res.returncode == 1 and "0 of 1 chapters stored" in res.stdout
    assert _states(stored)["01_alpha"] != "current"
    chk = covbook(stored, "check")
    assert chk.returncode == 1
    assert "edition: 01_alpha: its smoke run failed" in chk.stderr and "broken science" in chk.stderr


def test_the_key_is_taken_when_the_run_starts(stored, monkeypatch):
    """Defect 2: science edited while the edition runs: the run is stored under the key it started with."""
    from covbook.book import runner

    real = runner.run_notebooks

    def run_then_edit(*args, **kwargs):
        out = real(*args, **kwargs)
        nb = stored / "notebooks" / "02_beta.md"
        nb.write_text(nb.read_text().replace("x, prediction=x", "2 * x, prediction=x"))
        return out

    monkeypatch.setattr(runner, "run_notebooks", run_then_edit)
    edition.make(Paths(stored), ["02_beta"], profile="smoke", device="cpu", force=True, progress=False)
    assert _states(stored)["02_beta"] == "pending"


@pytest.mark.parametrize("damage", ["edit-claims", "delete-record", "delete-notebook", "record-list"])
def test_a_stored_file_that_is_not_what_its_record_says_fails_check_and_build(stored, damage):
    """Defects 3 and 5: edited claims, a deleted record or notebook, a record of the wrong shape."""
    ed = stored / "book" / "edition"
    if damage == "edit-claims":
        f = ed / "claims" / "01_alpha.json"
        data = json.loads(f.read_text())
        data[0]["value"] = 3.5  # a number edited: the digest no longer matches
        f.write_text(json.dumps(data))
    elif damage == "delete-record":
        (ed / "runs" / "01_alpha.json").unlink()
    elif damage == "delete-notebook":
        (ed / "01_alpha.ipynb").unlink()
    else:
        (ed / "runs" / "01_alpha.json").write_text("[]")
    chk = covbook(stored, "check")
    assert chk.returncode == 1 and "book/edition/" in chk.stderr and "Traceback" not in chk.stderr, chk.stderr
    if damage == "edit-claims":
        assert "not the file its run record 01_alpha.json was committed with" in chk.stderr
    build = covbook(stored, "build")
    assert build.returncode == 1 and "book/edition/" in build.stderr and "Traceback" not in build.stderr


def test_a_prose_edit_is_shown_or_the_chapter_marked_pending(stored):
    """Defect 4: the key now covers the notebook's text, so the stored run is no longer current."""
    nb = stored / "notebooks" / "01_alpha.md"
    nb.write_text(nb.read_text().replace("# Demo", "# Demo, retitled"))
    assert _states(stored)["01_alpha"] == "pending"
    chk = covbook(stored, "check")
    assert chk.returncode == 0 and "01_alpha: its stored smoke run is pending" in chk.stderr
    paths = Paths(stored)
    own = json.loads((paths.generated / "01_alpha.ipynb").read_text())
    record = json.loads((paths.runs / "01_alpha.json").read_text())
    page = edition.published_notebook(paths, "01_alpha", own, record)
    banner = "".join(page["cells"][1]["source"])
    assert "pending" in banner and "paper-scale" not in banner  # a smoke edition is not called paper-scale


def test_the_banner_names_the_commit_of_the_run_not_of_the_build(stored):
    """Defect 6: the book's own run's banner named the commit checked out at build time."""
    paths = Paths(stored)
    own = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Demo\n"}], "metadata": {}}
    rec = {"parameters": {"profile": "smoke"}, "device_used": "cpu", "commit": "run1234"}
    banner = "".join(edition.published_notebook(paths, "09_none", own, rec)["cells"][1]["source"])
    assert "commit run1234" in banner
    banner = "".join(edition.published_notebook(paths, "09_none", own, {**rec, "commit": None})["cells"][1]["source"])
    assert "commit" not in banner


def test_edition_usage_is_checked_before_any_kernel(stored):
    """`edition quick 01` over a smoke edition, and an invalid rules file: exit 2, no kernel started."""
    res = covbook(stored, "edition", "quick", "01", *SMOKE)
    assert res.returncode == 2 and "smoke" in res.stderr
    assert not (stored / ".covbook" / "edition" / "quick").exists()
    (stored / "notebooks" / "rules" / "02_beta.yml").write_text("x_is_x: {kind: nonsense}\n")
    before = (stored / "book" / "edition" / "runs" / "02_beta.json").read_bytes()
    res = covbook(stored, "edition", "smoke", "02", "--force", *SMOKE)
    assert res.returncode == 2 and "02_beta.yml" in res.stderr
    assert (stored / "book" / "edition" / "runs" / "02_beta.json").read_bytes() == before


def test_a_non_utf8_chapter_is_one_line_for_edition_and_build(stored):
    nb = stored / "notebooks" / "02_beta.md"
    nb.write_bytes(nb.read_bytes().replace(b"# Demo", b"# Demo \xff"))
    for cmd in (("edition", "smoke", *SMOKE), ("build",)):
        res = covbook(stored, *cmd)
        assert res.returncode == 2 and "02_beta.md" in res.stderr and "Traceback" not in res.stderr, (cmd, res.stderr)
