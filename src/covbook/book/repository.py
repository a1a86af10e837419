r"""Where the book lives online: its GitHub repository, from one place.

The book's repository, issue and launch buttons (Colab, Binder) only make sense when the
book knows the GitHub repository it is published from.  :func:`resolve_repository` is the
one place that decides it, in this order:

1. the environment variable ``COVBOOK_REPOSITORY`` (``owner/name`` or a GitHub URL; set
   it to the empty string or ``none`` to build a book without any repository link);
2. ``repository.url`` in ``_config.yml``, when a maintainer sets it;
3. ``git remote get-url origin``, when the project root is the top of a git checkout
   whose ``origin`` is a GitHub URL;
4. otherwise nothing: the book shows no repository, issue or launch buttons at all.

The executed notebooks (``book/generated/*.ipynb``) are build outputs and not committed.
The book workflow publishes them, with the source they were run from, on the branch
:data:`NOTEBOOKS_BRANCH`; the launch buttons open them there.  A published notebook's
setup cell installs covbook from that same branch when covbook is not importable
(e.g. in Colab): :func:`fill_setup_source` writes the install source into the cell.

Command line (used by the book workflow)::

    python -m covbook.book.repository            # print the resolved repository, or "none"
    python -m covbook.book.repository publish    # book/generated/*.ipynb as the published edition
                                                 # (covbook.book.standalone), setup cells filled, in
                                                 # place: for the book workflow, after the build; each
                                                 # run record's notebook SHA-256 follows its notebook
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV",
    "NOTEBOOKS_BRANCH",
    "SETUP_PLACEHOLDER",
    "SETUP_CELL",
    "INSTALL_CELL",
    "Repository",
    "parse_github",
    "resolve_repository",
    "fill_setup_source",
    "fill_notebook_file",
    "publish_notebook",
]

ENV = "COVBOOK_REPOSITORY"
NOTEBOOKS_BRANCH = "executed-notebooks"
COLAB_URL = "https://colab.research.google.com"
BINDER_URL = "https://mybinder.org"
#: The line of the notebooks' setup cell that publishing replaces by the install source.
SETUP_PLACEHOLDER = "COVBOOK_SOURCE = None"
#: The first code cell of every chapter (tagged ``remove-cell``): two lines, run where covbook is installed
#: (a clone after ``make setup``, the book's own runs).  Publishing replaces it by :data:`INSTALL_CELL`.
SETUP_CELL = f"""\
# Setup: a published notebook opened outside a checkout installs covbook here.
{SETUP_PLACEHOLDER}  # set when the executed notebooks are published"""
#: The setup cell of a published notebook (:func:`fill_setup_source` fills in ``COVBOOK_SOURCE``):
#: library-free, so that a notebook opened outside a covbook checkout installs covbook's runtime, and
#: shows pip's own output when the install fails.  Written as ruff formats it at the notebooks' line
#: length (covbook.book.nblint).
INSTALL_CELL = f"""\
# Setup: outside a covbook checkout (e.g. in Colab), install the book's library from
# its repository.
import importlib.util
import subprocess
import sys

{SETUP_PLACEHOLDER}
if importlib.util.find_spec("covbook") is None:
    # the runtime only (numpy, scipy, matplotlib, pandas; torch if missing)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--progress-bar", "off"]
    done = subprocess.run(
        [*pip, f"covbook @ {{COVBOOK_SOURCE}}"], capture_output=True, text=True
    )
    if done.returncode:
        print(done.stdout, done.stderr, sep="\\n", file=sys.stderr)
        raise RuntimeError("pip could not install covbook: its output is above")
    importlib.invalidate_caches()"""

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]+"
_PATTERNS = (
    re.compile(rf"^(?P<owner>{_NAME})/(?P<name>{_REPO})$"),
    re.compile(rf"^https?://(?:[^@/]+@)?github\.com/(?P<owner>{_NAME})/(?P<name>{_REPO}?)(?:\.git)?/?$"),
    re.compile(rf"^(?:ssh://)?git@github\.com[:/](?P<owner>{_NAME})/(?P<name>{_REPO}?)(?:\.git)?/?$"),
)


@dataclass(frozen=True)
class Repository:
    """A GitHub repository ``owner/name``."""

    owner: str
    name: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def url(self) -> str:
        return f"https://github.com/{self.slug}"

    @property
    def pages_url(self) -> str:
        """Where the book workflow deploys the book: the repository's GitHub Pages site."""
        return f"https://{self.owner.lower()}.github.io/{self.name}/"

    @property
    def install_source(self) -> str:
        """The pip source of covbook as published with the executed notebooks."""
        return f"git+{self.url}@{NOTEBOOKS_BRANCH}"


def parse_github(text: str) -> Repository | None:
    """``owner/name`` or an https / ssh GitHub URL as a :class:`Repository`; None for anything else.

    >>> parse_github("git@github.com:octo/covbook.git")
    Repository(owner='octo', name='covbook')
    >>> parse_github("https://gitlab.com/octo/covbook") is None
    True
    """
    text = text.strip()
    for pattern in _PATTERNS:
        m = pattern.match(text)
        if m and m["name"] not in ("", ".", ".."):
            return Repository(m["owner"], m["name"])
    return None


