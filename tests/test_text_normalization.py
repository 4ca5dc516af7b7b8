"""Text normalisation (issue 34 item 2): separators keep words apart, and a
data-bin for an imported tokenizer gives the BPE the text its checkpoint's
own pipeline gives it."""

import json
import os

import numpy as np
import pytest

from mdsfair.data.indexed import NumpyMMapDataset
from mdsfair.text import rouge_tokens
from tests.utils import SHARED_DATA

# Every white-space character clean_text used to delete: form feed, vertical
# tab and the information separators U+001C-U+001F.
SEPARATED_DOCUMENT = (
    "Line one\x0bline two. The page ends.\x0cNext page\x1cstarts here.\x1dGroup\x1erecord\x1funit words stay apart."
)
SEPARATED_SUMMARY = "Line one\x0cline two.\x0bThe page\x1cends\x1dhere\x1ein\x1fwords."
PLAIN = [
    "The council approved the budget on Tuesday.",
    "Critics said it cuts too much from schools.",
    "A storm hit the coast overnight.",
    "Thousands of homes lost power and roads were closed.",
]


def write_split(path, clusters):
    with open(path, "w", encoding="utf-8") as f:
        for cluster in clusters:
            f.write(json.dumps(cluster, ensure_ascii=False) + "\n")


def read_manifest(data_bin):
    with open(os.path.join(data_bin, "mdsfair.json"), encoding="utf-8") as f:
        return json.load(f)


def stored(data_bin, split, name):
    data = NumpyMMapDataset(os.path.join(data_bin, f"{split}.{name}"))
    return [np.asarray(data[i]).tolist() for i in range(len(data))]


def test_separators_become_spaces_in_source_summary_and_references(tmp_path):
    """Form feed, vertical tab and U+001C-U+001F glued the words either side
    together ("page.Next") in the stored source and in summary.txt, which
    mdsfair-rouge reads as the references, while mdsfair-baseline and ROUGE
    split on them: now they are spaces, and the words are the raw text's."""
    from fairseq.data import Dictionary

    from mdsfair.preprocess.binarize import run
    from mdsfair.preprocess.subword import SentencePieceEncoder

    raw = tmp_path / "raw"
    raw.mkdir()
    clusters = [{"id": "sep", "documents": [SEPARATED_DOCUMENT, PLAIN[0]], "summary": SEPARATED_SUMMARY}]
    clusters += [{"id": f"p{i}", "documents": PLAIN[i:] + PLAIN[:i], "summary": PLAIN[i]} for i in range(4)]
    write_split(raw / "train.jsonl", clusters)
    dest = str(tmp_path / "bin")
    run(["--input-dir", str(raw), "--destdir", dest, "--vocab-size", "300", "--no-progress-bar"])
    summary_line = open(os.path.join(dest, "train.summary.txt"), encoding="utf-8").read().split("\n")[0]
    assert summary_line.split() == SEPARATED_SUMMARY.split()
    assert rouge_tokens(summary_line) == rouge_tokens(SEPARATED_SUMMARY)
    # the stored source and target, decoded, have the raw text's words
    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    encoder = SentencePieceEncoder(os.path.join(dest, "spm.model"))
    source = encoder.decode([dictionary[i] for i in stored(dest, "train", "source")[0]])
    target = encoder.decode([dictionary[i] for i in stored(dest, "train", "target")[0]])
    assert source.split() == (SEPARATED_DOCUMENT + " " + PLAIN[0]).split()
    assert target.split() == SEPARATED_SUMMARY.split()
    # the ROUGE references mdsfair-rouge reads for this data-bin's split
    from mdsfair.evaluation.inputs import read_lines

    assert read_lines(os.path.join(dest, "train.summary.txt"))[0].split() == SEPARATED_SUMMARY.split()


def test_clean_text_turns_every_whitespace_character_but_the_line_break_into_a_space():
    from mdsfair.preprocess.structure import clean_text

    spaces = [chr(i) for i in range(0x110000) if chr(i).isspace() and chr(i) not in "\n\r"]
    for space in spaces:
        assert clean_text(f"a{space}b") == "a b", hex(ord(space))
    assert clean_text("a\r\nb\rc") == "a\nb\nc"
    assert clean_text("a\u200bb\ufeffc\x07d") == "abcd"  # zero-width and control characters still go


