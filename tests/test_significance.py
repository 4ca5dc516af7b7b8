"""Confidence intervals and paired tests (mdsfair.evaluation.significance) and
mdsfair-compare's --ci / --baseline / --published / --convention / --plot.

Known answers: identical systems give p = 1; a constant shift on every
cluster gives the smallest p the samples can resolve; a shift in one outlier
cluster only is not significant; on the same per-cluster data the intervals
and p-values agree with SciPy's independent implementations within
Monte-Carlo error. All statistics in float64."""

import json
import os

import numpy as np
import pytest

from mdsfair.evaluation import compare, significance

scipy_stats = pytest.importorskip("scipy.stats")

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "evaluation")
HYP = os.path.join(FIXTURES, "hyp.txt")
REF = os.path.join(FIXTURES, "ref.txt")
PAIR_HYP = os.path.join(FIXTURES, "pair_hyp.txt")


def _scores(seed=0, clusters=200):
    rng = np.random.default_rng(seed)
    baseline = rng.beta(4, 6, size=clusters)
    return baseline, np.clip(baseline + rng.normal(0.01, 0.05, size=clusters), 0, 1)


def test_identical_systems_give_p_one():
    baseline, _ = _scores()
    for test in (significance.paired_bootstrap, significance.approximate_randomization):
        delta, p = test(baseline, baseline.copy(), samples=500, seed=3)
        assert delta[0] == 0.0 and p[0] == 1.0


def test_constant_shift_gives_the_smallest_resolvable_p():
    baseline, _ = _scores()
    for samples in (99, 999):
        for test in (significance.paired_bootstrap, significance.approximate_randomization):
            delta, p = test(baseline + 0.02, baseline, samples=samples, seed=5)
            assert delta[0] == pytest.approx(0.02, abs=1e-12)
            assert p[0] == pytest.approx(1 / (samples + 1))


def test_a_shift_in_one_outlier_cluster_is_not_significant():
    """Only cluster 0 differs (by 0.9): the mean moves by 0.9/n, but no test
    may call that significant. Randomization: every sign pattern gives
    |mean| = 0.9/n, p = 1. Bootstrap: p = P(cluster 0 drawn 0 or >= 2 times),
    about 1 - 1/e."""
    baseline, _ = _scores(clusters=100)
    system = baseline.copy()
    system[0] += 0.9
    _, p_perm = significance.approximate_randomization(system, baseline, samples=1000, seed=2)
    _, p_boot = significance.paired_bootstrap(system, baseline, samples=2000, seed=2)
    assert p_perm[0] == 1.0
    exact = 1 - 100 * (1 / 100) * (1 - 1 / 100) ** 99
    assert p_boot[0] == pytest.approx(exact, abs=4 * (exact * (1 - exact) / 2000) ** 0.5)
    assert p_boot[0] > 0.5


def test_bootstrap_ci_agrees_with_scipy_bootstrap():
    baseline, system = _scores(seed=4)
    ours = significance.bootstrap_ci(np.stack([baseline, system]), samples=4000, seed=7)
    for row, values in enumerate((baseline, system)):
        reference = scipy_stats.bootstrap(
            (values,),
            np.mean,
            n_resamples=4000,
            method="percentile",
            confidence_level=0.95,
            rng=np.random.default_rng(11),
        )
        standard_error = values.std(ddof=1) / len(values) ** 0.5
        # a percentile of 4000 resamples is known to about 0.05 standard errors; allow 0.15
        assert ours[row, 0] == pytest.approx(reference.confidence_interval.low, abs=0.15 * standard_error)
        assert ours[row, 1] == pytest.approx(reference.confidence_interval.high, abs=0.15 * standard_error)
        assert ours[row, 0] < values.mean() < ours[row, 1]


def test_paired_bootstrap_agrees_with_scipys_bootstrap_distribution():
    """The p-value of the shifted paired bootstrap, computed from SciPy's own
    bootstrap distribution of the mean difference."""
    baseline, system = _scores(seed=8, clusters=150)
    differences = system - baseline
    delta, ours = significance.paired_bootstrap(system, baseline, samples=5000, seed=1)
    distribution = scipy_stats.bootstrap(
        (differences,), np.mean, n_resamples=5000, method="percentile", rng=np.random.default_rng(2)
    ).bootstrap_distribution
    theirs = (np.sum(np.abs(distribution - delta[0]) >= abs(delta[0])) + 1) / (5000 + 1)
    assert 0.001 < theirs < 0.5  # a case where the p-value is neither trivial nor 1
    assert ours[0] == pytest.approx(theirs, abs=4 * (theirs * (1 - theirs) / 5000) ** 0.5 * 2**0.5)


def test_approximate_randomization_agrees_with_scipy_permutation_test():
    baseline, system = _scores(seed=9, clusters=150)
    delta, ours = significance.approximate_randomization(system, baseline, samples=5000, seed=1)
    reference = scipy_stats.permutation_test(
        (system, baseline),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=5000,
        alternative="two-sided",
        rng=np.random.default_rng(3),
    )
    assert reference.statistic == pytest.approx(delta[0], rel=1e-12)
    theirs = reference.pvalue
    assert 0.001 < theirs < 0.5
    assert ours[0] == pytest.approx(theirs, abs=4 * (theirs * (1 - theirs) / 5000) ** 0.5 * 2**0.5)


