"""``mdsfair-convert wikisum_hiersumm``: the Hierarchical Transformer authors' WikiSum
``.pt`` shards (nlpyang/hiersumm) decoded with their SentencePiece model into the raw
contract, and the paper's clone-paragraph filter.

The shards are written here in the layout their loader reads
(``src/abstractive/data_loader.py`` at hiersumm 476e6bf; :func:`read_like_hiersumm`
mirrors it), with a tiny SentencePiece model holding their special pieces
(``tests/hiersumm_fixtures.py``)."""

import datetime
import glob
import json
import os

import pytest
import sentencepiece
import torch

from mdsfair.preprocess.converters import ConversionOptions, InputFormatError, cli_main, convert
from mdsfair.preprocess.converters.wikisum_hiersumm import CLONE_BIGRAM_RECALL
from tests.hiersumm_fixtures import TEXT, train_spm
from tests.utils import SHARED_DATA

PAPER = os.path.join(os.path.dirname(SHARED_DATA), "papers", "hiertransformer-liu-lapata2019.txt")
SKIP_BAD = ConversionOptions(skip_bad=True)

PARAGRAPHS = [TEXT[0], TEXT[1], TEXT[3], TEXT[4]]
SENTENCES = [TEXT[2], TEXT[5]]  # the target: no bigram of the paragraphs' above 0.8 recall


@pytest.fixture(scope="module", params=[False, True], ids=["user-defined-specials", "control-specials"])
def spm_model(request, tmp_path_factory):
    """Their special pieces as user-defined pieces, or <PAD>/<S>/</S> as SentencePiece's own."""
    return train_spm(str(tmp_path_factory.mktemp("spm") / "spm"), control_roles=request.param)


@pytest.fixture(scope="module")
def processor(spm_model):
    return sentencepiece.SentencePieceProcessor(model_file=spm_model)


def their_example(processor, paragraphs, sentences):
    """One example as their shards hold it: ``src`` paragraphs of ids, ``tgt`` = <S> sentences
    joined by <Q> </S>, ``tgt_str`` the sentences joined by ' <Q> '."""
    q = processor.piece_to_id("<Q>")
    target = [processor.piece_to_id("<S>")]
    for number, sentence in enumerate(sentences):
        target += ([q] if number else []) + processor.encode(sentence)
    target.append(processor.piece_to_id("</S>"))
    return {
        "src": [processor.encode(p) for p in paragraphs],
        "tgt": target,
        "tgt_str": " <Q> ".join(sentences),
    }


