"""Significance tests on small samples (issue 45): which test to trust at
which number of clusters, and the warnings ``mdsfair-compare`` prints.

* approximate randomization on a tiny example whose exact p-value is
  counted by hand;
* the sample-size thresholds of every procedure and their warning lines;
* on a true null at 10 clusters the paired bootstrap rejects far more often
  than its nominal 5%, approximate randomization does not;
* the issue's observation on real text (Multi-XScience sample, 10
  clusters, a word-salad system against Lead): what the two tests say.
"""

import json
import logging
import os
import random
from collections import Counter

import numpy as np
import pytest

from mdsfair.evaluation import compare, significance

MULTI_XSCIENCE = "/work/shared/data/multi_xscience/jsonl/test.jsonl"


def test_approximate_randomization_matches_the_hand_counted_exact_p_value():
    # differences d = (1, 2, 3), delta = 2. Of the 2^3 sign patterns only
    # (+,+,+) and (-,-,-) give |mean(s d)| >= 2 (the next largest is
    # (-1 + 2 + 3) / 3 = 4/3), so the exact two-sided p-value is 2/8.
    samples = 20000
    delta, p = significance.approximate_randomization([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], samples=samples, seed=3)
    assert delta[0] == 2.0
    standard_error = np.sqrt(0.25 * 0.75 / samples)
    assert abs(p[0] - 0.25) < 4 * standard_error
    # A difference in one cluster only: every sign pattern ties |delta|, so the
    # count is `samples` and the +1 correction gives exactly 1.
    _, p = significance.approximate_randomization([0.0, 0.0, 3.0], [0.0, 0.0, 0.0], samples=50, seed=1)
    assert p[0] == 1.0


def test_randomization_min_clusters_is_the_smallest_n_with_2_over_2_to_the_n_below_alpha():
    assert significance.randomization_min_clusters(0.05) == 6  # 2/32 = 0.0625, 2/64 = 0.031
    assert significance.randomization_min_clusters(0.01) == 8  # 2/128 = 0.0156, 2/256 = 0.0078
    assert significance.randomization_min_clusters(0.5) == 3  # 2/4 = 0.5 is not below 0.5
    with pytest.raises(ValueError, match="alpha"):
        significance.randomization_min_clusters(0.0)


def test_sample_size_problem_warns_once_per_procedure_below_its_threshold():
    usable, warnings = significance.sample_size_problem(10, interval=True, tests=True, alpha=0.05)
    assert usable and len(warnings) == 2
    assert "percentile bootstrap interval" in warnings[0] and "only 10 clusters" in warnings[0]
    assert "paired bootstrap" in warnings[1] and "trust approximate randomization" in warnings[1]
    usable, warnings = significance.sample_size_problem(5, interval=False, tests=True, alpha=0.05)
    assert usable and len(warnings) == 2 and "paired bootstrap" in warnings[0]
    assert "approximate randomization cannot go below p = 0.0625" in warnings[1]
    assert "score at least 6 clusters" in warnings[1]
    assert significance.sample_size_problem(5, interval=True, tests=False)[1][0].count("interval") == 1
    assert len(significance.sample_size_problem(5, interval=True, tests=False)[1]) == 1
    assert significance.sample_size_problem(30, interval=True, tests=True) == (True, [])
    usable, warnings = significance.sample_size_problem(1)
    assert not usable and "nothing to resample" in warnings[0]
    assert all("\n" not in line for line in significance.sample_size_problem(3)[1])


def test_on_a_true_null_at_10_clusters_the_bootstrap_rejects_too_often_and_randomization_does_not():
    # 1000 independent null data sets (differences symmetric about 0), one
    # row each; the tests share their resamples across rows, which leaves
    # each row's rejection probability as it is.
    rng = np.random.default_rng(45)
    differences = rng.normal(size=(1000, 10))
    zeros = np.zeros_like(differences)
    _, p_bootstrap = significance.paired_bootstrap(differences, zeros, samples=2000, seed=1)
    _, p_randomization = significance.approximate_randomization(differences, zeros, samples=2000, seed=1)
    # Student's t with 9 degrees of freedom predicts about 0.10 for the
    # bootstrap (module docstring); the binomial standard error of a rate
    # near 0.05 over 1000 rows is 0.007.
    bootstrap_rate = float((p_bootstrap < 0.05).mean())
    randomization_rate = float((p_randomization < 0.05).mean())
    assert bootstrap_rate > 0.075, bootstrap_rate
    assert randomization_rate < 0.065, randomization_rate


