"""Chapter 8's slope claims: which statistic's t ratio follows its Student-t law.

Redraws a smoke-profile model of chapter 8 (Experiment 1's Gaussian attention-only model, or
Experiment 3's discrete attention-only one) ``--redraws`` times with ``--streams`` paired streams,
pools the pairs' squared gaps at every depth, then resamples ``--sets`` sets of 16 pairs from the pool
and reports, per depth, how often |z| exceeds the window's quantile k (Student-t, 15 dof, at the
book's level) for

* the slope of the mean gap over the pairs with a bootstrap SE over the pairs;
* the mean over the pairs of each pair's log-log slope with its Student-t SE (``stats.mean_loglog_slope``),

z being centred on the statistic's value over the whole pool.  Numbers in
``notebooks/rules/08_depth_collapse.yml`` come from::

    python studies/slope_statistic_08.py --seed 1452 --model gauss --redraws 400 --sets 20000
    python studies/slope_statistic_08.py --seed 1458 --model dattn --redraws 400 --sets 10000

With ``--rate FAMILY`` it checks the statistic the chapter's rate claims use now
(:func:`covbook.experiments.depth.rate_slope`): it runs the family (gauss, dmlp or dattn) at the quick
profile's sizes with ``--models`` independent models (a law, weights and 8 contexts each), and resamples
``--sets`` sets of ``--size`` models (the quick profile's 24), reporting per depth the models' slopes' skew
and kurtosis, SD(z) (1.047 for Student-t with 23 dof) and how often |z| exceeds the window's quantile, in all
and in each tail.  On the development seeds, with sets of 16 models::

    python studies/slope_statistic_08.py --seed 2 --rate gauss --models 128 --sets 20000 --size 16
    python studies/slope_statistic_08.py --seed 3 --rate dmlp --models 96 --sets 20000 --size 16

gave SD(z) 1.07–1.09 at every depth (skew −0.67 to +0.50) and P(|z| > 4.42) from 0.00035 to 0.0011 at the
level 0.0005 (20000 resampled sets), against SD/SE 1.27–1.30 for the slope of the pooled mean with a
bootstrap SE.  With the quick profile's 24 models per set::

    python studies/slope_statistic_08.py --seed 31 --rate gauss --models 192 --sets 40000

gave SD(z) 1.046–1.050 at every depth (the models' slopes: SD 0.18–0.33, skew −0.20 to +0.16, kurtosis
3.1–4.0) and P(|z| > 4.05) from 0.00038 to 0.00057 at the level 0.0005, each tail from 0.00010 to 0.00047.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from scipy import stats as sst

from covbook.experiments import depth
from covbook.rules import quantile
from covbook.stats import loglog_slope, mean_loglog_slope
from covbook.streams import Streams
from covbook.transformer import CausalTransformer, mean_field, mean_field_gaussian


def pooled_pairs(seed: int, model: str, redraws: int, streams: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs' gaps over the fitted checkpoints, shape (L+1, redraws·streams/2, n_fit), and the fitted t."""
    st = Streams(seed, depth.CHAPTER)
    torch.manual_seed(st.seed_for("global"))
    s = depth.context_laws(d_in=2, d_model=8, n_layers=4, vocab=16, t_max=512, n_streams=streams, quad_nodes=32,
                      streams=st)
    cp = s.checkpoints
    cov = s.covariance(st.torch_generator("draws"))  # one law for every redraw: (d_in, d_in)
    freqs = depth.flat_dirichlet(s.vocab, st.torch_generator("global"))  # (V,)
    if model == "gauss":
        scale = depth.tail_safe_logit_scale(cov, list(depth.SCALES), kappa_min=depth.KAPPA_MIN, **s.shape,
                                            seed=st.seed_for("gauss"))
        net = CausalTransformer(**s.shape, logit_scale=scale, seed=st.seed_for("gauss"))
        Ms = mean_field_gaussian(net, cov)
    else:
        shape = dict(vocab_size=s.vocab, d_model=s.d_model, n_layers=s.n_layers, seed=st.seed_for("discrete"))
        pilot = torch.multinomial(freqs, 16 * s.t_max, replacement=True,
                                  generator=st.torch_generator("pilot")).view(16, s.t_max)
        scale, _ = depth.sink_free_logit_scale(list(depth.SCALES), pilot, **shape)
        net = CausalTransformer(**shape, logit_scale=scale)
        tokens = torch.arange(s.vocab)
        F = mean_field(net, tokens, freqs, tokens)  # (L+1, V, d)
    out = []
    for k in range(redraws):
        g = st.torch_generator("study-redraw", k)
        if model == "gauss":
            z = torch.randn(streams, s.t_max, s.d_in, generator=g, dtype=torch.float64)
            x = depth.paired(z @ torch.linalg.cholesky(cov).T, cp)  # (R, T, d_in)
            Fx = torch.stack([x[:, cp - 1] @ M.T for M in Ms])  # (L+1, R, n_t, d)
        else:
            x = depth.paired(torch.multinomial(freqs, streams * s.t_max, replacement=True, generator=g)
                             .view(streams, s.t_max), cp)  # (R, T)
            Fx = F[:, x[:, cp - 1]]
        sq, _ = depth.squared_gaps(net, x, Fx, cp)  # (L+1, R, n_t)
        out.append(np.stack([depth.group_means(q, 2) for q in sq])[:, :, s.fit])
    return np.concatenate(out, 1), s.t_fit


