"""Benchmark: the streaming readout against a plain float32 loop and against exact attention.

Prints, in one run, at d = 4 / m = 8 queries and at d = 16 / m = 64 queries:

  * covbook vs a plain loop: the median time of ``covbook.attention.readout_path`` on a
    GaussianIID context over the median time of the plain float32 torch loop with float64
    accumulators (float32 normals, logits, exp against a running max taken with ``amax`` on
    the contiguous axis, weighted sum of the values, chunks of 65,536 tokens), alternated in
    one run so that the ratio means something on a loaded machine;
  * tokens/s of both, the time 10^8 tokens would take at that rate, and where covbook's time
    goes (the share of drawing the float32 normals);
  * streaming vs exact attention on the same float64 tokens (time ratio);
  * peak memory (process ``ru_maxrss``, fresh child processes) at 10t over t, streaming and exact;
  * the float32 error at the default chunk length (d = 16, m = 64: one chunk of 2^17 tokens and
    more) against the float64 pass on the same tokens, as a fraction of the RMS value;
  * the CPU model, torch's BLAS and CPU capability (``torch.__config__.show()``), the machine's
    load average before and after, and torch's thread count.

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_attention.py [--t 1000000] [--full]``
(``--full`` also streams 10^8 tokens at d = 16, m = 64 once and reports the time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from covbook.attention import _default_chunk, readout_path, softmax_attention
from covbook.processes import GaussianIID, Replay

CONFIGS = ((4, 8), (16, 64))

CHILD = r"""
import json, resource, sys, time, torch
from covbook.attention import readout_path, softmax_attention
from covbook.processes import GaussianIID
mode, t, d, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
g = torch.Generator().manual_seed(0)
th = [torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5 for _ in range(3)]
q = torch.randn(m, d, generator=g, dtype=torch.float64)
start = time.perf_counter()
if mode == "stream":
    readout_path(GaussianIID(torch.eye(d, dtype=torch.float64)), q, *th, [t])
else:
    x = torch.randn(t, d, generator=g, dtype=torch.float64)
    softmax_attention(q @ th[0].T, x @ th[1].T, x @ th[2].T)
