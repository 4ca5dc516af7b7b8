"""Nothing silently wrong between the raw data and the numbers.

Stale splits in a re-used ``--destdir``; a training split with no valid line
before SentencePiece; multi-reference clusters (FewSum ``jsonl_multiref``)
trained on the first or each reference and all kept for ROUGE; a UTF-8 BOM in
the three raw readers; ``FILE:LINE: reason`` errors; the ``--skip-bad``
report file; the vocabulary SentencePiece really reached; PageSum page cuts
summed over every batch; repeated cluster ids.
"""

import json
import logging
import os
import shutil
from types import SimpleNamespace

import pytest

from mdsfair.preprocess.binarize import run
from tests.utils import SHARED_DATA

CLUSTERS = [
    {
        "id": "c0",
        "documents": [
            "The storm hit Calden on Monday. Power failed.\n\nRepairs began on Tuesday.",
            "Officials said repairs would take a week.",
        ],
        "summary": "A storm hit Calden. Repairs take a week.",
    },
    {
        "id": "c1",
        "documents": ["Mira Holt designed the bridge. It opened in 1987.", "The bridge is 340 metres long."],
        "summary": "Mira Holt designed the 340 metre bridge.",
    },
    {
        "id": "c2",
        "documents": ["The council approved a new park. Work starts in May."],
        "summary": "A park was approved.",
    },
]
FEWSUM_MULTIREF = os.path.join(SHARED_DATA, "fewsum", "amazon", "jsonl_multiref")
needs_fewsum = pytest.mark.skipif(not os.path.isdir(FEWSUM_MULTIREF), reason="shared data not present")


def write_jsonl(path, rows, raw_lines=(), bom=False):
    with open(path, "wb") as f:
        if bom:
            f.write(b"\xef\xbb\xbf")
        for row in rows:
            f.write((json.dumps(row) + "\n").encode("utf-8"))
        for line in raw_lines:
            f.write(line)
    return str(path)


def raw_dir(root, splits):
    raw = root / "raw"
    raw.mkdir(exist_ok=True)
    for name, rows in splits.items():
        write_jsonl(raw / f"{name}.jsonl", rows)
    return str(raw)


def preprocess(raw, dest, *extra):
    return run(["--input-dir", raw, "--destdir", str(dest), "--vocab-size", "60", "--no-progress-bar", *extra])


def manifest_of(dest):
    with open(os.path.join(dest, "mdsfair.json"), encoding="utf-8") as f:
        return json.load(f)


# ------------------------------------------------------------ 1. stale splits


def test_used_destdir_is_refused_without_overwrite(tmp_path, capsys):
    raw = raw_dir(tmp_path, {"train": CLUSTERS * 3, "valid": CLUSTERS})
    dest = tmp_path / "bin"
    preprocess(raw, dest)
    before = {name: os.path.getmtime(dest / name) for name in os.listdir(dest)}
    with pytest.raises(SystemExit) as info:
        preprocess(raw, dest)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert f"--destdir {dest} is not empty (it holds a data-bin" in err and "--overwrite" in err
    # Nothing was touched.
    assert {name: os.path.getmtime(dest / name) for name in os.listdir(dest)} == before


def test_overwrite_removes_what_the_new_manifest_does_not_list(tmp_path):
    raw = raw_dir(tmp_path, {"train": CLUSTERS * 3, "valid": CLUSTERS, "test": CLUSTERS})
    dest = tmp_path / "bin"
    preprocess(raw, dest, "--skip-bad")
    assert os.path.exists(dest / "valid.source.bin") and os.path.exists(dest / "train.skipped.txt")
    # Second run: a new vocabulary, no valid split, no --skip-bad; an input file inside the destdir stays.
    os.remove(os.path.join(raw, "valid.jsonl"))
    (dest / "notes.jsonl").write_text(json.dumps(CLUSTERS[0]) + "\n")
    (dest / "sub").mkdir()
    run(
        [
            "--input-dir",
            raw,
            "--split",
            f"extra={dest / 'notes.jsonl'}",
            "--destdir",
            str(dest),
            "--vocab-size",
            "70",
            "--no-progress-bar",
            "--overwrite",
        ]
    )
    manifest = manifest_of(dest)
    assert sorted(manifest["splits"]) == ["extra", "test", "train"]
    left = set(os.listdir(dest))
    assert left == set(manifest["files"]) | {"notes.jsonl", "sub"}
    assert not any(name.startswith("valid.") for name in left) and "train.skipped.txt" not in left
    for name in manifest["files"]:
        assert os.path.isfile(dest / name), name


