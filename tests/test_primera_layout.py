"""PRIMERA's per-document truncation (mdsfair/data/primera_layout.py)
against a copy of the authors' arithmetic in allenai/PRIMER
script/dataloader.py (SummarizationDataset.__getitem__,
join_method "concat_start_wdoc_global")."""

import json
import os
import tempfile

import pytest

from mdsfair.data.primera_layout import primera_truncation
from tests.import_fixtures import TEXTS, hf_tokenizer, write_tokenizer


def authors_join(tokenizer, all_docs, max_input_len, mask_num, docsep_token_id):
    """The authors' loop, copied: each document encoded with
    max_length=(max_input_len - mask_num) // len(all_docs), [1:-1], then
    <doc-sep>; <s> ... </s> around the whole."""
    input_ids = [tokenizer.mask_token_id] * mask_num if mask_num > 0 else []
    for doc in all_docs:
        input_ids.extend(
            tokenizer.encode(doc, truncation=True, max_length=(max_input_len - mask_num) // len(all_docs))[1:-1]
        )
        input_ids.append(docsep_token_id)
    return [tokenizer.bos_token_id] + input_ids + [tokenizer.eos_token_id]


def primera_tokenizer(directory):
    write_tokenizer(directory)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"model_type": "led"}, f)  # AutoTokenizer picks LED's (BART's) byte-level BPE
    tokenizer = hf_tokenizer(directory)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<doc-sep>"]})
    return tokenizer


def test_example_lengths_by_hand():
    # budget 4096, 3 documents: share 1365, 1363 content tokens each; the
    # short one's unused 1263 tokens are not given to the others.
    out = primera_truncation([5000, 100, 1400], 4096)
    assert out["share"] == 1365
    assert out["kept"] == [1363, 100, 1363]
    assert out["cut"] == [3637, 0, 37]
    assert out["source_length"] == 2 + 1364 + 101 + 1364
    # a single long document: one token over the budget, as the authors' layout
    assert primera_truncation([10_000], 4096)["source_length"] == 4097
    assert primera_truncation([10, 10], 4096, mask_num=5)["share"] == 2045
    with pytest.raises(ValueError, match="no content token"):
        primera_truncation([3] * 2000, 4096)


@pytest.mark.parametrize("max_input_len,mask_num", [(16, 0), (23, 0), (40, 0), (41, 5), (300, 0)])
def test_equals_authors_loop_with_a_real_tokenizer(max_input_len, mask_num):
    with tempfile.TemporaryDirectory() as directory:
        tokenizer = primera_tokenizer(directory)
        docsep = tokenizer.convert_tokens_to_ids("<doc-sep>")
        docs = [TEXTS[0] + " " + TEXTS[1], TEXTS[2], TEXTS[3] + " " + TEXTS[4] + " " + TEXTS[5]]
        theirs = authors_join(tokenizer, docs, max_input_len, mask_num, docsep)
        full = [tokenizer.encode(doc)[1:-1] for doc in docs]
        ours = primera_truncation([len(ids) for ids in full], max_input_len, mask_num)
        assert ours["source_length"] == len(theirs)
        # rebuild the joined source from the full encodings and our kept counts
        rebuilt = [tokenizer.bos_token_id] + [tokenizer.mask_token_id] * mask_num
        for ids, kept in zip(full, ours["kept"]):
            rebuilt += ids[:kept] + [docsep]
        rebuilt.append(tokenizer.eos_token_id)
        assert rebuilt == theirs
        assert sum(ours["cut"]) == sum(len(ids) for ids in full) - sum(ours["kept"])
        if max_input_len < 100:
            assert sum(ours["cut"]) > 0  # the case exercises truncation


