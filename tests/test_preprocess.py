"""The preprocessing pipeline: structure, alignment, bad input, binarization."""

import hashlib
import json
import os

import numpy as np
import pytest

from mdsfair.data.indexed import NumpyMMapDataset
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.binarize import run
from mdsfair.preprocess.pipeline import encode_cluster
from mdsfair.preprocess.structure import (
    InputFormatError,
    SentenceSplitter,
    parse_cluster,
    read_clusters,
    split_paragraphs,
    split_sentences_rule,
)
from mdsfair.preprocess.subword import SentencePieceEncoder
from tests.utils import SHARED_DATA

CLUSTERS = [
    {
        "id": "c0",
        "documents": [
            "The storm hit Calden on Monday. Power failed in the north.\n\nRepairs began on Tuesday.",
            "Officials in Calden said repairs would take a week.",
        ],
        "summary": "A storm hit Calden. Repairs take a week.",
    },
    {
        "id": "c1",
        "documents": ["Mira Holt designed the bridge. It opened in 1987.", "The bridge is 340 metres long."],
        "summary": "Mira Holt designed the 340 metre bridge, opened in 1987.",
        "title": "Varnel bridge",
    },
]


def write_jsonl(path, rows, raw_lines=()):
    with open(path, "wb") as f:
        for row in rows:
            f.write((json.dumps(row) + "\n").encode("utf-8"))
        for line in raw_lines:
            f.write(line)
    return str(path)


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("pre")
    raw = root / "raw"
    raw.mkdir()
    rows = CLUSTERS * 20
    rows = [dict(r, id=f"{r['id']}-{i}") for i, r in enumerate(rows)]
    write_jsonl(raw / "train.jsonl", rows)
    write_jsonl(raw / "test.jsonl", rows[:4])
    dest = str(root / "bin")
    reports = run(["--input-dir", str(raw), "--destdir", dest, "--vocab-size", "120", "--no-progress-bar"])
    return dest, rows, reports


def test_paragraphs_and_sentences():
    assert split_paragraphs("a b\nc\n\n\n d  e \n \n f") == ["a b c", "d e", "f"]
    assert split_sentences_rule("Dr. Smith met J. Doe. They talked! Then 3 more came.") == [
        "Dr. Smith met J. Doe.",
        "They talked!",
        "Then 3 more came.",
    ]


def test_spacy_splitter_splits_sentences():
    splitter = SentenceSplitter("spacy")
    assert splitter.split(["The storm hit Calden on Monday. Power failed in the north."]) == [
        ["The storm hit Calden on Monday.", "Power failed in the north."]
    ]


def test_structure_of_a_cluster():
    raw = json.dumps(CLUSTERS[0]).encode()
    cluster, dropped = parse_cluster(raw, "x.jsonl", 1, SentenceSplitter("rule"), True, False)
    assert dropped == 0
    assert cluster.documents == [
        [["The storm hit Calden on Monday.", "Power failed in the north."], ["Repairs began on Tuesday."]],
        [["Officials in Calden said repairs would take a week."]],
    ]
    assert cluster.paragraph_documents() == [0, 0, 1]
    assert cluster.summary_sentences == ["A storm hit Calden.", "Repairs take a week."]


