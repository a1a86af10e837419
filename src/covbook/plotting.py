"""The book's figure style and helpers (seaborn theme, log-log plots with fitted slopes)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from covbook.stats import loglog_slope

__all__ = ["use_theme", "loglog_with_fit", "PALETTE"]

PALETTE = "colorblind"


def use_theme() -> None:
    """Apply the book's theme: seaborn ``whitegrid``, colour-blind palette, crisp inline figures."""
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE)
    plt.rcParams.update({"figure.figsize": (6.4, 4.0), "figure.dpi": 110, "savefig.dpi": 110,
                         "axes.titlesize": "medium", "legend.fontsize": "small"})


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
    return slope
