"""Chapter 9's temperature sweep: how many models ``attractors_low_tau`` needs, and where ``t5_fixed_point_slope``
holds its level.

Per seed, draws ``--models`` random two-layer models of the chapter (stream ``cycle-models``), ``--prompts``
8-token prompts each, and samples 256 tokens at τ = 0.1, 2.0 and 1.0, as
:func:`covbook.experiments.repetition.temperature_sweep` does.  It reports

* ``attractors_low_tau``: the per-model contrast (between-prompt minus within-run TV of the runs' second halves,
  at τ = 0.1 minus at τ = 2.0) with the first 4 prompts and with all of them, its mean and SD over every model,
  and the chance that a run over G models passes the significance window [k·SE, ∞) at the book's level
  (Student t with G − 1 degrees of freedom, non-centrality √G·mean/SD);
* ``t5_fixed_point_slope``: the slope of the band means of the fixed-point residual at τ = 1 and its jackknife SE
  over models (:func:`covbook.stats.slope_with_group_se`) for disjoint sets of 32 models with 4 runs each (the
  quick profile's), fitted on every band from twice the prompt length or on the bands from t = 32
  (:func:`covbook.experiments.repetition.fixed_point_bands`): the mean slope, SD over the sets, the SE's root
  mean square, and the SD and largest |z| of z = (slope + 1/2)/SE.

On the development seeds::

    for s in $(seq 9130 9145); do python studies/sweep_claims_09.py --seed $s --out /tmp/sweep09; done
    python studies/sweep_claims_09.py --report /tmp/sweep09

gave a per-model contrast of 0.226 (SD 0.257) with 4 prompts, so a pass chance of 0.84 with 32 models, 0.99 with
48 and 0.999 with 64; and over 48 sets of 32 models, slope −0.517 (SD 0.023, SD/SE 1.07, mean z −1.00, SD z 1.21)
fitted from t = 16, against −0.483 (SD 0.025, SD/SE 1.01, mean z +0.65, SD z 1.00, largest |z| 2.58) from t = 32:
the jackknife SE holds its level, and the first two bands, where the 8-token prompt is more than a quarter of the
context, have local slopes −0.69 and −0.58.
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sst

from covbook.experiments import repetition as rp
from covbook.markov import fixed_point_residual, sample, within_between_tv
from covbook.rules import quantile
from covbook.stats import slope_with_group_se
from covbook.streams import Streams
from covbook.transformer import ModelBatch

PROMPT_LEN, T_SAMPLE, SET = 8, 256, 32  # the quick profile's prompt, run length and models per set


def draw(seed: int, models: int, prompts: int, out: Path) -> None:
    """One seed's per-model contrasts and fixed-point band means, saved to ``out/seed-N.npz``."""
    torch.set_num_threads(1)
    st = Streams(seed, rp.CHAPTER)
    gen, gdev = st.torch_generator("draws"), st.torch_generator("sampling")
    ms = [rp.random_model(2, st.seed_for("cycle-models", i), vocab=8, d_model=16) for i in range(models)]
    x0 = torch.randint(0, 8, (models * prompts, PROMPT_LEN), generator=gen)
    batch = ModelBatch(ms, np.repeat(np.arange(models), prompts))
    bands, _ = rp.fit_bands(PROMPT_LEN + T_SAMPLE, rp.GAP_PER_BAND, t_min=2 * PROMPT_LEN)
    read = np.unique(np.concatenate(bands))
    saved = {"start": np.array([b[0] for b in bands])}
    for tau in (0.1, 2.0, 1.0):
        runs = sample(batch, x0, T_SAMPLE, tau, generator=gdev).reshape(models, prompts, -1)  # (models, prompts, T)
        late = runs[:, :, PROMPT_LEN + T_SAMPLE // 2:]
        for n in sorted({4, prompts}):
            tv = [within_between_tv(r[:n], 8) for r in late]
            saved[f"contrast_{tau}_{n}"] = np.array([b.mean().item() - w.mean().item() for w, b in tv])
        if tau == 1.0:
            saved["fp"] = np.stack([rp._band_means(fixed_point_residual(m, r[:4], read, start=PROMPT_LEN).numpy(),
                                                   read, bands) for m, r in zip(ms, runs, strict=True)])
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"seed-{seed}.npz", **saved)


def report(folder: Path) -> None:
    files = sorted(glob.glob(str(folder / "seed-*.npz")))
    data = [np.load(f) for f in files]
    _, centres = rp.fit_bands(PROMPT_LEN + T_SAMPLE, rp.GAP_PER_BAND, t_min=2 * PROMPT_LEN)
    print(f"{len(files)} seeds")
    for n in (4, 8):
        if f"contrast_0.1_{n}" not in data[0]:
            continue
        c = np.concatenate([d[f"contrast_0.1_{n}"] - d[f"contrast_2.0_{n}"] for d in data])
        d = c.mean() / c.std(ddof=1)  # the effect in SDs of one model
        chance = {g: 1 - sst.nct.cdf(quantile(g - 1), g - 1, np.sqrt(g) * d) for g in (32, 48, 64)}
        print(f"attractors_low_tau, {n} prompts: mean {c.mean():.3f} SD {c.std(ddof=1):.3f} over {c.size} models; "
              + ", ".join(f"pass chance {p:.3f} with {g} models" for g, p in chance.items()))
    fits = (("from t = 16", np.ones(centres.size, bool)), ("from t = 32", rp.fixed_point_bands(data[0]["start"])))
    for name, fit in fits:
        sl, se = [], []
        for d in data:
            for a in range(d["fp"].shape[0] // SET):
                blk = d["fp"][SET * a:SET * (a + 1)][..., fit]  # (32, 4, n_fit)
                groups = np.repeat(np.arange(SET), 4)  # (128,): the model is the replicate
                b, s, _ = slope_with_group_se(centres[fit], blk.reshape(-1, blk.shape[-1]), groups)
                sl.append(b)
                se.append(s)
        sl, se = np.array(sl), np.array(se)
        z = (sl + 0.5) / se
        print(f"t5_fixed_point_slope {name}: {sl.size} sets, slope {sl.mean():.3f} SD {sl.std(ddof=1):.3f} "
              f"SD/SE {sl.std(ddof=1) / np.sqrt((se ** 2).mean()):.2f} mean z {z.mean():+.2f} SD z {z.std(ddof=1):.2f} "
              f"largest |z| {np.abs(z).max():.2f}")
    m = np.concatenate([d["fp"].reshape(-1, centres.size) for d in data]).mean(0)
    print("local slopes of the pooled residual:", np.round(np.diff(np.log(m)) / np.diff(np.log(centres)), 3))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int)
    ap.add_argument("--models", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("/tmp/sweep09"))
    ap.add_argument("--report", type=Path)
    a = ap.parse_args()
    if a.report:
        report(a.report)
    elif a.seed is None:
        ap.error("give --seed (draw one seed) or --report FOLDER")
    else:
        draw(a.seed, a.models, a.prompts, a.out)
