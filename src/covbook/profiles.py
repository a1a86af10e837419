"""Compatibility names for notebooks written before :mod:`covbook.session`.

The profiles themselves (``notebooks/profiles.yml``) are read by the pipeline,
:mod:`covbook.book.config`; a notebook's run set-up is :func:`covbook.session.setup`.
"""

from __future__ import annotations

from covbook.book.config import COMMON_PARAMETERS, PROFILES, load_profiles, project_root
from covbook.session import setup

__all__ = ["PROFILES", "COMMON_PARAMETERS", "project_root", "load_profiles", "setup"]
