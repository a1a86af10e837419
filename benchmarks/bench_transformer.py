"""Benchmark: the CausalTransformer's block attention against the reference softmax_attention.

The blocks of :class:`covbook.transformer.CausalTransformer` compute causal attention with
the reference's own operations and one check of the output
(``covbook.transformer.model._causal_attention``); the reference,
``covbook.attention.softmax_attention(causal=True)``, also validates its inputs and logits.
Both give the same bits.  This prints, in one run, alternating the two (so that the ratio
means something on a loaded machine), at chapter 10's quick sizes (width 64, 2 layers, 4
heads, rotary positions, MLP and layer norm, float32, one thread):

  * CPU seconds of 15 AdamW training steps on 16 windows of 128 tokens;
  * CPU seconds of greedy generation of 96 tokens after 8 prompts of 32 (KV cache);
  * the ratios reference / block attention, and whether the generated tokens agree.

Run: ``.venv/bin/python benchmarks/bench_transformer.py [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import covbook.transformer.model as model_module
from covbook.attention import softmax_attention
from covbook.transformer import CausalTransformer, generate

V, STEPS, GEN = 60, 15, 96


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return softmax_attention(q, k, v, causal=True)


def _work() -> tuple[float, float, torch.Tensor]:
    """(training CPU s, generation CPU s, generated tokens) with the current block attention."""
    m = CausalTransformer(vocab_size=V, d_model=64, n_layers=2, n_heads=4, mlp=True, layer_norm=True,
                          pos="rotary", dtype=torch.float32, seed=0)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, V, (16, 129), generator=torch.Generator().manual_seed(0))  # (B, T+1)
    t0 = time.process_time()
    for _ in range(STEPS):
        loss = torch.nn.functional.cross_entropy(m(x[:, :-1]).reshape(-1, V), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    t1 = time.process_time()
    out = generate(m.eval(), x[:8, :32], GEN, temperature=0)  # (8, 32 + GEN)
    return t1 - t0, time.process_time() - t1, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fast = model_module._causal_attention
    runs: dict[str, list[tuple[float, float, torch.Tensor]]] = {"reference": [], "block": []}
    load = os.getloadavg()[0]
    try:
        for _ in range(args.repeats):
            for name, fn in (("reference", _reference), ("block", fast)):
                model_module._causal_attention = fn
                runs[name].append(_work())
    finally:
        model_module._causal_attention = fast
    med = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
           for name, rs in runs.items()}
    for name, (train, gen) in med.items():
        print(f"{name:>9}: {STEPS} training steps {train:.2f} s CPU, greedy generation 8x{GEN} {gen:.2f} s CPU "
              f"(medians of {args.repeats})")
    same = all(torch.equal(a[2], b[2]) for a, b in zip(runs["reference"], runs["block"]))
    print(f"ratio reference / block: training {med['reference'][0] / med['block'][0]:.2f}, "
          f"generation {med['reference'][1] / med['block'][1]:.2f}; same tokens: {same}; "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