secs = time.perf_counter() - start
print(json.dumps({"seconds": secs, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def child(mode: str, t: int, d: int, m: int) -> dict:
    cmd = [sys.executable, "-c", CHILD, mode, str(t), str(d), str(m)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def setup(d: int, m: int):
    g = torch.Generator().manual_seed(0)
    th = [torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5 for _ in range(3)]
    q = torch.randn(m, d, generator=g, dtype=torch.float64)
    return th, q


def plain_loop(t: int, d: int, m: int, th, q, chunk: int = 65_536) -> torch.Tensor:
    """The plain reference: float32 per chunk, float64 running (max, den, num), eager max."""
    gen = torch.Generator().manual_seed(1)
    factor = torch.eye(d)  # Cholesky factor of the identity covariance, float32
    a = (q @ th[0].T @ th[1]).float()  # (m, d)
    tv = th[2].float()  # (d_v, d)
    mx = torch.full((m,), float("-inf"), dtype=torch.float64)
    den = torch.zeros(m, dtype=torch.float64)
    num = torch.zeros(m, d, dtype=torch.float64)
    seen = 0
    while seen < t:
        n = min(chunk, t - seen)
        x = torch.randn(n, d, generator=gen) @ factor.T  # (n, d) float32 tokens
        logits = a @ x.T  # (m, n)
        new = torch.maximum(mx, logits.amax(1).double())  # (m,)
        w = torch.exp(logits - new[:, None].float())  # (m, n)
        scale = torch.exp(mx - new)
        den = den * scale + w.sum(1).double()
        num = num * scale[:, None] + (w @ (x @ tv.T)).double()  # (m, d_v)
        mx = new
        seen += n
    return num / den[:, None]


def sampler_only(t: int, d: int, m: int) -> None:
    """The normals covbook's pass draws for t tokens, in its chunks (the sampler's share)."""
    gen = torch.Generator().manual_seed(1)
    c = min(_default_chunk(1, m), t)
    buf = torch.empty(1, c, d)
    for _ in range(t // c):
        buf.normal_(generator=gen)
    if t % c:
        torch.empty(1, t % c, d).normal_(generator=gen)


def timed(f) -> float:
    s = time.perf_counter()
    f()
    return time.perf_counter() - s


def compare(t: int, d: int, m: int, repeats: int) -> dict:
    th, q = setup(d, m)
    proc = GaussianIID(torch.eye(d, dtype=torch.float64))
    runs = {
        "plain": lambda: plain_loop(t, d, m, th, q),
        "covbook": lambda: readout_path(proc, q, *th, [t], seed=1),
        "sampler": lambda: sampler_only(t, d, m),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):  # alternate, so that load changes hit both alike
        for k, f in runs.items():
            times[k].append(timed(f))
    return {**{k: statistics.median(v) for k, v in times.items()}, "covbook_best": min(times["covbook"]),
            "plain_best": min(times["plain"])}


def same_tokens_ratio(t: int, d: int, m: int, repeats: int = 3) -> float:
    """Median time of the streaming pass over the median time of exact attention, same float64 tokens."""
    th, q = setup(d, m)
    x = torch.randn(t, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    stream = [timed(lambda: readout_path(Replay(x), q, *th, [t])) for _ in range(repeats)]
    exact = [timed(lambda: softmax_attention(q @ th[0].T, x @ th[1].T, x @ th[2].T)) for _ in range(repeats)]
    return statistics.median(stream) / statistics.median(exact)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def blas_path() -> str:
    """torch's BLAS and the CPU code path it dispatches to, from its build configuration."""
    cfg = torch.__config__.show()
    blas = next((w.split("=", 1)[1] for w in cfg.replace(",", " ").split() if w.startswith("BLAS_INFO=")), "?")
    lib = next((line.strip(" -") for line in cfg.splitlines() if "Math Kernel Library" in line or "OpenBLAS" in line),
               blas)
    cap = torch.backends.cpu.get_cpu_capability()
    return (f"BLAS_INFO={blas} ({lib}); mkl available: {torch.backends.mkl.is_available()}; "
            f"ATen CPU capability: {cap}")


def float32_error(d: int = 16, m: int = 64, chunks: int = 2) -> tuple[int, float]:
    """max |float32 - float64 readout| / RMS value at the default chunk, on the same float32 tokens."""
    chunk = _default_chunk(1, m)
    t = chunks * chunk
    th, q = setup(d, m)
    x = torch.randn(t, d, generator=torch.Generator().manual_seed(3)).double()  # float32 tokens
    out32 = readout_path(Replay(x), q, *th, [t], dtype=torch.float32)
    out64 = readout_path(Replay(x), q, *th, [t], dtype=torch.float64)
    rms = float(((x @ th[2].T) ** 2).sum(-1).mean().sqrt())
    return chunk, float((out32 - out64).abs().max()) / rms


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t", type=int, default=1_000_000, help="tokens per timed pass (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3, help="alternated repeats per pass (median)")
    ap.add_argument("--t-mem", type=int, default=150_000, help="base context of the memory and exact checks")
    ap.add_argument("--full", action="store_true", help="also stream 10^8 tokens at d = 16, m = 64")
    args = ap.parse_args()
    print(f"load average at start: {load()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical cores)")
    print(f"BLAS: {blas_path()}")
    chunk, err = float32_error()
    print(f"float32 error at the default chunk ({chunk:,} tokens, d = 16, m = 64, 2 chunks): {err:.2e} of the "
          f"RMS value (documented typical < 1e-6)")
    for d, m in CONFIGS:
        r = compare(args.t, d, m, args.repeats)
        ratio = r["plain"] / r["covbook"]
        rate = args.t / r["covbook"]
        print(f"\n== d = {d}, m = {m} queries, t = {args.t:,} tokens per pass, median of {args.repeats} ==")
        print(f"covbook readout_path     : {rate / 1e6:6.2f} M tokens/s   (10^8 tokens: {1e8 / rate:6.1f} s)")
        print(f"plain float32 loop       : {args.t / r['plain'] / 1e6:6.2f} M tokens/s   "
              f"(10^8 tokens: {1e8 * r['plain'] / args.t:6.1f} s)")
        print(f"ratio plain / covbook    : {ratio:6.2f}   (target >= 1.5 at d = 16, m = 64; "
              f"best-of-{args.repeats} ratio {r['plain_best'] / r['covbook_best']:.2f})")
        print(f"best of {args.repeats} covbook     : {args.t / r['covbook_best'] / 1e6:6.2f} M tokens/s   "
              f"(10^8 tokens: {1e8 * r['covbook_best'] / args.t:6.1f} s; the least-loaded pass)")
        share = r["sampler"] / r["covbook"]
        print(f"where covbook's time goes: float32 normals {100 * share:4.0f}%, attention "
              f"(logits, exp, sums) {100 * (1 - share):4.0f}%")
        print(f"streaming / exact, same float64 tokens (t = {args.t_mem:,}): "
              f"{same_tokens_ratio(args.t_mem, d, m):6.2f}")
        s1, s10 = child("stream", args.t_mem, d, m), child("stream", 10 * args.t_mem, d, m)
        e1, e10 = child("exact", args.t_mem, d, m), child("exact", 10 * args.t_mem, d, m)
        print(f"memory streaming, peak at 10t / at t : {s10['peak_kb'] / s1['peak_kb']:6.2f}  "
              f"({s1['peak_kb'] / 1024:.0f} MB -> {s10['peak_kb'] / 1024:.0f} MB; flat: ≈ 1)")
        print(f"memory exact, peak at 10t / at t     : {e10['peak_kb'] / e1['peak_kb']:6.2f}  "
              f"({e1['peak_kb'] / 1024:.0f} MB -> {e10['peak_kb'] / 1024:.0f} MB; grows with t)")
    if args.full:
        th, q = setup(16, 64)
        secs = timed(lambda: readout_path(GaussianIID(torch.eye(16, dtype=torch.float64)), q, *th, [10**8]))
        print(f"\n10^8 tokens at d = 16, m = 64: {secs:.1f} s ({1e8 / secs / 1e6:.2f} M tokens/s)")
    print(f"\nload average at end: {load()}")


if __name__ == "__main__":
    main()
