"""Where the book lives online: its GitHub repository, from one place.

:func:`resolve_repository` decides the repository: ``COVBOOK_REPOSITORY`` (``owner/name`` or a GitHub URL;
empty or ``none``: no repository), else ``repository.url`` in ``_config.yml``, else ``git remote get-url
origin`` when the project root is the top of a checkout whose origin is on GitHub, else none (the book then
shows no repository, issue or launch buttons).  The book workflow publishes the executed notebooks on the
branch :data:`NOTEBOOKS_BRANCH`, their setup cell filled to install covbook from there (``covbook publish``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from covbook.book.records import git
from covbook.book.standalone import (
    INSTALL_CELL,
    SETUP_CELL,
    SETUP_PLACEHOLDER,
    fill_setup_source,
)

__all__ = ["ENV", "NOTEBOOKS_BRANCH", "SETUP_PLACEHOLDER", "SETUP_CELL", "INSTALL_CELL", "Repository", "parse_github",
           "resolve_repository", "fill_setup_source"]

ENV = "COVBOOK_REPOSITORY"
NOTEBOOKS_BRANCH = "executed-notebooks"
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]+"
_PATTERNS = (
    re.compile(rf"^(?P<owner>{_NAME})/(?P<name>{_REPO})$"),
    re.compile(rf"^https?://(?:[^@/]+@)?github\.com/(?P<owner>{_NAME})/(?P<name>{_REPO}?)(?:\.git)?/?$"),
    re.compile(rf"^(?:ssh://)?git@github\.com[:/](?P<owner>{_NAME})/(?P<name>{_REPO}?)(?:\.git)?/?$"),
)


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
    for pattern in _PATTERNS:
        m = pattern.match(text.strip())
        if m and m["name"] not in ("", ".", ".."):
            return Repository(m["owner"], m["name"])
    return None


def resolve_repository(
    root: str | os.PathLike, configured: str | None = None, environ: Mapping[str, str] | None = None
) -> Repository | None:
    """The book's GitHub repository, or None when it is not known (module docstring): from ``environ``
    (default ``os.environ``), ``configured`` (``repository.url`` of ``_config.yml``) or the checkout at ``root``.
    Raises ``ValueError`` when ``COVBOOK_REPOSITORY`` or ``configured`` is set but is not a GitHub repository."""
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
