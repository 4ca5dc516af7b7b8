"""Each paper's ROUGE convention as a named preset (``--convention NAME``).

The seeds and their baselines scored with different tools and settings, and
the differences are larger than the margins the papers claim (R-L as a plain
LCS over the whole summary against a summary-level LCS over sentences moves
Multi-News R-L by about 20 points). A preset fixes every setting that changes
a number:

* the scorer: the ROUGE-1.5.5 Perl script with the authors' options, or
  Google's ``rouge-score`` (what Hugging Face's ``load_metric("rouge")``
  wraps) with the authors' ``rouge_types``;
* stemming (``-m`` / ``use_stemmer``) and stopword removal (``-s``: no preset uses it);
* the sentence splitting before ROUGE-L: none (the summary is one line, so
  R-L is a plain LCS: mdsfair's ``rouge-l``), the text's own newlines
  (pyrouge), or nltk's ``sent_tokenize`` (then R-L is the summary-level
  union LCS: mdsfair's ``rouge-lsum``);
* case (lower-casing before splitting: it changes where nltk splits; the
  Perl script and rouge-score lower-case every token anyway);
* length limits: no preset truncates the hypotheses (no ``-l``/``-b``);
* the aggregate over clusters: the script's mean of its 1,000
  bootstrap-resample means, or the plain mean;
* which of the scorer's outputs the paper printed, under which label.

Every preset names the file and line of the authors' evaluation code it
follows (``sources``); where no code was released it says so and cites the
paper. ``tests/test_conventions.py`` scores a fixed fixture with each preset
and with the authors' scoring logic written out from those lines.

Two presets are mdsfair's own: ``mdsfair`` (files2rouge-compatible ROUGE-1.5.5,
the default of ``mdsfair-rouge``) and ``mdsfair-fast`` (``--fast``).

Torch-free; nltk and rouge-score are imported only by the presets that use them.
"""

import logging
import unicodedata
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from mdsfair.evaluation.inputs import RougeInputError

logger = logging.getLogger("mdsfair.evaluation.rouge")

#: Every metric a preset can report, then the model-based columns of
#: :mod:`mdsfair.evaluation.model_metrics`, in column order, and each column's title.
ALL_METRICS = ("rouge-1", "rouge-2", "rouge-l", "rouge-lsum", "rouge-su4", "rouge-su*", "bertscore", "nsp-coherence")
TITLES = {
    "rouge-1": "R-1",
    "rouge-2": "R-2",
    "rouge-l": "R-L",
    "rouge-lsum": "R-Lsum",
    "rouge-su4": "R-SU4",
    "rouge-su*": "R-SU*",
    "bertscore": "BS",
    "nsp-coherence": "SC",
}

SPLITS = ("none", "newline", "nltk", "rules")


@dataclass(frozen=True)
class Convention:
    """How one paper scored (see the module docstring)."""

    name: str
    title: str
    #: ``rouge155`` (the Perl script with ``rouge155_options``), ``rouge-score``,
    #: or mdsfair's own ``mdsfair`` / ``mdsfair-fast``
    scorer: str
    stemming: bool
    #: how a summary is cut into lines before ROUGE-L(sum): one of SPLITS
    sentence_split: str
    lowercase: bool
    #: how the per-cluster scores become the reported number
    aggregate: str
    #: mdsfair metric -> the label the paper printed it under
    reported: Dict[str, str]
    #: the authors' code (repository@commit path:line) or paper this follows
    sources: Tuple[str, ...]
    rouge155_options: Tuple[str, ...] = ()
    rouge_types: Tuple[str, ...] = ()
    stopwords_removed: bool = False
    length_limit: Optional[str] = None
    notes: Tuple[str, ...] = field(default=())

    @property
    def metrics(self) -> Tuple[str, ...]:
        """The metrics this preset reports, in column order."""
        return tuple(metric for metric in ALL_METRICS if metric in self.reported)

    def describe(self) -> str:
        """One paragraph: every setting and where it comes from."""
        if self.scorer == "rouge155":
            scorer = "ROUGE-1.5.5 " + " ".join(self.rouge155_options)
        elif self.scorer == "rouge-score":
            scorer = f"rouge-score {list(self.rouge_types)}"
        else:
            scorer = self.scorer
        lines = [
            f"{self.name}: {self.title}",
            f"  scorer: {scorer}; stemming: {'yes' if self.stemming else 'no'}; stopwords removed: "
            f"{'yes' if self.stopwords_removed else 'no'}; length limit: {self.length_limit or 'none'}",
            f"  sentence split before R-L: {self.sentence_split}; lower-cased first: {'yes' if self.lowercase else 'no'}; "
            f"aggregate: {self.aggregate}",
            "  reports: " + ", ".join(f"{label} = {TITLES[metric]}" for metric, label in self.reported.items()),
        ]
        lines += [f"  source: {source}" for source in self.sources]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