@pytest.mark.parametrize("max_source_positions", [24, 37, 60, 2000])
def test_task_layout_equals_the_authors_join(max_source_positions):
    """The task's --source-layout primera view of a full stored source (the
    data-bin keeps every token) is the authors' joined input id for id, and
    every token it leaves out is counted."""
    import numpy as np
    from fairseq.data import Dictionary

    from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset
    from mdsfair.data.source_truncation import TruncationConfig

    with tempfile.TemporaryDirectory() as directory:
        tokenizer = primera_tokenizer(directory)
        docsep = tokenizer.convert_tokens_to_ids("<doc-sep>")
        # fairseq's Dictionary numbers <s> <pad> </s> <unk> 0-3 like BART, so
        # the ids of this dictionary are the tokenizer's
        dictionary = Dictionary()
        vocab = tokenizer.get_vocab()
        for token, index in sorted(vocab.items(), key=lambda item: item[1])[4:]:
            assert dictionary.add_symbol(token) == index
        docs = [TEXTS[0] + " " + TEXTS[1], TEXTS[2], TEXTS[3] + " " + TEXTS[4] + " " + TEXTS[5], TEXTS[6]]
        full = [tokenizer.encode(doc)[1:-1] for doc in docs]
        tokens = np.concatenate([np.array(ids) for ids in full])
        doc_ids = np.repeat(np.arange(len(full)), [len(ids) for ids in full])
        dataset = MultiDocSummarizationDataset(
            [tokens],
            [np.array([5, 6])],
            {"doc": [doc_ids], "para": [doc_ids], "sent": [doc_ids]},
            dictionary,
            TruncationConfig(
                max_source_positions=max_source_positions,
                per_document_budget=True,
                document_start_token=False,
                document_separator=docsep,
            ),
            name="primera",
        )
        theirs = authors_join(tokenizer, docs, max_source_positions, 0, docsep)
        item = dataset[0]
        assert item["source"].tolist() == theirs
        counts = dataset.truncation_counts
        assert counts["per_document_budget_tokens"] == len(tokens) - (len(theirs) - 2 - len(docs))
        assert (counts["per_document_budget_tokens"] > 0) == (max_source_positions < 2000)
        assert counts.get("max_source_positions_tokens", 0) == 0  # n >= 2: the layout fits the budget
        assert dataset.src_sizes[0] == len(theirs)
        # every <doc-sep> carries the document it closes
        doc_of = item["structure"]["doc"]
        assert doc_of[item["source"] == docsep].tolist() == list(range(len(docs)))


def test_separator_layout_cuts_at_the_budget_and_counts():
    """Without the per-document budget the whole source is cut at
    max_source_positions, the <doc-sep> of the cut document and </s> included."""
    import numpy as np
    from fairseq.data import Dictionary

    from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset
    from mdsfair.data.source_truncation import TruncationConfig

    dictionary = Dictionary()
    for i in range(40):
        dictionary.add_symbol(f"w{i}")
    sep = dictionary.add_symbol("<doc-sep>")
    tokens = np.arange(10, 22)  # documents of 5, 4, 3 tokens
    doc_ids = np.repeat(np.arange(3), [5, 4, 3])
    dataset = MultiDocSummarizationDataset(
        [tokens],
        [np.array([5])],
        {"doc": [doc_ids], "para": [doc_ids], "sent": [doc_ids]},
        dictionary,
        TruncationConfig(max_source_positions=12, document_start_token=False, document_separator=sep),
        name="sep",
    )
    bos, eos = dictionary.bos(), dictionary.eos()
    assert dataset[0]["source"].tolist() == [bos, 10, 11, 12, 13, 14, sep, 15, 16, 17, sep, eos]
    assert dataset.truncation_counts["max_source_positions_tokens"] == 4
    assert dataset.truncation_counts["max_source_positions_documents"] == 1


