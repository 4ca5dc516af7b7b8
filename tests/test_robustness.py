"""No silently wrong results: generation covers every cluster
whatever its reference length, ROUGE scores full references and refuses
incomplete inputs, the hub reports truncation, checkpoints refuse a foreign
dictionary and corrupted weights, and the task logs one readable line per split.

One tiny transformer is trained for the module (fairseq-train in a
subprocess, ``--max-target-positions 16`` so that every test reference is
longer than the training target limit)."""

import json
import logging
import os
import re
import shutil
import struct
import warnings
import zipfile
from collections import Counter

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from mdsfair.checkpoints.checksums import (
    VERIFY_ENV,
    CheckpointIntegrityError,
    file_sha256,
    model_checksum,
    tensor_digest,
    verify_model_checksum,
)
from mdsfair.checkpoints.diagnosis import CheckpointFileError
from mdsfair.checkpoints.fingerprints import (
    DictionaryMismatchError,
    check_data_fingerprint,
    dictionary_fingerprint,
    fingerprint_differences,
)
from mdsfair.checkpoints.record import RECORD_KEY
from mdsfair.checkpoints.stamping import stamp, verify
from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset
from mdsfair.data.source_truncation import TruncationConfig
from mdsfair.evaluation import compare
from mdsfair.evaluation.file_scoring import score_files
from mdsfair.evaluation.inputs import RougeInputError, read_lines
from mdsfair.evaluation.rouge import cli_main as rouge_main
from mdsfair.hub_interface import MultiDocSummarizationHubInterface
from tests.utils import (
    USER_DIR,
    fairseq_cli,
    generate_in_process,
    hypothesis_lines,
    make_tiny_data_bin,
    run_python,
    tiny_transformer,
)

TRAIN_TARGET_LIMIT = 16
TINY_TRANSFORMER = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(embed_dim=32, ffn_embed_dim=64, attention_heads=2),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("robust"))
    data_bin = make_tiny_data_bin(work, train=16, valid=4, test=8)
    save_dir = os.path.join(work, "checkpoints")
    log = fairseq_cli(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            *TINY_TRANSFORMER,
            "--max-source-positions",
            "256",
            "--max-target-positions",
            str(TRAIN_TARGET_LIMIT),
            "--optimizer",
            "adam",
            "--lr",
            "3e-3",
            "--max-tokens",
            "4096",
            "--max-update",
            "2",
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--cpu",
            "--seed",
            "1",
            "--log-format",
            "simple",
        ],
    )
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    raw_test = [json.loads(line) for line in open(os.path.join(work, "raw", "test.jsonl"), encoding="utf-8")]
    return {
        "work": work,
        "data_bin": data_bin,
        "save_dir": save_dir,
        "checkpoint": checkpoint,
        "train_log": log,
        "raw_test": raw_test,
    }


def generate(trained, tmp_path, data_bin=None, checkpoint=None, extra=()):
    return generate_in_process(
        [
            data_bin or trained["data_bin"],
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--path",
            checkpoint or trained["checkpoint"],
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--max-len-b",
            "8",
            "--batch-size",
            "4",
            "--cpu",
            "--max-source-positions",
            "256",
            "--post-process",
            "sentencepiece",
            *extra,
        ],
        str(tmp_path),
    )


@pytest.fixture(scope="module")
def generated(trained, tmp_path_factory):
    """fairseq-generate on the test split with the task's default target
    limit (1024) and a model trained with 16."""
    out = tmp_path_factory.mktemp("generated")
    text = generate(trained, out)
    path = out / "generate-test.txt"
    return {"path": str(path), "text": text}


# ------------------------------------------- 2. every cluster, full references


def toy_dataset(target_lengths, truncate_target=True, max_target_positions=1024):
    dictionary = Dictionary()
    for i in range(20):
        dictionary.add_symbol(f"w{i}")
    tokens = [np.arange(4, 10)] * len(target_lengths)
    ids = [np.array([0, 0, 0, 1, 1, 1])] * len(target_lengths)
    targets = [np.full(n, 5) for n in target_lengths]
    return MultiDocSummarizationDataset(
        tokens,
        targets,
        {"doc": ids, "para": ids, "sent": ids},
        dictionary,
        TruncationConfig(
            max_source_positions=64, max_target_positions=max_target_positions, truncate_target=truncate_target
        ),
        name="toy",
    )