def _git_origin(root: Path) -> str | None:
    """``origin``'s URL when ``root`` is the top of a git checkout, else None."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        if not top or Path(top).resolve() != root.resolve():
            return None  # a project copied inside another checkout is not that checkout's book
        return subprocess.run(["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def resolve_repository(
    root: str | os.PathLike, configured: str | None = None, environ: Mapping[str, str] | None = None
) -> Repository | None:
    """The book's GitHub repository, or None when it is not known (see the module docstring).

    Parameters
    ----------
    root
        The project root (the folder holding ``_config.yml``).
    configured
        ``repository.url`` from ``_config.yml`` (empty or None: not set).
    environ
        The environment to read ``COVBOOK_REPOSITORY`` from (default ``os.environ``).

    Raises
    ------
    ValueError
        When ``COVBOOK_REPOSITORY`` or ``configured`` is set but is not a GitHub repository.
    """
    environ = os.environ if environ is None else environ
    if ENV in environ:
        value = environ[ENV].strip()
        if value.lower() in ("", "none"):
            return None
        repo = parse_github(value)
        if repo is None:
            raise ValueError(f"{ENV}={value!r}: expected owner/name or a https://github.com/owner/name URL "
                             "(or empty for no repository)")
        return repo
    if configured and configured.strip():
        repo = parse_github(configured)
        if repo is None:
            raise ValueError(f"_config.yml repository.url={configured!r}: expected a https://github.com/owner/name "
                             "URL (the launch buttons need GitHub)")
        return repo
    origin = _git_origin(Path(root))
    return parse_github(origin) if origin else None


_PLACEHOLDER_LINE = re.compile(rf"^(?P<indent>[ \t]*){re.escape(SETUP_PLACEHOLDER)}\b.*$", re.MULTILINE)


def fill_setup_source(source: str, install_source: str) -> str:
    """A code cell with the setup placeholder becomes :data:`INSTALL_CELL` installing from ``install_source``.

    Any other cell is returned unchanged.

    >>> filled = fill_setup_source(SETUP_CELL, "git+https://github.com/o/r@b")
    >>> 'COVBOOK_SOURCE = "git+https://github.com/o/r@b"' in filled.splitlines()
    True
    >>> fill_setup_source("x = 1", "git+https://github.com/o/r@b")
    'x = 1'
    """
    if not _PLACEHOLDER_LINE.search(source):
        return source
    return _PLACEHOLDER_LINE.sub(lambda m: f"{m['indent']}COVBOOK_SOURCE = {json.dumps(install_source)}",
                                 INSTALL_CELL)


def fill_notebook_file(path: str | os.PathLike, install_source: str) -> bool:
    """Fill the setup cell of the ``.ipynb`` at ``path`` in place; True when it had a placeholder."""
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        text = "".join(src) if isinstance(src, list) else src
        new = fill_setup_source(text, install_source)
        if new != text:
            cell["source"] = new
            changed = True
    if changed:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    return changed


def publish_notebook(paths, nb_path: Path, repo: Repository) -> bool:
    """Rewrite the executed notebook ``nb_path`` in place as its published edition (:mod:`covbook.book.standalone`),
    setup cell filled; True when it had a setup placeholder.  Call it holding the tree's lock.

    Its run record follows it (:func:`covbook.book.runner.commit_rewritten`), so that ``covbook check``
    still finds the record true.
    """
    import tempfile

    from covbook.book.runner import commit_rewritten
    from covbook.book.standalone import standalone_file

    paths.tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="publish-", dir=paths.tmp) as d:
        new_nb = Path(d) / nb_path.name
        standalone_file(nb_path, new_nb, paths.root, repo.pages_url)
        filled = fill_notebook_file(new_nb, repo.install_source)
        commit_rewritten(paths, nb_path.stem, new_nb)
    return filled


def main(argv: list[str] | None = None) -> int:
    """``python -m covbook.book.repository [publish]``."""
    import argparse

    from covbook.book.config import project_root

    p = argparse.ArgumentParser(prog="python -m covbook.book.repository",
                                description="print the book's repository, or publish the executed notebooks")
    p.add_argument("command", nargs="?", choices=["publish"], help="rewrite book/generated/*.ipynb as published")
    publish = p.parse_args(argv).command == "publish"
    root = project_root()
    try:
        repo = resolve_repository(root)
    except ValueError as err:
        print(f"covbook repository: error: {err}", file=sys.stderr)
        return 2
    if not publish:
        print(repo.slug if repo else "none")
        return 0
    if repo is None:
        print(f"covbook repository: error: the repository is not known; set {ENV}=owner/name", file=sys.stderr)
        return 2
    from covbook.book.config import Paths
    from covbook.book.lock import Busy, tree_lock

    paths = Paths(root)
    notebooks = sorted(paths.generated.glob("[0-9][0-9]_*.ipynb"))
    try:
        with tree_lock(paths.lock, "python -m covbook.book.repository publish"):
            filled = [p.name for p in notebooks if publish_notebook(paths, p, repo)]
    except Busy as err:
        print(f"covbook repository: error: {err}", file=sys.stderr)
        return 2
    print(f"covbook repository: {repo.slug}; setup cells point to {repo.install_source} in "
          f"{len(filled)} of {len(notebooks)} notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