def test_task_refuses_a_split_the_manifest_does_not_list(tmp_path):
    from mdsfair.data.manifest import UnlistedSplitError, require_listed_split

    raw = raw_dir(tmp_path, {"train": CLUSTERS * 3, "test": CLUSTERS})
    dest = tmp_path / "bin"
    preprocess(raw, dest)
    # A split left over by an earlier run: its files are there, the manifest does not list it.
    for name in os.listdir(dest):
        if name.startswith("test."):
            shutil.copyfile(dest / name, dest / name.replace("test.", "valid.", 1))
    assert require_listed_split(str(dest), "test")["clusters"] == 3
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(dest),
            "--user-dir",
            os.path.join(os.path.dirname(os.path.dirname(__file__)), "mdsfair"),
            "--task",
            "multidoc_summarization",
            "--arch",
            "transformer",
        ],
    )
    task = tasks.setup_task(args)
    task.load_dataset("test")
    assert len(task.datasets["test"]) == 3
    with pytest.raises(UnlistedSplitError) as info:
        task.load_dataset("valid")
    message = str(info.value)
    assert f"split 'valid' is not listed in {dest / 'mdsfair.json'} (listed: test, train)" in message
    assert "valid.source.bin is left over from an earlier mdsfair-preprocess run" in message
    with pytest.raises(FileNotFoundError, match="split 'dev' is not listed .* preprocess it"):
        task.load_dataset("dev")


# ------------------------------------- 7. no valid line; several references


def test_a_training_split_without_valid_line_fails_with_file_and_line_before_sentencepiece(tmp_path, capsys):
    rows = [{"id": f"a{i}", "documents": ["Some text here."], "abstract": "Not the key."} for i in range(3)]
    raw = tmp_path / "raw"
    raw.mkdir()
    path = write_jsonl(raw / "train.jsonl", rows)
    with pytest.raises(SystemExit):
        preprocess(str(raw), tmp_path / "b1")
    err = capsys.readouterr().err
    assert f"{path}:1: missing key 'summary' (or 'summaries'" in err
    with pytest.raises(SystemExit):
        preprocess(str(raw), tmp_path / "b2", "--skip-bad")
    err = capsys.readouterr().err
    assert f"{path}:1: missing key 'summary'" in err
    assert (
        "no line of" in err
        and "(3 lines, all skipped by --skip-bad), so there is nothing to train SentencePiece on" in err
    )
    assert "trainer_interface" not in err


