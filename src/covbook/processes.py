"""Input laws for the context stream (Xu & Fang 2026, Sec. 3; book chapters 1–4).

A *process* is a stationary (or deliberately non-stationary) law for the token
sequence x_1, x_2, ... in R^d.  Each process knows its exact mean and covariance
where they exist, and draws its tokens in chunks from a ``torch.Generator`` so
that a context of any length can be streamed in bounded memory.

Sampling goes through :meth:`Process.sampler`, which returns a stateful callable
``draw(n) -> (streams, n, d)``: it lets processes with memory (a VAR(1), a
random walk, a covariance drawn once per sequence) continue a stream exactly
across chunks.  Independent streams share nothing but the generator.

Each law also knows the long-context limit of softmax attention over it, the
tilted mean ∇ log M(a) (:meth:`Process.tilted_mean`), where a closed form
exists, and says why where none does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from covbook._validate import (
    as_covariance,
    as_tensor,
    as_vector,
    check_fits,
    check_generator,
    check_positive_float,
    check_positive_int,
    finite_result,
    psd_sqrt_factor,
)
from covbook.linalg import stationary_covariance

Sampler = Callable[[int], torch.Tensor]

__all__ = [
    "Process", "IIDProcess", "GaussianIID", "Replay", "Sampler",
    "MixingLaw", "DiscreteMixing", "ExponentialMixing", "InverseGaussianMixing", "mixing_law", "MIXING_LAWS",
    "InputLaw", "INPUT_LAWS", "input_law",
    "ScaleMixture", "MultivariateLaplace", "StudentT", "VAR1", "RandomWalk", "NonErgodicGaussian",
    "SkewedExponential", "BimodalGaussian",
]


def _draw_shape(streams: int, n: object, dim: int) -> int:
    """Check ``n`` and that a (streams, n, dim) float64 draw fits in memory; return n."""
    n = check_positive_int(n, "n")
    check_fits((streams, n, dim), "n (tokens per stream)")
    return n


def _scale_by_factor(z: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """z Lᵀ for draws z (..., d) and a factor L (d, d), bit for bit, cheaper for a diagonal L.

    Every law here built on z (Gaussian, uniform) maps it by L with L Lᵀ = Σ.  With Σ = I, the common
    case, the product changes nothing (z·1 + 0 = z) but costs as much as a fifth of the draw; with a
    diagonal L each coordinate is z_k L_kk plus exact zeros, which the elementwise product gives alone.
    """
    diag = factor.diagonal()
    if not torch.equal(factor, torch.diag(diag)):
        return z @ factor.to(z.device).T  # (..., d)
    if bool((diag == 1).all()):
        return z
    return z * diag.to(z.device)  # (..., d)


class Process(ABC):
    """A law for a sequence of tokens in R^d.

    Attributes
    ----------
    dim : int
        Token dimension d.
    """

    dim: int

    @property
    def mean(self) -> torch.Tensor | None:
        """Exact stationary mean E x_s, shape (d,), or ``None`` where none exists."""
        return None

    @property
    def covariance(self) -> torch.Tensor | None:
        """Exact stationary covariance Cov x_s, shape (d, d), or ``None``."""
        return None

    @property
    def third_cumulant(self) -> torch.Tensor | None:
        """Third cumulant tensor κ₃[i, j, k] = E[(x−μ)_i (x−μ)_j (x−μ)_k], shape (d, d, d), or ``None``."""
        return None

    @abstractmethod
    def sampler(self, generator: torch.Generator, streams: int = 1) -> Sampler:
        """Return ``draw(n)`` giving the next ``n`` tokens of ``streams`` streams.

        The draws are float64 tensors of shape (streams, n, d) on the
        generator's device; successive calls continue the same streams.
        """

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Draw the first ``n`` tokens of one stream, shape (n, d)."""
        n = check_positive_int(n, "n")
        return self.sampler(check_generator(generator), 1)(n)[0]

    def tilted_mean(self, a: object) -> torch.Tensor:
        r"""The long-context limit of attention, E[X e^{aᵀX}] / E[e^{aᵀX}] = ∇ log M(a).

        Parameters
        ----------
        a : array-like, shape (d,) or (m, d)
            Tilt vectors a = Θ_Kᵀ Θ_Q q.

        Returns
        -------
        tensor of the shape of ``a``

        Raises
        ------
        ValueError
            Where no limit exists for this law, or none is known in closed form.
        """
        aa = as_tensor(a, "a", ndim=(1, 2))
        if aa.shape[-1] != self.dim:
            raise ValueError(f"a must have last dim {self.dim}, got shape {tuple(aa.shape)}")
        out = finite_result(self._tilted_mean(aa[None] if aa.ndim == 1 else aa), "the tilted mean")  # (m, d)
        return out[0] if aa.ndim == 1 else out

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        """The tilted mean for tilts a of shape (m, d); subclasses with a closed form override it."""
        raise ValueError(f"no closed-form tilted mean is known for {type(self).__name__}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"


class IIDProcess(Process):
    """A process whose tokens are independent draws from one law."""

    @abstractmethod
    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        """Draw iid tokens of shape (*shape, d) on the generator's device."""

    def sampler(self, generator: torch.Generator, streams: int = 1) -> Sampler:
        check_generator(generator)
        streams = check_positive_int(streams, "streams")

        def draw(n: int) -> torch.Tensor:
            return self.draw((streams, _draw_shape(streams, n, self.dim)), generator)  # (R, n, d)

        return draw


class GaussianIID(IIDProcess):
    """iid Gaussian tokens x_s ~ N(mu, Sigma).

    Parameters
    ----------
    cov : array-like, shape (d, d)
        Symmetric positive semi-definite covariance Sigma.
    mean : array-like, shape (d,), optional
        Mean mu (zero by default).

    Examples
    --------
    >>> import torch
    >>> p = GaussianIID(torch.eye(2), mean=[1.0, -1.0])
    >>> x = p.sample(100_000, torch.Generator().manual_seed(0))
    >>> x.shape
    torch.Size([100000, 2])
    >>> bool((x.mean(0) - p.mean).abs().max() < 0.02)
    True
    """

    def __init__(self, cov: object, mean: object | None = None) -> None:
        self._cov = as_covariance(cov, "cov")
        self.dim = self._cov.shape[0]
        self._mean = as_vector(mean, "mean", self.dim)
        self._factor = psd_sqrt_factor(self._cov)  # (d, d), L Lᵀ = Σ

    @property
    def mean(self) -> torch.Tensor:
        return self._mean.clone()

    @property
    def covariance(self) -> torch.Tensor:
        return self._cov.clone()

    @property
    def third_cumulant(self) -> torch.Tensor:
        return torch.zeros(self.dim, self.dim, self.dim, dtype=torch.float64)

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        return self._mean + a @ self._cov  # (m, d): μ + Σa, exact (chapter 1)

    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        dev = generator.device
        z = torch.randn(*shape, self.dim, generator=generator, device=dev, dtype=torch.float64)
        x = _scale_by_factor(z, self._factor)  # (R, n, d)
        return x + self._mean.to(dev) if bool(self._mean.any()) else x  # x + 0 = x: no sum for μ = 0


class Replay(Process):
    """Replays given token streams exactly, chunk by chunk (for tests and reference checks).

    Parameters
    ----------
    tokens : array-like, shape (n, d) or (streams, n, d)
        The context; drawing past its end is an error.
    """

    def __init__(self, tokens: object) -> None:
        x = as_tensor(tokens, "tokens", ndim=(2, 3))
        if x.numel() == 0:
            raise ValueError(f"tokens must hold at least one token of dimension >= 1, got shape {tuple(x.shape)}")
        self._x = x[None] if x.ndim == 2 else x  # (R, n, d)
        self.dim = self._x.shape[-1]

    def sampler(self, generator: torch.Generator, streams: int = 1) -> Sampler:
        check_generator(generator)
        streams = check_positive_int(streams, "streams")
        if streams != self._x.shape[0]:
            raise ValueError(f"Replay holds {self._x.shape[0]} stream(s), {streams} requested")
        pos = 0

        def draw(n: int) -> torch.Tensor:
            nonlocal pos
            n = check_positive_int(n, "n")
            if pos + n > self._x.shape[1]:
                raise ValueError(f"Replay has {self._x.shape[1]} tokens, {pos + n} requested")
            pos += n
            return self._x[:, pos - n : pos].to(generator.device)  # (R, n, d)

        return draw


def _as_u(u: object) -> torch.Tensor:
    """The argument u of a mixing law's log-MGF or tilted mean: finite float64 numbers."""
    return as_tensor(u, "u")


def _check_sample_shape(shape: object, generator: object) -> tuple[int, ...]:
    """A tuple of non-negative ints whose float64 draw fits in memory, and a torch.Generator."""
    check_generator(generator)
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 0 for k in shape
    ):
        raise ValueError(f"shape must be a tuple of non-negative integers, got {shape!r}")
    check_fits(tuple(shape), "shape")
    return tuple(int(k) for k in shape)


