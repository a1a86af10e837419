"""The book's figure theme (covbook.plotting): seaborn's look, without seaborn's import."""

from __future__ import annotations

import subprocess
import sys

import matplotlib as mpl

from covbook.plotting import PALETTE, THEME, use_theme


def test_use_theme_sets_the_white_grid_and_the_colour_blind_cycle():
    with mpl.rc_context():
        use_theme()
        assert mpl.rcParams["axes.grid"] and mpl.rcParams["axes.edgecolor"] == ".8"
        assert mpl.rcParams["axes.prop_cycle"].by_key()["color"] == list(PALETTE)
        assert all(mpl.rcParams[k] == mpl.rcParams.validate[k](v) for k, v in THEME.items()
                   if k not in ("axes.titlesize", "legend.fontsize"))  # use_theme sets these relative sizes


def test_the_palette_is_seaborns_colorblind_palette():
    """Wong's eight colour-blind-safe colours extended to ten, as seaborn 0.13 writes them (RGB in [0, 1])."""
    from matplotlib.colors import to_rgb

    seaborn_colorblind = [(1, 115, 178), (222, 143, 5), (2, 158, 115), (213, 94, 0), (204, 120, 188),
                          (202, 145, 97), (251, 175, 228), (148, 148, 148), (236, 225, 51), (86, 180, 233)]
    assert [tuple(round(255 * c) for c in to_rgb(h)) for h in PALETTE] == seaborn_colorblind


def test_a_chapters_imports_leave_out_seaborn_and_scipy_stats():
    """Kernel start-up: chapter 08's modules import neither seaborn nor pandas nor scipy.stats (~1.7 s)."""
    code = ("import sys, covbook.plotting, covbook.experiments.depth\n"
            "print(sorted(m for m in ('seaborn', 'pandas', 'scipy.stats') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
