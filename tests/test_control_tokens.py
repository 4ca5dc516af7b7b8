"""User text never becomes a control token (issue 34 item 1).

A SentencePiece model trained on one language returns a span it has never
seen as one unknown piece whose surface text is the span: a literal ``</s>``,
``<pad>``, ``<s>``, ``<mask>`` or ``<doc-sep>`` in the text was looked up in
the dictionary by that surface and became the control id (the stored source
held ``</s>`` and ``<pad>``; under ``--source-layout primera`` a 2-document
cluster got 3 ``<doc-sep>``), and the report counted only the literal
``<unk>``. A GPT-2 token missing from ``encoder.json`` was a KeyError
traceback. Every path from text to ids (mdsfair-preprocess, the hub, the
extra references) now maps a span that is not a known piece, and a piece whose
entry is a control symbol, to ``<unk>``, one per span, counted in the report.
"""

import json
import os

import numpy as np
import pytest

from mdsfair.data.indexed import NumpyMMapDataset

# Training text of one script (no Latin letters, no < > / -): every literal
# control symbol below is a span this SentencePiece model has never seen.
CHINESE = [
    "今天天气很好。",
    "我们去公园散步。",
    "北京是中国的首都。",
    "他们在学校学习中文和数学。",
    "这个城市有很多人。",
    "我喜欢喝茶和咖啡。",
    "明天会下雨吗。",
    "老师说学生们都很努力。",
]
LITERALS = ["</s>", "<pad>", "<s>", "<unk>", "<mask>", "<doc-sep>"]


def chinese_cluster(index, documents=None, summary=None):
    documents = documents or [CHINESE[index % 8] + CHINESE[(index + 1) % 8], CHINESE[(index + 2) % 8]]
    return {"id": f"c{index}", "documents": documents, "summary": summary or CHINESE[(index + 3) % 8]}


# Valid split: every literal as its own space-separated span, in a document and in the summary.
HOSTILE_DOCUMENT = "今天 " + " 北京 ".join(LITERALS) + " 中国。"
HOSTILE_SUMMARY = "他们 </s> 学习 <pad> 中文。"
HOSTILE_VALID = [
    chinese_cluster(0, documents=[HOSTILE_DOCUMENT, CHINESE[2]], summary=HOSTILE_SUMMARY),
    # PRIMERA's layout: two documents, the first holding a literal <doc-sep>
    chinese_cluster(1, documents=["我们 <doc-sep> 公园。", CHINESE[3]]),
]


def write_split(path, clusters):
    with open(path, "w", encoding="utf-8") as f:
        for cluster in clusters:
            f.write(json.dumps(cluster, ensure_ascii=False) + "\n")


def stream(data_bin, split, name):
    data = NumpyMMapDataset(os.path.join(data_bin, f"{split}.{name}"))
    return [np.asarray(data[i]).tolist() for i in range(len(data))]


