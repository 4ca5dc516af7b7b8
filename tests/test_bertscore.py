"""BERTScore columns (mdsfair/evaluation/bertscore.py): the numbers are
bert-score's for the model folder and layer, checked against bert_score.score
called directly and against greedy matching of the model's hidden states
worked by hand; the columns flow through mdsfair-rouge and mdsfair-compare
(tables, --per-cluster, --json, --ci, --baseline); a missing model or package
is one line."""

import json
import os
import re
import sys

import pytest
import torch

from mdsfair.evaluation import compare, rouge
from mdsfair.evaluation.bertscore import DEFAULT_MODEL, bertscore, default_layer
from mdsfair.evaluation.local_models import ModelMetricError, local_model_folder
from tests.import_fixtures import import_transformers, write_tokenizer
from tests.utils import REPO_ROOT, run_python

LAYER = 2
HYPOTHESES = [
    "The council approved the budget on Tuesday.",
    "A storm hit the coast and homes lost power.",
    "Prices for coffee climbed again this week.",
]
REFERENCES = [
    ["The council approved the new budget on Tuesday. Critics said it cuts too much from schools."],
    ["A storm hit the coast overnight. Thousands of homes lost power.", "Roads were closed after the storm."],
    ["Prices for coffee, tea and cocoa climbed again this week, traders said."],
]


@pytest.fixture(scope="module")
def roberta_folder(tmp_path_factory):
    """A random 3-layer RoBERTa encoder and its byte-level BPE tokenizer, saved as a Hugging Face folder."""
    transformers = import_transformers()
    folder = str(tmp_path_factory.mktemp("tiny-roberta"))
    vocab = write_tokenizer(folder)
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=len(vocab),
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=40,
        max_position_embeddings=130,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    transformers.RobertaModel(config).save_pretrained(folder)
    tokenizer = transformers.RobertaTokenizer(
        os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"), model_max_length=128
    )
    tokenizer.save_pretrained(folder)
    return folder


def bertscore_flags(folder):
    """mdsfair-rouge's and mdsfair-compare's flags for BERTScore of the tiny model (with --fast ROUGE)."""
    return ["--fast", "--bertscore", "--bertscore-model", folder, "--bertscore-layer", str(LAYER)]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_per_cluster_scores_are_bert_score_for_the_folder_and_layer(roberta_folder):
    import bert_score

    scores, info = bertscore(HYPOTHESES, REFERENCES, roberta_folder, layer=LAYER)
    precision, recall, f1 = bert_score.score(HYPOTHESES, REFERENCES, model_type=roberta_folder, num_layers=LAYER)
    assert scores == {"p": precision.tolist(), "r": recall.tolist(), "f": f1.tolist()}
    assert info["layer"] == LAYER and info["model_folder"] == roberta_folder
    assert info["hash"].startswith(f"{roberta_folder}_L{LAYER}_no-idf")
    # another layer gives other numbers: the layer reaches the library
    other, _ = bertscore(HYPOTHESES, REFERENCES, roberta_folder, layer=1)
    assert other["f"] != scores["f"]