# ------------------------------------------------ the checkpoint's own text


def primer_multi_news_document(doc):
    """What allenai/PRIMER's loader does to a document before its tokenizer
    sees it (script/dataloader.py, SummarizationDataset.__getitem__, the
    multi_news branch, copied): newlines become spaces and every run of white
    space one space; the document is then encoded whole,
    ``tokenizer.encode(doc, truncation=True, max_length=...)``. Nothing else
    is done to the text: no Unicode normalisation, no character removed
    (U+200B and U+FEFF are not white space to ``str.split``)."""
    doc = doc.replace("\n", " ")
    doc = " ".join(doc.split())
    return doc


# one cluster per character the clean normalisation changes, and white space of every kind
CHECKPOINT_CASES = {
    "zero_width_space": {
        "documents": ["The council\u200bapproved the budget. Critics\u200b objected."],
        "summary": "The budget\u200bpassed.",
    },
    "byte_order_mark": {
        "documents": ["\ufeffA storm hit the coast. Roads\ufeffwere closed.", "Power\ufeff lost."],
        "summary": "\ufeffA storm.",
    },
    "not_nfc": {
        "documents": ["Cafe\u0301 owners in Zu\u0308rich said no. Prices rose 12%."],
        "summary": "Cafe\u0301 prices rose.",
    },
    "cjk_full_stop": {
        "documents": ["今天很好。明天下雨。他说：“好。”然后走了。", "A storm hit. 北京是首都。"],
        "summary": "今天很好。明天下雨。",
    },
    "white_space": {
        "documents": [
            "First paragraph  here.\nSame paragraph.\r\n\r\nSecond\tparagraph\x0cends.\u00a0Yes.",
            "Second\u2003document.",
        ],
        "summary": "Two  documents,\none summary.",
    },
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A byte-level BPE tokenizer (Hugging Face's BART tokenizer over it), the
    files mdsfair-import hf-bart writes for it, and data-bins of the cases
    with the default normalisation of --subword gpt2 and with --text-normalization clean."""
    from mdsfair.importers.hf_bart_files import bpe_files
    from mdsfair.preprocess.binarize import run
    from tests.import_fixtures import TEXTS, hf_tokenizer, write_tokenizer

    work = tmp_path_factory.mktemp("normalization")
    tokenizer_dir = str(work / "tokenizer")
    vocab = write_tokenizer(tokenizer_dir)
    with open(os.path.join(tokenizer_dir, "config.json"), "w") as f:
        json.dump({"model_type": "bart"}, f)
    bpe = work / "bpe"
    bpe.mkdir()
    bpe_files(tokenizer_dir, len(vocab)).write(str(bpe))
    raw = work / "raw"
    raw.mkdir()
    clusters = [{"id": name, **case} for name, case in CHECKPOINT_CASES.items()]
    write_split(raw / "train.jsonl", [{"id": "t", "documents": TEXTS[:3], "summary": TEXTS[3]}])
    write_split(raw / "test.jsonl", clusters)
    common = [
        "--input-dir",
        str(raw),
        "--subword",
        "gpt2",
        "--gpt2-encoder-json",
        str(bpe / "encoder.json"),
        "--gpt2-vocab-bpe",
        str(bpe / "vocab.bpe"),
        "--dict",
        str(bpe / "dict.txt"),
        "--no-progress-bar",
    ]
    bins = {"default": str(work / "default"), "clean": str(work / "clean"), "work": work}
    run(common + ["--destdir", bins["default"]])
    run(common + ["--destdir", bins["clean"], "--text-normalization", "clean"])
    bins["tokenizer"] = hf_tokenizer(tokenizer_dir)
    bins["names"] = [cluster["id"] for cluster in clusters]
    return bins


def documents_of(data_bin, split, row):
    source, doc = stored(data_bin, split, "source")[row], stored(data_bin, split, "doc")[row]
    return [[t for t, d in zip(source, doc) if d == k] for k in range(max(doc) + 1)]


def test_imported_dictionary_records_whitespace_and_clean_on_request(imported):
    assert read_manifest(imported["default"])["text_normalization"] == "whitespace"
    assert read_manifest(imported["clean"])["text_normalization"] == "clean"


@pytest.mark.parametrize("case", sorted(CHECKPOINT_CASES))
def test_gpt2_data_bin_ids_equal_hf_tokenizer_on_primer_loader_text(imported, case):
    """A data-bin for an imported tokenizer holds, for every document, the
    ids Hugging Face's tokenizer gives the text PRIMER's loader gives it
    (zero-width space and byte-order mark kept, no NFC, no space after a CJK
    full stop), and for the summary the ids of its white-space-normalised
    text. The clean normalisation, the default before, differs on each."""
    tokenizer = imported["tokenizer"]
    row = imported["names"].index(case)
    cluster = CHECKPOINT_CASES[case]
    ours = documents_of(imported["default"], "test", row)
    theirs = [tokenizer(primer_multi_news_document(doc)).input_ids[1:-1] for doc in cluster["documents"]]
    assert ours == theirs
    target = stored(imported["default"], "test", "target")[row]
    assert target == tokenizer(" ".join(cluster["summary"].split())).input_ids[1:-1]
    if case != "white_space":
        assert documents_of(imported["clean"], "test", row) != theirs


def test_whitespace_normalisation_is_primer_loaders_text():
    """The documents' text under 'whitespace', paragraphs joined, is what
    PRIMER's loader gives its tokenizer."""
    from mdsfair.preprocess.structure import normalize_text
    from mdsfair.text import split_paragraphs

    documents = [doc for case in CHECKPOINT_CASES.values() for doc in case["documents"]]
    documents += ["a\r\n\r\nb\rc", "\n\n  lead\x0b\x1cand trail \u2028\u2029 \t\n", "x\u200b \ufeff y\u0301"]
    for document in documents:
        ours = " ".join(split_paragraphs(normalize_text(document, "whitespace")))
        assert ours == primer_multi_news_document(document), repr(document)


def test_the_hub_normalises_as_the_data_bin_records(imported, tmp_path):
    """The hub builds its encoder from the manifest (ClusterEncoder.from_data_bin
    through preprocessing_args): raw clusters are encoded as the data-bin
    stored them under either normalisation, and a manifest without the entry
    (written before it existed) is read as clean."""
    import shutil

    from mdsfair.data.manifest import read_manifest as read_checked
    from mdsfair.preprocess.pipeline import ClusterEncoder, preprocessing_args

    for name in ("default", "clean"):
        data_bin = imported[name]
        manifest = read_checked(data_bin)
        assert preprocessing_args(manifest, data_bin).text_normalization == manifest["text_normalization"]
        encoder = ClusterEncoder.from_data_bin(data_bin, manifest)
        for row, case in enumerate(imported["names"]):
            assert (
                encoder.encode(CHECKPOINT_CASES[case]["documents"]).tokens.tolist()
                == stored(data_bin, "test", "source")[row]
            ), (name, case)
    old = str(tmp_path / "old")
    shutil.copytree(imported["default"], old)
    manifest = read_checked(old)
    del manifest["text_normalization"]
    assert preprocessing_args(manifest, old).text_normalization == "clean"
    manifest["text_normalization"] = "nfkc"
    with pytest.raises(
        ValueError,
        match=r"old/mdsfair.json: text_normalization 'nfkc' is not one of clean, "
        r"whitespace",
    ):
        preprocessing_args(manifest, old)


def test_whitespace_normalisation_with_sentencepiece_is_refused(tmp_path, capsys):
    from mdsfair.preprocess.binarize import run

    raw = tmp_path / "raw"
    raw.mkdir()
    write_split(raw / "train.jsonl", [{"id": "a", "documents": PLAIN, "summary": PLAIN[0]}])
    dest = tmp_path / "bin"
    with pytest.raises(SystemExit) as exit_info:
        run(
            ["--input-dir", str(raw), "--destdir", str(dest), "--text-normalization", "whitespace", "--no-progress-bar"]
        )
    assert exit_info.value.code == 1
    assert (
        "mdsfair-preprocess: error: --text-normalization whitespace is for the byte-level BPE"
        in capsys.readouterr().err
    )
    assert not dest.exists()


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED_DATA, "peersum_sample")), reason="shared data not present")
def test_real_clusters_with_zero_width_spaces_get_the_checkpoints_ids(imported, tmp_path):
    """PeerSum clusters whose reviews hold U+200B (lines 54 and 64 of the
    sample's train split): every document's ids are those HF's tokenizer
    gives PRIMER's loader text."""
    from mdsfair.preprocess.binarize import run

    path = os.path.join(SHARED_DATA, "peersum_sample", "jsonl", "train.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    clusters = [json.loads(lines[number - 1]) for number in (54, 64)]
    assert all(any("\u200b" in doc for doc in cluster["documents"]) for cluster in clusters)
    raw = tmp_path / "raw"
    raw.mkdir()
    write_split(raw / "test.jsonl", clusters)
    bpe = imported["work"] / "bpe"
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
            str(bpe / "encoder.json"),
            "--gpt2-vocab-bpe",
            str(bpe / "vocab.bpe"),
            "--dict",
            str(bpe / "dict.txt"),
            "--no-progress-bar",
            "--allow-empty-summary",
            "--skip-bad",
        ]
    )
    tokenizer = imported["tokenizer"]
    for row, cluster in enumerate(clusters):
        documents = [doc for doc in cluster["documents"] if doc.split()]
        theirs = [tokenizer(primer_multi_news_document(doc)).input_ids[1:-1] for doc in documents]
        assert documents_of(dest, "test", row) == theirs


