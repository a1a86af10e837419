"""Names for notebooks written before :mod:`covbook.session` and :mod:`covbook.book.config`.

A notebook calls :func:`covbook.session.setup`; the profiles file is read by the
pipeline, :mod:`covbook.book.config`.  Both are re-exported here so that
``from covbook.profiles import setup, project_root`` keeps working.
"""

from __future__ import annotations

from covbook.book.config import COMMON_PARAMETERS, PROFILES, load_profiles, project_root
from covbook.session import setup

__all__ = ["PROFILES", "COMMON_PARAMETERS", "project_root", "load_profiles", "setup"]