def test_scores_are_greedy_cosine_matching_of_the_layer_worked_by_hand(roberta_folder):
    """Zhang et al. Sec. 3: P = mean over hypothesis tokens of the best cosine
    with a reference token, R the other way round, F their harmonic mean; the
    means leave out <s> and </s> (weight 0 in bert-score), the best match may
    be one of them; several references: each measure's best."""
    transformers = import_transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(roberta_folder, use_fast=False)
    model = transformers.AutoModel.from_pretrained(roberta_folder).eval()

    def embeddings(text):
        ids = tokenizer.encode(text.strip(), add_prefix_space=True)
        with torch.no_grad():
            states = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[LAYER][0]
        states = states.double()
        return states / states.norm(dim=-1, keepdim=True)

    def by_hand(hypothesis, reference):
        similarity = embeddings(hypothesis) @ embeddings(reference).T
        precision = similarity.max(dim=1).values[1:-1].mean().item()
        recall = similarity.max(dim=0).values[1:-1].mean().item()
        return {"p": precision, "r": recall, "f": 2 * precision * recall / (precision + recall)}

    scores, _ = bertscore(HYPOTHESES, REFERENCES, roberta_folder, layer=LAYER)
    tolerance = 100 * torch.finfo(torch.float32).eps
    for index, (hypothesis, references) in enumerate(zip(HYPOTHESES, REFERENCES)):
        per_reference = [by_hand(hypothesis, reference) for reference in references]
        for measure in ("p", "r", "f"):
            expected = max(values[measure] for values in per_reference)
            assert scores[measure][index] == pytest.approx(expected, abs=tolerance)
    # the second cluster's two references really differ (the max is taken per measure)
    first, second = (by_hand(HYPOTHESES[1], reference) for reference in REFERENCES[1])
    assert first["f"] != pytest.approx(second["f"], abs=tolerance)


def test_default_model_and_layer_are_bert_scores_for_english_and_dape_reports_raw_scores():
    from bert_score.utils import lang2model, model2layers

    assert DEFAULT_MODEL == lang2model["en"] == "roberta-large"
    assert default_layer(DEFAULT_MODEL) == model2layers["roberta-large"] == 17
    assert default_layer("/models/roberta-large/") == 17
    assert default_layer("/models/my-encoder") is None
    # DAPE's Tables I and II: every BS value lies in [0.80, 0.85] (the bertscore.py docstring says so)
    paper = os.path.join(os.path.dirname(REPO_ROOT), "shared", "papers", "dape-linguistic-ma2022.txt")
    if not os.path.exists(paper):
        pytest.skip(f"{paper}: the paper's text is not in this checkout's shared folder")
    with open(paper, encoding="utf-8") as handle:
        text = handle.read()
    tables = re.findall(r"Models\tR-1\tR-2\tR-SU\tBS\n((?:[^\n]+\t[\d.]+\n)+)", text)
    values = [float(line.split("\t")[-1]) for table in tables for line in table.strip().split("\n")]
    assert len(tables) == 2 and len(values) == 22
    assert min(values) == 0.80 and max(values) == 0.85


def test_layer_beyond_the_model_and_unknown_model_without_layer_are_one_line(roberta_folder):
    with pytest.raises(ModelMetricError, match=r"--bertscore-layer 4: the model in .* has 3 layers"):
        bertscore(HYPOTHESES, REFERENCES, roberta_folder, layer=4)
    with pytest.raises(ModelMetricError, match="give the layer with --bertscore-layer N"):
        bertscore(HYPOTHESES, REFERENCES, roberta_folder)


def test_a_model_neither_a_folder_nor_cached_is_one_line(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelMetricError) as error:
        local_model_folder("roberta-large", "--bertscore-model")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("--bertscore-model roberta-large: no such folder, and no model of that id")
    assert str(tmp_path / "empty-cache") in message and "does not download" in message


def test_a_missing_package_is_one_line_naming_it(roberta_folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "bert_score", None)
    with pytest.raises(
        ModelMetricError,
        match=r"^--bertscore needs the Python package 'bert-score', .*"
        r"pip install bert-score$",
    ):
        bertscore(HYPOTHESES, REFERENCES, roberta_folder, layer=LAYER)