def manifest(data_bin):
    with open(os.path.join(data_bin, "mdsfair.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def chinese_bins(tmp_path_factory):
    """A SentencePiece model trained on Chinese only; a dict.txt with
    ``<mask>`` and ``<doc-sep>`` appended (an imported model's); data-bins
    with that dictionary, plain and with ``--source-layout primera``."""
    from mdsfair.preprocess.binarize import run

    work = tmp_path_factory.mktemp("control")
    raw = work / "raw"
    raw.mkdir()
    write_split(raw / "train.jsonl", [chinese_cluster(i) for i in range(12)])
    write_split(raw / "valid.jsonl", HOSTILE_VALID)
    plain = str(work / "plain")
    run(["--input-dir", str(raw), "--destdir", plain, "--vocab-size", "80", "--no-progress-bar"])
    with_controls = str(work / "dict.txt")
    with open(os.path.join(plain, "dict.txt"), encoding="utf-8") as f:
        text = f.read()
    with open(with_controls, "w", encoding="utf-8") as f:
        f.write(text + "<mask> 0 #fairseq:overwrite\n<doc-sep> 0 #fairseq:overwrite\n")
    common = [
        "--input-dir",
        str(raw),
        "--spm-model",
        os.path.join(plain, "spm.model"),
        "--dict",
        with_controls,
        "--no-progress-bar",
    ]
    bins = {"plain": plain, "controls": str(work / "controls"), "primera": str(work / "primera"), "work": work}
    run(common + ["--destdir", bins["controls"]])
    run(common + ["--destdir", bins["primera"], "--source-layout", "primera"])
    return bins


def control_ids(data_bin):
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(os.path.join(data_bin, "dict.txt"))
    # every control id but <unk>, which is what a literal becomes
    return dictionary, {dictionary.index(s) for s in LITERALS if s in dictionary.indices} - {dictionary.unk()}


@pytest.mark.parametrize("name", ["plain", "controls"])
def test_sentencepiece_stores_no_control_id_and_counts_every_span(chinese_bins, name):
    data_bin = chinese_bins[name]
    dictionary, controls = control_ids(data_bin)
    assert {"<mask>", "<doc-sep>"} <= set(dictionary.indices) or name == "plain"
    for kind in ("source", "target"):
        for row in stream(data_bin, "valid", kind):
            assert not controls & set(row), (kind, [dictionary[i] for i in row])
    source = stream(data_bin, "valid", "source")
    target = stream(data_bin, "valid", "target")
    unk = dictionary.unk()
    # every literal is its own <unk>: 6 in the first document, 2 in its summary, 1 in the second cluster
    assert source[0].count(unk) == len(LITERALS) and target[0].count(unk) == 2 and source[1].count(unk) == 1
    assert manifest(data_bin)["splits"]["valid"]["unknown_tokens"] == len(LITERALS) + 2 + 1
    assert manifest(data_bin)["splits"]["train"]["unknown_tokens"] == 0


def test_primera_layout_gets_one_doc_sep_per_document(chinese_bins):
    """PRIMERA's layout writes a <doc-sep> after every document, the last one
    included (allenai/PRIMER script/dataloader.py, concat_start_wdoc_global):
    a 2-document cluster has exactly 2, however many the text spells out."""
    from fairseq import options, tasks

    data_bin = chinese_bins["primera"]
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            data_bin,
            "--user-dir",
            "mdsfair",
            "--task",
            "multidoc_summarization",
            "--arch",
            "bart_base",
            "--max-source-positions",
            "200",
        ],
    )
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    dictionary = task.dictionary
    separator = dictionary.index("<doc-sep>")
    assert separator != dictionary.unk()
    source = task.datasets["valid"][1]["source"].tolist()
    assert source.count(separator) == 2
    assert separator not in stream(data_bin, "valid", "source")[1]  # nothing of the text is a separator
    assert source[0] == dictionary.bos() and source[-1] == dictionary.eos()
    assert source.count(dictionary.bos()) == 1 and source.count(dictionary.eos()) == 1
    assert dictionary.pad() not in source


def test_extra_references_and_filler_lookup_map_controls_to_unk(chinese_bins):
    """The extra references' encoder and a symbol list read from a file go
    through the same lookup."""
    from mdsfair.preprocess.references import ReferenceTargetEncoder

    data_bin = chinese_bins["controls"]
    dictionary, controls = control_ids(data_bin)
    encode = ReferenceTargetEncoder(data_bin, manifest(data_bin)["subword"])
    ids = encode(HOSTILE_SUMMARY).tolist()
    assert not controls & set(ids) and ids.count(dictionary.unk()) == 2
    from mdsfair.preprocess.subword import text_symbol_indices

    # symbols given as text (mdsfair-page-importance --summaries): a control symbol is <unk>
    looked_up = text_symbol_indices(dictionary, ["▁今", "</s>", "<doc-sep>", "<pad>", "▁今"]).tolist()
    assert looked_up == [dictionary.index("▁今")] + [dictionary.unk()] * 3 + [dictionary.index("▁今")]