def test_torch_hub_summarizer_encodes_user_text_as_the_data_bin_did(imported):
    """torch.hub over a model trained on the imported-tokenizer data-bin:
    user text reaches the BPE as the data-bin's recorded normalisation gave
    it (zero-width space kept, no NFC, no space after a CJK full stop)."""
    from tests.utils import one_update_hub_model

    data_bin = imported["default"]
    save_dir = str(imported["work"] / "checkpoints")
    hub = one_update_hub_model(data_bin, save_dir)
    assert hub.cluster_encoder.text_normalization == "whitespace"
    tokenizer = imported["tokenizer"]
    for case in ("zero_width_space", "not_nfc", "cjk_full_stop"):
        documents = CHECKPOINT_CASES[case]["documents"]
        encoded = hub.encode_cluster(documents)
        theirs = [tokenizer(primer_multi_news_document(doc)).input_ids[1:-1] for doc in documents]
        assert [encoded.tokens[encoded.doc_ids == k].tolist() for k in range(len(documents))] == theirs, case


def test_literal_special_tokens_are_text_here_where_hf_reads_them_as_specials(imported, tmp_path):
    """docs/data_contract.md: a literal </s> in text is never a control id
    here (GPT-2 BPE: its ordinary byte-level tokens), where Hugging Face's
    tokenizer reads it as its special token."""
    from mdsfair.data.manifest import read_manifest as read_checked
    from mdsfair.preprocess.pipeline import ClusterEncoder

    tokenizer = imported["tokenizer"]
    text = "The vote </s> passed."
    assert tokenizer.eos_token_id in tokenizer(text).input_ids[1:-1]
    encoder = ClusterEncoder.from_data_bin(imported["default"], read_checked(imported["default"]))
    tokens = encoder.encode([text]).tokens.tolist()
    assert tokenizer.eos_token_id not in tokens and encoder.decode([encoder.dictionary[t] for t in tokens]) == text


def test_an_imports_manifest_records_the_checkpoints_normalisation(tmp_path):
    """mdsfair-import hf-bart's OUT_DIR is a data-bin without splits that the
    hub can load: it records 'whitespace', as a data-bin made with its files."""
    from mdsfair.data.manifest import read_manifest as read_checked
    from mdsfair.importers.hf_bart import import_hf_bart
    from mdsfair.preprocess.pipeline import ClusterEncoder
    from tests.import_fixtures import tiny_hf_bart

    hf_dir, out_dir = str(tmp_path / "hf"), str(tmp_path / "out")
    tiny_hf_bart(hf_dir)
    import_hf_bart(hf_dir, out_dir)
    manifest = read_checked(out_dir)
    assert manifest["text_normalization"] == "whitespace"
    assert ClusterEncoder.from_data_bin(out_dir, manifest).text_normalization == "whitespace"
