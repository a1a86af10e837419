"""Benchmark: the streaming readout against exact attention, as ratios measured in one run.

Prints
  * time(streaming) / time(exact) on the same tokens (the price of the online log-sum-exp);
  * peak memory of a streaming pass at 10x the context, over the peak at 1x (bounded memory: ≈ 1);
  * the same memory ratio for exact attention (grows with t: ≈ 10);
  * streaming throughput in tokens per second, for scale.

Run: `make bench` or `.venv/bin/python benchmarks/bench_attention.py [--t 1000000]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

CHILD = r"""
import json, resource, sys, time, torch
from covbook.attention import readout_path, softmax_attention
from covbook.processes import GaussianIID, Replay
mode, t = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
d, m = 4, 8
g = torch.Generator().manual_seed(0)
th = [torch.randn(d, d, generator=g, dtype=torch.float64) / d for _ in range(3)]
q = torch.randn(m, d, generator=g, dtype=torch.float64)
start = time.perf_counter()
if mode == "stream":
    readout_path(GaussianIID(torch.eye(d, dtype=torch.float64)), q, *th, [t], chunk=1 << 15)
else:
    x = torch.randn(t, d, generator=g, dtype=torch.float64)
    softmax_attention(q @ th[0].T, x @ th[1].T, x @ th[2].T)
secs = time.perf_counter() - start
print(json.dumps({"seconds": secs, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def child(mode: str, t: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(t)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def same_tokens_ratio(t: int, repeats: int = 3) -> float:
    """Median time of the streaming pass over the median time of exact attention, same tokens."""
    from covbook.attention import readout_path, softmax_attention
    from covbook.processes import Replay

    torch.set_num_threads(1)
    d, m = 4, 8
    g = torch.Generator().manual_seed(1)
    th = [torch.randn(d, d, generator=g, dtype=torch.float64) / d for _ in range(3)]
    q = torch.randn(m, d, generator=g, dtype=torch.float64)
    x = torch.randn(t, d, generator=g, dtype=torch.float64)

    def stream() -> None:
        readout_path(Replay(x), q, *th, [t], chunk=1 << 15)

    def exact() -> None:
        softmax_attention(q @ th[0].T, x @ th[1].T, x @ th[2].T)

    def med(f) -> float:
        ts = []
        for _ in range(repeats):
            s = time.perf_counter()
            f()
            ts.append(time.perf_counter() - s)
        return sorted(ts)[len(ts) // 2]

    return med(stream) / med(exact)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t", type=int, default=1_000_000, help="base context length")
    t = ap.parse_args().t
    ratio = same_tokens_ratio(t)
    s1, s10 = child("stream", t), child("stream", 10 * t)
    e1, e10 = child("exact", t), child("exact", 10 * t)
    print(f"context t = {t:,} tokens, d = 4, 8 queries, float64, 1 thread")
    print(f"time ratio   streaming / exact, same tokens          : {ratio:6.2f}")
    print(f"memory ratio streaming, process peak at 10t / at t     : {s10['peak_kb'] / s1['peak_kb']:6.2f}"
          f"  ({s1['peak_kb'] / 1024:.0f} MB -> {s10['peak_kb'] / 1024:.0f} MB; bounded: ≈ 1)")
    print(f"memory ratio exact, process peak at 10t / at t         : {e10['peak_kb'] / e1['peak_kb']:6.2f}"
          f"  ({e1['peak_kb'] / 1024:.0f} MB -> {e10['peak_kb'] / 1024:.0f} MB; grows with t)")
    print(f"streaming throughput (generation included)            : {10 * t / s10['seconds']:,.0f} tokens/s")


if __name__ == "__main__":
    main()
