"""Fast pure-Python ROUGE: rouge-score for R-1/R-2/R-L/R-Lsum, our own R-SU4.

rouge-score (Google's reimplementation of ROUGE-1.5.5) gives ``rouge1``,
``rouge2``, ``rougeL`` (plain LCS over the whole summary) and ``rougeLsum``
(summary-level union LCS over newline-separated sentences). It has no
skip-bigram metric, so :func:`skip_bigram_unigram_counts` and
:func:`rouge_su` implement ROUGE-SU4 the way ROUGE-1.5.5 does with
``-2 4 -u``/``-U`` (``createSkipBigram`` and ``skipBigramScore`` in the
script), on the tokens of rouge-score's tokenizer:

* a skip bigram pairs token ``i`` with each token ``j`` with
  ``i < j <= i + 5`` (at most 4 tokens in between), in order;
* the unigram extension adds token ``i`` as a unigram for every ``i`` *except
  the last token* -- the script's unigram loop stops one token early, and this
  is reproduced on purpose so the numbers agree (a one-token text therefore
  has no SU units at all);
* hits are clipped counts (``min(peer, model)``), recall = hits / model
  units, precision = hits / peer units, F = harmonic mean (alpha 0.5).

Differences from the official script that remain (see ``tests/test_rouge.py``
for the measured size): the script stems with its own Porter stemmer after a
WordNet irregular-form lookup (``said`` -> ``say``, ``children`` ->
``child``), rouge-score uses NLTK's Porter stemmer without that lookup; and
the script rounds every per-summary R/P/F to 5 decimals before averaging.

Scripts other than Latin (``ScriptAwareTokenizer``): rouge-score, like the
official script, deletes every character outside ``[a-z0-9]``, so Chinese,
Arabic or Russian text has no tokens and scores 0. The fast scorer keeps
them: a Han or kana character is one token (the usual character-level ROUGE
for Chinese and Japanese), a run of letters, marks and digits of any other
non-Latin script is one word (Arabic, Cyrillic, Greek, Hebrew, Devanagari,
Hangul, ...). Text that is all ASCII is tokenized exactly as rouge-score does
(so English numbers are unchanged), and accented Latin letters still separate
words as in the official script. Scripts written without spaces other than
Han/kana (Thai, Lao, Khmer, Burmese) come out as whole space-delimited runs.

Several references: the usual convention of rouge-score's ``score_multi`` --
for each metric separately, the reference with the highest F1 is used (its
recall and precision are reported with it). ROUGE-1.5.5's default instead
pools hits and counts over all references (``-f A``).
"""

from collections import Counter
from typing import Dict, List, Sequence, Tuple

from rouge_score import rouge_scorer, tokenizers

from mdsfair.text import character_kind

RougeTriple = Tuple[float, float, float]  # (recall, precision, f1)

#: Metric names of the result, in report order (as ``mdsfair.evaluation.scoring.METRICS``).
METRICS = ("rouge-1", "rouge-2", "rouge-l", "rouge-lsum", "rouge-su4")

_ROUGE_SCORE_TYPES = {
    "rouge-1": "rouge1",
    "rouge-2": "rouge2",
    "rouge-l": "rougeL",
    "rouge-lsum": "rougeLsum",
}


class ScriptAwareTokenizer(tokenizers.Tokenizer):
    """rouge-score's tokenizer, extended to non-Latin scripts (module docstring).

    Args:
        use_stemmer: Porter-stem ASCII words longer than 3 characters (as rouge-score).
    """

    def __init__(self, use_stemmer: bool = True):
        self._ascii = tokenizers.DefaultTokenizer(use_stemmer=use_stemmer)

    def tokenize(self, text: str) -> List[str]:
        if text.isascii():
            return self._ascii.tokenize(text)
        tokens: List[str] = []
        run, run_kind = [], ""
        for char in text.lower():
            kind = character_kind(char)
            if run and kind != run_kind:
                word = "".join(run)
                tokens.extend(self._ascii.tokenize(word) if run_kind == "ascii" else [word])
                run = []
            if kind == "han":
                tokens.append(char)
            elif kind:
                run.append(char)
            run_kind = kind
        if run:
            word = "".join(run)
            tokens.extend(self._ascii.tokenize(word) if run_kind == "ascii" else [word])
        return tokens


