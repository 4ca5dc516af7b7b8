"""Tests of mdsfair.evaluation: official ROUGE-1.5.5 wrapper, fast scorer, SU4,
multi-reference scoring, fairseq-generate parsing and the mdsfair-rouge CLI."""

import json
import os
import subprocess

import pytest

from mdsfair.evaluation import rouge155
from mdsfair.evaluation.fairseq_output import decode_sentencepiece, read_generate_output
from mdsfair.evaluation.fast_rouge import FastRougeScorer, rouge_su, skip_bigram_unigram_counts
from mdsfair.evaluation.file_scoring import score_files
from mdsfair.evaluation.hypotheses import load_hypotheses_and_references
from mdsfair.evaluation.inputs import RougeInputError
from mdsfair.evaluation.rouge import cli_main
from mdsfair.evaluation.scoring import METRICS, score, score_sentences
from mdsfair.text import split_sentences

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "evaluation")
PAIR_HYP = os.path.join(FIXTURES, "pair_hyp.txt")
PAIR_REF = os.path.join(FIXTURES, "pair_ref.txt")
HYP = os.path.join(FIXTURES, "hyp.txt")
REF = os.path.join(FIXTURES, "ref.txt")
REF2 = os.path.join(FIXTURES, "ref2.txt")
GENERATE_LOG = os.path.join(FIXTURES, "generate.log")
GENERATE_GPT2_LOG = os.path.join(FIXTURES, "generate_gpt2.log")
GPT2_ENCODER = os.path.join(FIXTURES, "gpt2_encoder.json")
GPT2_VOCAB = os.path.join(FIXTURES, "gpt2_vocab.bpe")


def _perl_ready() -> bool:
    try:
        rouge155.check_perl()
        rouge155.rouge155_home()
    except rouge155.RougeDependencyError:
        return False
    return True


needs_perl = pytest.mark.skipif(
    not _perl_ready(), reason="perl with XML::DOM and DB_File (apt-get install libxml-dom-perl) is not installed"
)


