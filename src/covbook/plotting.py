"""The book's figure style and helpers (a white-grid theme, log-log plots with fitted slopes, measured points
with error bars against a closed form)."""

from __future__ import annotations

import math
import os

import matplotlib.pyplot as plt
import numpy as np
from cycler import cycler
from matplotlib.ticker import FuncFormatter

from covbook.stats import loglog_slope

__all__ = ["use_theme", "loglog_with_fit", "sparse_minor_labels", "sparse_log_ticks", "errorbar_with_curve",
           "PALETTE", "THEME", "FIGURE_SIZE", "MAX_WIDTH_IN"]

#: seaborn's ``colorblind`` palette (Waskom 2021, after Wong 2011), the book's colour cycle.
PALETTE = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
           "#56b4e9")

#: The settings of ``seaborn.set_theme(context="notebook", style="whitegrid", palette="colorblind")``
#: that differ from matplotlib's defaults, written out: the book's figures keep seaborn's look
#: without its import (with pandas and scipy.stats, about 1.7 s of every kernel's start).
THEME = {
    "axes.axisbelow": True, "axes.edgecolor": ".8", "axes.grid": True, "axes.labelcolor": ".15",
    "axes.labelsize": 12.0, "axes.linewidth": 1.25, "axes.prop_cycle": cycler(color=list(PALETTE)),
    "axes.titlesize": 12.0, "font.size": 12.0,
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "grid.color": ".8", "grid.linewidth": 1.0, "legend.fontsize": 11.0, "legend.title_fontsize": 12.0,
    "lines.solid_capstyle": "round", "patch.edgecolor": "w", "patch.force_edgecolor": True, "text.color": ".15",
    "xtick.bottom": False, "xtick.color": ".15", "xtick.labelsize": 11.0, "xtick.major.size": 6.0,
    "xtick.major.width": 1.25, "xtick.minor.size": 4.0, "xtick.minor.width": 1.0,
    "ytick.left": False, "ytick.color": ".15", "ytick.labelsize": 11.0, "ytick.major.size": 6.0,
    "ytick.major.width": 1.25, "ytick.minor.size": 4.0, "ytick.minor.width": 1.0,
}


#: The book's text column is about 672 px wide on a 1280 px window (7 in at 96 px per inch): a
#: single-panel figure is 6.4 in wide, a figure of two panels side by side at most 8.4 in (shown
#: at 83 % or more of its size); three or more panels go in a grid, two across.
FIGURE_SIZE = (6.4, 4.0)
MAX_WIDTH_IN = 8.4


def use_theme() -> None:
    """Apply the book's theme (:data:`THEME`: seaborn's ``whitegrid`` look, colour-blind palette), SVG inline figures.

    In a Jupyter kernel the inline backend draws SVG, so figures stay sharp at any zoom, on a
    phone and in the PDF edition (text is drawn as paths, so it looks the same without the
    fonts).  Outside IPython only the matplotlib settings apply.
    """
    plt.rcParams.update(THEME)
    # svg.hashsalt fixes the SVG's element ids and SOURCE_DATE_EPOCH its date: the same run gives the same bytes
    plt.rcParams.update({"figure.figsize": FIGURE_SIZE, "figure.dpi": 110, "savefig.dpi": 200,
                         "axes.titlesize": "medium", "legend.fontsize": "small", "svg.hashsalt": "covbook"})
    os.environ.setdefault("SOURCE_DATE_EPOCH", "0")
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # not in a Jupyter kernel
        return
    if get_ipython() is not None:
        set_matplotlib_formats("svg")


def loglog_with_fit(ax: plt.Axes, t: object, y: object, *, label: str, color: object = None,
                    reference: float | None = None, marker: str = "o") -> float:
    """Plot y against t on log-log axes with its least-squares slope in the legend.

    If ``reference`` is given, a dashed line C/t with C = reference is drawn too.
    Returns the fitted slope.
    """
    tt, yy = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    slope, icpt = loglog_slope(tt, yy)
    (line,) = ax.loglog(tt, yy, marker, color=color, ms=4, label=f"{label} (slope {slope:.2f})")
    ax.loglog(tt, np.exp(icpt) * tt**slope, "-", color=line.get_color(), lw=1, alpha=0.7)
    if reference is not None:
        ax.loglog(tt, reference / tt, "--", color=line.get_color(), lw=1, alpha=0.9)
    sparse_log_ticks(ax)
    return slope


def sparse_log_ticks(ax: plt.Axes) -> None:
    """Label the minor ticks of both log axes of ``ax`` by :func:`sparse_minor_labels`."""
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(sparse_minor_labels(axis))


def sparse_minor_labels(axis: object, max_decades: float = 2.5) -> FuncFormatter:
    """Minor tick labels of a log axis at 2 and 5 times a power of ten only (``20``, ``50``, ``200``).

    Matplotlib labels 2, 3, 4 and 6 × 10^k on an axis spanning about a decade, which collide at
    the width of a panel of a two-panel figure; beyond ``max_decades`` no minor tick is labelled.
    """

    def label(x: float, _pos: object) -> str:
        lo, hi = sorted(axis.get_view_interval())
        if x <= 0 or lo <= 0 or hi / lo > 10**max_decades:
            return ""
        mantissa = round(x / 10 ** math.floor(math.log10(x)))
        return f"{x:g}" if mantissa in (2, 5) else ""

    return FuncFormatter(label)


def errorbar_with_curve(ax: plt.Axes, x: object, mean: object, se: object, *, label: str, color: object = None,
                        curve: tuple[object, object] | None = None, ms: float | None = None,
                        n_se: float = 2.0) -> None:
    """Measured points ``mean ± n_se·se`` at ``x`` (markers, no line) and, optionally, a closed form.

    ``curve = (x_line, y_line)`` draws the prediction as a thin line of the same colour (the book's
    "points: measured, lines: closed forms" figures, e.g. chapters 5 and 11). ``ms`` is the marker
    size (matplotlib's default when ``None``).

    Raises ``ValueError`` when ``x``, ``mean`` and ``se`` differ in length.
    """
    xx, m, s = (np.asarray(a, dtype=float).reshape(-1) for a in (x, mean, se))
    if not xx.size == m.size == s.size:
        raise ValueError(f"x, mean and se must have the same length, got {xx.size}, {m.size} and {s.size}")
    style = {} if ms is None else {"ms": ms}
    ax.errorbar(xx, m, yerr=n_se * s, fmt="o", color=color, label=label, **style)
    if curve is not None:
        ax.plot(np.asarray(curve[0], dtype=float), np.asarray(curve[1], dtype=float), "-", color=color, lw=1)