def test_holm_and_bonferroni():
    p = [0.01, 0.04, 0.03, 0.2]
    assert significance.adjust_pvalues(p, "bonferroni").tolist() == pytest.approx([0.04, 0.16, 0.12, 0.8])
    # Holm: sorted 0.01*4, 0.03*3, 0.04*2, 0.2*1, running maximum
    assert significance.adjust_pvalues(p, "holm").tolist() == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert significance.adjust_pvalues(p, "none").tolist() == p
    with pytest.raises(ValueError):
        significance.adjust_pvalues(p, "sidak")


def test_compare_to_baseline_corrects_across_systems_and_metrics():
    baseline, system = _scores(seed=12, clusters=80)
    scores = {
        "base": {"rouge-1": baseline, "rouge-2": baseline / 2},
        "same": {"rouge-1": baseline, "rouge-2": baseline / 2},
        "better": {"rouge-1": baseline + 0.05, "rouge-2": system / 2},
    }
    tests = significance.compare_to_baseline(scores, "base", samples=999, seed=1, correction="bonferroni")
    assert set(tests) == {"same", "better"}
    assert tests["same"]["rouge-1"]["p_randomization"] == 1.0
    assert tests["better"]["rouge-1"]["p_randomization"] == pytest.approx(1 / 1000)
    assert tests["better"]["rouge-1"]["p_randomization_adjusted"] == pytest.approx(4 / 1000)  # 2 systems x 2 metrics


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_compare_cli_ci_baseline_per_cluster_plot_and_json(tmp_path, capsys):
    references = [f"the {w} cat sat on the {v} mat today ." for w, v in zip("abcdefghij", "klmnopqrst")]
    ref = _write(tmp_path, "ref.txt", references)
    same = _write(tmp_path, "same.txt", references)
    worse = _write(tmp_path, "worse.txt", [r.replace("cat sat", "dog ran") for r in references])
    out_json, out_csv, out_png = tmp_path / "c.json", tmp_path / "c.csv", tmp_path / "c.png"
    assert (
        compare.cli_main(
            [
                "--ref",
                ref,
                "--fast",
                "--ci",
                "--baseline",
                "gold",
                "--samples",
                "400",
                "--correction",
                "holm",
                "--per-cluster",
                str(out_csv),
                "--json",
                str(out_json),
                "--plot",
                str(out_png),
                "gold=" + same,
                "worse=" + worse,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "mdsfair-fast" in printed and "p_boot" in printed and "100.00 [100.00,100.00]" in printed
    saved = json.loads(out_json.read_text())
    test = saved["tests"]["worse"]["rouge-1"]
    assert test["delta"] == pytest.approx(0.6 - 1.0 + 0.0, abs=0.2) and test["delta"] < 0
    assert test["p_randomization"] == pytest.approx(1 / 401)  # every cluster lost the same words
    assert test["p_randomization_adjusted"] == pytest.approx(5 / 401)  # Holm over 1 system x 5 metrics
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(out_csv.read_text().splitlines()) == 1 + 2 * 10


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--baseline", "nobody", "a=" + HYP], "--baseline nobody: no system of that name"),
        (["--plot", "x.svg", "a=" + HYP], "--plot x.svg: the file name must end in .png"),
        (["--convention", "nosuch", "a=" + HYP], "unknown convention 'nosuch'"),
        (["--published", "atlantis", "--mixed"], "--published atlantis: no published results for this data set"),
        (
            ["--published", "multinews"],
            "would mix the conventions hierencdec, led-hierencdec, ma2022, pagesum, primera",
        ),
        (["a"], "expected NAME=PATH, got 'a'"),
    ],
)
def test_compare_cli_refuses_bad_input_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compare.cli_main(["--ref", REF, "--fast", *argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("mdsfair-compare: error: ") and message in error, error


def test_published_rows_are_shown_with_their_convention(capsys):
    assert compare.cli_main(["--published", "multinews", "--convention", "pagesum"]) == 0
    printed = capsys.readouterr().out
    assert "PageSum-Document [Liu et al. 2022, Table 5]" in printed and "published" in printed
    assert "51.17" in printed and "46.88" in printed  # R-1 and the summary-level R-L of Table 5
    assert "hierencdec" not in printed.split("[F1")[0]  # other conventions left out of the table
    assert "in other conventions not shown" in printed
    assert compare.cli_main(["--published", "multinews", "--mixed"]) == 0
    printed = capsys.readouterr().out
    assert "led-hierencdec" in printed and "50.10" in printed  # LED as HierEncDec ran it, Table 5
    assert "Ma et al. 2022 [Ma et al. 2022, Table I]" in printed and "17.97" in printed  # R-SU*


def test_published_file_matches_the_papers():
    """A few values checked against the papers' tables by hand; every row is well formed."""
    from mdsfair.evaluation.published import read_published

    rows = read_published()
    index = {(r["dataset"], r["system"], r["metric"], r["paper"]): r for r in rows}
    assert (
        index[("multinews", "BART-large-cnn + HierEncDec", "rouge-1", "Shen et al. 2023 (HierEncDec)")]["value"] == 50.7
    )
    assert index[("wikisum", "HT (1,600 tokens)", "rouge-l", "Liu & Lapata 2019")]["value"] == 35.08
    assert index[("govreport", "PageSum (20480)", "rouge-lsum", "Liu et al. 2022 (PageSum)")]["value"] == 57.07
    assert len(
        {(r["dataset"], r["system"], r["metric"], r["paper"], r["table"], r["convention"]) for r in rows}
    ) == len(rows)
