"""Confidence intervals and paired significance tests over clusters (numpy).

Every statistic here is the **mean over clusters** of a per-cluster score
(ROUGE F1, recall or precision of one cluster), and every resampling unit is
a cluster: the clusters of a test set are the sample, so a confidence
interval says how much the mean would move on another test set drawn like
this one, and a paired test says whether two systems' difference on the
same clusters is larger than that.

* :func:`bootstrap_ci`: percentile bootstrap interval of the mean (Efron &
  Tibshirani 1993): resample the clusters with replacement ``samples`` times,
  take the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of
  the resampled means.
* :func:`paired_bootstrap`: the paired bootstrap test of Koehn (2004) in the
  form of Berg-Kirkpatrick et al. (2012, Section 2.2): with ``d_i`` the
  per-cluster difference between a system and the baseline and ``delta`` its
  mean, resample the clusters; a resample whose mean difference ``delta*`` is
  at least ``delta`` away from ``delta`` (``|delta* - delta| >= |delta|``:
  the bootstrap distribution shifted to the null of no difference) counts
  against the system. Two-sided; Berg-Kirkpatrick et al.'s one-sided count
  ``delta* > 2 delta`` is its half for a symmetric bootstrap distribution.
* :func:`approximate_randomization`: the paired permutation test, called
  approximate randomization by Noreen (1989) and Riezler & Maxwell (2005):
  under the null the two systems' outputs are exchangeable cluster by
  cluster, so each cluster's pair is swapped with probability 1/2 (the sign
  of ``d_i`` flipped) and the mean difference recomputed; two-sided,
  ``|mean(s_i d_i)| >= |delta|``.
* p-values are ``(count + 1) / (samples + 1)`` (Davison & Hinkley 1997; also
  SciPy's ``permutation_test`` for randomized tests): never 0, so a test of
  ``samples`` resamples cannot claim more than it can resolve.
* :func:`adjust_pvalues`: Holm's step-down or Bonferroni's correction of a
  family of p-values (here: every system x metric against the baseline).

All resampling is vectorized: one ``[samples, clusters]`` count matrix (or
sign matrix) is drawn once and multiplied with every system's and metric's
per-cluster scores, so systems share their resamples (which is what makes
the bootstrap *paired*) and the cost is one matrix product per table.
Comparisons use a relative tolerance of 1e-12 (float64) so that ties that
are exact in real arithmetic (e.g. a difference that sits in one cluster)
are counted as ties.

The matrices grow with ``samples x clusters``: :func:`resampling_bytes`
bounds the memory one call takes, and :func:`largest_samples` the
resamples that fit in :data:`RESAMPLING_MEMORY_BUDGET`; ``mdsfair-compare``
refuses a ``--samples`` above it before it starts.

How many clusters each procedure needs (:func:`sample_size_problem`): with
one cluster there is nothing to resample (every bootstrap resample is the
observed sample, so the paired bootstrap's count is 0 and its p-value the
smallest it can give, and an interval has width 0), so no p-value or
interval is reported. Above that, each procedure has its own threshold,
below which its results come with a one-line warning naming it:

* the percentile interval and the paired bootstrap, below
  :data:`SMALL_SAMPLE_CLUSTERS` clusters: the bootstrap distribution of a
  mean has the plug-in variance ``(n - 1) / n * s^2 / n`` and a normal
  shape, so it behaves like a z-test where Student's t applies (at 10
  clusters a nominal 5% paired bootstrap rejects a true null about 10% of
  the time: ``P(|t_9| > 1.96 sqrt(9/10))``); the interval is too narrow and
  the p-value too small. Approximate randomization does not have this
  problem: under the null hypothesis that the two systems are exchangeable
  in every cluster, its ``2^n`` sign patterns are equally likely whatever
  ``n``, so its p-value is valid at any sample size;
* approximate randomization, below :func:`randomization_min_clusters`
  (``alpha``): it cannot go below ``2 / 2^n`` (exact enumeration of the
  ``2^n`` sign patterns, two-sided), so with fewer clusters than the
  smallest ``n`` with ``2 / 2^n < alpha`` no difference can be significant.

Torch-free; numpy is imported by ``mdsfair-compare`` only when ``--ci`` or
``--baseline`` asks for it.
"""

from typing import Dict, List, Sequence, Tuple

import numpy as np

#: Relative tolerance for ">=" between resampled and observed statistics.
TIE_TOLERANCE = 1e-12

CORRECTIONS = ("none", "holm", "bonferroni")

#: The memory the resampling of one ``mdsfair-compare`` may take (bytes).
RESAMPLING_MEMORY_BUDGET = 4 * 2**30
#: Bytes per resample and cluster: the bootstrap's draws, their offset
#: indices and counts (int64) and the counts as float64.
BYTES_PER_DRAW = 32
#: Bytes per resample and row (metric x system): the resampled statistic and
#: its temporaries (quantiles, differences, absolute values), float64.
BYTES_PER_STATISTIC = 40
#: Fewer clusters than this: bootstrap intervals and the paired bootstrap
#: test are reported with a warning (see the module docstring).
SMALL_SAMPLE_CLUSTERS = 30