def test_size_filter_cuts_targets_to_the_model_limit_instead_of_dropping():
    dataset = toy_dataset([3, 30, 12])
    kept, ignored = dataset.filter_indices_by_size(np.arange(3), (64, 10))
    assert kept.tolist() == [0, 1, 2] and ignored == []
    assert [len(dataset[i]["target"]) for i in range(3)] == [4, 10, 10]  # + </s>, cut at 10
    assert dataset.tgt_sizes.tolist() == [4, 10, 10]
    assert dataset.truncation_counts["target_examples_truncated"] == 2
    assert dataset.truncation_counts["target_tokens_truncated"] == (31 - 10) + (13 - 10)
    # a source over its limit is still reported (fairseq stops or skips it)
    kept, ignored = dataset.filter_indices_by_size(np.arange(3), (8, 10))
    assert kept.tolist() == [] and ignored == [0, 1, 2]
    # --no-truncate-target keeps fairseq's filtering of long targets
    dataset = toy_dataset([3, 30], truncate_target=False)
    kept, ignored = dataset.filter_indices_by_size(np.arange(2), (64, 10))
    assert kept.tolist() == [0] and ignored == [1]


def test_generation_covers_every_cluster_whose_reference_exceeds_the_training_limit(trained, generated):
    target_tokens = [len(t) for t in read_lines(os.path.join(trained["data_bin"], "test.summary.txt"))]
    assert len(target_tokens) == 8
    ids = sorted(int(line.split("\t")[0][2:]) for line in generated["text"].splitlines() if line.startswith("H-"))
    assert ids == list(range(8))


def test_rouge_scores_full_data_bin_references_not_cut_target_lines(trained, generated, tmp_path):
    summaries = os.path.join(trained["data_bin"], "test.summary.txt")
    references = read_lines(summaries)
    # The T- lines are the targets cut at the model's 16 tokens: shorter than the references.
    targets = {
        int(line.split("\t")[0][2:]): line.split("\t")[1]
        for line in generated["text"].splitlines()
        if line.startswith("T-")
    }
    assert all(len(targets[i].split()) < len(references[i].split()) for i in range(8))
    # The generate log with every hypothesis replaced by its full reference.
    lines = []
    for line in generated["text"].splitlines():
        if line[:2] in ("H-", "D-"):
            fields = line.split("\t")
            line = "\t".join([fields[0], fields[1], references[int(fields[0][2:])]])
        lines.append(line)
    log = tmp_path / "perfect.out"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = score_files(str(log), fast=True, per_cluster=True, data_bin=trained["data_bin"], split="test")
    assert result["info"]["references"] == summaries
    assert result["per_cluster"]["rouge-1"]["f"] == pytest.approx([1.0] * 8)
    assert result["per_cluster"] == score_files(str(log), summaries, fast=True, per_cluster=True)["per_cluster"]
    cut = score_files(str(log), fast=True, per_cluster=True, target_lines=True, expected=8)
    # against the cut T- lines the full text has most words extra (the last
    # word of a cut target may be cut inside a word, so recall is not 1)
    assert all(r > 0.8 for r in cut["per_cluster"]["rouge-1"]["r"])
    assert all(p < 0.6 for p in cut["per_cluster"]["rouge-1"]["p"])


def test_rouge_finds_the_data_bin_named_in_a_captured_log(trained, generated, tmp_path):
    log = tmp_path / "gen.log"
    line = f"INFO | split test of data-bin {trained['data_bin']}: 8 clusters, source tokens kept 50.0% (1 of 2)\n"
    log.write_text(line + generated["text"], encoding="utf-8")
    result = score_files(str(log), fast=True)
    assert result["info"]["references"] == os.path.join(trained["data_bin"], "test.summary.txt")


# --------------------------------------------- 3. incomplete inputs to ROUGE