@pytest.fixture(scope="module", autouse=True)
def rouge_data_dir(tmp_path_factory):
    """Build the ROUGE-1.5.5 data directory (WordNet DB) in a temporary place."""
    data_dir = str(tmp_path_factory.mktemp("rouge-data"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MDSFAIR_ROUGE_DATA", data_dir)
        yield data_dir


# Numbers printed by the official script for the fixed pair
# tests/fixtures/evaluation/pair_{hyp,ref}.txt. Obtained by hand, once, without
# any mdsfair code: the sentence-split and single-line SPL files under
# fixtures/evaluation/perl_by_hand/ were written by hand, a one-EVAL config
# (PEERS: peer.spl, MODELS: model.spl, INPUT-FORMAT SPL) pointed at each folder,
# the data dir held smart_common_words.txt and the WordNet DB built with
# `buildExeptionDB.pl . exc WordNet-2.0.exc.db`, and then
#   perl ROUGE-1.5.5.pl -e DATA -c 95 -r 1000 -n 2 -a -m -2 4 -u split.xml
#   perl ROUGE-1.5.5.pl -e DATA -c 95 -r 1000 -a -m single_line.xml
# printed these Average_R/P/F values (rouge-lsum is the ROUGE-L line of the
# first run, rouge-l the ROUGE-L line of the second).
PERL_PAIR_SCORES = {
    "rouge-1": {"r": 0.50000, "p": 0.73333, "f": 0.59459},
    "rouge-2": {"r": 0.23810, "p": 0.35714, "f": 0.28572},
    "rouge-l": {"r": 0.40909, "p": 0.60000, "f": 0.48649},
    "rouge-lsum": {"r": 0.50000, "p": 0.73333, "f": 0.59459},
    "rouge-su4": {"r": 0.24138, "p": 0.37838, "f": 0.29474},
}


def _run_perl_by_hand(folder: str, options, tmp_path):
    """Run ROUGE-1.5.5.pl directly on a hand-written SPL pair; parse Average lines."""
    root = os.path.join(FIXTURES, "perl_by_hand", folder)
    config = tmp_path / f"{folder}.xml"
    config.write_text(
        '<ROUGE-EVAL version="1.5.5"><EVAL ID="1">'
        f"<MODEL-ROOT>{root}</MODEL-ROOT><PEER-ROOT>{root}</PEER-ROOT>"
        '<INPUT-FORMAT TYPE="SPL"></INPUT-FORMAT>'
        '<PEERS><P ID="1">peer.spl</P></PEERS><MODELS><M ID="A">model.spl</M></MODELS>'
        "</EVAL></ROUGE-EVAL>\n"
    )
    command = ["perl", rouge155.rouge155_script(), "-e", rouge155.ensure_data_dir(), *options, str(config)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return rouge155.parse_output(output)


@needs_perl
def test_hand_run_perl_prints_the_recorded_numbers(tmp_path):
    split = _run_perl_by_hand("split", ["-c", "95", "-r", "1000", "-n", "2", "-a", "-m", "-2", "4", "-u"], tmp_path)
    single = _run_perl_by_hand("single_line", ["-c", "95", "-r", "1000", "-a", "-m"], tmp_path)
    printed = {
        "rouge-1": split["ROUGE-1"],
        "rouge-2": split["ROUGE-2"],
        "rouge-lsum": split["ROUGE-L"],
        "rouge-su4": split["ROUGE-SU4"],
        "rouge-l": single["ROUGE-L"],
    }
    for metric, expected in PERL_PAIR_SCORES.items():
        for measure, value in expected.items():
            assert printed[metric][measure] == value, (metric, measure)


@needs_perl
def test_official_wrapper_reproduces_hand_run_numbers():
    result = score_files(PAIR_HYP, PAIR_REF)
    assert result["info"]["scorer"] == "ROUGE-1.5.5"
    for metric, expected in PERL_PAIR_SCORES.items():
        for measure, value in expected.items():
            assert result[metric][measure] == value, (metric, measure)
    # files2rouge defaults, plus -2 4 -u for SU4.
    arguments = result["info"]["rouge_args_sentence_split"]
    for option in ("-c 95", "-r 1000", "-n 2", "-2 4"):
        assert option in " ".join(arguments)
    assert "-m" in arguments and "-a" in arguments


@needs_perl
def test_rouge_l_is_whole_summary_lcs_and_lsum_is_summary_level():
    # Same sentences in swapped order: summary-level LCS is perfect, plain LCS is not.
    result = score(
        ["The dog barked loudly. The cat sat on the mat."], ["The cat sat on the mat. The dog barked loudly."]
    )
    assert result["rouge-1"]["f"] == 1.0
    assert result["rouge-lsum"]["f"] == 1.0
    assert result["rouge-l"]["f"] < 0.7
    fast = score(
        ["The dog barked loudly. The cat sat on the mat."],
        ["The cat sat on the mat. The dog barked loudly."],
        fast=True,
    )
    assert fast["rouge-lsum"]["f"] == pytest.approx(1.0)
    assert fast["rouge-l"]["f"] == pytest.approx(result["rouge-l"]["f"], abs=1e-5)


@needs_perl
def test_fast_matches_official_within_tolerance():
    """Fast and official scores on the 5-cluster fixture.

    Without stemming every per-cluster score agrees to 2e-5: same tokenization,
    and the script rounds each cluster's R/P/F to 5 decimals (F from the
    rounded R and P). The averages then differ by at most 0.5 points: the
    script's "Average" is the mean of 1000 bootstrap-resample means, not the
    plain mean.

    With stemming (the default) the tolerance is 2 points: ROUGE-1.5.5 maps
    irregular forms through WordNet exception lists and uses its own Porter
    stemmer, rouge-score uses NLTK's Porter stemmer (about 4% of the word types
    of real summaries stem differently). On this tiny set one irregular form
    ("shot" -> "shoot" matching "shooting" in cluster 0) moves the R-1 mean by
    1.3 points; on the 674 MReD test clusters (lead-120 summaries) the largest
    mean difference was 0.25 points.
    """
    for stemming, per_cluster_tolerance, mean_tolerance in ((False, 2e-5, 0.005), (True, None, 0.02)):
        official = score_files(HYP, REF, stemming=stemming, per_cluster=True)
        fast = score_files(HYP, REF, fast=True, stemming=stemming, per_cluster=True)
        for metric in METRICS:
            for measure in "rpf":
                assert fast[metric][measure] == pytest.approx(official[metric][measure], abs=mean_tolerance)
                if per_cluster_tolerance is not None:
                    assert fast["per_cluster"][metric][measure] == pytest.approx(
                        official["per_cluster"][metric][measure], abs=per_cluster_tolerance
                    )


def test_skip_bigram_units_follow_rouge155():
    units = skip_bigram_unigram_counts(list("abcdefg"), max_gap=4)
    # The script counts no unigram for the last token.
    assert ("g",) not in units and ("f",) in units
    assert ("a", "f") in units and ("a", "g") not in units  # at most 4 tokens between
    assert sum(units.values()) == 6 + (5 + 5 + 4 + 3 + 2 + 1)
    assert skip_bigram_unigram_counts(["alone"]) == {}
    recall, precision, f1 = rouge_su(["a", "b", "c"], ["a", "b", "c"])
    assert (recall, precision, f1) == (1.0, 1.0, 1.0)


@needs_perl
def test_python_su4_matches_perl_per_cluster():
    """Our ROUGE-SU4 against the script's -2 4 -u on every fixture cluster.

    Stemming is off so both sides see identical tokens; the only difference
    left is the script's rounding of each value to 5 decimals.
    """
    hypotheses = [split_sentences(line) for line in open(HYP, encoding="utf-8").read().splitlines()]
    references = [[split_sentences(line)] for line in open(REF, encoding="utf-8").read().splitlines()]
    # Add clusters that stress the skip window and repeated words.
    hypotheses += [["a b a b a b c"], ["one"], ["x y z"]]
    references += [[["a b c a b c"]], [["one two"]], [["z y x"]]]
    official = score_sentences(hypotheses, references, stemming=False, per_cluster=True)
    scorer = FastRougeScorer(stemming=False)
    for index, (hypothesis, cluster_references) in enumerate(zip(hypotheses, references)):
        tokens = scorer.tokenize(" ".join(hypothesis))
        reference_tokens = scorer.tokenize(" ".join(cluster_references[0]))
        expected = rouge_su(tokens, reference_tokens)
        for position, measure in enumerate("rpf"):
            assert official["per_cluster"]["rouge-su4"][measure][index] == pytest.approx(
                expected[position], abs=2e-5
            ), (index, measure)


@needs_perl
def test_multi_reference_pooling_best_and_fast_max():
    hypotheses = ["the cat sat", "a dog ran home"]
    references = [["the cat ran", "a dog sat"], ["a dog ran home"]]
    average = score(hypotheses, references, stemming=False, per_cluster=True)
    # -f A pools counts: hits 2 (ref 1) + 1 (ref 2) over 3 + 3 model unigrams.
    assert average["per_cluster"]["rouge-1"]["r"][0] == 0.5
    assert average["per_cluster"]["rouge-1"]["p"][0] == 0.5
    best = score(hypotheses, references, stemming=False, per_cluster=True, multi_ref_mode="best")
    assert best["per_cluster"]["rouge-1"]["r"][0] == 0.66667
    fast = score(hypotheses, references, fast=True, stemming=False, per_cluster=True)
    assert fast["per_cluster"]["rouge-1"]["f"][0] == pytest.approx(2 / 3)
    assert fast["info"]["multi_ref_mode"] == "best-f1"
    # Several reference files: an empty line means "no reference in this file".
    files = score_files(HYP, [REF, REF2], fast=True, per_cluster=True)
    single = score_files(HYP, REF, fast=True, per_cluster=True)
    assert files["info"]["max_references_per_hypothesis"] == 2
    for metric in METRICS:
        for new, old in zip(files["per_cluster"][metric]["f"], single["per_cluster"][metric]["f"]):
            assert new >= old - 1e-12
    assert files["per_cluster"]["rouge-1"]["f"][1] == single["per_cluster"]["rouge-1"]["f"][1]


def test_input_errors_name_files_and_counts(tmp_path):
    short_ref = tmp_path / "short.txt"
    short_ref.write_text("only one line\n")
    with pytest.raises(RougeInputError, match=r"hyp\.txt has 5 hypotheses but .*short\.txt has 1 lines"):
        score_files(HYP, str(short_ref), fast=True)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(RougeInputError, match=r"empty\.txt is empty \(0 lines\)"):
        score_files(str(empty), REF, fast=True)
    blank_ref = tmp_path / "blank_ref.txt"
    blank_ref.write_text("a\n\nc\nd\ne\n")
    with pytest.raises(RougeInputError, match=r"blank_ref\.txt:2: empty reference"):
        score_files(HYP, str(blank_ref), fast=True)
    with pytest.raises(RougeInputError, match="REF file is required"):
        score_files(HYP, fast=True)


def test_empty_hypothesis_is_counted_and_warned(caplog):
    with caplog.at_level("WARNING"):
        result = score_files(HYP, REF, fast=True, per_cluster=True)
    assert result["info"]["num_empty_hypotheses"] == 1
    assert result["per_cluster"]["rouge-1"]["f"][3] == 0.0
    assert "1 of 5 hypotheses are empty" in caplog.text


def test_read_generate_output_sorts_prefers_d_and_decodes_sentencepiece():
    ids, hypotheses, targets = read_generate_output(GENERATE_LOG)
    assert ids == [0, 1, 2, 10]
    assert hypotheses == [
        "Police killed the gunman on Tuesday.",  # H- only, SentencePiece joined
        "",  # empty hypothesis
        "Shares rose sharply.",  # first (best) D- of an nbest list
        "Heavy rain flooded the region.",  # D- preferred over H-
    ]
    assert targets[0] == "The gunman was shot dead by police on Tuesday."
    assert targets[3] == "Rain flooded the region."  # T- still in pieces, joined
    pieces = "\u2581Heavy \u2581rain \u2581flood ed \u2581the \u2581region ."
    assert decode_sentencepiece(pieces) == "Heavy rain flooded the region."


def test_read_generate_output_decodes_gpt2_ids():
    ids, hypotheses, targets = read_generate_output(GENERATE_GPT2_LOG, GPT2_ENCODER, GPT2_VOCAB)
    assert ids == [0, 1]
    assert hypotheses == ["The cat sat on the mat.", "The dog sat on the mat."]
    assert targets == ["The cat sat on the mat.", "The dog sat."]


def test_score_generate_log_against_its_targets_only_when_asked_and_complete():
    # No data-bin named in the log and no REF: refused (T- lines are cut targets).
    with pytest.raises(RougeInputError, match="does not name its data-bin"):
        score_files(GENERATE_LOG, fast=True)
    # ids 0, 1, 2, 10: clusters 3..9 have no hypothesis.
    with pytest.raises(RougeInputError, match=r"no hypothesis for 7 of 11 clusters \(ids 3, 4, 5, 6, 7, 8, 9\)"):
        score_files(GENERATE_LOG, fast=True, target_lines=True, expected=11)
    with pytest.raises(RougeInputError, match="--expected N"):
        score_files(GENERATE_LOG, fast=True, target_lines=True)


def test_sentence_separator_marker_is_removed():
    assert split_sentences("first part <q> second part", separator="<q>") == ["first part", "second part"]
    result = score(["alpha beta<q>gamma delta"], ["alpha beta gamma delta"], fast=True, sentence_separator="<q>")
    assert result["rouge-1"]["f"] == pytest.approx(1.0)


def test_rule_based_sentence_splitter():
    text = 'Mr. Smith met the U.S. team in Jan. 2020. "It went well," he said. Was it? Yes!'
    assert split_sentences(text) == [
        "Mr. Smith met the U.S. team in Jan. 2020.",
        '"It went well," he said.',
        "Was it?",
        "Yes!",
    ]
    assert split_sentences("the cat sat . the dog ran .") == ["the cat sat .", "the dog ran ."]


def test_missing_perl_module_error_names_the_package(monkeypatch):
    rouge155.check_perl.cache_clear()
    monkeypatch.setattr(rouge155.shutil, "which", lambda name: None)
    try:
        with pytest.raises(rouge155.RougeDependencyError, match="apt-get install perl libxml-dom-perl"):
            rouge155.check_perl()
    finally:
        rouge155.check_perl.cache_clear()


@needs_perl
def test_cli_official_table_and_json(tmp_path, capsys):
    out_json = tmp_path / "scores.json"
    assert cli_main([PAIR_HYP, PAIR_REF, "--json", str(out_json), "--measure", "all"]) == 0
    table = capsys.readouterr().out
    assert "R-1" in table and "R-Lsum" in table and "R-SU4" in table
    assert "59.46" in table and "48.65" in table  # F1 of R-1 and R-L, x100
    saved = json.loads(out_json.read_text())
    assert saved["rouge-su4"]["f"] == PERL_PAIR_SCORES["rouge-su4"]["f"]


def test_cli_fast_several_refs_and_errors(tmp_path, capsys):
    assert cli_main([HYP, "--ref", REF, "--ref", REF2, "--fast", "--measure", "r"]) == 0
    assert "recall" in capsys.readouterr().out
    short_ref = tmp_path / "short.txt"
    short_ref.write_text("x\n")
    with pytest.raises(SystemExit) as exit_info:
        cli_main([HYP, str(short_ref), "--fast"])
    assert exit_info.value.code == 2
    assert "short.txt has 1 lines" in capsys.readouterr().err


def _gpt2_data_bin(tmp_path, with_files=True):
    """A data-bin holding what mdsfair-preprocess --subword gpt2 writes for
    scoring: the manifest's subword entry, the GPT-2 files, the references."""
    import shutil

    data_bin = tmp_path / "data-bin"
    data_bin.mkdir(parents=True)
    subword = {"type": "gpt2"}
    if with_files:
        shutil.copy(GPT2_ENCODER, data_bin / "encoder.json")
        shutil.copy(GPT2_VOCAB, data_bin / "vocab.bpe")
        subword.update(encoder_json="encoder.json", vocab_bpe="vocab.bpe")
    manifest = {"subword": subword, "splits": {"test": {"clusters": 2}}}
    (data_bin / "mdsfair.json").write_text(json.dumps(manifest), encoding="utf-8")
    (data_bin / "test.summary.txt").write_text("The cat sat on the mat.\nThe dog sat on the mat.\n", encoding="utf-8")
    return str(data_bin)


def test_gpt2_ids_in_a_log_are_decoded_with_the_data_bins_files_or_refused(tmp_path):
    """A generate log of GPT-2 ids (fairseq-generate without --bpe gpt2) once
    scored 0.00 with only a warning: with --data-bin of a GPT-2 data-bin it is
    decoded with that data-bin's encoder.json / vocab.bpe; where nothing can
    decode it, it is refused."""
    hypotheses, references = load_hypotheses_and_references(
        GENERATE_GPT2_LOG, data_bin=_gpt2_data_bin(tmp_path), split="test"
    )
    assert hypotheses == ["The cat sat on the mat.", "The dog sat on the mat."]
    assert references == [["The cat sat on the mat."], ["The dog sat on the mat."]]
    result = score_files(GENERATE_GPT2_LOG, data_bin=str(tmp_path / "data-bin"), split="test", fast=True)
    assert result["rouge-1"]["f"] == pytest.approx(1.0)
    with pytest.raises(RougeInputError, match="sequence of integers"):
        load_hypotheses_and_references(
            GENERATE_GPT2_LOG, data_bin=_gpt2_data_bin(tmp_path / "b", with_files=False), split="test"
        )


# --- issue 33: per-cluster scores and the reported aggregate ------------------------------------------------------


def _perl_bootstrap_indices(clusters: int, resamples: int):
    """The cluster positions ROUGE-1.5.5's bootstrapResampling draws: resample
    ``s`` calls ``srand(s)`` then ``int(rand(N))`` N times (positions in the
    script's instance list, which is ``sort keys``: the cluster ids sorted as
    strings)."""
    code = (
        f"for $s (0..{resamples - 1}) {{ srand($s); "
        f"print join(' ', map {{ int(rand({clusters})) }} 1..{clusters}), \"\\n\" }}"
    )
    output = subprocess.run(["perl", "-e", code], capture_output=True, text=True, check=True).stdout
    return [[int(x) for x in line.split()] for line in output.splitlines()]


@needs_perl
@pytest.mark.parametrize("multi_ref_mode", ["average", "best"])
def test_official_average_is_the_mean_of_its_bootstrap_means_not_the_plain_mean(multi_ref_mode):
    """ROUGE-1.5.5's Average_R/P/F is not the mean of the per-cluster scores
    it prints with -d: it is the mean, over its -r resamples, of each
    resample's mean (computeAverages: ``$resampleAvgROUGE_*``; resample s
    seeded with srand(s)), printed to 5 decimals, and the per-cluster scores
    are themselves rounded to 5 decimals (F from the rounded R and P). This
    holds for both multi-reference modes: -f A pools counts and -f B picks a
    reference *inside* each cluster's score; the averaging is the same (no
    jackknifing: ROUGE 1.4 removed it). Reproduced here exactly, with the
    script's own random draws; the plain mean differs from it by Monte-Carlo
    error only."""
    resamples = 50
    result = score_files(HYP, [REF, REF2], multi_ref_mode=multi_ref_mode, per_cluster=True, resamples=resamples)
    count = result["info"]["num_hypotheses"]
    order = sorted(range(count), key=str)  # the script's `sort keys %$ROUGEScores`
    draws = _perl_bootstrap_indices(count, resamples)
    for metric in METRICS:
        for measure in "rpf":
            values = result["per_cluster"][metric][measure]
            sorted_values = [values[i] for i in order]
            resample_means = [sum(sorted_values[i] for i in draw) / count for draw in draws]
            script_average = sum(resample_means) / resamples
            assert result[metric][measure] == pytest.approx(script_average, abs=5.1e-6), (metric, measure)
            plain = sum(values) / count
            spread = max(values) - min(values)
            # the bootstrap average moves away from the plain mean by about spread / sqrt(count * resamples)
            assert abs(result[metric][measure] - plain) <= 4 * spread / (count * resamples) ** 0.5 + 1e-5


@pytest.mark.parametrize("references", [[REF], [REF, REF2]])
def test_fast_average_is_exactly_the_mean_of_its_per_cluster_scores(references, tmp_path):
    """--fast (rouge-score, best F1 per metric with several references): the
    reported score is the plain float64 mean of the per-cluster scores, and
    the --per-cluster file holds exactly those scores."""
    from mdsfair.evaluation.per_cluster import read_per_cluster

    for suffix in ("jsonl", "csv"):
        out = tmp_path / f"clusters.{suffix}"
        json_out = tmp_path / "scores.json"
        args = [HYP, *references, "--fast", "--per-cluster", str(out), "--json", str(json_out)]
        assert cli_main(args) == 0
        reported = json.loads(json_out.read_text())
        records = read_per_cluster(str(out))
        assert [record["cluster"] for record in records] == list(range(5))
        for metric in METRICS:
            for measure in "rpf":
                values = [record[metric][measure] for record in records]
                assert values == reported["per_cluster"][metric][measure]
                assert reported[metric][measure] == pytest.approx(sum(values) / len(values), rel=1e-15, abs=1e-15)
    # two references improve some cluster, so the two runs differ (the check above can fail)
    if len(references) == 2:
        single = score_files(HYP, REF, fast=True)
        assert any(reported[m]["f"] > single[m]["f"] for m in METRICS)


def test_per_cluster_file_needs_jsonl_or_csv(capsys):
    with pytest.raises(SystemExit):
        cli_main([HYP, REF, "--fast", "--per-cluster", "clusters.txt"])
    assert "mdsfair-rouge: error: --per-cluster clusters.txt: the file name must end in .jsonl or .csv" in (
        capsys.readouterr().err
    )
