"""Where the book lives online: its GitHub repository, from one place (:func:`resolve_repository`).

``COVBOOK_REPOSITORY`` (``owner/name`` or a GitHub URL; empty or ``none``: no repository), else ``repository.url``
in ``_config.yml``, else ``git remote get-url origin`` of a checkout whose top is the project root, when it is
on GitHub; else none, and the book shows no repository, issue or launch buttons.  ``covbook publish`` fills the
notebooks' setup cell to install covbook from the branch :data:`NOTEBOOKS_BRANCH`, where the workflow publishes them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from covbook.book.records import git

__all__ = ["ENV", "NOTEBOOKS_BRANCH", "Repository", "parse_github", "resolve_repository"]

ENV = "COVBOOK_REPOSITORY"
NOTEBOOKS_BRANCH = "executed-notebooks"
#: ``owner/name``, or that behind ``https://[token@]github.com/``, ``git@github.com:`` or ``ssh://git@github.com/``
_GITHUB = re.compile(r"^(?:(?:https?://(?:[^@/]+@)?|(?:ssh://)?git@)github\.com[:/])?"
                     r"(?P<owner>[A-Za-z0-9][A-Za-z0-9-]{0,38})/(?P<name>[A-Za-z0-9._-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Repository:
    """A GitHub repository ``owner/name``: its ``url``, GitHub Pages site (``pages_url``, where the book
    workflow deploys the book) and the pip source of covbook published with the notebooks (``install_source``)."""

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
        return f"https://{self.owner.lower()}.github.io/{self.name}/"

    @property
    def install_source(self) -> str:
        return f"git+{self.url}@{NOTEBOOKS_BRANCH}"


def parse_github(text: str) -> Repository | None:
    """``owner/name`` or an https / ssh GitHub URL as a :class:`Repository`; None for anything else.

    >>> parse_github("git@github.com:octo/covbook.git"), parse_github("https://gitlab.com/octo/covbook")
    (Repository(owner='octo', name='covbook'), None)
    """
    m = _GITHUB.match(text.strip())
    return Repository(m["owner"], m["name"]) if m and m["name"] not in (".", "..") else None


def resolve_repository(root: str | os.PathLike, configured: str | None = None,
                       environ: Mapping[str, str] | None = None) -> Repository | None:
    """The book's GitHub repository, or None (module docstring): from ``environ`` (default ``os.environ``),
    ``configured`` (``repository.url`` of ``_config.yml``) or the checkout at ``root``; ``ValueError`` when
    ``COVBOOK_REPOSITORY`` or ``configured`` is set but is not a GitHub repository."""
    environ = os.environ if environ is None else environ
    if ENV in environ:
        value = environ[ENV].strip()
        if value.lower() in ("", "none"):
            return None
        if (repo := parse_github(value)) is None:
            raise ValueError(f"{ENV}={value!r}: expected owner/name or a https://github.com/owner/name URL "
                             "(or empty for no repository)")
        return repo
    if configured and configured.strip():
        if (repo := parse_github(configured)) is None:
            raise ValueError(f"_config.yml repository.url={configured!r}: expected a https://github.com/owner/name "
                             "URL (the launch buttons need GitHub)")
        return repo
    return parse_github(git(Path(root), "remote", "get-url", "origin") or "")
