"""Benchmark: chapter 09's greedy cycles, batched against one law at a time, in one run.

:func:`covbook.experiments.repetition.greedy_cycles` reads the mean-field kernel at many laws: the
self-consistency of each final cycle, the grid and bisection of each break time, every context length
of each margin, the gaps at and after detection.  The library evaluates them in batches of laws
(:func:`covbook.markov.cycle_records`) and kicks every orbit of one model in one greedy decoding
(:func:`covbook.markov.perturbed_returns`); the reference, ``tests/cycles_reference.py``, calls the
kernel once per law and decodes once per orbit, as the definitions read.  This prints, alternating the
two (so that the ratio means something on a loaded machine), at chapter 09's sizes of a profile
(``--profile smoke`` or ``quick``; one thread, as the chapter runs on a CPU):

  * seconds of ``greedy_cycles`` with the reference and with the batched evaluation (medians);
  * the ratio reference / batched;
  * passes of the mean-field recursion (each a few kernel launches on a GPU) and greedy decodings;
  * whether the two give the same claims and glued numbers.

Run: ``.venv/bin/python benchmarks/bench_repetition.py [--profile smoke] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import covbook.markov as mk  # noqa: E402
import cycles_reference  # noqa: E402
from covbook.experiments import repetition  # noqa: E402
from covbook.streams import Streams  # noqa: E402

# the module, not the function covbook.transformer re-exports under its name
mf_module = importlib.import_module("covbook.transformer.mean_field")
SIZES = {  # notebooks/profiles.yml (smoke) and the notebook's parameters cell (quick)
    "smoke": dict(n_models=6, n_prompts=6, t_detect=64, t_greedy=192),
    "quick": dict(n_models=8, n_prompts=8, t_detect=128, t_greedy=384),
}


def _one_orbit_at_a_time(model, cycle, **kw) -> np.ndarray:
    """perturbed_returns with one greedy decoding per orbit (kicks drawn in the same order)."""
    if isinstance(cycle, list):
        return np.stack([mk.perturbed_returns(model, c, **kw) for c in cycle])
    return mk.perturbed_returns(model, cycle, **kw)


def _run(profile: str, reference: bool) -> tuple[float, dict, int, int]:
    """(seconds, claims and glued numbers, mean-field passes, greedy decodings) of one greedy_cycles."""
    counts = {"passes": 0, "decodings": 0}
    recursion, decode = mf_module._recursion, mk.greedy_decode

    def counted_recursion(*a, **k):
        counts["passes"] += 1
        return recursion(*a, **k)

    def counted_decode(*a, **k):
        counts["decodings"] += 1
        return decode(*a, **k)

    saved = (repetition.cycle_records, repetition.perturbed_returns, repetition.greedy_decode,
             mk.cycles.greedy_decode)
    mf_module._recursion = counted_recursion
    repetition.greedy_decode = mk.cycles.greedy_decode = counted_decode
    if reference:
        repetition.cycle_records, repetition.perturbed_returns = cycles_reference.cycle_records, _one_orbit_at_a_time
    try:
        s = Streams(0, repetition.CHAPTER)
        t0 = time.perf_counter()
        out = repetition.greedy_cycles(vocab=8, d_model=16, logit_scale=1.0, prompt_len=8, significance=False,
                                       streams=s, draws=s.torch_generator("draws"), **SIZES[profile])
        seconds = time.perf_counter() - t0
    finally:
        mf_module._recursion = recursion
        (repetition.cycle_records, repetition.perturbed_returns, repetition.greedy_decode,
         mk.cycles.greedy_decode) = saved
    return seconds, {"claims": out.measurements, "numbers": out.numbers}, counts["passes"], counts["decodings"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(SIZES), default="smoke")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.broadcast_shapes((1,), (2,))  # torch's first call imports sympy: not part of either timing
    load = os.getloadavg()[0]
    runs: dict[str, list] = {"reference": [], "batched": []}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(_run(args.profile, name == "reference"))
    med = {name: statistics.median(r[0] for r in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        print(f"{name:>9}: greedy_cycles at {args.profile} {med[name]:.2f} s (median of {args.repeats}), "
              f"{rs[0][2]} mean-field passes, {rs[0][3]} greedy decodings")
    same = all(repr(a[1]) == repr(b[1]) for a, b in zip(runs["reference"], runs["batched"], strict=True))
    print(f"ratio reference / batched: {med['reference'] / med['batched']:.2f}; same claims and glued numbers: "
          f"{same}; load average {load:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