@pytest.mark.parametrize(
    "line, reason, fragment",
    [
        (b"{not json\n", "invalid_json", "not valid JSON"),
        (b"[1, 2]\n", "not_an_object", "expected a JSON object"),
        (b'{"id": "a", "documents": ["x"]}\n', "missing_key", "missing key 'summary'"),
        (b'{"id": "a", "documents": "x", "summary": "s"}\n', "wrong_type", "list of strings"),
        (b'{"id": "a", "documents": [], "summary": "s"}\n', "empty_cluster", "no non-empty document"),
        (b'{"id": "a", "documents": ["x.", "  \\n\\n "], "summary": "s"}\n', "empty_document", "document 1"),
        (b'{"id": "a", "documents": ["x."], "summary": " "}\n', "empty_summary", "empty summary"),
        (b'{"id": "a", "documents": ["caf\xe9"], "summary": "s"}\n', "invalid_utf8", "invalid UTF-8"),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, line, reason, fragment):
    path = write_jsonl(tmp_path / "train.jsonl", CLUSTERS, raw_lines=[line])
    with pytest.raises(InputFormatError) as info:
        list(read_clusters(path))
    assert info.value.reason == reason
    assert str(info.value).startswith(f"{path}:3: ")
    assert fragment in str(info.value)


def test_skip_bad_counts_every_skipped_line(tmp_path):
    from mdsfair.preprocess.structure import ReadReport

    lines = [
        b"{oops\n",
        b'{"id": "a", "documents": [], "summary": "s"}\n',
        b'{"id": "b", "documents": ["Fine text.", ""], "summary": "s"}\n',
    ]
    path = write_jsonl(tmp_path / "train.jsonl", CLUSTERS, raw_lines=lines)
    report = ReadReport()
    clusters = list(read_clusters(path, skip_bad=True, report=report))
    assert [c.id for c in clusters] == ["c0", "c1", "b"]
    assert report.lines == 5 and report.clusters == 3
    assert dict(report.skipped) == {"invalid_json": 1, "empty_cluster": 1}
    assert report.empty_documents_dropped == 1


def test_empty_summary_allowed_outside_training_splits(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [dict(CLUSTERS[0], summary="")])
    clusters = list(read_clusters(path, require_summary=False))
    assert clusters[0].summary == "" and clusters[0].summary_sentences == []


def test_binarized_structure_matches_raw_text(data_bin):
    dest, rows, reports = data_bin
    encoder = SentencePieceEncoder(os.path.join(dest, "spm.model"))
    source = NumpyMMapDataset(os.path.join(dest, "train.source"))
    doc = NumpyMMapDataset(os.path.join(dest, "train.doc"))
    para = NumpyMMapDataset(os.path.join(dest, "train.para"))
    sent = NumpyMMapDataset(os.path.join(dest, "train.sent"))
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    splitter = SentenceSplitter("rule")
    for index in (0, 1):
        cluster, _ = parse_cluster(json.dumps(rows[index]).encode(), "t", 1, splitter, True, False)
        tokens = np.asarray(source[index])
        # Every sentence decodes back to its own text from the tokens with its ids.
        sentence_index = 0
        paragraph_index = 0
        for d, document in enumerate(cluster.documents):
            for paragraph in document:
                for sentence in paragraph:
                    positions = np.flatnonzero(np.asarray(sent[index]) == sentence_index)
                    assert (np.asarray(doc[index])[positions] == d).all()
                    assert (np.asarray(para[index])[positions] == paragraph_index).all()
                    symbols = [dictionary[t] for t in tokens[positions]]
                    assert encoder.decode(symbols) == sentence
                    sentence_index += 1
                paragraph_index += 1
        assert sentence_index == cluster.num_sentences
        assert len(tokens) == positions[-1] + 1  # the last sentence ends the stream
    assert reports["train"]["clusters"] == 40
    assert reports["train"]["documents"] == 80
    assert reports["train"]["paragraphs"] == 20 * (3 + 2)
    with open(os.path.join(dest, "train.ids.txt")) as f:
        assert f.read().split("\n")[:2] == ["c0-0", "c1-1"]
    manifest = json.load(open(os.path.join(dest, "mdsfair.json")))
    assert manifest["subword"] == {"type": "sentencepiece", "model": "spm.model"}
    assert manifest["splits"]["test"]["clusters"] == 4


def test_parallel_workers_write_identical_files(data_bin, tmp_path):
    dest, rows, _ = data_bin
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "train.jsonl", rows)
    other = str(tmp_path / "bin")
    run(
        [
            "--split",
            f"train={raw / 'train.jsonl'}",
            "--destdir",
            other,
            "--spm-model",
            os.path.join(dest, "spm.model"),
            "--workers",
            "2",
            "--chunk-size",
            "3",
            "--no-progress-bar",
        ]
    )
    for name in ("train.source.bin", "train.doc.bin", "train.para.bin", "train.sent.bin", "train.target.bin"):
        assert open(os.path.join(dest, name), "rb").read() == open(os.path.join(other, name), "rb").read()


