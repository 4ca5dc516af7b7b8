"""Tests of the extractive baselines (Lead, LexRank, greedy oracle) and mdsfair-baseline."""

import json
import statistics
from pathlib import Path

import pytest

from mdsfair.evaluation.baselines import BUDGET_PRESETS, cli_main
from mdsfair.evaluation.extractive_baselines import (
    cluster_sentences,
    greedy_oracle,
    lead,
    lexrank,
    read_clusters,
    reference_word_budget,
)
from mdsfair.lexrank import lexrank_scores
from mdsfair.raw_contract import InputFormatError

CENTRAL = "The earthquake damaged buildings, roads and bridges across the city."

# Three documents; the second document's first sentence shares words with the
# earthquake sentence of document 1 and with both sentences about damage, so it
# is the centre of the similarity graph.
CLUSTER = {
    "id": "quake",
    "title": "Earthquake",
    "documents": [
        "The earthquake struck the city at night. Local bakeries sold more bread than usual.\n\n"
        "The football club signed a new striker.",
        CENTRAL + " Many buildings collapsed.",
        "Roads and bridges were closed. A new museum exhibition opened on Friday.",
    ],
    "summary": "The earthquake damaged buildings, roads and bridges in the city.",
}


def test_sentences_follow_documents_and_paragraphs():
    assert cluster_sentences(CLUSTER) == [
        [
            "The earthquake struck the city at night.",
            "Local bakeries sold more bread than usual.",
            "The football club signed a new striker.",
        ],
        [CENTRAL, "Many buildings collapsed."],
        ["Roads and bridges were closed.", "A new museum exhibition opened on Friday."],
    ]


def test_lead_sentences_tokens_and_order():
    assert lead(CLUSTER, num_sentences=2) == [
        "The earthquake struck the city at night.",
        "Local bakeries sold more bread than usual.",
    ]
    assert lead(CLUSTER, num_sentences=4, order="round-robin") == [
        "The earthquake struck the city at night.",
        CENTRAL,
        "Roads and bridges were closed.",
        "Local bakeries sold more bread than usual.",
    ]
    assert lead(CLUSTER, num_tokens=10) == [
        "The earthquake struck the city at night.",
        "Local bakeries sold",
    ]
    assert lead(CLUSTER) == lead(CLUSTER, num_sentences=3)
    with pytest.raises(ValueError):
        lead(CLUSTER, num_sentences=2, num_tokens=5)


def test_lexrank_picks_the_central_sentence():
    sentences = [s for document in cluster_sentences(CLUSTER) for s in document]
    scores = lexrank_scores(sentences, threshold=0.1)
    assert sentences[max(range(len(sentences)), key=scores.__getitem__)] == CENTRAL
    assert lexrank(CLUSTER, num_sentences=1) == [CENTRAL]
    # Several sentences come back in document order.
    chosen = lexrank(CLUSTER, num_sentences=3)
    assert CENTRAL in chosen and len(chosen) == 3
    flat = [s for document in cluster_sentences(CLUSTER) for s in document]
    assert chosen == sorted(chosen, key=flat.index)


def test_lexrank_word_budget_and_redundancy():
    budgeted = lexrank(CLUSTER, max_words=12)
    assert sum(len(s.split()) for s in budgeted) == 12
    assert CENTRAL in budgeted
    duplicate = dict(CLUSTER, documents=CLUSTER["documents"] + [CENTRAL])
    without_removal = lexrank(duplicate, num_sentences=2)
    assert without_removal.count(CENTRAL) == 2
    with_removal = lexrank(duplicate, num_sentences=2, redundancy_threshold=0.5)
    assert with_removal.count(CENTRAL) == 1 and len(with_removal) == 2


def test_greedy_oracle_picks_the_obvious_sentence():
    assert greedy_oracle(CLUSTER) == [CENTRAL]
    summary = "The earthquake damaged buildings, roads and bridges. Many buildings collapsed."
    assert greedy_oracle(CLUSTER, summary=summary) == [CENTRAL, "Many buildings collapsed."]
    assert greedy_oracle(CLUSTER, summary=summary, max_sentences=1) == [CENTRAL]
    with pytest.raises(ValueError, match="no reference summary"):
        greedy_oracle({"id": "x", "documents": ["A sentence."]})


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def test_bad_jsonl_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(CLUSTER) + "\n\n" + '{"id": "broken", "documents": [\n')
    with pytest.raises(InputFormatError, match=r"bad\.jsonl:3: not valid JSON"):
        read_clusters(str(bad))
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"id": "a", "documents": ["x"]}) + "\n" + json.dumps({"id": "b"}) + "\n")
    with pytest.raises(InputFormatError, match=r"missing\.jsonl:2: missing key 'documents'"):
        read_clusters(str(missing))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"id": "a", "documents": "not a list"}) + "\n")
    with pytest.raises(InputFormatError, match=r"\.jsonl:1: 'documents' must be a list of strings"):
        read_clusters(str(wrong))