@needs_fewsum
def test_fewsum_multiref_first_and_each_keep_every_reference(tmp_path):
    from fairseq.data import Dictionary

    from mdsfair.data.indexed import NumpyMMapDataset
    from mdsfair.preprocess.structure import clean_text
    from mdsfair.preprocess.subword import SentencePieceEncoder

    def rows_of(split):
        with open(os.path.join(FEWSUM_MULTIREF, f"{split}.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def cleaned(text):
        return " ".join(clean_text(text).split())

    first = tmp_path / "first"
    reports = run(
        ["--input-dir", FEWSUM_MULTIREF, "--destdir", str(first), "--vocab-size", "1000", "--no-progress-bar"]
    )
    assert reports["train"]["clusters"] == reports["train"]["examples"] == 28
    assert reports["test"]["reference_files"] == ["test.summary.txt", "test.summary.2.txt", "test.summary.3.txt"]
    each = tmp_path / "each"
    reports = run(
        [
            "--input-dir",
            FEWSUM_MULTIREF,
            "--destdir",
            str(each),
            "--spm-model",
            str(first / "spm.model"),
            "--multi-reference",
            "each",
            "--no-progress-bar",
        ]
    )
    assert (reports["train"]["clusters"], reports["train"]["examples"]) == (28, 84)
    assert (reports["test"]["clusters"], reports["test"]["examples"]) == (20, 20)  # only training splits expand

    encoder = SentencePieceEncoder(str(first / "spm.model"))
    dictionary = Dictionary.load(str(first / "dict.txt"))
    splitter_free = lambda text: [dictionary.index(s) for s in encoder.encode(text)]  # noqa: E731
    # Each training row: the cluster's source, one reference as target, in order.
    train = rows_of("train")
    source_first = NumpyMMapDataset(str(first / "train.source"))
    target_first = NumpyMMapDataset(str(first / "train.target"))
    source_each = NumpyMMapDataset(str(each / "train.source"))
    target_each = NumpyMMapDataset(str(each / "train.target"))
    with open(each / "train.ids.txt") as f:
        assert f.read().split() == [row["id"] for row in train for _ in range(3)]
    for c, row in enumerate(train):
        refs = [cleaned(s) for s in row["summaries"]]
        assert target_first[c].tolist() == splitter_free(refs[0])
        for j in range(3):
            assert source_each[3 * c + j].tolist() == source_first[c].tolist()
            # rows after the first are encoded whole in the parent process; the first by the
            # per-sentence worker path: the same ids either way
            assert target_each[3 * c + j].tolist() == splitter_free(refs[j])
    # Evaluation: every reference of every test cluster, in order, via the data-bin.
    from mdsfair.evaluation.references import data_bin_references

    references, name = data_bin_references(str(first), "test")
    assert references == [[cleaned(s) for s in row["summaries"]] for row in rows_of("test")]
    assert name == f"{first / 'test.summary.txt'} + 2 more"
    # A training row of --multi-reference each: its target's reference first, then the others.
    references, _ = data_bin_references(str(each), "train")
    refs = [cleaned(s) for s in train[0]["summaries"]]
    assert references[:3] == [refs, [refs[1], refs[0], refs[2]], [refs[2], refs[0], refs[1]]]


@needs_fewsum
def test_mdsfair_rouge_scores_all_references_of_the_data_bin(tmp_path):
    from mdsfair.evaluation.file_scoring import score_files
    from mdsfair.evaluation.references import split_reference_files
    from mdsfair.evaluation.scoring import score

    dest = tmp_path / "bin"
    run(
        [
            "--split",
            f"test={FEWSUM_MULTIREF}/test.jsonl",
            "--spm-model",
            _tiny_spm(tmp_path),
            "--destdir",
            str(dest),
            "--no-progress-bar",
        ]
    )
    paths, _ = split_reference_files(str(dest), "test")
    columns = [open(p, encoding="utf-8").read().splitlines() for p in paths]
    # Hypotheses: the second reference of each cluster. Against all three references it is
    # found (best F1 = 1 with --fast); against the first alone it is not.
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("\n".join(columns[1]) + "\n", encoding="utf-8")
    every = score_files(str(hyp), paths, fast=True)
    assert every["rouge-1"]["f"] == pytest.approx(1.0)
    assert every["info"]["max_references_per_hypothesis"] == 3
    only_first = score_files(str(hyp), paths[:1], fast=True)
    assert only_first["rouge-1"]["f"] < 0.6
    assert every["rouge-2"]["f"] == pytest.approx(
        score(columns[1], [list(r) for r in zip(*columns)], fast=True)["rouge-2"]["f"]
    )


def _tiny_spm(tmp_path):
    raw = raw_dir(tmp_path, {"train": CLUSTERS * 3})
    preprocess(raw, tmp_path / "spm-bin")
    return str(tmp_path / "spm-bin" / "spm.model")


def test_summary_and_summaries_give_one_reference_list(tmp_path):
    from mdsfair.evaluation.extractive_baselines import reference_summaries
    from mdsfair.preprocess.structure import SentenceSplitter, parse_cluster

    record = {
        "id": "m",
        "documents": ["Text one."],
        "summary": "First ref.",
        "summaries": ["First ref.", "Second ref.", " "],
    }
    cluster, _ = parse_cluster(json.dumps(record).encode(), "x.jsonl", 1, SentenceSplitter("rule"), True, False)
    assert (cluster.summary, cluster.references) == ("First ref.", ["First ref.", "Second ref."])
    assert reference_summaries(record) == ["First ref.", "Second ref."]
    only_list = {"id": "n", "documents": ["Text one."], "summaries": ["", "Only ref."]}
    cluster, _ = parse_cluster(json.dumps(only_list).encode(), "x.jsonl", 1, SentenceSplitter("rule"), True, False)
    assert (cluster.summary, cluster.references) == ("Only ref.", ["Only ref."])
    from mdsfair.preprocess.structure import InputFormatError

    with pytest.raises(InputFormatError, match=r"x\.jsonl:4: 'summaries' must be a list of strings"):
        parse_cluster(
            b'{"id": "a", "documents": ["x."], "summaries": "s"}', "x.jsonl", 4, SentenceSplitter("rule"), True, False
        )


# --------------------------------------------------------- 8. consistency


def test_preprocess_accepts_a_byte_order_mark(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "train.jsonl", CLUSTERS * 3, bom=True)
    reports = preprocess(str(raw), tmp_path / "b1")
    assert reports["train"]["clusters"] == 9
    reports = preprocess(str(raw), tmp_path / "b2", "--skip-bad")
    assert reports["train"]["clusters"] == 9 and reports["train"]["skipped"] == {}
    with open(tmp_path / "b2" / "train.ids.txt") as f:
        assert f.readline() == "c0\n"


def test_baseline_accepts_a_byte_order_mark(tmp_path):
    from mdsfair.evaluation.baselines import cli_main
    from mdsfair.evaluation.extractive_baselines import read_clusters

    path = write_jsonl(tmp_path / "bom.jsonl", CLUSTERS, bom=True)
    assert [c["id"] for c in read_clusters(path)] == ["c0", "c1", "c2"]
    output = tmp_path / "lead.txt"
    assert cli_main(["--method", "lead", path, "-o", str(output), "--lead-sentences", "1"]) == 0
    assert output.read_text().splitlines()[0] == "The storm hit Calden on Monday."


def test_convert_strips_a_byte_order_mark(tmp_path):
    from mdsfair.preprocess.converters.driver import convert

    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"id": 7, "summary": "S.", "articles": [{"text": "A b."}]}).encode() + b"\n"
    )
    report = convert("wcep", [source], tmp_path / "out.jsonl", split="test")
    assert report.clusters_written == 1 and report.skipped_total == 0
    assert json.loads((tmp_path / "out.jsonl").read_text())["id"] == "7"


