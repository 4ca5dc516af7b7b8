"""Each paper's ROUGE convention (mdsfair.evaluation.conventions) against the
authors' scoring logic, written out here from their code's settings (the
files and lines each preset cites), on one fixed fixture.

Perl presets: the authors ran ROUGE-1.5.5 through pyrouge, which writes SEE
(HTML) files, one ``<a>`` element per line of a summary, and a SEE
configuration; the test does the same and runs the script with the authors'
options, then reads the numbers the way their code did (PageSum reads fixed
output lines). rouge-score presets: the authors' rouge_score calls.

nltk's English Punkt model is not installed on every machine (it is a data
download); where the authors call ``nltk.sent_tokenize``, the test replaces
that one function, on both sides, by nltk's Punkt tokenizer with default
(untrained) parameters, so the rest of each pipeline (lower-casing first, one
sentence per line, the options) is still compared number for number; with
the English model installed the unpatched pipeline is compared too.
"""

import re
import subprocess

import nltk
import pytest

from mdsfair.evaluation import rouge155
from mdsfair.evaluation.conventions import CONVENTIONS, PRESET_NAMES, score_with_convention
from mdsfair.evaluation.file_scoring import score_files

HYPOTHESES = [
    "The Senate passed the bill on Tuesday. Mr. Smith voted against it. The vote was 52 to 48.",
    "Heavy rain flooded the Northern region. Thousands of people were evacuated.",
    "Shares of Acme Corp. rose sharply after its earnings report.",
    "",
    "The museum reopened its doors. Visitors were happy. Tickets sold out in an hour.",
    "Scientists discovered a new species of frog in the rainforest; it is bright blue.",
]
REFERENCES = [
    "On Tuesday the Senate passed the bill by 52 votes to 48. Mr. Smith, a senator, opposed it.",
    "Floods hit the northern region after heavy rains. Thousands were evacuated from their homes.",
    "Acme Corp. shares jumped after the company reported strong earnings. Analysts were surprised.",
    "The storm caused damage across the coast.",
    "After two years, the museum reopened. Tickets sold out within an hour as visitors returned.",
    "A bright blue frog species was discovered by scientists in the rainforest.",
]


def _perl_ready():
    try:
        rouge155.check_perl()
        rouge155.rouge155_home()
    except rouge155.RougeDependencyError:
        return False
    return True


needs_perl = pytest.mark.skipif(not _perl_ready(), reason="perl with XML::DOM is not installed")


def _punkt_installed():
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return True
    except LookupError:
        return False


@pytest.fixture(params=["untrained-punkt"] + (["english-punkt"] if _punkt_installed() else []))
def sent_tokenize(request, monkeypatch):
    """nltk.sent_tokenize as the authors call it (see the module docstring)."""
    if request.param == "untrained-punkt":
        tokenizer = nltk.tokenize.punkt.PunktSentenceTokenizer()
        monkeypatch.setattr(nltk, "sent_tokenize", lambda text, language="english": tokenizer.tokenize(text))
    return request.param