def resampling_bytes(clusters: int, rows: int, samples: int) -> int:
    """An upper bound of the memory (bytes) one resampling of ``rows``
    per-cluster score rows over ``clusters`` clusters takes with ``samples``
    resamples (the largest of :func:`bootstrap_ci`, :func:`paired_bootstrap`
    and :func:`approximate_randomization`)."""
    return samples * (BYTES_PER_DRAW * clusters + BYTES_PER_STATISTIC * rows)


def largest_samples(clusters: int, rows: int, budget: int = RESAMPLING_MEMORY_BUDGET) -> int:
    """The most resamples whose :func:`resampling_bytes` fit in ``budget``."""
    return budget // (BYTES_PER_DRAW * clusters + BYTES_PER_STATISTIC * rows)


def randomization_min_clusters(alpha: float) -> int:
    """The fewest clusters at which two-sided approximate randomization can
    give a p-value below ``alpha``: the smallest ``n`` with ``2 / 2^n < alpha``
    (``2 / 2^n`` is the exact test's smallest p-value: the observed sign
    pattern and its mirror image)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    clusters = 1
    while 2 / 2**clusters >= alpha:
        clusters += 1
    return clusters


def sample_size_problem(
    clusters: int, interval: bool = True, tests: bool = True, alpha: float = 0.05
) -> Tuple[bool, List[str]]:
    """``(usable, warnings)`` for resampling over ``clusters`` clusters.

    Args:
        clusters: the sample size.
        interval: percentile bootstrap intervals are computed.
        tests: the paired bootstrap and approximate randomization tests are run.
        alpha: the significance level the tests are read at.

    Returns:
        not usable with fewer than 2 clusters (nothing to resample; one
        reason); otherwise one warning line per procedure whose threshold
        (module docstring) the sample is below, naming the procedure, the
        sample size and what to use instead.
    """
    if clusters < 2:
        return False, [
            f"{clusters} cluster{'' if clusters == 1 else 's'}: there is nothing to resample (every "
            "resample is the sample itself), so no interval or p-value is reported"
        ]
    warnings = []
    if interval and clusters < SMALL_SAMPLE_CLUSTERS:
        warnings.append(
            f"only {clusters} clusters: below {SMALL_SAMPLE_CLUSTERS} the percentile bootstrap interval is too "
            "narrow (it treats the clusters' spread as known); read it as a lower bound of the uncertainty, "
            "or score more clusters"
        )
    if tests and clusters < SMALL_SAMPLE_CLUSTERS:
        warnings.append(
            f"only {clusters} clusters: below {SMALL_SAMPLE_CLUSTERS} the paired bootstrap's p-values (p_boot) are "
            "too small (at 10 clusters a 5% test rejects a true null about 10% of the time); trust approximate "
            "randomization (p_AR) instead"
        )
    smallest = randomization_min_clusters(alpha) if tests else 0
    if tests and clusters < smallest:
        warnings.append(
            f"only {clusters} clusters: approximate randomization cannot go below p = {2 / 2**clusters:.3g} "
            f"(2 / 2^{clusters}), which is not below alpha {alpha:g}, so p_AR can mark no difference; score at "
            f"least {smallest} clusters"
        )
    return True, warnings


def _as_matrix(values) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"expected per-cluster scores of shape [clusters] or [rows, clusters], got {array.shape}")
    return array


def bootstrap_counts(clusters: int, samples: int, seed: int) -> np.ndarray:
    """``[samples, clusters]`` matrix: how often each cluster is drawn in each
    bootstrap resample (each row sums to ``clusters``)."""
    if samples < 1:
        raise ValueError("samples must be at least 1")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, clusters, size=(samples, clusters))
    offsets = (np.arange(samples) * clusters)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=samples * clusters)
    return counts.reshape(samples, clusters).astype(np.float64)


def bootstrap_means(values, samples: int = 1000, seed: int = 1) -> np.ndarray:
    """Resampled means, ``[samples, rows]``, of per-cluster scores ``[rows, clusters]``
    (all rows share the same resamples)."""
    matrix = _as_matrix(values)
    counts = bootstrap_counts(matrix.shape[1], samples, seed)
    return counts @ matrix.T / matrix.shape[1]


def bootstrap_ci(values, samples: int = 1000, seed: int = 1, confidence: float = 0.95) -> np.ndarray:
    """Percentile bootstrap confidence interval of the mean over clusters.

    Args:
        values: per-cluster scores, ``[clusters]`` or ``[rows, clusters]``.
        samples: bootstrap resamples.
        seed: seed of numpy's default generator.
        confidence: e.g. 0.95.

    Returns:
        ``[rows, 2]`` (low, high); one row for 1-D input.
    """
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    means = bootstrap_means(values, samples, seed)
    tail = (1 - confidence) / 2
    return np.quantile(means, [tail, 1 - tail], axis=0).T


def _pvalue(extreme_counts: np.ndarray, samples: int) -> np.ndarray:
    return (extreme_counts + 1) / (samples + 1)


def paired_bootstrap(system, baseline, samples: int = 1000, seed: int = 1) -> Tuple[np.ndarray, np.ndarray]:
    """Paired bootstrap test (Koehn 2004; Berg-Kirkpatrick et al. 2012), two-sided.

    Args:
        system, baseline: per-cluster scores, ``[clusters]`` or ``[rows, clusters]``
            (row ``k`` of ``system`` is compared with row ``k`` of ``baseline``,
            e.g. one row per metric).

    Returns:
        ``(delta, p)``: per row the observed mean difference ``system - baseline``
        and the p-value.
    """
    differences = _as_matrix(system) - _as_matrix(baseline)
    delta = differences.mean(axis=1)
    resampled = bootstrap_means(differences, samples, seed)  # [samples, rows]
    tolerance = TIE_TOLERANCE * np.maximum(1.0, np.abs(delta))
    extreme = (np.abs(resampled - delta) >= np.abs(delta) - tolerance).sum(axis=0)
    return delta, _pvalue(extreme, samples)


def approximate_randomization(system, baseline, samples: int = 1000, seed: int = 1) -> Tuple[np.ndarray, np.ndarray]:
    """Paired approximate randomization (permutation) test (Noreen 1989;
    Riezler & Maxwell 2005), two-sided. Arguments and result as
    :func:`paired_bootstrap`."""
    if samples < 1:
        raise ValueError("samples must be at least 1")
    differences = _as_matrix(system) - _as_matrix(baseline)
    clusters = differences.shape[1]
    delta = differences.mean(axis=1)
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 2, size=(samples, clusters), dtype=np.int8) * 2 - 1
    permuted = signs.astype(np.float64) @ differences.T / clusters  # [samples, rows]
    tolerance = TIE_TOLERANCE * np.maximum(1.0, np.abs(delta))
    extreme = (np.abs(permuted) >= np.abs(delta) - tolerance).sum(axis=0)
    return delta, _pvalue(extreme, samples)


def adjust_pvalues(pvalues: Sequence[float], method: str = "holm") -> np.ndarray:
    """Family-wise error correction: ``holm`` (step-down; Holm 1979),
    ``bonferroni``, or ``none``. Returns adjusted p-values (capped at 1) in
    the input order; compare them with alpha."""
    p = np.asarray(pvalues, dtype=np.float64)
    if method == "none" or p.size == 0:
        return p.copy()
    m = p.size
    if method == "bonferroni":
        return np.minimum(1.0, p * m)
    if method == "holm":
        order = np.argsort(p, kind="stable")
        scaled = np.minimum(1.0, p[order] * (m - np.arange(m)))
        adjusted = np.empty_like(p)
        adjusted[order] = np.maximum.accumulate(scaled)
        return adjusted
    raise ValueError(f"correction must be one of {CORRECTIONS}, got {method!r}")


def compare_to_baseline(
    scores: Dict[str, Dict[str, Sequence[float]]],
    baseline: str,
    samples: int = 1000,
    seed: int = 1,
    correction: str = "none",
) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Both paired tests of every system against ``baseline``, per metric.

    Args:
        scores: ``{system: {metric: per-cluster scores}}`` (the same clusters,
            in the same order, for every system).
        baseline: the key of the baseline system.
        correction: applied to each test's family of ``(systems - 1) x metrics``
            p-values.

    Returns:
        ``{system: {metric: {"delta", "p_bootstrap", "p_randomization",
        "p_bootstrap_adjusted", "p_randomization_adjusted"}}}`` for every
        system but the baseline.
    """
    if baseline not in scores:
        raise KeyError(baseline)
    metrics = list(scores[baseline])
    others = [name for name in scores if name != baseline]
    if not others:
        return {}
    base = np.array([scores[baseline][metric] for metric in metrics], dtype=np.float64)
    system_rows = np.concatenate(
        [np.array([scores[name][metric] for metric in metrics], dtype=np.float64) for name in others]
    )
    base_rows = np.tile(base, (len(others), 1))
    delta, p_boot = paired_bootstrap(system_rows, base_rows, samples, seed)
    _, p_perm = approximate_randomization(system_rows, base_rows, samples, seed)
    boot_adjusted = adjust_pvalues(p_boot, correction)
    perm_adjusted = adjust_pvalues(p_perm, correction)
    result: Dict[str, Dict[str, Dict[str, float]]] = {}
    for row, (name, metric) in enumerate((name, metric) for name in others for metric in metrics):
        result.setdefault(name, {})[metric] = {
            "delta": float(delta[row]),
            "p_bootstrap": float(p_boot[row]),
            "p_randomization": float(p_perm[row]),
            "p_bootstrap_adjusted": float(boot_adjusted[row]),
            "p_randomization_adjusted": float(perm_adjusted[row]),
        }
    return result