def skip_bigram_unigram_counts(tokens: Sequence[str], max_gap: int = 4) -> Counter:
    """ROUGE-SU units of ``tokens`` as ROUGE-1.5.5 counts them (``-2 max_gap -u``).

    Keys are 1-tuples (unigrams) and 2-tuples (skip bigrams). The unigram of
    the last token is not counted, exactly as in the script.
    """
    units: Counter = Counter()
    last = len(tokens) - 1
    for i in range(last):
        units[(tokens[i],)] += 1
        for j in range(i + 1, min(last, i + max_gap + 1) + 1):
            units[(tokens[i], tokens[j])] += 1
    return units


def _triple(hits: int, model_total: int, peer_total: int) -> RougeTriple:
    recall = hits / model_total if model_total else 0.0
    precision = hits / peer_total if peer_total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return recall, precision, f1


def rouge_su(peer_tokens: Sequence[str], model_tokens: Sequence[str], max_gap: int = 4) -> RougeTriple:
    """ROUGE-SU``max_gap`` (recall, precision, F1) of one peer against one model."""
    peer = skip_bigram_unigram_counts(peer_tokens, max_gap)
    model = skip_bigram_unigram_counts(model_tokens, max_gap)
    hits = sum(min(count, peer[unit]) for unit, count in model.items() if unit in peer)
    return _triple(hits, sum(model.values()), sum(peer.values()))


class FastRougeScorer:
    """Per-cluster ROUGE-1/2/L/Lsum (rouge-score) and ROUGE-SU4 (ours).

    Args:
        stemming: Porter-stem words longer than 3 characters (as ``-m``).
    """

    def __init__(self, stemming: bool = True):
        self.stemming = stemming
        self._tokenizer = ScriptAwareTokenizer(use_stemmer=stemming)
        self._scorer = rouge_scorer.RougeScorer(list(_ROUGE_SCORE_TYPES.values()), tokenizer=self._tokenizer)

    def tokenize(self, text: str) -> List[str]:
        """rouge-score's tokens (lower-cased ``[a-z0-9]+`` runs, stemmed if
        asked), plus words and Han/kana characters of non-Latin scripts."""
        return self._tokenizer.tokenize(text)

    def score_pair(self, hypothesis: Sequence[str], reference: Sequence[str]) -> Dict[str, RougeTriple]:
        """All five metrics of one hypothesis against one reference (sentence lists)."""
        hypothesis_text = "\n".join(hypothesis)
        reference_text = "\n".join(reference)
        scores = self._scorer.score(reference_text, hypothesis_text)
        result = {
            name: (scores[key].recall, scores[key].precision, scores[key].fmeasure)
            for name, key in _ROUGE_SCORE_TYPES.items()
        }
        result["rouge-su4"] = rouge_su(self.tokenize(hypothesis_text), self.tokenize(reference_text))
        return result

    def score_cluster(self, hypothesis: Sequence[str], references: Sequence[Sequence[str]]) -> Dict[str, RougeTriple]:
        """Scores against several references: per metric, the best F1 wins."""
        if not references:
            raise ValueError("a cluster needs at least one reference")
        per_reference = [self.score_pair(hypothesis, reference) for reference in references]
        return {
            metric: max((scores[metric] for scores in per_reference), key=lambda triple: triple[2])
            for metric in METRICS
        }

    def score_corpus(
        self, hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]
    ) -> Tuple[Dict[str, Dict[str, float]], Dict[str, Dict[str, List[float]]]]:
        """Score every cluster.

        Returns:
            ``(means, per_cluster)``: per metric the mean recall ``r``,
            precision ``p`` and F1 ``f`` over clusters, and per metric and
            measure the list of cluster scores in input order.
        """
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference sets")
        if not hypotheses:
            raise ValueError("nothing to score: no hypotheses")
        per_cluster = {metric: {"r": [], "p": [], "f": []} for metric in METRICS}
        for hypothesis, cluster_references in zip(hypotheses, references):
            for metric, triple in self.score_cluster(hypothesis, cluster_references).items():
                for measure, value in zip("rpf", triple):
                    per_cluster[metric][measure].append(value)
        means = {
            metric: {measure: sum(values) / len(values) for measure, values in measures.items()}
            for metric, measures in per_cluster.items()
        }
        return means, per_cluster