def test_preprocess_fails_with_file_and_line_and_skips_with_flag(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "train.jsonl", CLUSTERS * 5, raw_lines=[b'{"id": "x", "documents": ["a."], "summary": ""}\n'])
    with pytest.raises(SystemExit):
        run(["--input-dir", str(raw), "--destdir", str(tmp_path / "b1"), "--vocab-size", "60", "--no-progress-bar"])
    assert f"{raw / 'train.jsonl'}:11: cluster 'x' has an empty summary" in capsys.readouterr().err
    reports = run(
        [
            "--input-dir",
            str(raw),
            "--destdir",
            str(tmp_path / "b2"),
            "--vocab-size",
            "60",
            "--skip-bad",
            "--no-progress-bar",
        ]
    )
    assert reports["train"]["skipped"] == {"empty_summary": 1}
    assert reports["train"]["clusters"] == 10
    assert "skipped: empty_summary=1" in capsys.readouterr().out


def test_gpt2_bpe_symbols_and_word_ids(tmp_path):
    """GPT-2 BPE from local files: symbols are ids as strings, and words are
    counted from the space-marked tokens."""
    from fairseq.data import Dictionary

    # A byte-level BPE over a toy alphabet, in GPT-2's file formats.
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    from mdsfair.preprocess.structure import ClusterStructure
    from mdsfair.preprocess.subword import GPT2BPEEncoder

    byte_encoder = bytes_to_unicode()
    vocab = {byte_encoder[b]: i for i, b in enumerate(range(256))}
    merges = [("Ġ", "a"), ("Ġa", "b")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (tmp_path / "encoder.json").write_text(json.dumps(vocab))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    encoder = GPT2BPEEncoder(str(tmp_path / "encoder.json"), str(tmp_path / "vocab.bpe"))
    dictionary = Dictionary()
    for i in range(len(vocab)):
        dictionary.add_symbol(str(i))
    cluster = ClusterStructure(id="g", documents=[[["ab ab.", "ab."]]], summary="ab", summary_sentences=["ab"])
    encoded = encode_cluster(cluster, encoder, dictionary)
    symbols = [dictionary[t] for t in encoded.tokens]
    assert encoder.decode(symbols) == "ab ab. ab."
    assert list(encoded.sent_ids) == [0] * 4 + [1] * 2
    assert encoder.word_ids(encoder.encode("ab ab.", continues=False)) == [0, 0, 1, 1]
    assert list(encoded.word_ids) == [0, 0, 1, 1, 0, 0]


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="shared data not present")
def test_real_data_fewsum_preprocesses(tmp_path):
    reports = run(
        [
            "--input-dir",
            os.path.join(SHARED_DATA, "fewsum", "amazon", "jsonl"),
            "--destdir",
            str(tmp_path / "fewsum"),
            "--vocab-size",
            "2000",
            "--no-progress-bar",
        ]
    )
    assert reports["train"]["clusters"] == 28 and reports["test"]["clusters"] == 20
    assert reports["train"]["documents"] == 28 * 8