HIERSUMM = "nlpyang/hiersumm@476e6bf"
HIERENCDEC = "DAMO-NLP-SG/HierEncDec@a413890"
PAGESUM = "yixinL7/PageSum@0533390"
SPARSE = "potsawee/encdec_attn_sparse@838df89"
PRIMER = "allenai/PRIMER@5acb5aa"
PYROUGE = "bheinzerling/pyrouge@08e9cc3"

SCRIPT_AVERAGE = "ROUGE-1.5.5's Average: mean of its -r bootstrap-resample means (srand(0..r-1)), 5 decimals"

CONVENTIONS: Dict[str, Convention] = {}


def _register(convention: Convention) -> Convention:
    CONVENTIONS[convention.name] = convention
    return convention


_register(
    Convention(
        name="mdsfair",
        title="mdsfair-rouge's default: files2rouge-compatible ROUGE-1.5.5",
        scorer="mdsfair",
        rouge155_options=("-c", "95", "-r", "1000", "-n", "2", "-a", "-m", "-2", "4", "-u"),
        stemming=True,
        sentence_split="rules",
        lowercase=False,
        aggregate=SCRIPT_AVERAGE,
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-l": "R-L", "rouge-lsum": "R-Lsum", "rouge-su4": "R-SU4"},
        sources=("mdsfair/evaluation/rouge155.py (pltrdy/files2rouge files2rouge.py, function run)",),
        notes=(
            "R-L is the script on each summary as one line (plain LCS), R-Lsum the script on the sentences of "
            "mdsfair.text's splitter (summary-level LCS)",
        ),
    )
)
_register(
    Convention(
        name="mdsfair-fast",
        title="mdsfair-rouge --fast: rouge-score plus mdsfair's ROUGE-SU4",
        scorer="mdsfair-fast",
        rouge_types=("rouge1", "rouge2", "rougeL", "rougeLsum"),
        stemming=True,
        sentence_split="rules",
        lowercase=False,
        aggregate="plain mean over clusters",
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-l": "R-L", "rouge-lsum": "R-Lsum", "rouge-su4": "R-SU4"},
        sources=("mdsfair/evaluation/fast_rouge.py",),
    )
)
_register(
    Convention(
        name="hiersumm",
        title="Liu & Lapata 2019 (Hierarchical Transformers, WikiSum)",
        scorer="rouge155",
        rouge155_options=("-c", "95", "-m", "-r", "1000", "-n", "2", "-a"),
        stemming=True,
        sentence_split="none",
        lowercase=True,
        aggregate=SCRIPT_AVERAGE,
        reported={"rouge-1": "ROUGE-1", "rouge-2": "ROUGE-2", "rouge-l": "ROUGE-L"},
        sources=(
            f"{HIERSUMM} src/abstractive/my_pyrouge.py:539-551 (options -c 95 -m -r 1000 -n 2 -a)",
            f"{HIERSUMM} src/abstractive/my_pyrouge.py:42 (files lower-cased)",
            f"{HIERSUMM} src/abstractive/predictor_builder.py:146-149 (<Q> -> space: each summary on one line; "
            "gold lower-cased)",
            f"{HIERSUMM} src/abstractive/cal_rouge.py:38 (convert_and_evaluate(): no sentence splitting)",
        ),
        notes=(
            "each summary is one line, so the script's ROUGE-L is a plain LCS over the whole summary (mdsfair's R-L)",
        ),
    )
)
_register(
    Convention(
        name="hierencdec",
        title="Shen et al. 2023 (HierEncDec)",
        scorer="rouge-score",
        rouge_types=("rouge1", "rouge2", "rougeL"),
        stemming=True,
        sentence_split="nltk",
        lowercase=False,
        aggregate="plain mean over clusters (the authors print rouge-score's BootstrapAggregator mid, the median of "
        "1,000 unseeded bootstrap means: the mean up to Monte-Carlo error)",
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-l": "R-L"},
        sources=(
            f"{HIERENCDEC} run_summarization.py:671 (load_metric('rouge'): the repository's rouge/rouge.py, "
            "found first from the repository root)",
            f"{HIERENCDEC} rouge/rouge.py:84-88 (rouge_types default rouge1, rouge2, rougeL; BootstrapAggregator)",
            f"{HIERENCDEC} run_summarization.py:680-688 (strip, then nltk.sent_tokenize joined by newlines)",
            f"{HIERENCDEC} run_summarization.py:892-893 (use_stemmer=True; value.mid.fmeasure)",
            f"{HIERENCDEC} run_summarization.py:791-792 (references: the labels decoded, i.e. cut at "
            "--max_target_length 1024 BART tokens)",
        ),
        notes=(
            "rouge1, rouge2 and rougeL read no line breaks, so the nltk split changes no score and is not run",
            "the authors' references are cut at 1,024 BART tokens; mdsfair scores the full references (equal "
            "whenever a reference is at most 1,024 tokens)",
        ),
    )
)
_register(
    Convention(
        name="led-hierencdec",
        title="LED as Shen et al. 2023 ran it (HierEncDec's finetune_led.py)",
        scorer="rouge-score",
        rouge_types=("rouge1", "rouge2", "rougeL"),
        stemming=True,
        sentence_split="nltk",
        lowercase=False,
        aggregate=CONVENTIONS["hierencdec"].aggregate,
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-l": "R-L"},
        sources=(
            f"{HIERENCDEC} finetune_led.py:513 (load_metric('rouge'): the repository's rouge/rouge.py)",
            f"{HIERENCDEC} finetune_led.py:522-530 (strip, nltk.sent_tokenize joined by newlines)",
            f"{HIERENCDEC} finetune_led.py:545-547 (use_stemmer=True; value.mid.fmeasure)",
        ),
        notes=CONVENTIONS["hierencdec"].notes,
    )
)
_register(
    Convention(
        name="pagesum",
        title="Liu et al. 2022 (PageSum)",
        scorer="rouge155",
        rouge155_options=("-c", "95", "-r", "1000", "-n", "2", "-m", "-a"),
        stemming=True,
        sentence_split="nltk",
        lowercase=True,
        aggregate=SCRIPT_AVERAGE,
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-lsum": "R-L"},
        sources=(
            f"{PAGESUM} cal_rouge.py:20 and :31-34 (options -c 95 -r 1000 -n 2 -m, then -a)",
            f"{PAGESUM} cal_rouge.py:57-73 (with -l every line lower-cased, then one nltk sent_tokenize sentence "
            "per line)",
            f"{PAGESUM} README.md:99 (the evaluation command passes -l)",
        ),
        notes=("the paper's R-L is the script's ROUGE-L over sentence lines: a summary-level LCS (mdsfair's R-Lsum)",),
    )
)
_register(
    Convention(
        name="sparse",
        title="Manakul & Gales 2021 (sparse encoder-decoder attention)",
        scorer="rouge155",
        rouge155_options=("-c", "95", "-2", "-1", "-U", "-r", "1000", "-n", "4", "-w", "1.2", "-a"),
        stemming=False,
        sentence_split="newline",
        lowercase=False,
        aggregate=SCRIPT_AVERAGE,
        reported={"rouge-1": "R1", "rouge-2": "R2", "rouge-l": "RL"},
        sources=(
            "Manakul & Gales 2021, Appendix A.3: 'The ROUGE scoring tool is pyrouge' (the repository has no "
            f"scoring script: {SPARSE} decode.py:103-105 writes each decoded summary as it is)",
            f"{PYROUGE} pyrouge/Rouge155.py:520-530 (pyrouge's default options -c 95 -2 -1 -U -r 1000 -n 4 -w 1.2 -a: "
            "no stemming)",
            f"{PYROUGE} pyrouge/Rouge155.py:221 (a summary's lines are its newline-separated pieces)",
        ),
        notes=(
            "the options are pyrouge's defaults, since neither paper nor repository names others",
            "a summary on one line (mdsfair's files) makes RL a plain LCS (mdsfair's R-L); give "
            "--sentence-separator for the marker that stood for the authors' newlines",
        ),
    )
)
_register(
    Convention(
        name="ma2022",
        title="Ma et al. 2022 (document-aware positional and linguistic-guided encoding)",
        scorer="rouge155",
        rouge155_options=("-c", "95", "-2", "-1", "-U", "-r", "1000", "-n", "4", "-w", "1.2", "-a", "-m"),
        stemming=True,
        sentence_split="none",
        lowercase=False,
        aggregate=SCRIPT_AVERAGE,
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-su*": "R-SU"},
        sources=(
            "Ma et al. 2022, Section IV-D, footnote 3: ROUGE-1.5.5 with '-c 95 -2 -1 -U -r 1000 -n 4 -w 1.2 -a -m' "
            "(no code was released)",
        ),
        notes=(
            "R-SU is ROUGE-SU* with no limit on the skip distance (-2 -1 -U), not ROUGE-SU4",
            "R-1, R-2 and R-SU do not depend on line breaks (the script joins a summary's lines before counting)",
        ),
    )
)
_register(
    Convention(
        name="primera",
        title="Xiao et al. 2022 (PRIMERA)",
        scorer="rouge-score",
        rouge_types=("rouge1", "rouge2", "rougeL", "rougeLsum"),
        stemming=True,
        sentence_split="newline",
        lowercase=False,
        aggregate="plain mean over clusters",
        reported={"rouge-1": "R-1", "rouge-2": "R-2", "rouge-l": "R-L", "rouge-lsum": "R-Lsum"},
        sources=(
            f"{PRIMER} script/primer_main.py:184 and :236-241 (load_metric('rouge'), use_agregator=False, "
            "use_stemmer=True, one cluster at a time)",
            f"{PRIMER} script/primer_main.py:286-287 (pandas mean over clusters)",
            f"{PRIMER} script/dataloader.py:64 (references: the data set's summary string, uncut)",
        ),
        notes=(
            "no sentence splitting: rougeLsum splits on the texts' own newlines (none in a generated summary; "
            "allenai/PRIMER issue #12: arXiv references with newlines give a far higher R-Lsum)",
        ),
    )
)