def test_rouge_refuses_a_log_cut_in_half_naming_the_missing_ids(trained, generated, tmp_path, capsys):
    kept_ids = {"0", "1", "2", "3"}
    half = [
        line
        for line in generated["text"].splitlines()
        if line[:2] not in ("H-", "D-", "T-", "S-", "P-") or line.split("\t")[0][2:] in kept_ids
    ]
    path = tmp_path / "half.out"
    path.write_text("\n".join(half) + "\n", encoding="utf-8")
    with pytest.raises(RougeInputError, match=r"no hypothesis for 4 of 8 clusters \(ids 4, 5, 6, 7\)"):
        score_files(str(path), fast=True, data_bin=trained["data_bin"])
    with pytest.raises(SystemExit):
        rouge_main([str(path), "--fast", "--data-bin", trained["data_bin"], "--split", "test"])
    assert "ids 4, 5, 6, 7" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.cli_main(["--fast", "--data-bin", trained["data_bin"], f"model={path}"])
    assert "ids 4, 5, 6, 7" in capsys.readouterr().err
    # --expected for T- lines; REF files give the count too
    with pytest.raises(RougeInputError, match=r"ids 4, 5, 6, 7"):
        score_files(str(path), fast=True, target_lines=True, expected=8)
    with pytest.raises(RougeInputError, match=r"ids 4, 5, 6, 7"):
        score_files(str(path), os.path.join(trained["data_bin"], "test.summary.txt"), fast=True)
    # plain hypotheses: one line per cluster of the data-bin split
    plain = tmp_path / "plain.txt"
    plain.write_text("a summary\n" * 5, encoding="utf-8")
    with pytest.raises(RougeInputError, match=r"plain\.txt has 5 hypotheses but data-bin .* has 8 clusters"):
        score_files(str(plain), fast=True, data_bin=trained["data_bin"])
    with pytest.raises(RougeInputError, match="--expected 7 but"):
        score_files(generated["path"], fast=True, data_bin=trained["data_bin"], expected=7)


# ----------------------------------------------- 4. hub truncation reported


def test_hub_summarize_warns_per_cut_cluster_and_returns_counts(trained, caplog):
    limit = 128
    hub = MultiDocSummarizationHubInterface.from_pretrained(
        trained["save_dir"],
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=trained["data_bin"],
        max_source_positions=limit,
    )
    clusters = trained["raw_test"][:3]
    options = {"beam": 2, "max_len_b": 6}
    with caplog.at_level(logging.WARNING, logger="mdsfair.hub_interface"):
        summaries, truncation = hub.summarize(clusters, return_truncation=True, **options)
        assert summaries == hub.summarize(clusters, **options)
    for index, (cluster, cut) in enumerate(zip(clusters, truncation)):
        encoded = hub.encode_cluster(cluster, index)
        assert cut["source_tokens"] == len(encoded.tokens)
        assert cut["documents"] == len([d for d in cluster["documents"] if d.strip()])
        # kept tokens + one <s> per kept document + </s> fill the budget
        # (one short when the next document's <s> would stand alone)
        assert limit - 1 <= cut["source_tokens_kept"] + cut["documents_kept"] + 1 <= limit
        assert sum(cut["tokens_cut_by"].values()) == cut["source_tokens"] - cut["source_tokens_kept"]
        assert cut["documents_kept"] < cut["documents"]
        assert (
            f"cluster {index}: the model sees {cut['source_tokens_kept']:,} of {cut['source_tokens']:,} source tokens"
        ) in caplog.text
    assert caplog.text.count("the model sees") == 2 * len(clusters)  # two summarize calls


# ------------------------------------------------ 5. foreign dictionaries


def data_bin_with_permuted_dictionary(data_bin: str, destination: str) -> str:
    """A copy of ``data_bin`` whose dict.txt lists the same symbols in reverse
    order: equal size, (almost) every id means another piece."""
    shutil.copytree(data_bin, destination)
    path = os.path.join(destination, "dict.txt")
    lines = open(path, encoding="utf-8").read().splitlines()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(reversed(lines)) + "\n")
    return destination