def _uniform(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Uniform(0, 1] draws in float64 (never exactly 0, so logs are finite)."""
    u = torch.rand(*shape, generator=generator, device=generator.device, dtype=torch.float64)
    return 1.0 - u  # (*shape,), in (0, 1]


def _standard_exponential(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Exp(1) draws by inversion, E = -log U."""
    return -torch.log(_uniform(shape, generator))  # (*shape,)


class MixingLaw(ABC):
    r"""Law of the scale W > 0 of a Gaussian scale mixture X = √W Z.

    Every mixing law here is normalised to **E W = 1**, so that the mixture
    has covariance exactly Σ (the covariance of Z).  The readout theory only
    needs the moment generating function of W:

    .. math:: g(s) = \frac{E[W e^{sW/2}]}{E[e^{sW/2}]} = \frac{d}{du}\log E e^{uW}\Big|_{u=s/2}

    (paper Sec. 3; book chapter 2).

    Attributes
    ----------
    abscissa : float
        sup{u : E e^{uW} < ∞}; ``inf`` for a bounded W.
    variance : float
        Var W; the excess kurtosis of every projection of X is 3 Var W.
    """

    abscissa: float = float("inf")
    variance: float

    @abstractmethod
    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """Draw W of the given shape (float64, on the generator's device)."""

    @abstractmethod
    def log_mgf(self, u: torch.Tensor) -> torch.Tensor:
        """log E e^{uW}, elementwise; ``inf`` where u ≥ abscissa."""

    @abstractmethod
    def tilted_mean(self, u: torch.Tensor) -> torch.Tensor:
        """E[W e^{uW}] / E[e^{uW}] (the mean of W under exponential tilting by u); ``inf`` where u ≥ abscissa."""


class DiscreteMixing(MixingLaw):
    """W takes ``values`` with probabilities ``probs``; requires E W = 1.

    Parameters
    ----------
    values : array-like, shape (k,)
        Non-negative values, at least one positive.
    probs : array-like, shape (k,)
        Non-negative probabilities summing to one.

    Examples
    --------
    >>> w = DiscreteMixing([0.5, 1.5], [0.5, 0.5])   # the two-point mixture
    >>> round(w.variance, 6)
    0.25
    >>> float(w.tilted_mean(torch.tensor(0.0)))
    1.0
    """

    def __init__(self, values: object, probs: object) -> None:
        v = as_tensor(values, "values", ndim=1)
        p = as_tensor(probs, "probs", ndim=1)
        if v.shape != p.shape or v.numel() == 0:
            raise ValueError(f"values and probs must be non-empty and of equal length, got {v.numel()} and {p.numel()}")
        if bool((v < 0).any()) or not bool((v > 0).any()):
            raise ValueError("values must be >= 0 with at least one positive value")
        if bool((p < 0).any()) or abs(float(p.sum()) - 1.0) > 1e-10:
            raise ValueError(f"probs must be non-negative and sum to 1, got sum {float(p.sum()):.6g}")
        mean = float((v * p).sum())
        if abs(mean - 1.0) > 1e-10:
            raise ValueError(f"the mixing law must have E W = 1 (rescale the values), got E W = {mean:.6g}")
        self.values, self.probs = v, p
        self.variance = float((p * (v - 1.0) ** 2).sum())

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        shape = _check_sample_shape(shape, generator)
        dev = generator.device
        n = 1
        for k in shape:
            n *= k
        idx = torch.multinomial(self.probs.to(dev), n, replacement=True, generator=generator)  # (n,)
        return self.values.to(dev)[idx].reshape(shape)

    def _logits(self, u: torch.Tensor) -> torch.Tensor:
        logp = torch.log(self.probs)  # (k,); -inf for zero-probability atoms
        return logp + u[..., None] * self.values  # (..., k)

    def log_mgf(self, u: torch.Tensor) -> torch.Tensor:
        u = _as_u(u)
        return torch.logsumexp(self._logits(u), dim=-1)

    def tilted_mean(self, u: torch.Tensor) -> torch.Tensor:
        u = _as_u(u)
        return (torch.softmax(self._logits(u), dim=-1) * self.values).sum(-1)


class ExponentialMixing(MixingLaw):
    r"""W ~ Exp(1) (E W = 1, Var W = 1): the mixture is the symmetric multivariate Laplace law.

    log E e^{uW} = −log(1 − u) and E[W e^{uW}]/E e^{uW} = 1/(1 − u) for u < 1.

    Examples
    --------
    >>> float(ExponentialMixing().tilted_mean(torch.tensor(0.5)))
    2.0
    """

    abscissa = 1.0
    variance = 1.0

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        shape = _check_sample_shape(shape, generator)
        return _standard_exponential(shape, generator)

    def log_mgf(self, u: torch.Tensor) -> torch.Tensor:
        u = _as_u(u)
        ok = u < 1.0
        return torch.where(ok, -torch.log1p(-torch.where(ok, u, 0.0)), torch.inf)

    def tilted_mean(self, u: torch.Tensor) -> torch.Tensor:
        u = _as_u(u)
        ok = u < 1.0
        return torch.where(ok, 1.0 / (1.0 - torch.where(ok, u, 0.0)), torch.inf)


class InverseGaussianMixing(MixingLaw):
    r"""W ~ inverse Gaussian IG(mean 1, shape λ) (E W = 1, Var W = 1/λ): normal-inverse-Gaussian inputs.

    .. math:: \log E e^{uW} = \lambda\bigl(1 - \sqrt{1 - 2u/\lambda}\bigr), \qquad
              \frac{E[W e^{uW}]}{E e^{uW}} = (1 - 2u/\lambda)^{-1/2}, \quad u < \lambda/2.

    Sampled exactly by the transformation method of Michael, Schucany & Haas (1976).

    Parameters
    ----------
    shape : float
        λ > 0; λ → ∞ is the Gaussian limit (W ≡ 1).

    Examples
    --------
    >>> w = InverseGaussianMixing(2.0)
    >>> float(w.tilted_mean(torch.tensor(0.75)))
    2.0
    """

    def __init__(self, shape: float = 2.0) -> None:
        lam = check_positive_float(shape, "shape")
        self.shape = lam
        self.abscissa = lam / 2.0
        self.variance = 1.0 / lam

    def sample(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        shape = _check_sample_shape(shape, generator)
        lam = self.shape
        nu = torch.randn(*shape, generator=generator, device=generator.device, dtype=torch.float64)
        y = nu**2
        x = 1.0 + y / (2 * lam) - torch.sqrt(4 * lam * y + y**2) / (2 * lam)  # smaller root, in (0, 1]
        u = _uniform(shape, generator)
        return torch.where(u <= 1.0 / (1.0 + x), x, 1.0 / x)

    def log_mgf(self, u: torch.Tensor) -> torch.Tensor:
        # finite at the abscissa itself (= λ), where only the tilted mean diverges
        u = _as_u(u)
        ok = u <= self.abscissa
        r = torch.sqrt((1.0 - 2.0 * torch.where(ok, u, 0.0) / self.shape).clamp_min(0.0))
        return torch.where(ok, self.shape * (1.0 - r), torch.inf)

    def tilted_mean(self, u: torch.Tensor) -> torch.Tensor:
        u = _as_u(u)
        ok = u < self.abscissa
        return torch.where(ok, 1.0 / torch.sqrt(1.0 - 2.0 * torch.where(ok, u, 0.0) / self.shape), torch.inf)


@dataclass(frozen=True)
class InputLaw:
    r"""One input law of the book's experiments, by name: the one registry (:data:`INPUT_LAWS`).

    An elliptical law is a Gaussian scale mixture x = μ + √W L z with a :class:`MixingLaw` W
    (E W = 1, so Cov x = L Lᵀ); a non-elliptical one (``uniform``) has iid unit-variance
    coordinates of kurtosis ``coordinate_kurtosis`` after whitening.

    Attributes
    ----------
    name : str
        The law's name (``x_law`` in :mod:`covbook.icl`, ``scale`` in :mod:`covbook.theory`).
    description : str
        One line for tables and error messages.
    mixing : callable or None
        Makes the law's :class:`MixingLaw` W; ``None`` for a law that is not a scale mixture.
    coordinate_kurtosis : float or None
        E u⁴ of one whitened coordinate, for a non-elliptical law with iid coordinates.
    """

    name: str
    description: str
    mixing: Callable[[], MixingLaw] | None = None
    coordinate_kurtosis: float | None = None

    @property
    def elliptical(self) -> bool:
        """Whether the law is a Gaussian scale mixture (it then has a gain g(s))."""
        return self.mixing is not None

    def fourth_moment_ratio(self, d: int) -> float:
        r"""E|x|⁴ / σ⁴ for x in R^d with mean zero and covariance σ² I from this law.

        Elliptical: E W² · d(d + 2) (E W² = 1 + Var W); iid coordinates of kurtosis κ: d(d − 1) + κ d.

        Examples
        --------
        >>> INPUT_LAWS["two_point"].fourth_moment_ratio(1), INPUT_LAWS["uniform"].fourth_moment_ratio(1)
        (3.75, 1.8)
        """
        d = check_positive_int(d, "d")
        if self.mixing is not None:
            return (1.0 + self.mixing().variance) * d * (d + 2)
        if self.coordinate_kurtosis is None:
            raise ValueError(f"the law {self.name!r} states neither a mixing law nor a coordinate kurtosis")
        return d * (d - 1) + self.coordinate_kurtosis * d


#: Every input law by name. Adding a law is one entry here (and, for a new family of W, a
#: :class:`MixingLaw` subclass above); :mod:`covbook.icl` tasks, :mod:`covbook.theory` gains and
#: :mod:`covbook.prior_work` risks all read it.
INPUT_LAWS: dict[str, InputLaw] = {
    "gaussian": InputLaw("gaussian", "Gaussian (W ≡ 1)", lambda: DiscreteMixing([1.0], [1.0])),
    "two_point": InputLaw("two_point", "scale mixture, W uniform on {1/2, 3/2}",
                          lambda: DiscreteMixing([0.5, 1.5], [0.5, 0.5])),
    "laplace": InputLaw("laplace", "multivariate Laplace, W ~ Exp(1)", ExponentialMixing),
    "nig": InputLaw("nig", "normal-inverse-Gaussian, W ~ IG(1, 2)", lambda: InverseGaussianMixing(2.0)),
    "uniform": InputLaw("uniform", "iid coordinates uniform on (−√3, √3) (not elliptical)",
                        coordinate_kurtosis=1.8),
}

#: The elliptical laws of :data:`INPUT_LAWS` (those with a mixing law W).
MIXING_LAWS = tuple(name for name, law in INPUT_LAWS.items() if law.elliptical)


def input_law(name: str) -> InputLaw:
    """The :class:`InputLaw` called ``name`` in :data:`INPUT_LAWS`.

    Examples
    --------
    >>> input_law("laplace").elliptical, input_law("uniform").elliptical
    (True, False)
    """
    if not isinstance(name, str) or name not in INPUT_LAWS:
        raise ValueError(f"input law name (x_law) must be one of {', '.join(INPUT_LAWS)}, got {name!r}")
    return INPUT_LAWS[name]


def mixing_law(name: str) -> MixingLaw:
    """The mixing law of W by name: ``gaussian`` (W ≡ 1), ``two_point`` (W uniform on {½, 3/2}),
    ``laplace`` (W ~ Exp(1)) or ``nig`` (inverse Gaussian, shape 2); see :data:`INPUT_LAWS`.

    Examples
    --------
    >>> mixing_law("two_point").variance
    0.25
    """
    if not isinstance(name, str) or name not in INPUT_LAWS:
        raise ValueError(f"mixing law name (x_law) must be one of {', '.join(MIXING_LAWS)}, got {name!r}")
    law = INPUT_LAWS[name]
    if law.mixing is None:
        raise ValueError(f"x_law={name!r} is not elliptical: it has no mixing law W, and the gain g(s) needs a "
                         f"Gaussian scale mixture ({', '.join(MIXING_LAWS)})")
    return law.mixing()


class _ZeroMeanWithCovariance:
    """Mean zero and the covariance stored in ``self._cov`` (for the centred laws below)."""

    dim: int
    _cov: torch.Tensor

    @property
    def mean(self) -> torch.Tensor:
        return torch.zeros(self.dim, dtype=torch.float64)

    @property
    def covariance(self) -> torch.Tensor:
        return self._cov.clone()


class _Symmetric:
    """A law symmetric about its (zero) mean: every odd cumulant vanishes."""

    dim: int

    @property
    def third_cumulant(self) -> torch.Tensor:
        return torch.zeros(self.dim, self.dim, self.dim, dtype=torch.float64)


class ScaleMixture(_ZeroMeanWithCovariance, _Symmetric, IIDProcess):
    r"""iid Gaussian scale mixture X = √W Z, Z ~ N(0, Σ), W ⟂ Z drawn from a :class:`MixingLaw`.

    An elliptical law with mean 0 and covariance Σ (the mixing law has
    E W = 1).  Its long-context readout is g(s) Σ a with the gain of
    :func:`covbook.theory.elliptical_gain` (paper Sec. 3; book chapter 2).

    Parameters
    ----------
    cov : array-like, shape (d, d)
        Covariance Σ (symmetric PSD).
    scale : MixingLaw
        Law of W, e.g. ``DiscreteMixing([0.5, 1.5], [0.5, 0.5])``.

    Examples
    --------
    >>> p = ScaleMixture(torch.eye(2), DiscreteMixing([0.5, 1.5], [0.5, 0.5]))
    >>> x = p.sample(200_000, torch.Generator().manual_seed(0))
    >>> bool(((x.T @ x) / len(x) - torch.eye(2, dtype=torch.float64)).abs().max() < 0.02)
    True
    """

    def __init__(self, cov: object, scale: MixingLaw) -> None:
        if not isinstance(scale, MixingLaw):
            raise ValueError(f"scale must be a MixingLaw (e.g. DiscreteMixing), got {type(scale).__name__}")
        self._cov = as_covariance(cov, "cov")
        self.dim = self._cov.shape[0]
        self.scale = scale
        self._factor = psd_sqrt_factor(self._cov)  # (d, d)

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        sa = a @ self._cov  # (m, d): Σa
        s = (sa * a).sum(-1)  # (m,): s = aᵀΣa
        g = self.scale.tilted_mean(s / 2.0)  # (m,): the gain g(s)
        if not bool(torch.isfinite(g).all()):
            raise ValueError(f"{type(self).__name__}: E[X e^(aᵀX)] = ∞ for s = aᵀΣa >= "
                             f"{2 * self.scale.abscissa:g}: no limit exists")
        return g[:, None] * sa  # (m, d)

    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        dev = generator.device
        w = self.scale.sample(shape, generator)  # (R, n)
        z = torch.randn(*shape, self.dim, generator=generator, device=dev, dtype=torch.float64)
        return torch.sqrt(w)[..., None] * _scale_by_factor(z, self._factor)  # (R, n, d)


class MultivariateLaplace(ScaleMixture):
    """Symmetric multivariate Laplace law with covariance Σ: the scale mixture with W ~ Exp(1).

    Every projection aᵀX is a Laplace variable of variance aᵀΣa.
    """

    def __init__(self, cov: object) -> None:
        super().__init__(cov, ExponentialMixing())


class StudentT(IIDProcess):
    r"""iid multivariate Student-t tokens X = Z / √(V/ν), Z ~ N(0, S), V ~ χ²_ν.

    No moment generating function exists, so softmax attention has no limit
    (book chapter 3).  The mean exists for ν > 1 (zero), the covariance
    ν/(ν − 2) S for ν > 2; otherwise the properties are ``None``.

    Parameters
    ----------
    scale : array-like, shape (d, d)
        Scale matrix S (symmetric PSD).
    nu : int
        Degrees of freedom, a positive integer (χ²_ν is drawn exactly as a
        sum of ν squared standard normals).
    """

    def __init__(self, scale: object, nu: int) -> None:
        self._scale = as_covariance(scale, "scale")
        self.dim = self._scale.shape[0]
        self.nu = check_positive_int(nu, "nu")
        self._factor = psd_sqrt_factor(self._scale)  # (d, d)

    @property
    def mean(self) -> torch.Tensor | None:
        return torch.zeros(self.dim, dtype=torch.float64) if self.nu > 1 else None

    @property
    def covariance(self) -> torch.Tensor | None:
        return self._scale * (self.nu / (self.nu - 2)) if self.nu > 2 else None

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        raise ValueError("StudentT: E e^(aᵀX) = ∞ for every a ≠ 0 (no moment generating function): no limit exists")

    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        dev = generator.device
        z = torch.randn(*shape, self.dim, generator=generator, device=dev, dtype=torch.float64)
        g = torch.randn(*shape, self.nu, generator=generator, device=dev, dtype=torch.float64)
        v = (g**2).sum(-1)  # (R, n), chi-square with nu degrees of freedom
        return _scale_by_factor(z, self._factor) / torch.sqrt(v / self.nu)[..., None]  # (R, n, d)


def _linear_recurrence(xi: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    r"""y_k = A y_{k-1} + ξ_k (y_{-1} = 0) along dim 1, by a log-depth prefix scan.

    Hillis–Steele doubling: after level l, y_k = Σ_{j=k-2^l+1}^{k} A^{k-j} ξ_j.
    Levels stop once ‖A^{2^l}‖ < 1e-40 (the omitted terms are then far below
    float64 resolution for a stable A).  xi: (R, n, d), a: (d, d).
    """
    y = xi.clone()  # (R, n, d)
    n = y.shape[1]
    p = a.clone()  # (d, d), A^{2^l}
    step = 1
    while step < n and float(p.abs().max()) >= 1e-40:
        shifted = y[:, : n - step] @ p.T  # (R, n - step, d)
        y = torch.cat([y[:, :step], y[:, step:] + shifted], dim=1)  # (R, n, d)
        p = p @ p
        step *= 2
    return y


class VAR1(_ZeroMeanWithCovariance, _Symmetric, Process):
    r"""Stationary Gaussian VAR(1): x_{s+1} = A x_s + ξ_s, ξ_s ~ N(0, Q) iid.

    The stream starts from the stationary law N(0, Σ), where Σ solves the
    discrete Lyapunov equation Σ = AΣAᵀ + Q (book chapter 4), so it is
    stationary from the first token; the sampler carries x_s across chunks.

    Parameters
    ----------
    A : array-like, shape (d, d)
        Transition matrix with spectral radius < 1 (otherwise ``ValueError``).
    noise_cov : array-like, shape (d, d)
        Innovation covariance Q (symmetric PSD).

    Examples
    --------
    >>> p = VAR1([[0.5]], [[0.75]])
    >>> p.covariance
    tensor([[1.]], dtype=torch.float64)
    """

    def __init__(self, A: object, noise_cov: object) -> None:
        self.A = as_tensor(A, "A", ndim=2)
        self._cov = stationary_covariance(self.A, noise_cov)  # checks shapes and stability
        self._q = as_covariance(noise_cov, "noise_cov")
        self.dim = self._cov.shape[0]
        self._q_factor = psd_sqrt_factor(self._q)  # (d, d)
        self._factor = psd_sqrt_factor(self._cov)  # (d, d)

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        return a @ self._cov  # (m, d): Σa with the stationary Σ; dependence does not enter the limit

    @property
    def noise_covariance(self) -> torch.Tensor:
        """Innovation covariance Q, shape (d, d)."""
        return self._q.clone()

    def sampler(self, generator: torch.Generator, streams: int = 1) -> Sampler:
        check_generator(generator)
        streams = check_positive_int(streams, "streams")
        dev = generator.device
        a, lq, ls = self.A.to(dev), self._q_factor.to(dev), self._factor.to(dev)
        state: dict[str, torch.Tensor | None] = {"last": None}

        def draw(n: int) -> torch.Tensor:
            n = _draw_shape(streams, n, self.dim)
            z = torch.randn(streams, n, self.dim, generator=generator, device=dev, dtype=torch.float64)
            xi = z @ lq.T  # (R, n, d)
            if state["last"] is None:
                xi[:, 0] = z[:, 0] @ ls.T  # stationary start x_1 ~ N(0, Σ)
            else:
                xi[:, 0] = xi[:, 0] + state["last"] @ a.T  # carry the stream across chunks
            x = _linear_recurrence(xi, a)  # (R, n, d)
            state["last"] = x[:, -1].clone()
            return x

        return draw


class RandomWalk(Process):
    r"""Gaussian random walk x_s = x_{s-1} + ξ_s, x_0 = 0, ξ_s ~ N(0, Q): non-stationary.

    Cov x_t = tQ grows without bound, so there is no stationary mean or
    covariance (both properties are ``None``) and no readout limit: |out_t|
    grows like √t (book chapter 4).
    """

    def __init__(self, noise_cov: object) -> None:
        self._q = as_covariance(noise_cov, "noise_cov")
        self.dim = self._q.shape[0]
        self._factor = psd_sqrt_factor(self._q)  # (d, d)

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        raise ValueError("RandomWalk: no stationary law, so no limit exists (|out_t| grows like √t)")

    def sampler(self, generator: torch.Generator, streams: int = 1) -> Sampler:
        check_generator(generator)
        streams = check_positive_int(streams, "streams")
        dev = generator.device
        lq = self._factor.to(dev)
        state = {"last": torch.zeros(streams, 1, self.dim, dtype=torch.float64, device=dev)}

        def draw(n: int) -> torch.Tensor:
            n = _draw_shape(streams, n, self.dim)
            xi = torch.randn(streams, n, self.dim, generator=generator, device=dev, dtype=torch.float64) @ lq.T
            x = state["last"] + torch.cumsum(xi, dim=1)  # (R, n, d)
            state["last"] = x[:, -1:].clone()
            return x

        return draw


class NonErgodicGaussian(_ZeroMeanWithCovariance, _Symmetric, Process):
    r"""Gaussian tokens whose covariance is drawn once per stream: non-ergodic.

    Each stream first draws a component k with probability p_k and then emits
    iid N(0, Σ_k) tokens.  The marginal law over streams has the pooled
    covariance Σ̄ = Σ_k p_k Σ_k (returned by :attr:`covariance`), but every
    stream converges to its own readout Θ_V Σ_k a, never Θ_V Σ̄ a
    (book chapter 4).

    Parameters
    ----------
    covs : sequence of array-like, each (d, d)
        The component covariances Σ_k.
    probs : array-like, shape (K,), optional
        Component probabilities (uniform by default).

    Notes
    -----
    ``sampler(generator, R)`` first draws the components with
    :meth:`components` from the same generator, so
    ``components(torch.Generator(device=dev).manual_seed(seed), R)`` recovers
    the components of a run seeded with ``seed``.
    """

    def __init__(self, covs: object, probs: object | None = None) -> None:
        if isinstance(covs, torch.Tensor) and covs.ndim == 3:
            covs = list(covs)
        if not isinstance(covs, (list, tuple)) or len(covs) == 0:
            raise ValueError("covs must be a non-empty sequence of (d, d) covariance matrices")
        first = as_covariance(covs[0], "covs[0]")
        self.dim = first.shape[0]
        self._covs = torch.stack([as_covariance(c, f"covs[{i}]", size=self.dim) for i, c in enumerate(covs)])
        k = self._covs.shape[0]
        if probs is None:
            self.probs = torch.full((k,), 1.0 / k, dtype=torch.float64)
        else:
            self.probs = as_tensor(probs, "probs", ndim=1)
            if self.probs.shape[0] != k or bool((self.probs < 0).any()) or abs(float(self.probs.sum()) - 1) > 1e-10:
                raise ValueError(f"probs must be {k} non-negative numbers summing to 1")
        self._factors = torch.stack([psd_sqrt_factor(c) for c in self._covs])  # (K, d, d)
        self._cov = (self.probs[:, None, None] * self._covs).sum(0)  # (d, d): the pooled Σ̄ = Σ_k p_k Σ_k

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        raise ValueError("NonErgodicGaussian: each stream has its own limit; use tilted_mean(process.component(k), a)")

    @property
    def component_covariances(self) -> torch.Tensor:
        """The component covariances Σ_k, shape (K, d, d)."""
        return self._covs.clone()

    def component(self, k: int) -> GaussianIID:
        """The ergodic component k as an iid Gaussian process."""
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < self._covs.shape[0]:
            raise ValueError(f"k must be an integer in [0, {self._covs.shape[0]}), got {k!r}")
        return GaussianIID(self._covs[k])

    def components(self, generator: torch.Generator, streams: int) -> torch.Tensor:
        """Draw the component index of each of ``streams`` streams, shape (R,)."""
        check_generator(generator)
        streams = check_positive_int(streams, "streams")
        return torch.multinomial(self.probs.to(generator.device), streams, replacement=True, generator=generator)

    def sampler(self, generator: torch.Generator, streams: int = 1) -> Sampler:
        check_generator(generator)
        ks = self.components(generator, streams)  # (R,)
        streams = ks.shape[0]
        dev = generator.device
        factors = self._factors.to(dev)[ks]  # (R, d, d)

        def draw(n: int) -> torch.Tensor:
            n = _draw_shape(streams, n, self.dim)
            z = torch.randn(streams, n, self.dim, generator=generator, device=dev, dtype=torch.float64)
            return z @ factors.transpose(1, 2)  # (R, n, d)

        return draw


class SkewedExponential(_ZeroMeanWithCovariance, IIDProcess):
    r"""iid tokens with independent centred exponential coordinates x_i = E_i − 1, E_i ~ Exp(1).

    Mean 0, covariance I, but skewed (third cumulant 2 on the diagonal):
    log M(a) = Σ_i (−a_i − log(1 − a_i)), so the tilted mean is a_i/(1 − a_i)
    for a_i < 1 — bent away from Σa = a (book chapters 2 and 4).
    """

    def __init__(self, dim: int) -> None:
        self.dim = check_positive_int(dim, "dim")
        self._cov = torch.eye(self.dim, dtype=torch.float64)

    @property
    def third_cumulant(self) -> torch.Tensor:
        k3 = torch.zeros(self.dim, self.dim, self.dim, dtype=torch.float64)
        i = torch.arange(self.dim)
        k3[i, i, i] = 2.0  # the third cumulant of Exp(1)
        return k3

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        if bool((a >= 1).any()):
            raise ValueError("SkewedExponential: E e^(aᵀX) = ∞ unless every a_i < 1: no limit exists")
        return a / (1.0 - a)  # (m, d)

    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        return _standard_exponential((*shape, self.dim), generator) - 1.0  # (R, n, d)


class BimodalGaussian(_ZeroMeanWithCovariance, _Symmetric, IIDProcess):
    r"""iid tokens from the symmetric two-component mixture ½N(m, I) + ½N(−m, I).

    Mean 0, covariance I + m mᵀ; log M(a) = ½|a|² + log cosh(mᵀa), so the
    tilted mean is a + m tanh(mᵀa), while Σa = a + m(mᵀa) (book chapter 4).

    Parameters
    ----------
    m : array-like, shape (d,)
        Half the separation of the two modes (at least one coordinate).
    """

    def __init__(self, m: object) -> None:
        self.m = as_tensor(m, "m", ndim=1)
        if self.m.numel() == 0:
            raise ValueError("m must have at least one coordinate, got an empty vector")
        self.dim = self.m.shape[0]
        self._cov = torch.eye(self.dim, dtype=torch.float64) + torch.outer(self.m, self.m)

    def _tilted_mean(self, a: torch.Tensor) -> torch.Tensor:
        return a + torch.tanh(a @ self.m)[:, None] * self.m  # (m, d)

    def draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        dev = generator.device
        sign = torch.randint(0, 2, shape, generator=generator, device=dev).to(torch.float64) * 2 - 1  # (R, n)
        z = torch.randn(*shape, self.dim, generator=generator, device=dev, dtype=torch.float64)
        return z + sign[..., None] * self.m.to(dev)  # (R, n, d)