def test_cli_bad_line_exits_with_message(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(CLUSTER) + "\nnot json\n")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--method", "lead", str(bad), "-o", str(tmp_path / "out.txt")])
    assert exit_info.value.code == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_cli_writes_one_summary_per_line(tmp_path, capsys):
    second = {
        "id": "rain",
        "documents": ["Heavy rain flooded the valley. Residents left their homes.", "The river rose by two metres."],
        "summaries": ["Heavy rain flooded the valley.", "Residents fled as the river rose."],
    }
    source = _write_jsonl(tmp_path / "clusters.jsonl", [CLUSTER, second])
    output = tmp_path / "lead.txt"
    assert (
        cli_main(["--method", "lead", source, "-o", str(output), "--lead-sentences", "1", "--separator", " <q> "]) == 0
    )
    assert output.read_text().splitlines() == [
        "The earthquake struck the city at night.",
        "Heavy rain flooded the valley.",
    ]

    output = tmp_path / "lead_rr.txt"
    assert (
        cli_main(
            ["--method", "lead", source, "-o", str(output), "--lead-sentences", "2", "--lead-order", "round-robin"]
        )
        == 0
    )
    assert output.read_text().splitlines()[1] == "Heavy rain flooded the valley. The river rose by two metres."

    output = tmp_path / "lexrank.txt"
    assert cli_main(["--method", "lexrank", source, "-o", str(output), "--num-sentences", "1"]) == 0
    assert output.read_text().splitlines()[0] == CENTRAL

    output = tmp_path / "oracle.txt"
    capsys.readouterr()
    assert cli_main(["--method", "oracle", source, "-o", str(output), "--score", "fast"]) == 0
    lines = output.read_text().splitlines()
    assert lines[0] == CENTRAL and len(lines) == 2
    table = capsys.readouterr().out
    assert "R-1" in table and "R-SU4" in table and "rouge-score" in table


def test_cli_rejects_bad_flags(tmp_path):
    source = _write_jsonl(tmp_path / "clusters.jsonl", [CLUSTER])
    with pytest.raises(SystemExit):
        cli_main(
            ["--method", "lead", source, "-o", str(tmp_path / "o.txt"), "--lead-sentences", "2", "--lead-tokens", "5"]
        )
    with pytest.raises(SystemExit):
        cli_main(["--method", "lead", source, "-o", str(tmp_path / "o.txt"), "--separator", "\n"])


# ---------------------------------------------------------------------------
# Word budgets


def _cluster_words(cluster):
    return [word for document in cluster["documents"] for word in document.split()]


def test_lead_word_budget_is_exactly_the_first_words():
    words = _cluster_words(CLUSTER)
    assert len(words) == 46
    for budget in range(1, len(words) + 3):
        summary = lead(CLUSTER, num_tokens=budget)
        assert " ".join(summary).split() == words[:budget], budget
    # Cut at the word: 7 words is exactly sentence 1, 8 words adds the first word of sentence 2.
    assert lead(CLUSTER, num_tokens=7) == ["The earthquake struck the city at night."]
    assert lead(CLUSTER, num_tokens=8) == ["The earthquake struck the city at night.", "Local"]
    # Round-robin: the budget runs over sentence 1 of every document first (7 + 10 words, then 3 of the third).
    assert lead(CLUSTER, num_tokens=20, order="round-robin") == [
        "The earthquake struck the city at night.",
        CENTRAL,
        "Roads and bridges",
    ]
    # The title, when asked for, is the first unit of the reading order and counts against the budget.
    assert lead(CLUSTER, num_tokens=3, include_title=True) == ["Earthquake", "The earthquake"]
    assert lead(CLUSTER, num_sentences=1, include_title=True) == ["Earthquake"]
    assert lead({"id": "x", "documents": ["A b."]}, num_tokens=2, include_title=True) == ["A b."]


def test_lexrank_word_budget_is_exact():
    for budget in (1, 5, 11, 12, 30, 46):
        summary = lexrank(CLUSTER, max_words=budget)
        assert sum(len(sentence.split()) for sentence in summary) == budget, budget
    assert sum(len(s.split()) for s in lexrank(CLUSTER, max_words=500)) == 46


def test_reference_word_budget_is_the_reference_length():
    assert reference_word_budget(CLUSTER) == 10
    # Several references: the mean of their word counts, rounded half up ((4 + 5) / 2 = 4.5 -> 5).
    assert reference_word_budget({"id": "m", "documents": [], "summaries": ["a b c d", "a b c d e", " "]}) == 5
    with pytest.raises(ValueError, match="'none' has no reference summary"):
        reference_word_budget({"id": "none", "documents": ["Text."], "summary": "  "})


SECOND = {
    "id": "rain",
    "documents": ["Heavy rain flooded the valley. Residents left their homes.", "The river rose by two metres."],
    "summaries": ["Heavy rain flooded the valley.", "Residents fled as the river rose."],
}