PRESET_NAMES = tuple(name for name in CONVENTIONS if not name.startswith("mdsfair"))


def get_convention(name: str) -> Convention:
    """The preset called ``name``; :class:`RougeInputError` naming the known ones otherwise."""
    try:
        return CONVENTIONS[name]
    except KeyError:
        raise RougeInputError(f"unknown convention {name!r}; known: {', '.join(CONVENTIONS)}") from None


def nltk_sentences(text: str) -> List[str]:
    """nltk's ``sent_tokenize`` (English Punkt), as the authors call it."""
    import nltk

    try:
        return nltk.sent_tokenize(text)
    except LookupError as error:
        raise RougeInputError(
            "this convention splits sentences with nltk's Punkt model, which is not installed: run "
            "`python -m nltk.downloader punkt_tab punkt` once"
        ) from error


def prepare_lines(
    text: str, convention: Convention, sentence_separator: Optional[str] = None, split: bool = True
) -> List[str]:
    """A summary as the authors' code handed it to the scorer: lower-cased
    if they did, then cut into lines by the convention's split (``split=False``:
    one line, for scores that read no line breaks)."""
    if sentence_separator:
        text = text.replace(sentence_separator, "\n")
    text = text.strip()
    if convention.lowercase:
        text = text.lower()
    how = convention.sentence_split if split else "none"
    if how == "none":
        lines = [" ".join(text.split())]
    elif how == "newline":
        lines = text.split("\n")
    elif how == "nltk":
        lines = nltk_sentences(text)
    elif how == "rules":
        from mdsfair.text import split_sentences

        lines = split_sentences(text)
    else:  # pragma: no cover - the table above holds only SPLITS
        raise ValueError(how)
    return [line for line in (" ".join(piece.split()) for piece in lines) if line]