@pytest.fixture(scope="module")
def other_data_bin(trained):
    return data_bin_with_permuted_dictionary(trained["data_bin"], os.path.join(trained["work"], "other-data-bin"))


def test_checkpoint_records_data_fingerprint_and_weight_checksum(trained):
    state = torch.load(trained["checkpoint"], map_location="cpu", weights_only=False)
    record = state["task_state"][RECORD_KEY]
    dictionary = Dictionary.load(os.path.join(trained["data_bin"], "dict.txt"))
    assert record["data"]["data_bins"] == [os.path.abspath(trained["data_bin"])]
    assert record["data"]["dictionary"] == dictionary_fingerprint(dictionary)
    spm = os.path.join(trained["data_bin"], "spm.model")
    assert record["data"]["subword"] == {"type": "sentencepiece", "files": {"spm.model": file_sha256(spm)}}
    assert set(record["model_checksum"]["tensors"]) == {k for k, v in state["model"].items() if torch.is_tensor(v)}
    name = "encoder.layers.0.fc1.weight"
    assert record["model_checksum"]["tensors"][name] == tensor_digest(state["model"][name])


def test_task_state_checksums_the_model_it_built_unless_told_not_to(trained):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(
        options.get_training_parser(), [trained["data_bin"], "--user-dir", USER_DIR, *TINY_TRANSFORMER]
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    record = task.state_dict()[RECORD_KEY]
    assert record["model_checksum"] == model_checksum(model.state_dict())
    assert record["data"] == task.data_fingerprint()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert task.state_dict()[RECORD_KEY]["model_checksum"] != record["model_checksum"]
    task.cfg.no_checkpoint_checksum = True
    assert "model_checksum" not in task.state_dict()[RECORD_KEY]
    task.load_state_dict({RECORD_KEY: record})  # the record is not task state
    assert RECORD_KEY not in task.state.state_dict


def test_generate_refuses_a_data_bin_with_another_dictionary(trained, other_data_bin, tmp_path):
    same_size = [len(Dictionary.load(os.path.join(d, "dict.txt"))) for d in (trained["data_bin"], other_data_bin)]
    assert same_size[0] == same_size[1]
    with pytest.raises(DictionaryMismatchError) as error:
        generate(trained, tmp_path / "refused", data_bin=other_data_bin)
    message = str(error.value)
    assert os.path.abspath(trained["data_bin"]) in message and os.path.abspath(other_data_bin) in message
    assert trained["checkpoint"] in message and "--allow-dictionary-mismatch" in message
    text = generate(trained, tmp_path / "allowed", data_bin=other_data_bin, extra=["--allow-dictionary-mismatch"])
    assert len(hypothesis_lines(text)) == 8


def test_hub_refuses_a_data_bin_with_another_dictionary(trained, other_data_bin):
    load = lambda **kw: MultiDocSummarizationHubInterface.from_pretrained(  # noqa: E731
        trained["save_dir"], checkpoint_file="checkpoint_last.pt", data_name_or_path=other_data_bin, **kw
    )
    with pytest.raises(DictionaryMismatchError, match="other-data-bin"):
        load()
    assert isinstance(load(allow_dictionary_mismatch=True), MultiDocSummarizationHubInterface)


def test_restore_file_fine_tuning_refuses_another_dictionary(trained, other_data_bin, tmp_path):
    with pytest.raises(RuntimeError) as error:
        fairseq_cli(
            "fairseq_cli.train",
            [
                other_data_bin,
                "--user-dir",
                USER_DIR,
                *TINY_TRANSFORMER,
                "--max-source-positions",
                "256",
                "--max-target-positions",
                str(TRAIN_TARGET_LIMIT),
                "--optimizer",
                "adam",
                "--lr",
                "3e-3",
                "--max-tokens",
                "4096",
                "--max-update",
                "1",
                "--restore-file",
                trained["checkpoint"],
                "--reset-optimizer",
                "--reset-dataloader",
                "--reset-meters",
                "--save-dir",
                str(tmp_path / "ft"),
                "--cpu",
                "--disable-validation",
            ],
        )
    output = str(error.value)
    assert "DictionaryMismatchError" in output
    assert f"trained on data-bin {os.path.abspath(trained['data_bin'])}" in output
    assert f"this run uses data-bin {os.path.abspath(other_data_bin)}" in output


def test_fingerprint_differences_name_dictionary_and_subword_model():
    trained = {
        "data_bins": ["/a"],
        "dictionary": {"size": 5, "sha256": "1" * 64},
        "subword": {"type": "sentencepiece", "files": {"spm.model": "2" * 64}},
    }
    assert fingerprint_differences(trained, dict(trained)) == []
    other_spm = {**trained, "subword": {"type": "sentencepiece", "files": {"spm.model": "3" * 64}}}
    assert [d.split(":")[0] for d in fingerprint_differences(trained, other_spm)] == ["subword model"]
    other_dict = {**trained, "dictionary": {"size": 5, "sha256": "4" * 64}}
    with pytest.raises(DictionaryMismatchError, match=r"trained on data-bin /a.*dictionary: 5 symbols"):
        check_data_fingerprint(trained, {**other_dict, "data_bins": ["/b"]}, "c.pt", False)
    check_data_fingerprint(trained, {**other_dict, "data_bins": ["/b"]}, "c.pt", True)  # allowed


# ------------------------------------------------- 6. checkpoint integrity


def load_with_fairseq(path):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(path)


def test_empty_lfs_pointer_and_truncated_checkpoints_name_file_and_cause(trained, tmp_path):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointFileError, match=r"empty\.pt is empty \(0 bytes\)"):
        load_with_fairseq(str(empty))
    pointer = tmp_path / "pointer.pt"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4096\n")
    with pytest.raises(CheckpointFileError, match=r"pointer\.pt is a Git LFS pointer .*git lfs pull"):
        load_with_fairseq(str(pointer))
    content = open(trained["checkpoint"], "rb").read()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(content[: len(content) // 2])
    with pytest.raises(CheckpointFileError, match=r"truncated\.pt .*truncated"):
        load_with_fairseq(str(truncated))
    not_torch = tmp_path / "notes.pt"
    not_torch.write_text("vocabulary notes\n")
    with pytest.raises(CheckpointFileError, match=r"notes\.pt .*not a torch checkpoint"):
        load_with_fairseq(str(not_torch))
    # through fairseq-generate too
    with pytest.raises(CheckpointFileError, match=r"empty\.pt is empty"):
        generate(trained, tmp_path / "gen", checkpoint=str(empty))


def flip_bytes_in_largest_tensor(path: str, count: int = 4096) -> None:
    """XOR ``count`` bytes in the middle of the largest tensor storage of a
    torch zip checkpoint, leaving the zip structure intact."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as handle:
        handle.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", handle.read(4))
        size = min(count, info.file_size)
        start = info.header_offset + 30 + name_length + extra_length + (info.file_size - size) // 2
        handle.seek(start)
        flipped = bytes(b ^ 0xFF for b in handle.read(size))
        handle.seek(start)
        handle.write(flipped)


def test_flipped_bytes_inside_tensors_are_detected(trained, tmp_path, monkeypatch):
    corrupted = str(tmp_path / "corrupted.pt")
    shutil.copyfile(trained["checkpoint"], corrupted)
    flip_bytes_in_largest_tensor(corrupted)
    differ = r"corrupted\.pt: the model weights .* differ: .*embed"
    with pytest.raises(CheckpointIntegrityError, match=differ):
        load_with_fairseq(corrupted)
    with pytest.raises(CheckpointIntegrityError, match=r"corrupted\.pt"):
        generate(trained, tmp_path / "gen", checkpoint=corrupted)
    assert load_with_fairseq(trained["checkpoint"])["model"]  # the intact file loads
    monkeypatch.setenv(VERIFY_ENV, "0")
    load_with_fairseq(corrupted)  # verification off
    monkeypatch.delenv(VERIFY_ENV)
    # a deliberate change, re-stamped, loads
    stamp(corrupted)
    assert verify(corrupted)["model_checksum"]
    load_with_fairseq(corrupted)


def test_checksum_follows_the_stored_form_of_half_precision_weights():
    weights = torch.randn(3, 4)
    half = {"w": weights.half(), "shared": weights.half()}
    stored = {"w": weights.half().float(), "shared": weights.half().float()}  # fairseq's move_to_cpu
    assert model_checksum(half) == model_checksum(stored)
    changed = {"w": stored["w"].clone(), "shared": stored["shared"]}
    changed["w"][1, 2] += 1
    with pytest.raises(CheckpointIntegrityError, match=r"1 of 2 tensors differ: w\b"):
        verify_model_checksum(changed, model_checksum(half), "x.pt")


# ------------------------------------------------------- 12. readable logs


def test_truncation_report_is_one_line_with_the_share_of_source_tokens_kept():
    dictionary = Dictionary()
    doc = np.array([0] * 6 + [1] * 3 + [2] * 5)
    tokens = np.arange(10, 24)
    structure = {"doc": [doc, doc[:6]], "para": [doc, doc[:6]], "sent": [doc, doc[:6]]}
    dataset = MultiDocSummarizationDataset(
        [tokens, tokens[:6]],
        [np.array([5, 6, 7])] * 2,
        structure,
        dictionary,
        TruncationConfig(max_source_positions=10, max_target_positions=3),
        name="toy",
    )
    # example 0 keeps <s> 6 tokens <s> 1 token </s> = 10 of 14 positions: 7 of its 14 tokens;
    # example 1 (one document of 6 tokens) keeps all; targets of 4 (with </s>) cut to 3
    assert dataset.truncation_report(label="split test of data-bin d") == (
        "split test of data-bin d: 2 clusters, source tokens kept 65.0% (13 of 20); "
        "--max-source-positions cut 7 tokens in 1 clusters (1 whole documents); "
        "targets cut at 3 tokens: 2 targets, 2 tokens"
    )
    assert dataset.example_truncation(0) == {
        "source_tokens": 14,
        "source_tokens_kept": 7,
        "documents": 3,
        "documents_kept": 2,
        "paragraphs": 3,
        "paragraphs_kept": 2,
        "tokens_cut_by": {"max_source_positions": 7},
    }
    whole = MultiDocSummarizationDataset(
        [tokens],
        [np.array([5])],
        {k: [doc] for k in ("doc", "para", "sent")},
        dictionary,
        TruncationConfig(max_source_positions=100),
        name="toy",
    )
    assert whole.truncation_report() == "toy: 1 clusters, source tokens kept 100.0% (14 of 14); nothing truncated"
    assert whole.truncation_counts == Counter()


#: ``path:line: Category: message`` as Python prints a warning
WARNING_LINE = re.compile(r"^\S.*:\d+: (\w*Warning): (.*)$")


def known_warning_filters(config):
    """The ``ignore`` filters of pytest.ini's filterwarnings: (message regex, category name, module regex)."""
    filters = []
    for line in config.getini("filterwarnings"):
        action, message, category, module = (line.split(":", 4) + ["", "", ""])[:4]
        if action == "ignore":
            filters.append((message, category, module))
    return filters


def test_training_log_has_one_line_per_split_and_only_known_third_party_warnings(trained, request):
    """mdsfair silences nothing in the user's process (fairseq-train shows
    hydra's and torch's notices as fairseq does), so the log may hold
    warnings, but only the known third-party ones pytest.ini filters, and
    none from mdsfair."""
    log = trained["train_log"]
    lines = [line for line in log.splitlines() if "source tokens kept" in line]
    assert len(lines) == 2 and "split train of data-bin" in lines[0] + lines[1]
    known = known_warning_filters(request.config)
    assert (
        "hydra\\.experimental\\.(initialize|compose)\\(\\) is no longer experimental",
        "UserWarning",
        "hydra",
    ) in known
    log_lines = log.splitlines()
    warned = 0
    for index, line in enumerate(log_lines):
        match = WARNING_LINE.match(line)
        if not match:
            continue
        warned += 1
        assert "mdsfair" not in line, line
        message = match.group(2) + "\n" + (log_lines[index + 1] if index + 1 < len(log_lines) else "")
        assert any(re.match(pattern, message, re.I) for pattern, _, _ in known), f"unknown warning in the log: {line}"
    assert warned > 0  # the check above saw fairseq's known notices


def test_pytest_configuration_filters_known_warnings_by_message_and_module_and_fails_on_mdsfair_warnings():
    """What pytest.ini's filterwarnings does in every test (filters active here)."""
    hydra_notice = "hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()"
    with warnings.catch_warnings(record=True) as caught:  # keeps pytest's filters, records what passes them
        warnings.warn_explicit(hydra_notice, UserWarning, "initialize.py", 43, module="hydra.experimental.initialize")
        warnings.warn_explicit(hydra_notice, UserWarning, "elsewhere.py", 1, module="some_library")  # other module
        warnings.warn_explicit("an unrelated notice", UserWarning, "initialize.py", 44, module="hydra.experimental")
        warnings.warn_explicit(
            "`torch.cuda.amp.autocast(args...)` is deprecated. Please use ...",
            FutureWarning,
            "fairseq_task.py",
            531,
            module="fairseq.tasks.fairseq_task",
        )
    assert [(str(w.message), w.filename) for w in caught] == [
        (hydra_notice, "elsewhere.py"),
        ("an unrelated notice", "initialize.py"),
    ]
    with pytest.raises(UserWarning, match="from mdsfair"):
        warnings.warn_explicit("a notice from mdsfair", UserWarning, "rouge.py", 1, module="mdsfair.evaluation.rouge")


@pytest.mark.slow  # three commands in fresh processes: the slow tier (docs/tests.md)
def test_commands_refuse_a_foreign_dictionary_or_corrupted_weights_in_one_line(trained, other_data_bin, tmp_path):
    """mdsfair-generate on a data-bin with another dictionary, and both
    mdsfair-generate and mdsfair-train (--restore-file) on corrupted weights:
    one ``error:`` line naming the checkpoint, exit 1, no traceback."""
    corrupted = str(tmp_path / "corrupted.pt")
    shutil.copyfile(trained["checkpoint"], corrupted)
    flip_bytes_in_largest_tensor(corrupted)

    def command(main, arguments):
        return run_python(["-c", f"from mdsfair.cli import {main}; {main}()", *arguments], tmp_path)

    generate_flags = [
        "--task",
        "multidoc_summarization",
        "--gen-subset",
        "test",
        "--beam",
        "2",
        "--max-len-b",
        "8",
        "--cpu",
        "--max-source-positions",
        "256",
    ]
    cases = [
        (
            command("generate_main", [other_data_bin, "--path", trained["checkpoint"], *generate_flags]),
            "mdsfair-generate: error: ",
            "--allow-dictionary-mismatch",
        ),
        (
            command("generate_main", [trained["data_bin"], "--path", corrupted, *generate_flags]),
            f"mdsfair-generate: error: {corrupted}: the model weights do not match",
            "python -m mdsfair.checkpoints stamp",
        ),
        (
            command(
                "train_main",
                [
                    trained["data_bin"],
                    *TINY_TRANSFORMER,
                    "--max-source-positions",
                    "256",
                    "--max-target-positions",
                    str(TRAIN_TARGET_LIMIT),
                    "--optimizer",
                    "adam",
                    "--lr",
                    "3e-3",
                    "--max-tokens",
                    "4096",
                    "--max-update",
                    "3",
                    "--restore-file",
                    corrupted,
                    "--save-dir",
                    str(tmp_path / "resumed"),
                    "--cpu",
                    "--no-progress-bar",
                ],
            ),
            f"mdsfair-train: error: {corrupted}: the model weights do not match",
            "python -m mdsfair.checkpoints stamp",
        ),
    ]
    for result, first, hint in cases:
        output = result.stdout + result.stderr
        assert result.returncode == 1, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        errors = [line for line in result.stderr.splitlines() if ": error: " in line]
        assert len(errors) == 1 and errors[0].startswith(first) and hint in errors[0], output[-3000:]
    assert trained["checkpoint"] in cases[0][0].stderr and os.path.abspath(other_data_bin) in cases[0][0].stderr
