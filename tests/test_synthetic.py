"""Tests of the synthetic multi-document summarization data set (``mdsfair-synth``)."""

import json
import re

import pytest

from mdsfair.preprocess import synthetic, synthetic_clusters
from mdsfair.preprocess.synthetic import cli_main, write_dataset
from mdsfair.preprocess.synthetic_clusters import generate_clusters
from mdsfair.preprocess.synthetic_report import baseline_gap_report, dataset_statistics
from mdsfair.preprocess.synthetic_sentences import SLOT_ORDER, canonical_summary
from mdsfair.preprocess.synthetic_world import ENTITY_TYPES


def _mentions(text, phrase):
    return re.search(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", text, re.IGNORECASE) is not None


def _sentences(document):
    return [s for s in re.split(r"(?<=[.!?])\s+", document.strip()) if s]


@pytest.fixture(scope="module")
def clusters():
    return generate_clusters(60, seed=7, split="train", include_meta=True)


def test_same_seed_is_byte_identical(tmp_path):
    first = write_dataset(str(tmp_path / "a"), seed=3, train=20, valid=5, test=5)
    second = write_dataset(str(tmp_path / "b"), seed=3, train=20, valid=5, test=5)
    for split in ("train", "valid", "test"):
        with open(first[split], "rb") as a, open(second[split], "rb") as b:
            assert a.read() == b.read()


def test_different_seed_gives_different_data():
    assert generate_clusters(10, seed=1) != generate_clusters(10, seed=2)
    # Same world, different clusters.
    assert generate_clusters(10, seed=1) != generate_clusters(10, seed=2, world_seed=1)


def test_schema_of_every_line(tmp_path):
    paths = write_dataset(str(tmp_path), seed=5, train=15, valid=4, test=4)
    for split, path in paths.items():
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        for line in lines:
            record = json.loads(line)
            assert set(record) == {"id", "title", "documents", "summary"}
            assert isinstance(record["id"], str) and record["id"].startswith(f"synth-{split}-")
            assert isinstance(record["title"], str) and record["title"]
            assert isinstance(record["summary"], str) and record["summary"].endswith(".")
            assert record["summary"].startswith(record["title"] + " is ")
            assert isinstance(record["documents"], list) and len(record["documents"]) == 6
            for document in record["documents"]:
                assert isinstance(document, str) and document
                paragraphs = document.split("\n\n")
                assert 1 <= len(paragraphs) <= 3
                assert all(p.strip() == p and p and "\n" not in p for p in paragraphs)


def test_lengths_are_in_the_intended_range(clusters):
    stats = dataset_statistics(clusters)
    assert 250 <= stats["source_words"] <= 500
    assert 20 <= stats["summary_words"] <= 50


def test_every_summary_fact_appears_in_a_relevant_document(clusters):
    for cluster in clusters:
        meta = cluster["meta"]
        assert meta["facts"], cluster["id"]
        assert cluster["summary"] == canonical_summary(cluster["title"], meta["type"], meta["facts"])
        for slot, value in meta["facts"].items():
            assert _mentions(cluster["summary"], value)
            supporting = [
                d
                for d in meta["relevant_docs"]
                if any(
                    _mentions(s, cluster["title"]) and _mentions(s, value) for s in _sentences(cluster["documents"][d])
                )
            ]
            assert supporting, (cluster["id"], slot, value)
        noun = ENTITY_TYPES[meta["type"]].noun
        assert any(_mentions(cluster["documents"][d], f"{cluster['title']} {noun}") for d in meta["relevant_docs"])


def test_summary_states_each_fact_once_in_canonical_order(clusters):
    for cluster in clusters:
        facts = cluster["meta"]["facts"]
        assert list(facts) == [s for s in SLOT_ORDER if s in facts]
        positions = [cluster["summary"].find(facts[s]) for s in facts]
        assert positions == sorted(positions)
        for value in facts.values():
            assert len(re.findall(r"(?<![\w-])" + re.escape(value) + r"(?![\w-])", cluster["summary"])) == 1


def test_summary_sentences_are_not_copied_from_documents(clusters):
    for cluster in clusters:
        source = {s for d in cluster["documents"] for s in _sentences(d)}
        assert not source & set(_sentences(cluster["summary"]))


def test_distractor_documents_present_and_off_topic(clusters):
    for cluster in clusters:
        meta = cluster["meta"]
        assert len(meta["distractor_docs"]) == 2 and len(meta["relevant_docs"]) == 4
        for d in meta["distractor_docs"]:
            document = cluster["documents"][d]
            assert not _mentions(document, cluster["title"])
            for slot, value in meta["facts"].items():
                if slot != "category":
                    assert not _mentions(document, value), (cluster["id"], slot, value)
        # In-document distractors: relevant documents also name other entities.
        others = meta["distractor_entities"]
        assert any(_mentions(cluster["documents"][d], name) for d in meta["relevant_docs"] for name in others)


def test_facts_are_redundant_and_spread(clusters):
    for cluster in clusters:
        support = cluster["meta"]["fact_support"]
        assert any(len(docs) >= 2 for docs in support.values())
        assert len({d for docs in support.values() for d in docs}) >= 2
        # No single document holds every fact: fusion across documents is needed.
        for d in cluster["meta"]["relevant_docs"]:
            assert sum(d in docs for docs in support.values()) < len(support)
    mentions = [len(docs) for c in clusters for docs in c["meta"]["fact_support"].values()]
    assert sum(m >= 2 for m in mentions) / len(mentions) > 0.8


def test_splits_are_disjoint():
    splits = {s: generate_clusters(40, seed=11, split=s, include_meta=True) for s in ("train", "valid", "test")}
    ids = [c["id"] for clusters in splits.values() for c in clusters]
    assert len(ids) == len(set(ids))

    def signature(cluster):
        return (cluster["title"], tuple(sorted(cluster["meta"]["facts"].items())))

    train = {signature(c) for c in splits["train"]}
    assert not train & {signature(c) for c in splits["test"]}
    assert not train & {signature(c) for c in splits["valid"]}
    assert [c["summary"] for c in splits["train"]] != [c["summary"] for c in splits["test"]]
    # Split buckets make the separation hold for any sizes and seeds.
    for split, clusters in splits.items():
        for cluster in clusters:
            topic = {"name": cluster["title"], "facts": cluster["meta"]["facts"]}
            assert synthetic_clusters._signature_bucket(topic) in synthetic_clusters._SPLIT_BUCKETS[split]


def test_options_are_validated():
    with pytest.raises(TypeError):
        generate_clusters(1, seed=1, no_such_option=3)
    with pytest.raises(ValueError):
        generate_clusters(1, seed=1, num_docs=1, max_facts_per_doc=2, max_facts=6)
    with pytest.raises(ValueError):
        generate_clusters(1, seed=1, split="dev")


def test_options_change_the_shape():
    clusters = generate_clusters(
        10,
        seed=2,
        num_docs=3,
        distractor_docs=1,
        min_facts=3,
        max_facts=3,
        distractor_sentences=0,
        max_paragraphs=1,
        include_meta=True,
    )
    for cluster in clusters:
        assert len(cluster["documents"]) == 4
        assert len(cluster["meta"]["facts"]) == 3
        assert all("\n\n" not in d for d in cluster["documents"])


def test_cli_writes_three_files_with_requested_counts(tmp_path, capsys):
    out_dir = tmp_path / "synth"
    status = cli_main(["--out-dir", str(out_dir), "--seed", "4", "--train", "12", "--valid", "3", "--test", "5"])
    assert status == 0
    counts = {"train": 12, "valid": 3, "test": 5}
    for split, count in counts.items():
        path = out_dir / f"{split}.jsonl"
        assert len(path.read_text(encoding="utf-8").splitlines()) == count
    assert "train.jsonl" in capsys.readouterr().out


def test_cli_flags_have_help_strings():
    parser = synthetic.build_parser()
    for action in parser._actions:
        assert action.help, action.dest


def test_fact_oracle_far_above_extractive_baselines():
    """On 50 test clusters the canonical-fact systems beat Lead/LexRank by >= 40 ROUGE-2 points."""
    report = baseline_gap_report(50, seed=1, split="test")
    best_extractive = max(report["lead"]["rouge2"], report["lexrank"]["rouge2"])
    assert report["fact_oracle"]["rouge2"] >= best_extractive + 40
    assert report["noisy_model"]["rouge2"] >= best_extractive + 40
    assert report["template_only"]["rouge2"] >= best_extractive + 25
    assert report["noisy_model"]["rougeL"] >= max(report["lead"]["rougeL"], report["lexrank"]["rougeL"]) + 30