def test_cli_budget_from_reference_is_labelled_an_oracle(tmp_path, capsys):
    source = _write_jsonl(tmp_path / "clusters.jsonl", [CLUSTER, SECOND])
    for method in ("lead", "lexrank"):
        output = tmp_path / f"{method}.txt"
        assert (
            cli_main(["--method", method, source, "-o", str(output), "--budget-from-reference", "--score", "fast"]) == 0
        )
        # CLUSTER's reference has 10 words; SECOND's two have 5 and 6 (mean 5.5 -> 6).
        assert [len(line.split()) for line in output.read_text().splitlines()] == [10, 6]
        captured = capsys.readouterr()
        assert "ORACLE LENGTH" in captured.err and "ORACLE LENGTH" in captured.out
    assert (tmp_path / "lead.txt").read_text().splitlines() == [
        "The earthquake struck the city at night. Local bakeries sold",
        "Heavy rain flooded the valley. Residents",
    ]


def test_cli_budget_from_reference_needs_a_reference(tmp_path, capsys):
    source = _write_jsonl(tmp_path / "clusters.jsonl", [CLUSTER, {"id": "unscored", "documents": ["A sentence."]}])
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--method", "lead", source, "-o", str(tmp_path / "o.txt"), "--budget-from-reference"])
    assert exit_info.value.code == 2
    assert "clusters.jsonl, cluster 'unscored': cluster 'unscored' has no reference summary" in capsys.readouterr().err


def test_cli_budget_preset_sets_the_word_budget(tmp_path, capsys):
    source = _write_jsonl(tmp_path / "clusters.jsonl", [CLUSTER, SECOND])
    assert BUDGET_PRESETS["wcep"].words == 40
    output = tmp_path / "lead.txt"
    assert cli_main(["--method", "lead", source, "-o", str(output), "--budget-preset", "wcep"]) == 0
    lines = output.read_text().splitlines()
    assert lines[0].split() == _cluster_words(CLUSTER)[:40]
    assert lines[1].split() == _cluster_words(SECOND)  # 14 words: all of them
    assert "(40 words (--budget-preset wcep))" in capsys.readouterr().err
    output = tmp_path / "lexrank.txt"
    assert cli_main(["--method", "lexrank", source, "-o", str(output), "--budget-preset", "wcep"]) == 0
    assert len(output.read_text().splitlines()[0].split()) == 40
    # The same length through the method's own flag gives the same summaries.
    same = tmp_path / "lexrank_max_words.txt"
    assert cli_main(["--method", "lexrank", source, "-o", str(same), "--max-words", "40"]) == 0
    assert same.read_text() == output.read_text()


@pytest.mark.parametrize(
    "flags",
    [
        ["--method", "lead", "--budget-preset", "multinews", "--lead-tokens", "5"],
        ["--method", "lead", "--budget-from-reference", "--lead-sentences", "2"],
        ["--method", "lexrank", "--budget-preset", "wcep", "--max-words", "5"],
        ["--method", "lexrank", "--budget-from-reference", "--num-sentences", "2"],
        ["--method", "oracle", "--budget-preset", "wcep"],
        ["--method", "lead", "--budget-preset", "wcep", "--budget-from-reference"],
        ["--method", "lead", "--budget-preset", "duc2004"],
    ],
)
def test_cli_rejects_conflicting_lengths(tmp_path, capsys, flags):
    source = _write_jsonl(tmp_path / "clusters.jsonl", [CLUSTER])
    with pytest.raises(SystemExit) as exit_info:
        cli_main(flags + [source, "-o", str(tmp_path / "o.txt")])
    assert exit_info.value.code == 2
    assert not (tmp_path / "o.txt").exists()


def _shared_dir():
    """The project's ../shared folder (beside the repository or a worktree's parents), or None."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "papers").is_dir():
            return parent / "shared"
    return None


SHARED = _shared_dir()


@pytest.mark.skipif(SHARED is None, reason="../shared (papers and data) not available")
def test_budget_presets_match_their_sources():
    papers = SHARED / "papers"
    dape = (papers / "dape-linguistic-ma2022.txt").read_text(encoding="utf-8")
    liu_lapata = (papers / "hiertransformer-liu-lapata2019.txt").read_text(encoding="utf-8")
    # Multi-News: mean reference length 263.66 words, as Ma et al. (2022) quote Fabbri et al. (2019).
    assert "The average length of the golden summaries is 263.66." in dape
    assert BUDGET_PRESETS["multinews"].words == round(263.66)
    # Multi-XScience: 116 (Ma et al. 2022; the dataset README gives 116.44).
    assert "an average length of 116 tokens on the summary" in dape
    assert BUDGET_PRESETS["multixscience"].words == round(116.44) == 116
    # WikiSum: 139.4 tokens (Liu & Lapata 2019, Sec. 4), and their Lead takes the reference length.
    assert "mary is 139.4 tokens." in liu_lapata
    assert "first k tokens; we set k to the length of the" in liu_lapata
    assert BUDGET_PRESETS["wikisum"].words == round(139.4)
    # PeerSum: the mean meta-review length of the shared sample.
    lengths = [
        len(json.loads(line)["summary"].split())
        for path in sorted((SHARED / "data" / "peersum_sample" / "jsonl").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").split("\n")
        if line.strip()
    ]
    assert len(lengths) == 90 and round(statistics.mean(lengths), 1) == 112.8
    assert BUDGET_PRESETS["peersum"].words == round(statistics.mean(lengths))