def test_task_source_layout_primera_takes_doc_sep_from_the_dictionary(tmp_path):
    """--source-layout primera: the <doc-sep> id is the data-bin dictionary's;
    a dictionary without it is an error naming the data-bin."""
    import shutil

    from fairseq import options, tasks

    from tests.utils import make_tiny_data_bin

    data_bin = make_tiny_data_bin(str(tmp_path / "plain"), train=4, valid=2, test=2)

    def setup(data):
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(
            parser,
            [
                data,
                "--user-dir",
                "mdsfair",
                "--task",
                "multidoc_summarization",
                "--arch",
                "bart_base",
                "--source-layout",
                "primera",
                "--per-document-budget",
                "--max-source-positions",
                "40",
            ],
        )
        return tasks.setup_task(args)

    with pytest.raises(ValueError, match=r"plain.*no <doc-sep> symbol"):
        setup(data_bin).load_dataset("valid")
    with_sep = str(tmp_path / "with-sep")
    shutil.copytree(data_bin, with_sep)
    with open(os.path.join(with_sep, "dict.txt"), "a", encoding="utf-8") as f:
        f.write("<doc-sep> 0 #fairseq:overwrite\n")
    task = setup(with_sep)
    task.load_dataset("valid")
    separator = task.dictionary.index("<doc-sep>")
    assert separator != task.dictionary.unk()
    dataset = task.datasets["valid"]
    for index in range(len(dataset)):
        item = dataset[index]
        source = item["source"].tolist()
        assert source[0] == task.dictionary.bos() and source[-1] == task.dictionary.eos()
        assert task.dictionary.bos() not in source[1:]
        assert source[-2] == separator
        assert source.count(separator) == len(set(item["structure"]["doc"].tolist()))
        assert len(source) <= 40


# ------------------------------------- the layout as a data-bin option


def setup_task(data, *flags):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            data,
            "--user-dir",
            "mdsfair",
            "--task",
            "multidoc_summarization",
            "--arch",
            "bart_base",
            "--max-source-positions",
            "40",
            *flags,
        ],
    )
    return tasks.setup_task(args)


@pytest.fixture(scope="module")
def layout_data_bins(tmp_path_factory):
    """A SentencePiece data-bin (its dict.txt has no <doc-sep>), a dict.txt
    with <doc-sep> appended, and the same clusters preprocessed with
    --source-layout primera and --source-layout documents."""
    import shutil

    from mdsfair.preprocess.binarize import run
    from tests.utils import make_tiny_data_bin

    work = tmp_path_factory.mktemp("layouts")
    plain = make_tiny_data_bin(str(work / "plain"), train=4, valid=2, test=2)
    with_sep = str(work / "dict-with-sep.txt")
    shutil.copyfile(os.path.join(plain, "dict.txt"), with_sep)
    with open(with_sep, "a", encoding="utf-8") as f:
        f.write("<doc-sep> 0 #fairseq:overwrite\n")
    common = [
        "--input-dir",
        str(work / "plain" / "raw"),
        "--spm-model",
        os.path.join(plain, "spm.model"),
        "--no-progress-bar",
    ]
    bins = {"plain": plain, "dict": with_sep}
    for layout in ("primera", "documents"):
        bins[layout] = str(work / layout)
        run(common + ["--destdir", bins[layout], "--dict", with_sep, "--source-layout", layout])
    bins["common"] = common
    bins["work"] = str(work)
    return bins


def test_preprocess_records_the_layout_and_the_dictionary_doc_sep_id(layout_data_bins):
    from fairseq.data import Dictionary

    separator = Dictionary.load(layout_data_bins["dict"]).index("<doc-sep>")
    assert separator == len(Dictionary.load(os.path.join(layout_data_bins["plain"], "dict.txt")))
    with open(os.path.join(layout_data_bins["primera"], "mdsfair.json"), encoding="utf-8") as f:
        assert json.load(f)["source_layout"] == {
            "name": "primera",
            "document_separator": "<doc-sep>",
            "document_separator_id": separator,
            "per_document_budget": True,
        }
    with open(os.path.join(layout_data_bins["documents"], "mdsfair.json"), encoding="utf-8") as f:
        assert json.load(f)["source_layout"] == {"name": "documents"}
    with open(os.path.join(layout_data_bins["plain"], "mdsfair.json"), encoding="utf-8") as f:
        assert "source_layout" not in json.load(f)  # not asked for: nothing recorded


def test_preprocess_primera_layout_needs_doc_sep_in_the_dictionary(layout_data_bins, capsys):
    """A --dict without <doc-sep> is refused before anything is encoded,
    naming the dictionary file; nothing is written."""
    from mdsfair.preprocess.binarize import run

    plain_dict = os.path.join(layout_data_bins["plain"], "dict.txt")
    destdir = os.path.join(layout_data_bins["work"], "refused")
    with pytest.raises(SystemExit) as exit_info:
        run(layout_data_bins["common"] + ["--destdir", destdir, "--dict", plain_dict, "--source-layout", "primera"])
    assert exit_info.value.code == 1
    error = capsys.readouterr().err
    assert f"{plain_dict}: --source-layout primera needs the <doc-sep> symbol" in error
    assert not os.path.exists(os.path.join(destdir, "mdsfair.json"))