@pytest.mark.parametrize("first_import", ["mdsfair.preprocess.binarize", "mdsfair.hub_interface", "mdsfair", "hubconf"])
def test_every_entry_module_imports_first_in_a_fresh_process(first_import):
    """The plugin registers models on import and models register hub entries,
    so import cycles show up only in a fresh interpreter, by entry point."""
    import subprocess
    import sys

    from tests.utils import REPO_ROOT

    result = subprocess.run(
        [sys.executable, "-c", f"import {first_import}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]


# ------------------------------------------------- byte-identical output

# Clusters that exercise cleaning and splitting: CRLF, control and zero-width
# characters, non-breaking and em spaces, combining accents (NFC), curly
# quotes, abbreviations, an empty document (dropped under --skip-bad) and
# extra reference summaries.
REGRESSION_EXTRA_TRAIN = [
    {
        "id": "u0",
        "title": "Caf\u00e9 \u201cnotes\u201d",
        "documents": [
            "Dr. Smith met J. Doe at 5 p.m. in the U.S. capital.\r\nThey talked!  Then   3 more came.\n\n\n"
            "\u201cIt\u2019s fine,\u201d she said. (A quiet day.) The cafe\u0301 was closed\u200b; co-workers left.",
            "Caf\u00e9 r\u00e9sum\u00e9 na\u00efve \u2014 \u00fcber\u00a0spaces\u2003here. Numbers: 3.14, 1,000 and 42%.\x07",
            "   \n\n  ",
        ],
        "summary": "Smith met Doe.  They talked \u2014 \u201cfine.\u201d",
    },
    {
        "id": "u1",
        "documents": ["ALL CAPS TEXT. mixed Case text? yes! e.g. this one, i.e. that one. Fig. 3 shows it."],
        "summary": "Caps and cases.",
        "summaries": ["Other reference.", "A third\none."],
    },
]
REGRESSION_BAD_LINES = [b"{not json\n", b'{"id": "b", "documents": [], "summary": "s"}\n']
REGRESSION_DIGESTS = os.path.join(os.path.dirname(__file__), "fixtures", "preprocess", "regression_digests.json")


def toy_gpt2_files(directory):
    """A byte-level BPE over all 256 bytes plus a few merges, in GPT-2's file
    formats, with a ``dict.txt`` listing every id."""
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    byte_encoder = bytes_to_unicode()
    vocab = {byte_encoder[b]: i for i, b in enumerate(range(256))}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    with open(os.path.join(directory, "encoder.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(directory, "vocab.bpe"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    with open(os.path.join(directory, "dict.txt"), "w") as f:
        f.write("".join(f"{i} 1\n" for i in range(len(vocab))))
    return [os.path.join(directory, n) for n in ("encoder.json", "vocab.bpe", "dict.txt")]


def build_regression_inputs(root):
    """Synthetic splits plus the clusters above, two bad lines and a blank one."""
    from mdsfair.preprocess.synthetic import write_dataset

    raw = os.path.join(root, "raw")
    write_dataset(raw, seed=3, train=10, valid=3, test=3)
    with open(os.path.join(raw, "train.jsonl"), "ab") as f:
        for row in REGRESSION_EXTRA_TRAIN:
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
        for line in REGRESSION_BAD_LINES:
            f.write(line)
    with open(os.path.join(raw, "test.jsonl"), "ab") as f:
        f.write(b'{"id": "t-empty", "documents": ["No summary here."], "summary": ""}\n\n')
    return raw


def regression_configs(root, raw):
    """Three settings covering every code path of the command: SentencePiece
    trained here; a given model with lowercasing, dependency arcs (all-subwords),
    a paragraph graph and two workers; GPT-2 BPE with spaCy sentence splitting,
    arcs and the discourse graph."""
    gpt2_json, gpt2_bpe, gpt2_dict = toy_gpt2_files(root)
    common = ["--skip-bad", "--no-progress-bar"]
    plain = os.path.join(root, "plain")
    return {
        "plain": ["--input-dir", raw, "--destdir", plain, "--vocab-size", "150"] + common,
        "arcs": [
            "--split",
            f"train={raw}/train.jsonl",
            "--split",
            f"test={raw}/test.jsonl",
            "--destdir",
            os.path.join(root, "arcs"),
            "--spm-model",
            os.path.join(plain, "spm.model"),
            "--lowercase",
            "--side-data",
            "dep_head",
            "dep_rel",
            "dep_word",
            "graph_similarity",
            "--dep-subword-arcs",
            "all-subwords",
            "--workers",
            "2",
            "--chunk-size",
            "3",
        ]
        + common,
        "gpt2": [
            "--split",
            f"train={raw}/train.jsonl",
            "--split",
            f"valid={raw}/valid.jsonl",
            "--destdir",
            os.path.join(root, "gpt2"),
            "--subword",
            "gpt2",
            "--gpt2-encoder-json",
            gpt2_json,
            "--gpt2-vocab-bpe",
            gpt2_bpe,
            "--dict",
            gpt2_dict,
            "--sentence-splitter",
            "spacy",
            # the reference pipeline's normalisation (GPT-2 BPE defaults to 'whitespace' since issue 34)
            "--text-normalization",
            "clean",
            "--side-data",
            "dep_head",
            "dep_rel",
            "graph_discourse",
        ]
        + common,
    }


def data_bin_digests(directory, root):
    """sha256 (16 hex digits) of every file; the manifest and the ``--skip-bad``
    reports record input paths, made relative to ``root`` first, and the
    SentencePiece model its training prefix (a path), cleared first."""
    from sentencepiece import sentencepiece_model_pb2

    digests = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        if name == "mdsfair.json" or name.endswith(".skipped.txt"):
            data = data.replace(root.encode(), b"<root>")
        if name == "spm.model":
            model = sentencepiece_model_pb2.ModelProto()
            model.ParseFromString(data)
            model.trainer_spec.ClearField("model_prefix")
            data = model.SerializeToString()
        digests[name] = hashlib.sha256(data).hexdigest()[:16]
    return digests


def test_data_bins_are_byte_identical_to_the_reference_pipeline(tmp_path, monkeypatch):
    """Every file of three data-bins equals, byte for byte, what the
    preprocessing code before the corpus-speed rewrite wrote for the same
    input and settings (digests in fixtures/preprocess/regression_digests.json).
    The two ``graph_similarity.bin`` digests were renewed when the cosines
    became rounded to 12 decimals: unrounded, their float64 last bits followed
    the CPU's BLAS kernel and the digests failed on another machine."""
    # SentencePiece training uses os.cpu_count() threads and its result depends
    # on the thread count; pin it so the digests hold on any machine.
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    root = str(tmp_path)
    raw = build_regression_inputs(root)
    with open(REGRESSION_DIGESTS) as f:
        expected = json.load(f)
    for name, argv in regression_configs(root, raw).items():
        run(argv)
        assert data_bin_digests(os.path.join(root, name), root) == expected[name], name


# ------------------------------------------- batched encoding, workers, progress


def reference_encoding(encoder, dictionary, sentences, continues):
    """Symbol by symbol, as preprocessing encoded before batching: tokens,
    word ids per sentence and non-space characters per symbol."""
    from mdsfair.preprocess.subword import non_space_length

    tokens, words, chars = [], [], []
    for sentence, more in zip(sentences, continues):
        symbols = encoder.encode(sentence, continues=more)
        tokens += [dictionary.index(s) for s in symbols]
        words += encoder.word_ids(symbols)
        chars += [non_space_length(encoder.symbol_text(s)) for s in symbols]
    return tokens, words, chars


def test_batched_encoding_equals_symbol_by_symbol(data_bin, tmp_path):
    """One batched call per cluster with lookup tables gives the symbols'
    dictionary indices, word ids and characters, unknown pieces included
    (SentencePiece returns their surface text, not the unknown piece)."""
    from fairseq.data import Dictionary

    from mdsfair.preprocess.subword import GPT2BPEEncoder

    dest = data_bin[0]
    sentences = ["The storm hit Calden.", "Unseen: 一二 ☃ Ωmega ½…", "Repairs began on Tuesday.", "ünïcödé 一"]
    continues = [False, True, True, False]
    encoder = SentencePieceEncoder(os.path.join(dest, "spm.model"))
    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    batch = encoder.encode_sentences(sentences, continues, dictionary)
    tokens, words, chars = reference_encoding(encoder, dictionary, sentences, continues)
    assert dictionary.unk() in tokens  # the unknown path is exercised
    assert batch.tokens.tolist() == tokens and batch.word_ids.tolist() == words
    assert batch.symbol_chars.tolist() == chars
    assert batch.lengths.tolist() == [len(encoder.encode(s)) for s in sentences]

    gpt2_json, gpt2_bpe, gpt2_dict = toy_gpt2_files(str(tmp_path))
    gpt2 = GPT2BPEEncoder(gpt2_json, gpt2_bpe)
    small = Dictionary()
    for i in range(0, 263, 2):  # half of the ids: the others are unknown to this dictionary
        small.add_symbol(str(i))
    batch = gpt2.encode_sentences(sentences, continues, small)
    tokens, words, chars = reference_encoding(gpt2, small, sentences, continues)
    assert small.unk() in tokens
    assert batch.tokens.tolist() == tokens and batch.word_ids.tolist() == words
    assert batch.symbol_chars.tolist() == chars


def test_count_lines(tmp_path):
    from mdsfair.preprocess.split_writer import count_lines

    for content, lines in [(b"", 0), (b"a\n", 1), (b"a\n\nb", 3), (b"a\nb\n", 2)]:
        (tmp_path / "f").write_bytes(content)
        assert count_lines(str(tmp_path / "f")) == lines


def test_progress_advances_per_cluster_with_words_per_second(tmp_path):
    from mdsfair.preprocess.split_writer import Progress

    path = write_jsonl(tmp_path / "x.jsonl", CLUSTERS * 3, raw_lines=[b"\n"])
    progress = Progress("train", path, disable=False)
    assert progress.bar.total == 7
    progress.update(1, 40)
    assert progress.bar.n == 1
    progress.last_postfix -= 1.0  # the postfix is refreshed at most twice a second
    progress.update(2, 60)
    assert progress.bar.n == 2 and progress.words == 100
    assert progress.bar.postfix.endswith("words/s")
    progress.update(6, 0)
    progress.close()
    assert progress.bar.n == 7  # the trailing blank line


def test_worker_pool_streams_clusters_in_order_with_bounded_chunks(data_bin, tmp_path):
    """Two workers, chunks of 3 lines: every line comes back once, in input
    order, one cluster at a time, while at most ``chunks_in_flight`` chunks
    have been read ahead of what was delivered."""
    from mdsfair.preprocess.binarize import get_parser
    from mdsfair.preprocess.worker_pool import OrderedWorkerPool

    dest, rows, _ = data_bin
    path = write_jsonl(tmp_path / "train.jsonl", rows, raw_lines=[b"{bad\n"])
    args = get_parser().parse_args(["--destdir", dest])
    manifest = json.load(open(os.path.join(dest, "mdsfair.json")))
    pool = OrderedWorkerPool(2, args, dest, manifest["subword"], chunks_in_flight=2)
    read = []

    def chunks():
        lines = [(i + 1, line) for i, line in enumerate(open(path, "rb"))]
        for start in range(0, len(lines), 3):
            read.append(start)
            yield lines[start : start + 3]

    try:
        delivered = []
        for line_number, result in pool.imap(path, True, chunks()):
            delivered.append(line_number)
            assert len(read) * 3 - len(delivered) <= 2 * 3  # chunks read ahead of the consumer
            if line_number <= len(rows):
                assert result[0].id == rows[line_number - 1]["id"]
        assert delivered == list(range(1, len(rows) + 2))
        assert result[0] == "error" and result[1].reason == "invalid_json"
        assert pool.stage_seconds["subwords"] > 0
    finally:
        pool.close()


def test_worker_pool_starts_the_next_split_before_this_one_is_finished(data_bin, tmp_path):
    """A feed of three splits (one empty): every split's lines come back in
    order and only with it, and chunks of the next split are handed out while
    the last ones of the current split are still being encoded, so no worker
    waits at a split boundary."""
    from mdsfair.preprocess.binarize import get_parser
    from mdsfair.preprocess.worker_pool import OrderedWorkerPool

    dest, rows, _ = data_bin
    paths = [
        write_jsonl(tmp_path / "a.jsonl", rows[:7]),
        write_jsonl(tmp_path / "empty.jsonl", []),
        write_jsonl(tmp_path / "b.jsonl", rows[7:12]),
    ]
    args = get_parser().parse_args(["--destdir", dest])
    manifest = json.load(open(os.path.join(dest, "mdsfair.json")))
    pool = OrderedWorkerPool(2, args, dest, manifest["subword"], chunks_in_flight=3)
    handed_out = []

    def feed():
        for path in paths:
            lines = [(i + 1, line) for i, line in enumerate(open(path, "rb"))]
            for start in range(0, len(lines), 2):
                handed_out.append(path)
                yield path, True, lines[start : start + 2]
            yield None

    try:
        pool.start(feed())
        ids = []
        for path in paths:
            delivered = []
            for line_number, (encoded, _) in pool.next_split():
                delivered.append(line_number)
                if path == paths[0] and line_number == 7:  # the last line of the first split
                    assert paths[2] in handed_out, "the next split's chunks were not handed out yet"
            ids.append(delivered)
        assert ids == [list(range(1, 8)), [], list(range(1, 6))]
        # the feed was read to its end: the pool takes a new one
        assert [n for n, _ in pool.imap(paths[2], True, [[(1, open(paths[2], "rb").readline())]])] == [1]
    finally:
        pool.close()


class FailingProducer:
    """Test side data that fails on one cluster."""

    spec = SideDataSpec("fails_on_c1", "token", "int32")

    def __init__(self, args):
        pass

    @staticmethod
    def add_args(parser):
        pass

    def __call__(self, cluster, encoded):
        if cluster.id.startswith("c1"):
            raise ValueError(f"cannot annotate cluster {cluster.id}")
        return np.zeros(len(encoded.tokens), dtype=np.int32)


class BlasThreadsProducer(FailingProducer):
    """Test side data: fails where the BLAS of the process runs more than one thread."""

    spec = SideDataSpec("blas_threads", "token", "int32")

    def __call__(self, cluster, encoded):
        from threadpoolctl import threadpool_info

        threads = max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")
        if threads != 1:
            raise ValueError(f"BLAS runs {threads} threads in a worker")
        return np.zeros(len(encoded.tokens), dtype=np.int32)


def test_workers_run_one_blas_thread_each(data_bin, tmp_path):
    """--workers N: each worker keeps numpy's BLAS (spaCy's matrix products)
    to one thread, so N workers use N cores, not N x cores threads."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS

    dest, rows, _ = data_bin
    path = write_jsonl(tmp_path / "train.jsonl", rows[:4])
    SIDE_DATA_PRODUCERS["blas_threads"] = BlasThreadsProducer
    try:
        with threadpool_limits(2, user_api="blas"):  # what an unlimited BLAS starts on a 2-core machine
            assert max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas") == 2
            run(
                [
                    "--split",
                    f"train={path}",
                    "--destdir",
                    str(tmp_path / "bin"),
                    "--spm-model",
                    os.path.join(dest, "spm.model"),
                    "--workers",
                    "2",
                    "--chunk-size",
                    "1",
                    "--no-progress-bar",
                    "--side-data",
                    "blas_threads",
                ]
            )
    finally:
        del SIDE_DATA_PRODUCERS["blas_threads"]


def test_worker_error_reaches_the_command(data_bin, tmp_path, capsys):
    from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS

    dest, rows, _ = data_bin
    path = write_jsonl(tmp_path / "train.jsonl", rows[:6])
    SIDE_DATA_PRODUCERS["fails_on_c1"] = FailingProducer
    try:
        with pytest.raises(SystemExit):
            run(
                [
                    "--split",
                    f"train={path}",
                    "--destdir",
                    str(tmp_path / "bin"),
                    "--spm-model",
                    os.path.join(dest, "spm.model"),
                    "--workers",
                    "2",
                    "--chunk-size",
                    "2",
                    "--no-progress-bar",
                    "--side-data",
                    "fails_on_c1",
                ]
            )
    finally:
        del SIDE_DATA_PRODUCERS["fails_on_c1"]
    assert "cannot annotate cluster c1-1" in capsys.readouterr().err


def test_manifest_producer_arguments_do_not_depend_on_import_order(monkeypatch):
    """The manifest's ``side_data_args`` list the producer flags in one order
    whatever imported the producers first (a test module importing
    paragraph_graphs before dependency_arcs changed mdsfair.json's bytes)."""
    from mdsfair.preprocess import data_bin_writer
    from mdsfair.preprocess.binarize import get_parser
    from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, import_producers

    import_producers()
    args = get_parser().parse_args(["--destdir", "x", "--input-dir", "y"])
    in_registration_order = list(data_bin_writer.producer_arguments(args))
    monkeypatch.setattr(data_bin_writer, "SIDE_DATA_PRODUCERS", dict(reversed(list(SIDE_DATA_PRODUCERS.items()))))
    assert list(data_bin_writer.producer_arguments(args)) == in_registration_order
    assert in_registration_order[0].startswith("dep_")