def test_gpt2_bpe_never_gives_a_control_id_and_counts_unknown_tokens(tmp_path):
    """GPT-2 BPE: the literal control symbols are ordinary byte-level text,
    never a control id; a BPE token that encoder.json lacks (here: every
    non-ASCII byte) is one <unk> per span and counted, where it was a KeyError
    traceback."""
    from fairseq.data import Dictionary
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    from mdsfair.preprocess.binarize import run

    byte_encoder = bytes_to_unicode()
    vocab = {byte_encoder[b]: i for i, b in enumerate(range(32, 127))}  # printable ASCII only
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    (tmp_path / "encoder.json").write_text(json.dumps(vocab))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    (tmp_path / "dict.txt").write_text(
        "".join(f"{i} 1\n" for i in range(len(vocab))) + "<mask> 1 #fairseq:overwrite\n<doc-sep> 1 #fairseq:overwrite\n"
    )
    raw = tmp_path / "raw"
    raw.mkdir()
    text = "The cat </s> sat <pad> on <s> the <unk> mat <mask> and <doc-sep> ran."
    write_split(
        raw / "train.jsonl",
        [
            {
                "id": "a",
                "documents": [text, "A caf\u00e9 in Z\u00fcrich, na\u00efve."],
                "summary": "The \u00fcber cat.",
            },
            {"id": "b", "documents": ["Plain text here."], "summary": "Plain."},
        ],
    )
    dest = str(tmp_path / "bin")
    run(
        [
            "--input-dir",
            str(raw),
            "--destdir",
            dest,
            "--subword",
            "gpt2",
            "--gpt2-encoder-json",
            str(tmp_path / "encoder.json"),
            "--gpt2-vocab-bpe",
            str(tmp_path / "vocab.bpe"),
            "--dict",
            str(tmp_path / "dict.txt"),
            "--no-progress-bar",
        ]
    )
    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    controls = {dictionary.index(s) for s in LITERALS}
    source, target = stream(dest, "train", "source"), stream(dest, "train", "target")
    for row in source + target:
        assert not controls - {dictionary.unk()} & set(row)
    # é, ü, ï: one unknown span each (their two bytes form one span); the literals are known bytes
    assert source[0].count(dictionary.unk()) == 3 and target[0].count(dictionary.unk()) == 1
    assert manifest(dest)["splits"]["train"]["unknown_tokens"] == 4
    # the literal text is kept as ordinary byte-level tokens
    symbols = [dictionary[i] for i in source[0]]
    decoded = "".join(bytes_to_unicode_inverse(byte_encoder, vocab, s) for s in symbols)
    assert "</s>" in decoded and "<doc-sep>" in decoded


def bytes_to_unicode_inverse(byte_encoder, vocab, symbol):
    decoder = {i: token for token, i in vocab.items()}
    byte_decoder = {c: b for b, c in byte_encoder.items()}
    if not symbol.isdigit():
        return "?"
    return bytes(byte_decoder[c] for c in decoder[int(symbol)]).decode("utf-8")


@pytest.fixture(scope="module")
def chinese_hub(chinese_bins):
    """A stock transformer trained for one update on the data-bin whose
    dictionary holds <mask> and <doc-sep>, loaded through torch.hub."""
    from tests.utils import one_update_hub_model

    data_bin = chinese_bins["controls"]
    save_dir = str(chinese_bins["work"] / "checkpoints")
    return one_update_hub_model(data_bin, save_dir)


def test_hub_encodes_literal_controls_as_unk(chinese_hub, chinese_bins):
    dictionary, controls = control_ids(chinese_bins["controls"])
    encoded = chinese_hub.encode_cluster([HOSTILE_DOCUMENT, "我们 <doc-sep> 公园。"])
    assert not controls & set(encoded.tokens.tolist())
    assert encoded.tokens.tolist().count(dictionary.unk()) == len(LITERALS) + 1 == encoded.num_unknown
    # what the hub feeds the model: only the pipeline's <s> / </s>
    dataset = chinese_hub.task.build_dataset_for_inference([encoded])
    source = dataset[0]["source"].tolist()
    assert source.count(dictionary.eos()) == 1 and dictionary.pad() not in source
    assert dictionary.index("<doc-sep>") not in source and dictionary.index("<mask>") not in source