def test_errors_say_file_colon_line(tmp_path):
    from mdsfair.evaluation.extractive_baselines import read_clusters
    from mdsfair.preprocess.converters.common import ConversionOptions
    from mdsfair.preprocess.converters.driver import convert
    from mdsfair.raw_contract import InputFormatError as ConvertError

    bad = write_jsonl(tmp_path / "bad.jsonl", CLUSTERS[:1], raw_lines=[b"{oops\n"])
    with pytest.raises(ConvertError, match=rf"^{bad}:2: not valid JSON"):
        read_clusters(bad)
    events = tmp_path / "events.jsonl"
    events.write_bytes(json.dumps({"id": 7, "summary": "S.", "articles": [{"text": "A b."}]}).encode() + b"\n{oops\n")
    with pytest.raises(ConvertError) as info:
        convert("wcep", [events], tmp_path / "out.jsonl", split="test")
    assert str(info.value).startswith(f"{events}:2: not valid JSON")
    report = convert("wcep", [events], tmp_path / "out.jsonl", split="test", options=ConversionOptions(skip_bad=True))
    assert report.skipped_examples[0].startswith(f"{events}:2: not valid JSON")


def test_skip_bad_lists_skipped_lines_and_dropped_documents_in_a_report_file(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = [
        b"{oops\n",
        b"\n",
        b'{"id": "e", "documents": [], "summary": "s"}\n',
        b'{"id": "d", "documents": ["Fine text.", "  ", "More text."], "summary": "s"}\n',
    ]
    path = write_jsonl(raw / "train.jsonl", CLUSTERS * 2, raw_lines=lines)
    dest = tmp_path / "bin"
    reports = preprocess(str(raw), dest, "--skip-bad")
    assert reports["train"]["skip_report"] == "train.skipped.txt"
    assert (dest / "train.skipped.txt").read_text().splitlines() == [
        f"{path}:7: skipped (invalid_json): not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{path}:9: skipped (empty_cluster): cluster 'e' has no non-empty document",
        f"{path}:10: dropped document 1 of cluster 'd' (empty_document: no text after cleaning)",
    ]
    assert "train: skipped lines and dropped documents listed in train.skipped.txt" in capsys.readouterr().out


# ---------------------------------------------------- 9. unreported shrinkage


def test_sentencepiece_reports_the_vocabulary_it_reached(tmp_path, caplog, capsys):
    import sentencepiece

    raw = raw_dir(tmp_path, {"train": CLUSTERS * 3})
    dest = tmp_path / "bin"
    with caplog.at_level(logging.INFO, logger="mdsfair.preprocess"):
        run(["--input-dir", raw, "--destdir", str(dest), "--vocab-size", "32000", "--no-progress-bar"])
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(dest / "spm.model")).get_piece_size()
    assert pieces < 200
    with open(dest / "dict.txt") as f:
        dictionary_size = 4 + len(f.readlines())
    assert manifest_of(dest)["vocabulary"] == {
        "requested_pieces": 32000,
        "pieces": pieces,
        "dictionary_size": dictionary_size,
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"SentencePiece: asked for 32000 pieces (--vocab-size), got {pieces}" in " ".join(warnings)
    assert f"vocabulary: {pieces:,} SentencePiece pieces (asked for 32,000)" in capsys.readouterr().out


def test_repeated_cluster_ids_are_warned_with_the_ids(tmp_path, caplog):
    rows = CLUSTERS + [dict(CLUSTERS[0], summary="Another.")] + CLUSTERS[1:2] + [CLUSTERS[2]]
    raw = raw_dir(tmp_path, {"train": rows})
    with caplog.at_level(logging.WARNING, logger="mdsfair.preprocess"):
        reports = preprocess(raw, tmp_path / "bin")
    assert reports["train"]["duplicate_ids"] == {"c0": [1, 4], "c1": [2, 5], "c2": [3, 6]}
    message = " ".join(r.getMessage() for r in caplog.records)
    assert (
        "split 'train' has 3 cluster ids that occur more than once: 'c0' (lines 1, 4); 'c1' (lines 2, 5); 'c2' (lines 3, 6)"
        in message
    )


def test_pagesum_counts_page_cuts_on_device_and_reports_them_through_fairseq_metrics(caplog, monkeypatch):
    """Page cuts of every batch add up on the device with no host
    synchronization and no exit hook in the forward pass; fairseq's metrics
    carry the per-batch counts (summed over an epoch by fairseq), and
    log_page_totals reports the running totals when asked."""
    import atexit

    import torch
    from fairseq.logging import metrics

    from mdsfair.models.pagesum_bart import PAGE_STATISTICS, PageSumEncoder
    from mdsfair.modules.pages import PageBuilder

    bos, pad, eos = 0, 1, 2
    builder = PageBuilder("document", 2, 6, bos, eos, pad)  # 2 pages of 4 content tokens
    encoder = SimpleNamespace(
        page_builder=builder, page_counts=torch.zeros(len(PAGE_STATISTICS), dtype=torch.long), examples_encoded=0
    )
    layouts = []
    for seed in (0, 1):  # two batches of 3 examples, 3 documents of 8 tokens each
        tokens = torch.randint(4, 30, (3, 24), generator=torch.Generator().manual_seed(seed))
        doc = torch.arange(24).div(8, rounding_mode="floor").expand(3, 24)
        layouts.append(builder(tokens, doc, doc, doc))
    totals = {name: sum(int(getattr(layout, name).sum()) for layout in layouts) for name in PAGE_STATISTICS}

    def host_sync(*args, **kwargs):
        raise AssertionError("host synchronization in the forward pass")

    with monkeypatch.context() as patch, metrics.aggregate(new_root=True) as aggregated:
        patch.setattr(atexit, "register", host_sync)
        for method in ("tolist", "item", "__bool__", "__int__", "__float__"):
            patch.setattr(torch.Tensor, method, host_sync)
        for layout in layouts:
            PageSumEncoder.record_page_statistics(encoder, layout)
    # per batch: document 3 dropped (8 tokens), documents 1-2 cut to 4 tokens (4 + 4 cut), for 3 examples
    assert totals == {"dropped_units": 6, "dropped_tokens": 48, "cut_tokens": 48, "merged_units": 0}
    assert encoder.page_counts.tolist() == [totals[name] for name in PAGE_STATISTICS]
    assert encoder.examples_encoded == 6
    assert {name: int(aggregated[f"page_{name}"].sum) for name in PAGE_STATISTICS} == totals
    encoder.page_settings = lambda: PageSumEncoder.page_settings(encoder)
    with caplog.at_level(logging.INFO):
        message = PageSumEncoder.log_page_totals(encoder)
    assert message.startswith(
        "PageSum pages over the 6 examples this encoder encoded: 6 dropped units, 48 dropped tokens, "
        "0 merged units, 48 cut tokens (locality document, --num-pages 2, --page-tokens 6"
    )
    assert message in caplog.text


def test_mdsfair_rank_keeps_every_reference(tmp_path):
    from mdsfair.preprocess.rank import run as rank_main

    record = {"id": "m", "documents": ["One. Two.\n\nThree."], "summaries": ["First ref.", "Second ref."]}
    source = write_jsonl(tmp_path / "in.jsonl", [record])
    output = tmp_path / "ranked.jsonl"
    rank_main(["--input", source, "--output", str(output), "--method", "original"])
    ranked = json.loads(output.read_text())
    assert (ranked["summary"], ranked["summaries"]) == ("First ref.", ["First ref.", "Second ref."])


def test_a_whole_reference_encodes_as_its_sentences_do_with_gpt2_bpe(tmp_path):
    """The extra rows of --multi-reference each encode a reference whole; the
    first row's target is encoded sentence by sentence, each later sentence
    continuing the text. GPT-2's pre-tokenizer keeps a word's leading space,
    so both give the same ids (SentencePiece: see the FewSum test)."""
    from fairseq.data import Dictionary
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    from mdsfair.preprocess.references import ReferenceTargetEncoder
    from mdsfair.preprocess.structure import SentenceSplitter

    byte_encoder = bytes_to_unicode()
    vocab = {byte_encoder[b]: i for i, b in enumerate(range(256))}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), (".", "Ġ")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (tmp_path / "encoder.json").write_text(json.dumps(vocab))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    dictionary = Dictionary()
    for i in range(len(vocab)):
        dictionary.add_symbol(str(i))
    dictionary.save(str(tmp_path / "dict.txt"))
    target_encoder = ReferenceTargetEncoder(
        str(tmp_path), {"type": "gpt2", "encoder_json": "encoder.json", "vocab_bpe": "vocab.bpe"}
    )
    reference = "The cat sat in the hat. Then it ran! A dog (the big one) barked 3 times. Done."
    sentences = SentenceSplitter("rule").split([reference])[0]
    assert len(sentences) == 4
    per_sentence = [
        dictionary.index(s)
        for i, sentence in enumerate(sentences)
        for s in target_encoder.encoder.encode(sentence, continues=i > 0)
    ]
    assert target_encoder(reference).tolist() == per_sentence