def _reads_lines(convention: Convention) -> bool:
    if convention.scorer == "rouge-score":
        return "rougeLsum" in convention.rouge_types
    return "rouge-lsum" in convention.reported or convention.sentence_split == "newline"


_SCRIPT_METRICS = {"ROUGE-1": "rouge-1", "ROUGE-2": "rouge-2", "ROUGE-SU4": "rouge-su4", "ROUGE-SU*": "rouge-su*"}
_ROUGE_SCORE_METRICS = {"rouge1": "rouge-1", "rouge2": "rouge-2", "rougeL": "rouge-l", "rougeLsum": "rouge-lsum"}


def _single_references(references: Sequence[Sequence[str]], convention: Convention) -> List[str]:
    single = []
    for index, cluster in enumerate(references):
        if len(cluster) != 1:
            raise RougeInputError(
                f"cluster {index} has {len(cluster)} references; the {convention.name} convention scores one "
                "reference per cluster, as the authors' code does"
            )
        single.append(cluster[0])
    return single


def score_with_convention(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    convention: Convention,
    sentence_separator: Optional[str] = None,
    resamples: int = 1000,
) -> Dict[str, Dict]:
    """Score summaries (strings) the way ``convention``'s authors did.

    Args:
        hypotheses: one summary per cluster.
        references: per cluster, its reference(s) (the authors' presets take one).
        convention: a preset of :data:`CONVENTIONS` other than mdsfair's own.
        sentence_separator: a marker in the texts that stands for the authors'
            newline (replaced by one before anything else).
        resamples: Perl presets: the script's ``-r`` (the papers: 1000).

    Returns:
        ``{metric: {"r", "p", "f"}, ..., "per_cluster": {metric: {"r": [...], ...}},
        "info": {...}}`` for the preset's reported metrics, fractions in [0, 1].
    """
    if convention.scorer not in ("rouge155", "rouge-score"):
        raise ValueError(f"{convention.name} is scored by mdsfair.evaluation.scoring.score")
    # Unicode NFC first, as mdsfair-rouge scores every convention (see mdsfair.evaluation.scoring).
    refs = [unicodedata.normalize("NFC", text) for text in _single_references(references, convention)]
    split = _reads_lines(convention)
    hyp_lines = [
        prepare_lines(unicodedata.normalize("NFC", text), convention, sentence_separator, split) for text in hypotheses
    ]
    ref_lines = [prepare_lines(text, convention, sentence_separator, split) for text in refs]
    info: Dict[str, object] = {
        "convention": convention.name,
        "num_hypotheses": len(hypotheses),
        "num_empty_hypotheses": sum(1 for lines in hyp_lines if not lines),
        "stemming": convention.stemming,
    }
    per_cluster: Dict[str, Dict[str, List[float]]] = {}
    result: Dict[str, Dict] = {}
    if convention.scorer == "rouge155":
        from mdsfair.evaluation.rouge155 import run_rouge155_options

        options = list(convention.rouge155_options)
        if "-r" in options:
            options[options.index("-r") + 1] = str(resamples)
        parsed, command = run_rouge155_options(hyp_lines, [[lines] for lines in ref_lines], options)
        names = dict(_SCRIPT_METRICS)
        names["ROUGE-L"] = "rouge-lsum" if "rouge-lsum" in convention.reported else "rouge-l"
        for script_name, metric in names.items():
            if metric not in convention.reported:
                continue
            entry = parsed[script_name]
            result[metric] = {key: entry[key] for key in ("r", "p", "f", "r_ci", "p_ci", "f_ci")}
            per_cluster[metric] = {
                measure: [entry["per_eval"][index][position] for index in range(len(hypotheses))]
                for position, measure in enumerate("rpf")
            }
        info.update(scorer="ROUGE-1.5.5", rouge_args=command[2:-1])
    else:
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(list(convention.rouge_types), use_stemmer=convention.stemming)
        for metric in (_ROUGE_SCORE_METRICS[t] for t in convention.rouge_types):
            per_cluster[metric] = {"r": [], "p": [], "f": []}
        for hyp, ref in zip(hyp_lines, ref_lines):
            scores = scorer.score("\n".join(ref), "\n".join(hyp))
            for rouge_type in convention.rouge_types:
                metric = _ROUGE_SCORE_METRICS[rouge_type]
                score = scores[rouge_type]
                for measure, value in zip("rpf", (score.recall, score.precision, score.fmeasure)):
                    per_cluster[metric][measure].append(value)
        for metric, measures in per_cluster.items():
            result[metric] = {measure: sum(values) / len(values) for measure, values in measures.items()}
        info.update(scorer="rouge-score", rouge_types=list(convention.rouge_types))
    result["per_cluster"] = per_cluster
    result["info"] = info
    return result