def write_shards(folder, split, shards, legacy=()):
    """``folder/WIKI.{split}.{n}.pt`` for each list of examples (``legacy``: the shard numbers
    written in torch's pre-1.6 format, as their 2019 release was)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, examples in enumerate(shards):
        path = folder / f"WIKI.{split}.{number}.pt"
        torch.save(examples, path, _use_new_zipfile_serialization=number not in legacy)
        paths.append(path)
    return paths


def read_like_hiersumm(data_path, corpus_type, pad_id, trunc_src_nblock=40):
    """Their loader's reading of the shards, step by step (src/abstractive/data_loader.py):
    the file names (l. 77: ``sorted(glob.glob(data_path + '.' + corpus_type + '.[0-9]*.pt'))``),
    ``torch.load`` (l. 71; here with weights_only=True, stricter than theirs), the keys
    (l. 160: ``ex['src'], ex['tgt'], ex['tgt_str']``), the paragraph cut (l. 166) and the
    batch of ``-hier`` (l. 29-36: ``_pad`` pads each paragraph with list concatenation
    ``d + [pad_id] * n`` (l. 18), then ``torch.stack([torch.tensor(e[0]) ...])``); the
    target (l. 38-40) as ``[T, B]``. Returns (src, tgt, tgt_str) of the batch of all examples."""

    def pad(data, height, width):
        rows = [d + [pad_id] * (width - len(d)) for d in data]
        return rows + [[pad_id] * width] * (height - len(data))

    examples = []
    for pt in sorted(glob.glob(data_path + "." + corpus_type + ".[0-9]*.pt")):
        for ex in torch.load(pt, weights_only=True):
            src, tgt, tgt_str = ex["src"], ex["tgt"], ex["tgt_str"]
            examples.append((src[:trunc_src_nblock], tgt, tgt_str))
    src = [x[0] for x in examples]
    max_nblock = max([len(e) for e in src])
    max_ntoken = max([max([len(p) for p in e]) for e in src])
    src = torch.stack([torch.tensor(pad(e, max_nblock, max_ntoken)) for e in src])
    tgt = [x[1] for x in examples]
    tgt = torch.tensor(pad(tgt, len(tgt), max(len(t) for t in tgt))).transpose(0, 1)
    return src, tgt, [x[2].split() for x in examples]  # predictor_builder.py l. 99: tgt_str[b].split()


def read_jsonl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def run(inputs, tmp_path, spm_model, **options):
    output = tmp_path / "out.jsonl"
    report = convert("wikisum_hiersumm", inputs, output, spm_model=spm_model, **options)
    assert report.records_read == report.clusters_written + report.skipped_total + report.filtered_total
    return read_jsonl(output), report


def test_shards_are_in_the_layout_their_loader_reads(tmp_path, processor):
    examples = [their_example(processor, PARAGRAPHS, SENTENCES), their_example(processor, PARAGRAPHS[:2], SENTENCES)]
    write_shards(tmp_path / "data", "train", [examples[:1], examples[1:]], legacy=(1,))
    pad_id = processor.piece_to_id("<PAD>")
    src, tgt, gold = read_like_hiersumm(str(tmp_path / "data" / "WIKI"), "train", pad_id)
    longest = max(len(ids) for ex in examples for ids in ex["src"])
    assert src.shape == (2, len(PARAGRAPHS), longest)  # [B, n_blocks, n_tokens]
    assert (src[1, 2:] == pad_id).all()  # the second example's missing paragraphs are all padding
    assert tgt.shape == (max(len(ex["tgt"]) for ex in examples), 2)  # [T, B]
    assert gold[0][len(SENTENCES[0].split())] == "<Q>"


def test_round_trip_text_in_ranked_order(tmp_path, processor, spm_model):
    shard = write_shards(tmp_path, "train", [[their_example(processor, PARAGRAPHS, SENTENCES)]])[0]
    for target_from in ("tgt_str", "tgt"):
        clusters, report = run(shard, tmp_path, spm_model, target_from=target_from)
        assert clusters == [{"id": "train-0", "documents": PARAGRAPHS, "summary": " ".join(SENTENCES)}]
        assert report.dropped_documents == {}


def test_tgt_str_markup_is_removed_as_their_evaluation_does(tmp_path, processor, spm_model):
    example = their_example(processor, PARAGRAPHS, SENTENCES)
    example["tgt_str"] = "<t> " + SENTENCES[0] + " </t> <q> " + SENTENCES[1]
    shard = write_shards(tmp_path, "test", [[example]])[0]
    clusters, _ = run(shard, tmp_path, spm_model, split="test")
    assert clusters[0]["summary"] == " ".join(SENTENCES)


def test_clone_filter_drops_recall_above_0_8_and_keeps_exactly_0_8(tmp_path, processor, spm_model):
    # The target's words: the lake ferry leaves the harbour -> 5 bigrams.
    target = "the lake ferry leaves the harbour ."
    exactly = "the lake ferry leaves the"  # 4 of the 5 bigrams: recall 4/5 = 0.8, kept ("higher than")
    clone = "the lake ferry leaves the harbour at noon ."  # 5/5 = 1.0 > 0.8, dropped
    short = "the lake"  # precision 1, recall 1/5: the filter measures recall against the target
    other = TEXT[3]
    example = their_example(processor, [clone, exactly, short, other], [target])
    shard = write_shards(tmp_path, "train", [[example]])[0]
    clusters, report = run(shard, tmp_path, spm_model)
    assert clusters[0]["documents"] == [exactly, short, other]
    assert report.dropped_documents == {"clone_paragraph": 1}
    assert "clone_paragraph: 1" in report.format()
    clusters, report = run(shard, tmp_path, spm_model, keep_clone_paragraphs=True)
    assert clusters[0]["documents"] == [clone, exactly, short, other]
    assert report.dropped_documents == {}


def test_the_threshold_is_the_papers():
    if not os.path.isfile(PAPER):
        pytest.skip("../shared/papers not available")
    with open(PAPER, encoding="utf-8") as handle:
        text = " ".join(handle.read().split())
    assert (
        "removed clone paragraphs (which are exact copies of some parts of the Wikipedia articles); these were "
        "paragraphs in the source documents whose bigram recall against the target summary was higher than 0.8."
    ) in text
    assert CLONE_BIGRAM_RECALL == 0.8


def test_a_cluster_of_clones_only_is_bad_input(tmp_path, processor, spm_model):
    target = "the lake ferry leaves the harbour ."
    example = their_example(processor, ["the lake ferry leaves the harbour at noon .", ""], [target])
    shard = write_shards(tmp_path, "train", [[their_example(processor, PARAGRAPHS, SENTENCES), example]])[0]
    with pytest.raises(InputFormatError, match=rf"{shard}\[1\]: empty cluster .*all 1 non-empty paragraphs are clones"):
        run(shard, tmp_path, spm_model)


def test_folder_of_shards_in_shard_order_and_split_aliases(tmp_path, processor, spm_model):
    shards = [[their_example(processor, [TEXT[n]], SENTENCES)] for n in range(11)]
    write_shards(tmp_path / "data", "train", shards)
    write_shards(tmp_path / "data", "valid", shards[:1])
    clusters, _ = run(tmp_path / "data", tmp_path, spm_model)
    # WIKI.train.10.pt comes after WIKI.train.2.pt (increasing shard number)
    assert [c["documents"][0] for c in clusters] == [TEXT[n] for n in range(11)]
    assert [c["id"] for c in clusters] == [f"train-{n}" for n in range(11)]
    clusters, _ = run(tmp_path / "data", tmp_path, spm_model, split="validation")
    assert [c["id"] for c in clusters] == ["validation-0"]
    with pytest.raises(FileNotFoundError, match=r"no shard WIKI\.test\.N\.pt or WIKI\.test\.pt"):
        run(tmp_path / "data", tmp_path, spm_model, split="test")


def test_empty_paragraphs_are_dropped_and_counted(tmp_path, processor, spm_model):
    example = their_example(processor, PARAGRAPHS, SENTENCES)
    example["src"].insert(1, [])
    example["src"].append([processor.piece_to_id("<PAD>")])
    shard = write_shards(tmp_path, "train", [[example]])[0]
    clusters, report = run(shard, tmp_path, spm_model)
    assert clusters[0]["documents"] == PARAGRAPHS
    assert report.dropped_documents == {"empty_paragraph": 2}


def _damaged(processor):
    good = their_example(processor, PARAGRAPHS, SENTENCES)
    cases = {
        "missing_key": (dict(good, tgt_str=None), r"missing key: 'tgt_str'"),
        "not_a_list": (dict(good, src=[good["src"][0], "a paragraph"]), r"wrong type: src\[1\] must be a list of ids"),
        "bad_id": (dict(good, tgt=[1, 2, 10**6]), r"wrong type: tgt\[2\] = 1000000 is no id of the SentencePiece"),
        "float_id": (dict(good, src=[[1, 2.0]]), r"wrong type: src\[0\]\[1\] must be an int id, got float"),
        "not_a_dict": ([good["src"], good["tgt"]], r"wrong type: an example is a dict"),
        "tgt_str_type": (dict(good, tgt_str=["a", "list"]), r"wrong type: 'tgt_str' must be str"),
    }
    del cases["missing_key"][0]["tgt_str"]
    return good, cases


def test_damaged_examples_name_file_and_index_or_are_counted(tmp_path, processor, spm_model):
    good, cases = _damaged(processor)
    for name, (bad, message) in cases.items():
        shard = write_shards(tmp_path / name, "train", [[good, bad, good]])[0]
        with pytest.raises(InputFormatError, match=rf"^{shard}\[1\]: {message}"):
            run(shard, tmp_path, spm_model)
    shard = write_shards(tmp_path / "all", "train", [[good] + [bad for bad, _ in cases.values()]])[0]
    clusters, report = run(shard, tmp_path, spm_model, options=SKIP_BAD)
    assert len(clusters) == 1
    assert report.skipped == {"missing_key": 1, "wrong_type": 5}
    assert [example.split(":")[0] for example in report.skipped_examples] == [
        f"{shard}[{n}]" for n in range(1, len(cases) + 1)
    ]


def test_unreadable_shards_are_fatal_even_when_skipping(tmp_path, processor, spm_model):
    good = their_example(processor, PARAGRAPHS, SENTENCES)
    not_a_list = tmp_path / "WIKI.train.0.pt"
    torch.save({"examples": [good]}, not_a_list)
    garbage = tmp_path / "WIKI.valid.0.pt"
    garbage.write_bytes(b"not a torch file")
    for shard, message in ((not_a_list, "wrong type: a shard is a list of examples"), (garbage, "not a readable")):
        with pytest.raises(InputFormatError, match=rf"^{shard}: {message}") as raised:
            run(shard, tmp_path, spm_model, options=SKIP_BAD)
        assert not raised.value.skippable


def test_a_shard_that_pickles_an_object_is_refused_unless_trusted(tmp_path, processor, spm_model, monkeypatch):
    example = dict(their_example(processor, PARAGRAPHS, SENTENCES), crawled=datetime.date(2018, 1, 30))
    shard = write_shards(tmp_path, "train", [[example]])[0]
    monkeypatch.delenv("MDSFAIR_TRUST_CHECKPOINTS", raising=False)
    with pytest.raises(InputFormatError, match=r"pickles datetime\.date.*MDSFAIR_TRUST_CHECKPOINTS=1"):
        run(shard, tmp_path, spm_model)
    monkeypatch.setenv("MDSFAIR_TRUST_CHECKPOINTS", "1")
    clusters, report = run(shard, tmp_path, spm_model)
    assert clusters[0]["documents"] == PARAGRAPHS
    assert report.notes == {"shard_unpickled_fully": 1}


def test_a_sentencepiece_model_without_their_pieces_is_refused(tmp_path, processor):
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT), model_prefix=str(tmp_path / "plain"), vocab_size=60, minloglevel=2
    )
    shard = write_shards(tmp_path, "train", [[their_example(processor, PARAGRAPHS, SENTENCES)]])[0]
    with pytest.raises(ValueError, match=r"plain\.model: the SentencePiece model has no piece '<PAD>'"):
        run(shard, tmp_path, str(tmp_path / "plain.model"))


def test_cli(tmp_path, processor, spm_model, capsys):
    write_shards(tmp_path / "data", "train", [[their_example(processor, PARAGRAPHS, SENTENCES)]])
    output = tmp_path / "raw" / "train.jsonl"
    argv = ["wikisum_hiersumm", str(tmp_path / "data"), "--spm-model", spm_model, "-o", str(output)]
    assert cli_main(argv) == 0
    assert "clusters written:     1" in capsys.readouterr().out
    assert read_jsonl(output)[0]["documents"] == PARAGRAPHS
    assert cli_main(argv[:-2] + ["-o", str(output), "--split", "test"]) == 1
    assert "no shard WIKI.test.N.pt" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["wikisum_hiersumm", "--help"])
    help_text = capsys.readouterr().out
    for flag in ("--spm-model", "--target-from", "--keep-clone-paragraphs", "--shard-prefix"):
        assert flag in help_text