@pytest.fixture(scope="module", autouse=True)
def rouge_data_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("rouge-data"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MDSFAIR_ROUGE_DATA", data_dir)
        yield data_dir


def _pyrouge_run(tmp_path, candidates, references, options, lower_files=False):
    """pyrouge's Rouge155.convert_and_evaluate on one candidate and one
    reference text per cluster (bheinzerling/pyrouge Rouge155.py: each text's
    lines become SEE <a> elements, convert_text_to_rouge_format; the config of
    write_config_static; hiersumm's copy lower-cases the files,
    my_pyrouge.py:42). Returns the script's stdout."""
    root = tmp_path / "pyrouge"
    for kind, texts in (("system", candidates), ("model", references)):
        folder = root / kind
        folder.mkdir(parents=True)
        for index, text in enumerate(texts):
            elements = [
                f'<a name="{i}">[{i}]</a> <a href="#{i}" id={i}>{sentence}</a>'
                for i, sentence in enumerate(text.split("\n"), start=1)
            ]
            html = (
                '<html>\n<head>\n<title>dummy title</title>\n</head>\n<body bgcolor="white">\n'
                + "\n".join(elements)
                + "\n</body>\n</html>"
            )
            (folder / f"{index}.html").write_text(html.lower() if lower_files else html, encoding="utf-8")
    evals = []
    for index in range(len(candidates)):
        evals.append(
            f'<EVAL ID="{index + 1}"><MODEL-ROOT>{root / "model"}</MODEL-ROOT><PEER-ROOT>{root / "system"}</PEER-ROOT>'
            f'<INPUT-FORMAT TYPE="SEE"></INPUT-FORMAT><PEERS><P ID="1">{index}.html</P></PEERS>'
            f'<MODELS><M ID="A">{index}.html</M></MODELS></EVAL>'
        )
    config = root / "settings.xml"
    config.write_text('<ROUGE-EVAL version="1.0">\n' + "\n".join(evals) + "\n</ROUGE-EVAL>\n", encoding="utf-8")
    command = ["perl", rouge155.rouge155_script(), "-e", rouge155.ensure_data_dir(), *options, str(config)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def _output_to_dict(output):
    """pyrouge's Rouge155.output_to_dict."""
    pattern = re.compile(r"(\d+) (ROUGE-\S+) (Average_\w): (\d.\d+) \(95%-conf.int. (\d.\d+) - (\d.\d+)\)")
    results = {}
    for line in output.split("\n"):
        match = pattern.match(line)
        if match:
            _, rouge_type, measure, result, _, _ = match.groups()
            measure = {"Average_R": "recall", "Average_P": "precision", "Average_F": "f_score"}[measure]
            results[f"{rouge_type.lower().replace('-', '_')}_{measure}"] = float(result)
    return results


def _preset(name):
    return score_with_convention(HYPOTHESES, [[r] for r in REFERENCES], CONVENTIONS[name])


@needs_perl
def test_hiersumm_preset_equals_hiersumm_scoring(tmp_path):
    # predictor_builder.py:146-149: <Q> -> space (one line), gold lower-cased; cal_rouge.py:24-38 writes each
    # as cand.i / ref.i and calls convert_and_evaluate() (no splitting); my_pyrouge.py:539-551 options
    candidates = [" ".join(h.split()) for h in HYPOTHESES]
    gold = [" ".join(r.split()).lower() for r in REFERENCES]
    output = _pyrouge_run(
        tmp_path, candidates, gold, ["-c", "95", "-m", "-r", "1000", "-n", "2", "-a"], lower_files=True
    )
    theirs = _output_to_dict(output)
    ours = _preset("hiersumm")
    assert set(k for k in ours if k.startswith("rouge")) == {"rouge-1", "rouge-2", "rouge-l"}
    for metric, key in (("rouge-1", "rouge_1"), ("rouge-2", "rouge_2"), ("rouge-l", "rouge_l")):
        assert ours[metric]["f"] == theirs[f"{key}_f_score"], metric
        assert ours[metric]["r"] == theirs[f"{key}_recall"], metric


@needs_perl
def test_pagesum_preset_equals_pagesum_cal_rouge(tmp_path, sent_tokenize):
    # cal_rouge.py:57-73 with -l: lower-case, one nltk sentence per line; :20 and :31-34 options; :37-39 reads
    # output lines 3, 7 and 11 (the F of ROUGE-1, ROUGE-2, ROUGE-L)
    def prepare(text):
        return "\n".join(nltk.sent_tokenize(text.strip().lower()))

    output = _pyrouge_run(
        tmp_path,
        [prepare(h) for h in HYPOTHESES],
        [prepare(r) for r in REFERENCES],
        ["-c", "95", "-r", "1000", "-n", "2", "-m", "-a"],
    )
    r_1 = float(output.split("\n")[3].split(" ")[3])
    r_2 = float(output.split("\n")[7].split(" ")[3])
    r_l = float(output.split("\n")[11].split(" ")[3])
    ours = _preset("pagesum")
    assert (ours["rouge-1"]["f"], ours["rouge-2"]["f"], ours["rouge-lsum"]["f"]) == (r_1, r_2, r_l)
    assert "rouge-l" not in ours  # PageSum's R-L is summary-level: mdsfair's R-Lsum
    # the split matters: one line per summary gives another R-L
    single = _pyrouge_run(
        tmp_path / "single",
        [h.lower() for h in HYPOTHESES],
        [r.lower() for r in REFERENCES],
        ["-c", "95", "-r", "1000", "-n", "2", "-m", "-a"],
    )
    assert float(single.split("\n")[11].split(" ")[3]) != r_l


@needs_perl
@pytest.mark.parametrize(
    "name, options, key",
    [
        ("sparse", ["-c", "95", "-2", "-1", "-U", "-r", "1000", "-n", "4", "-w", "1.2", "-a"], "rouge_l_f_score"),
        (
            "ma2022",
            ["-c", "95", "-2", "-1", "-U", "-r", "1000", "-n", "4", "-w", "1.2", "-a", "-m"],
            "rouge_su*_f_score",
        ),
    ],
)
def test_pyrouge_default_presets_equal_pyrouge(tmp_path, name, options, key):
    # sparse: decode.py:103-105 writes each summary as it is, scored by pyrouge with its defaults
    # (Rouge155.py:520-530); ma2022: the options of its paper's footnote 3
    output = _pyrouge_run(tmp_path, HYPOTHESES, REFERENCES, options)
    theirs = _output_to_dict(output)
    ours = _preset(name)
    assert ours["rouge-1"]["f"] == theirs["rouge_1_f_score"]
    assert ours["rouge-2"]["f"] == theirs["rouge_2_f_score"]
    metric = "rouge-l" if name == "sparse" else "rouge-su*"
    assert ours[metric]["f"] == theirs[key]
    if name == "sparse":  # no stemming: differs from the stemmed hiersumm run on this fixture
        assert ours["rouge-1"]["f"] != _preset("hiersumm")["rouge-1"]["f"]


@pytest.mark.parametrize("name", ["hierencdec", "led-hierencdec"])
def test_hierencdec_presets_equal_their_rouge_metric(name, sent_tokenize):
    """run_summarization.py:680-688 / finetune_led.py:522-530, then rouge/rouge.py:84-108
    (rouge1, rouge2, rougeL; use_stemmer=True) and BootstrapAggregator's mid."""
    import numpy as np
    from rouge_score import rouge_scorer, scoring

    preds = ["\n".join(nltk.sent_tokenize(p.strip())) for p in HYPOTHESES]
    labels = ["\n".join(nltk.sent_tokenize(label.strip())) for label in REFERENCES]
    scorer = rouge_scorer.RougeScorer(rouge_types=["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    aggregator = scoring.BootstrapAggregator()
    per_example = []
    for ref, pred in zip(labels, preds):
        score = scorer.score(ref, pred)
        aggregator.add_scores(score)
        per_example.append(score)
    np.random.seed(0)
    result = aggregator.aggregate()
    ours = _preset(name)
    for metric, key in (("rouge-1", "rouge1"), ("rouge-2", "rouge2"), ("rouge-l", "rougeL")):
        assert ours["per_cluster"][metric]["f"] == [s[key].fmeasure for s in per_example]
        mean = float(np.mean([s[key].fmeasure for s in per_example]))
        assert ours[metric]["f"] == pytest.approx(mean, rel=1e-12)
        # the authors' mid: the median of 1,000 bootstrap means, the mean up to Monte-Carlo error
        spread = result[key].high.fmeasure - result[key].low.fmeasure
        assert abs(result[key].mid.fmeasure - ours[metric]["f"]) <= spread / 10


def test_primera_preset_equals_primer_main():
    """primer_main.py:236-255 (per example; datasets' rouge with its default rouge_types and
    use_stemmer=True) and :286-287 (mean over examples)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    rows = []
    for ref, pred in zip(REFERENCES, HYPOTHESES):
        s = scorer.score(ref, pred)
        rows.append(
            [
                getattr(s[k], m)
                for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")
                for m in ("recall", "precision", "fmeasure")
            ]
        )
    means = [sum(column) / len(rows) for column in zip(*rows)]
    ours = _preset("primera")
    flat = [ours[m][x] for m in ("rouge-1", "rouge-2", "rouge-l", "rouge-lsum") for x in "rpf"]
    assert flat == pytest.approx(means, rel=1e-12, abs=1e-15)
    # no newline in these texts: rougeLsum = rougeL, as in PRIMERA's Multi-News numbers
    assert ours["rouge-lsum"]["f"] == pytest.approx(ours["rouge-l"]["f"], rel=1e-12)


def test_every_preset_cites_its_sources_and_refuses_several_references():
    for name in PRESET_NAMES:
        convention = CONVENTIONS[name]
        assert convention.sources and all(":" in source for source in convention.sources), name
        assert name in convention.describe()
    from mdsfair.evaluation.inputs import RougeInputError

    with pytest.raises(RougeInputError, match="scores one reference per cluster"):
        score_with_convention(HYPOTHESES[:1], [["a", "b"]], CONVENTIONS["primera"])


def test_convention_through_score_files(tmp_path):
    hyp = tmp_path / "hyp.txt"
    ref = tmp_path / "ref.txt"
    hyp.write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    result = score_files(str(hyp), str(ref), convention="primera", per_cluster=True)
    assert result["info"]["convention"] == "primera"
    assert result["rouge-1"]["f"] == _preset("primera")["rouge-1"]["f"]