def _word_salad(cluster, words: int, rng: random.Random) -> list:
    """The ``words`` most frequent source words, shuffled: a 'gibberish' system
    that shares the sources' vocabulary but has no sentences."""
    frequent = [word for word, _ in Counter(" ".join(cluster["documents"]).lower().split()).most_common(words)]
    rng.shuffle(frequent)
    return [" ".join(frequent)]


@pytest.mark.skipif(not os.path.exists(MULTI_XSCIENCE), reason="the Multi-XScience sample is not in /work/shared/data")
def test_issue_observation_on_ten_real_clusters_bootstrap_p_below_randomization_p():
    """What we found (6 draws of 10 clusters x ROUGE-1/2/L F1, 1000 samples):
    the word salad scores *below* Lead on most rows (it beats Lead once, on
    ROUGE-1, by 3 points), so the issue's 'significantly better' was not
    reproduced with this system; but the paired bootstrap's p-value is
    smaller than approximate randomization's on 17 of the 18 rows and it
    marks more rows significant at 0.05: the bootstrap is the
    anti-conservative test at this size, as the null simulation above
    shows."""
    from mdsfair.evaluation.extractive_baselines import (
        document_sentences,
        lead,
        reference_summaries,
        reference_word_budget,
    )
    from mdsfair.evaluation.fast_rouge import FastRougeScorer

    with open(MULTI_XSCIENCE, encoding="utf-8") as handle:
        clusters = [json.loads(line) for line in handle]
    scorer = FastRougeScorer()
    bootstrap_smaller = rows = bootstrap_marks = randomization_marks = 0
    for seed in range(6):
        rng = random.Random(seed)
        chosen = rng.sample(clusters, 10)
        lead_scores, salad_scores = [], []
        for cluster in chosen:
            references = [document_sentences(reference) for reference in reference_summaries(cluster)]
            budget = reference_word_budget(cluster)
            lead_scores.append(scorer.score_cluster(lead(cluster, num_tokens=budget), references))
            salad_scores.append(scorer.score_cluster(_word_salad(cluster, budget, rng), references))
        for metric in ("rouge-1", "rouge-2", "rouge-l"):
            salad = [scores[metric][2] for scores in salad_scores]
            lead_f1 = [scores[metric][2] for scores in lead_scores]
            _, p_bootstrap = significance.paired_bootstrap(salad, lead_f1, 1000, seed)
            _, p_randomization = significance.approximate_randomization(salad, lead_f1, 1000, seed)
            rows += 1
            bootstrap_smaller += int(p_bootstrap[0] < p_randomization[0])
            bootstrap_marks += int(p_bootstrap[0] < 0.05)
            randomization_marks += int(p_randomization[0] < 0.05)
    assert rows == 18
    assert bootstrap_smaller >= 15, bootstrap_smaller
    assert bootstrap_marks > randomization_marks, (bootstrap_marks, randomization_marks)


def test_compare_prints_one_warning_line_per_procedure(tmp_path, capsys, caplog):
    references = [f"the cat number {index} sat on the mat near house {index}" for index in range(10)]
    reference_path = tmp_path / "ref.txt"
    reference_path.write_text("\n".join(references) + "\n")
    gold = tmp_path / "gold.txt"
    gold.write_text("\n".join(references) + "\n")
    worse = tmp_path / "worse.txt"
    worse.write_text("\n".join(text.replace("cat", "dog") for text in references) + "\n")
    with caplog.at_level(logging.WARNING):
        argv = ["--ref", str(reference_path), "--fast", "--ci", "--baseline", "gold"]
        assert compare.cli_main(argv + ["gold=" + str(gold), "worse=" + str(worse)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  note: only 10 clusters")]
    assert len(notes) == 2
    assert "percentile bootstrap interval" in notes[0] and "trust approximate randomization" in notes[1]
    assert "approximate randomization cannot go below" not in caplog.text