def test_mdsfair_rouge_adds_the_column_to_table_json_and_per_cluster(roberta_folder, tmp_path, capsys):
    import bert_score

    hyp = write_lines(tmp_path / "hyp.txt", HYPOTHESES)
    ref = write_lines(tmp_path / "ref.txt", [references[0] for references in REFERENCES])
    per_cluster = str(tmp_path / "clusters.jsonl")
    output = str(tmp_path / "scores.json")
    status = rouge.cli_main(
        [
            hyp,
            ref,
            *bertscore_flags(roberta_folder),
            "--per-cluster",
            per_cluster,
            "--json",
            output,
        ]
    )
    assert status == 0
    precision, recall, f1 = bert_score.score(
        HYPOTHESES, [references[0] for references in REFERENCES], model_type=roberta_folder, num_layers=LAYER
    )
    with open(per_cluster, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    assert [record["bertscore"] for record in records] == [
        {"r": r, "p": p, "f": f} for r, p, f in zip(recall.tolist(), precision.tolist(), f1.tolist())
    ]
    with open(output, encoding="utf-8") as handle:
        result = json.load(handle)
    assert result["bertscore"]["f"] == pytest.approx(f1.double().mean().item(), rel=1e-12)
    assert result["info"]["bertscore"]["layer"] == LAYER
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[-1] == "BS"
    assert float(table[1].split()[-1]) == round(100 * result["bertscore"]["f"], 2)


def test_mdsfair_compare_intervals_and_paired_tests_read_the_column(roberta_folder, tmp_path, capsys):
    hypotheses = HYPOTHESES * 4
    references = [[cluster[0]] for cluster in REFERENCES] * 4
    ref = write_lines(tmp_path / "ref.txt", [cluster[0] for cluster in references])
    first = write_lines(tmp_path / "a.txt", hypotheses)
    second = write_lines(tmp_path / "b.txt", hypotheses[1:] + hypotheses[:1])
    output = str(tmp_path / "compare.json")
    status = compare.cli_main(
        [
            "--ref",
            ref,
            *bertscore_flags(roberta_folder),
            "--ci",
            "--baseline",
            "good",
            "--samples",
            "200",
            "--json",
            output,
            f"good={first}",
            f"shifted={second}",
        ]
    )
    assert status == 0
    with open(output, encoding="utf-8") as handle:
        result = json.load(handle)
    expected, _ = bertscore(hypotheses, references, roberta_folder, layer=LAYER)
    assert result["systems"]["good"]["per_cluster"]["bertscore"] == expected
    good = next(row for row in result["rows"] if row["name"] == "good")
    low, high = good["ci"]["bertscore"]
    assert low <= good["scores"]["bertscore"] <= high and low < high
    assert result["tests"]["shifted"]["bertscore"]["delta"] < 0
    assert " BS" in capsys.readouterr().out


def test_mdsfair_rouge_missing_model_ends_with_one_error_line(tmp_path, capsys):
    hyp = write_lines(tmp_path / "hyp.txt", HYPOTHESES)
    missing = str(tmp_path / "no-model")
    with pytest.raises(SystemExit) as exit_info:
        rouge.cli_main([hyp, hyp, "--fast", "--bertscore", "--bertscore-model", missing + "/x/y"])
    assert exit_info.value.code == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mdsfair-rouge: error:")]
    assert len(error_lines) == 1 and "--bertscore-model" in error_lines[0] and "does not download" in error_lines[0]


@pytest.mark.slow
def test_mdsfair_rouge_in_a_fresh_process(roberta_folder, tmp_path):
    """The command as a user runs it: the BS column printed; a model that is
    neither a folder nor cached is one error line, no traceback."""
    hyp = write_lines(tmp_path / "hyp.txt", HYPOTHESES)
    ref = write_lines(tmp_path / "ref.txt", [references[0] for references in REFERENCES])
    done = run_python(["-m", "mdsfair.evaluation.rouge", hyp, ref, *bertscore_flags(roberta_folder)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split()[-1] == "BS"
    missing = run_python(
        ["-m", "mdsfair.evaluation.rouge", hyp, ref, "--fast", "--bertscore", "--bertscore-model", "no-org/no-model"],
        tmp_path,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    errors = [line for line in missing.stderr.splitlines() if line.startswith("mdsfair-rouge: error:")]
    assert len(errors) == 1 and "--bertscore-model no-org/no-model: no such folder" in errors[0]