def z_tails(pool: np.ndarray, t: np.ndarray, sets: int, n_pairs: int, rng: np.random.Generator,
            n_boot: int = 400) -> dict[str, np.ndarray]:
    """z of both statistics for ``sets`` resampled sets of ``n_pairs`` pairs from ``pool`` (P, n_fit)."""
    x = np.log(t) - np.log(t).mean()
    w = x / (x**2).sum()  # (n_fit,)
    centre_mean, centre_log = w @ np.log(pool.mean(0)), (np.log(pool) @ w).mean()
    z_mean, z_log = [], []
    for start in range(0, sets, 500):
        n = min(500, sets - start)
        g = pool[rng.integers(0, len(pool), (n, n_pairs))]  # (n, pairs, n_fit)
        b = np.log(g.mean(1)) @ w  # (n,)
        boot = g[np.arange(n)[:, None, None], rng.integers(0, n_pairs, (n, n_boot, n_pairs))]
        se = (np.log(boot.mean(2)) @ w).std(1, ddof=1)  # (n,)
        z_mean.append((b - centre_mean) / se)
        per = np.log(g) @ w  # (n, pairs)
        z_log.append((per.mean(1) - centre_log) / (per.std(1, ddof=1) / np.sqrt(n_pairs)))
    return {"slope of the mean, bootstrap SE": np.concatenate(z_mean),
            "mean of the pairs' slopes, t SE": np.concatenate(z_log)}


def rate_level(seed: int, family: str, n_models: int, sets: int, size: int = 24) -> None:
    """Print, per depth, the rate statistic's level over ``sets`` resampled sets of ``size`` of ``n_models`` models.

    Besides P(|z| > k) it prints each tail's share, P(z < −k) and P(z > k), against half the level each.
    """
    st = Streams(seed, depth.CHAPTER)
    s = depth.context_laws(d_in=2, d_model=8, n_layers=4, vocab=16, t_max=1024,
                           n_streams=depth.CONTEXTS_PER_MODEL * n_models, quad_nodes=64, streams=st)
    run = {"gauss": depth.gaussian, "dmlp": depth.discrete_mlp,
           "dattn": lambda laws: depth.discrete_attention(laws)[0]}[family]
    r = run(s)
    k = quantile(size - 1)
    rng = np.random.default_rng(0)
    for l in range(1, s.n_layers + 1):
        per = depth.rate_slope(s.t_fit, r.sq[l][:, s.fit])[3]  # (n_models,): each model's slope
        pick = per[rng.integers(0, per.size, (sets, size))]  # (sets, size)
        z = (pick.mean(1) - per.mean()) / (pick.std(1, ddof=1) / np.sqrt(size))
        print(f"{family} L = {l}: {per.size} models, mean slope {per.mean():+.3f} (SD {per.std():.3f}, skew "
              f"{sst.skew(per):+.2f}, kurtosis {sst.kurtosis(per, fisher=False):.2f}); SD(z) {z.std():.3f}, "
              f"P(|z| > k = {k:.2f}) {np.mean(np.abs(z) > k):.5f} (below {np.mean(z < -k):.5f}, "
              f"above {np.mean(z > k):.5f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1452)
    p.add_argument("--model", choices=("gauss", "dattn"), default="gauss")
    p.add_argument("--redraws", type=int, default=100)
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--sets", type=int, default=5000)
    p.add_argument("--rate", choices=("gauss", "dmlp", "dattn"), default=None,
                   help="check the rate claims' statistic (the mean of the models' slopes) on this family")
    p.add_argument("--models", type=int, default=128)
    p.add_argument("--size", type=int, default=24, help="models per resampled set (the quick profile's 24)")
    a = p.parse_args()
    if a.rate is not None:
        rate_level(a.seed, a.rate, a.models, a.sets, a.size)
        return
    pool, t = pooled_pairs(a.seed, a.model, a.redraws, a.streams)
    n_pairs = 16
    k = quantile(n_pairs - 1)
    rng = np.random.default_rng(0)
    for l in range(1, pool.shape[0]):
        per = mean_loglog_slope(t, pool[l])[2]  # (P,): the pairs' slopes
        pooled = loglog_slope(t, pool[l].mean(0))[0]
        print(f"L = {l}: pool of {pool.shape[1]} pairs; slope of the pooled mean {pooled:+.3f}, "
              f"mean of the pairs' slopes {per.mean():+.3f} (SD {per.std():.3f}, skew {sst.skew(per):+.2f}, "
              f"kurtosis {sst.kurtosis(per, fisher=False):.2f})")
        for name, z in z_tails(pool[l], t, a.sets, n_pairs, rng).items():
            print(f"    {name:34s} SD(z) {z.std():.2f}  P(|z| > k = {k:.2f}) {np.mean(np.abs(z) > k):.5f}")


if __name__ == "__main__":
    main()