def test_task_takes_the_recorded_layout_and_its_per_document_truncation(layout_data_bins):
    """No --source-layout: the data-bin's PRIMERA layout, with PRIMERA's
    per-document truncation; the same sources as the explicit flags."""
    task = setup_task(layout_data_bins["primera"])
    explicit = setup_task(layout_data_bins["primera"], "--source-layout", "primera", "--per-document-budget")
    separator = task.dictionary.index("<doc-sep>")
    config = task.truncation_config()
    assert task.source_layout == "primera" and not task.source_layout_explicit
    assert config.document_separator == separator and config.per_document_budget
    assert config == explicit.truncation_config()
    task.load_dataset("valid")
    explicit.load_dataset("valid")
    for index in range(len(task.datasets["valid"])):
        source = task.datasets["valid"][index]["source"].tolist()
        assert source == explicit.datasets["valid"][index]["source"].tolist()
        assert source[-2] == separator and task.dictionary.bos() not in source[1:]
    # repeating --source-layout primera (the primera arch sets it) keeps the recorded truncation
    assert setup_task(layout_data_bins["primera"], "--source-layout", "primera").truncation_config() == config
    # a data-bin recording 'documents', or nothing, joins documents with <s>
    for name in ("documents", "plain"):
        other = setup_task(layout_data_bins[name])
        assert other.source_layout == "documents" and other.truncation_config().document_separator is None


@pytest.mark.parametrize(
    "data_bin,flag,recorded", [("primera", "documents", "primera"), ("documents", "primera", "documents")]
)
def test_task_refuses_a_layout_contradicting_the_data_bin(layout_data_bins, data_bin, flag, recorded):
    path = os.path.join(layout_data_bins[data_bin], "mdsfair.json")
    with pytest.raises(
        ValueError,
        match=rf"--source-layout {flag} contradicts the layout '{recorded}' that "
        rf"{path} records",
    ):
        setup_task(layout_data_bins[data_bin], "--source-layout", flag)


def test_task_refuses_a_replaced_dictionary_under_the_recorded_layout(layout_data_bins, tmp_path):
    """The recorded <doc-sep> id must still be the dictionary's."""
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(layout_data_bins["primera"], copy)
    shutil.copyfile(os.path.join(layout_data_bins["plain"], "dict.txt"), os.path.join(copy, "dict.txt"))
    with pytest.raises(
        ValueError,
        match=r"copy/mdsfair.json: the PRIMERA layout was preprocessed with <doc-sep> = "
        r"\d+, but the data-bin's dictionary gives no such symbol",
    ):
        setup_task(copy)


def test_every_epoch_shard_records_the_layout(layout_data_bins, tmp_path):
    """--shards with --source-layout primera: each shard's manifest records
    the layout and <doc-sep> id, and the task over DATA = shard0:shard1 takes
    it (open_epoch_shards compares the shards' layouts)."""
    from mdsfair.preprocess.binarize import run

    destdir = str(tmp_path / "sharded")
    run(
        layout_data_bins["common"]
        + ["--destdir", destdir, "--dict", layout_data_bins["dict"], "--source-layout", "primera", "--shards", "2"]
    )
    shards = [os.path.join(destdir, f"shard{index}") for index in range(2)]
    layouts = []
    for shard in shards:
        with open(os.path.join(shard, "mdsfair.json"), encoding="utf-8") as f:
            layouts.append(json.load(f)["source_layout"])
    assert layouts[0] == layouts[1] and layouts[0]["name"] == "primera"
    assert setup_task(os.pathsep.join(shards)).source_layout == "primera"
    with open(os.path.join(shards[1], "mdsfair.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    manifest["source_layout"] = {"name": "documents"}
    with open(os.path.join(shards[1], "mdsfair.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    with pytest.raises(ValueError, match=r"epoch shard .*shard1 does not match the first shard .*source layout"):
        setup_task(os.pathsep.join(shards))
