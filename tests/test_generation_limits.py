"""Generation takes the checkpoint's input limits (issue 47, the class
"generation forgets how it was trained").

fairseq-generate sets its task up from its own command line: a model trained
with ``--max-documents 2 --max-source-positions 160`` was decoded on the
command line's defaults (every document, 1,024 tokens), reading sources it
never saw in training, without a word. The task now takes every input limit
(:data:`mdsfair.tasks.checkpoint_limits.INPUT_LIMITS`) from the checkpoint
unless its flag is given, and logs one line of the limits it used; a given
flag wins and the line says what it overrides. A given limit past the model's
positions is refused as before, naming the limit to give.
"""

import argparse
import dataclasses
import logging
import re
import sys

import pytest
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from mdsfair import cli
from mdsfair.tasks.checkpoint_limits import (
    CHECKPOINT,
    DEFAULT,
    GIVEN,
    INPUT_LIMITS,
    describe_input_limits,
    flags_on_command_line,
    option_defaults,
    resolve_input_limits,
)
from mdsfair.tasks.multidoc_config import MultiDocSummarizationConfig
from tests.utils import (
    USER_DIR,
    generation_command,
    hypothesis_lines,
    make_tiny_data_bin,
    tiny_transformer,
    train_in_process,
)

#: The task's options that are not input limits, each with why generation
#: keeps its own value: a new option of the task must be placed here or in
#: INPUT_LIMITS.
GENERATION_KEEPS_ITS_OWN = {
    "data": "the data-bin to generate from is the command's",
    "no_truncate_target": "cuts or filters references, not the sources the model reads",
    "allow_dictionary_mismatch": "a check at load, no input shaping",
    "no_checkpoint_checksum": "what checkpoints this task saves hold",
    "static_decoding": "the generator, not its inputs",
    "fairseq_generator": "the generator, not its inputs",
    "static_decoding_buckets": "batch padding whose copies' output is dropped",
    "length_penalty_form": "the search's length penalty, a decoding setting as --lenpen is",
    "min_len_words": "the summary's length in words, a decoding setting as --min-len is",
    "max_len_words": "the summary's length in words, a decoding setting as --max-len-b is",
    "eval_rouge": "validation in training",
    "eval_rouge_args": "validation in training",
    "eval_rouge_convention": "validation in training",
    "seed": "fairseq's common.seed",
    "train_subset": "fairseq's dataset.train_subset",
    "bf16": "fairseq's precision flags",
    "tpu": "fairseq's device flags",
    "cpu": "fairseq's device flags",
    "fp16": "fairseq's precision flags",
    "memory_efficient_fp16": "fairseq's precision flags",
    "ddp_backend": "fairseq's distributed flags",
    "distributed_world_size": "fairseq's distributed flags",
    "allow_arch_change": "a check on resume",
}

MODEL = ["--task", "multidoc_summarization", *tiny_transformer(embed_dim=16, ffn_embed_dim=32, attention_heads=2)]

#: The training's input limits, none of them the default; the model's
#: position table has --max-source-positions rows.
TRAINED_LIMITS = ["--max-source-positions", "160", "--max-target-positions", "48", "--max-documents", "2"]

REPORT = re.compile(r"input limits of split test \(a flag given wins, else the checkpoint's\): (?P<limits>.*)")
KEPT = re.compile(r"split test of data-bin .*: 4 clusters, source tokens kept [\d.]+% \((?P<kept>[\d,]+) of")


def test_every_task_option_is_an_input_limit_or_kept_by_generation_for_a_reason():
    options_of_task = {field.name for field in dataclasses.fields(MultiDocSummarizationConfig)} - {"_name"}
    assert set(INPUT_LIMITS) | set(GENERATION_KEEPS_ITS_OWN) == options_of_task
    assert not set(INPUT_LIMITS) & set(GENERATION_KEEPS_ITS_OWN)


def test_a_flag_counts_as_given_on_the_command_line_or_by_a_value_other_than_its_default():
    assert flags_on_command_line(["data", "--max-documents", "3", "--max-paragraphs=4", "--max-source"]) == {
        "max_documents",
        "max_paragraphs",
    }
    defaults = option_defaults(MultiDocSummarizationConfig)
    assert defaults["max_source_positions"] == 1024 and defaults["max_paragraphs"] is None
    command_line = argparse.Namespace(**{**defaults, "max_paragraphs": 6})  # 6: set in code, no flag
    checkpoint = {**defaults, "max_source_positions": 1600, "max_paragraphs": 24, "max_documents": 5}
    del checkpoint["no_document_start_token"]  # a configuration older than the option
    limits = resolve_input_limits(command_line, checkpoint, defaults, argv=["--max-source-positions", "1024"])
    assert (limits["max_source_positions"].value, limits["max_source_positions"].origin) == (1024, GIVEN)
    assert (limits["max_paragraphs"].value, limits["max_paragraphs"].origin) == (6, GIVEN)
    assert (limits["max_documents"].value, limits["max_documents"].origin) == (5, CHECKPOINT)
    assert (limits["no_document_start_token"].value, limits["no_document_start_token"].origin) == (False, DEFAULT)
    line = describe_input_limits(limits, "test")
    assert "--max-source-positions 1024 overrides the checkpoint's 1600" in line
    assert "--max-paragraphs 6 overrides the checkpoint's 24" in line
    assert "--max-documents 5 (checkpoint)" in line and "--max-target-positions 1024 (checkpoint)" in line
    assert "--no-document-start-token off (default; the checkpoint records none)" in line
    assert "\n" not in line


def test_a_task_set_up_from_the_checkpoint_takes_every_limit_as_the_checkpoint_s():
    """fairseq-validate sets its task up from the checkpoint's configuration
    and hands the same configuration to load_dataset: nothing is 'given'."""
    defaults = option_defaults(MultiDocSummarizationConfig)
    checkpoint = argparse.Namespace(**{**defaults, "max_documents": 3})
    limits = resolve_input_limits(checkpoint, checkpoint, defaults, argv=["--max-documents", "3"])
    assert {limit.origin for limit in limits.values()} == {CHECKPOINT}


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("generation_limits")), train=8, valid=2, test=4)


def generation_task(data_bin, *flags):
    """The task as fairseq-generate sets it up from its command line."""
    parsed = options.parse_args_and_arch(
        options.get_generation_parser(),
        [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization", "--path", "unused.pt", *flags],
    )
    return tasks.setup_task(convert_namespace_to_omegaconf(parsed).task)


def test_every_input_limit_reaches_the_dataset(data_bin, monkeypatch):
    """A checkpoint whose every input limit differs from the command line's
    default: the generation task's truncation is that of a task given the
    checkpoint's flags (the class: nothing that shapes the sources is left
    at the command line's default)."""
    trained_flags = [
        "--max-source-positions",
        "90",
        "--max-target-positions",
        "20",
        "--max-documents",
        "3",
        "--max-paragraphs",
        "5",
        "--max-paragraph-tokens",
        "12",
        "--per-document-budget",
        "--no-document-start-token",
        "--source-layout",
        "documents",
    ]
    assert {name for name in flags_on_command_line(trained_flags)} == set(INPUT_LIMITS)
    trained = generation_task(data_bin, *trained_flags)
    monkeypatch.setattr(sys, "argv", ["fairseq-generate", data_bin])
    generating = generation_task(data_bin)
    assert generating.truncation_config() != trained.truncation_config()
    generating.load_dataset("test", task_cfg=trained.cfg)
    assert generating.truncation_config() == trained.truncation_config()
    assert generating.max_positions() == (90, 20)
    trained.load_dataset("test")
    generated_sizes = generating.datasets["test"].src_sizes.tolist()
    assert generated_sizes == trained.datasets["test"].src_sizes.tolist()


def test_training_and_its_validation_keep_the_command_line(data_bin, caplog):
    """load_dataset without a checkpoint's configuration (training, its
    validation) changes no limit and logs no limits line."""
    task = generation_task(data_bin, "--max-documents", "2")
    before = task.truncation_config()
    with caplog.at_level(logging.INFO):
        task.load_dataset("valid")
    assert task.truncation_config() == before
    assert not any("input limits" in record.getMessage() for record in caplog.records)


@pytest.fixture(scope="module")
def checkpoint(data_bin, tmp_path_factory):
    """mdsfair-train (in this process) for 1 update with non-default limits."""
    save_dir = str(tmp_path_factory.mktemp("generation_limits_checkpoints"))
    return train_in_process(data_bin, [*MODEL, *TRAINED_LIMITS], save_dir)


def generate(run, data_bin, checkpoint, caplog, capsys, *flags):
    """Run a generation command's entry point; returns its limits line, the
    source tokens the test split kept and the hypothesis lines."""
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run(generation_command(data_bin, checkpoint, "--max-len-b", "4", *flags))
    messages = [record.getMessage() for record in caplog.records]
    reports = [match for match in map(REPORT.fullmatch, messages) if match]
    kept = [match for match in map(KEPT.match, messages) if match]
    assert len(reports) == 1 and len(kept) == 1, messages
    hypotheses = hypothesis_lines(capsys.readouterr().out)
    return reports[0]["limits"], int(kept[0]["kept"].replace(",", "")), hypotheses


def fairseq_generate(argv):
    """``fairseq-generate --user-dir mdsfair ARGV``: fairseq's entry point on its own sys.argv."""
    from fairseq_cli.generate import cli_main

    saved = sys.argv
    sys.argv = ["fairseq-generate", "--user-dir", USER_DIR, *argv]
    try:
        cli_main()
    finally:
        sys.argv = saved


def source_tokens_kept(data_bin, *flags):
    """The test split's source tokens under the given task flags."""
    task = generation_task(data_bin, *flags)
    task.load_dataset("test")
    return task.datasets["test"].source_tokens_kept


@pytest.mark.parametrize("run", [cli.generate_main, fairseq_generate], ids=["mdsfair-generate", "fairseq-generate"])
def test_generation_takes_the_checkpoint_s_limits_without_flags(run, data_bin, checkpoint, caplog, capsys):
    limits, kept, hypotheses = generate(run, data_bin, checkpoint, caplog, capsys)
    assert "--max-source-positions 160 (checkpoint)" in limits
    assert "--max-target-positions 48 (checkpoint)" in limits
    assert "--max-documents 2 (checkpoint)" in limits and "--max-paragraphs none (checkpoint)" in limits
    assert "--source-layout documents (default)" in limits and "--per-document-budget off (checkpoint)" in limits
    assert kept == source_tokens_kept(data_bin, *TRAINED_LIMITS) < source_tokens_kept(data_bin)
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == [0, 1, 2, 3]


def test_a_given_flag_wins_and_the_override_is_reported(data_bin, checkpoint, caplog, capsys):
    limits, kept, hypotheses = generate(
        cli.generate_main, data_bin, checkpoint, caplog, capsys, "--max-source-positions", "96", "--max-documents", "3"
    )
    assert "--max-source-positions 96 overrides the checkpoint's 160" in limits
    assert "--max-documents 3 overrides the checkpoint's 2" in limits
    assert "--max-target-positions 48 (checkpoint)" in limits
    trained_targets = ["--max-target-positions", "48"]
    assert kept == source_tokens_kept(
        data_bin, "--max-source-positions", "96", "--max-documents", "3", *trained_targets
    )
    assert len(hypotheses) == 4


def test_a_given_default_value_wins_and_past_the_model_s_positions_is_refused(data_bin, checkpoint, capsys):
    """``--max-source-positions 1024`` is the option's default, given: it wins
    over the checkpoint's 160, and the model's 160 positions refuse the longer
    sources, naming the limit to give (as before: no cluster is dropped)."""
    with pytest.raises(ValueError, match=r"give --max-source-positions 160 so the task cuts them to fit"):
        cli.generate_main(generation_command(data_bin, checkpoint, "--max-source-positions", "1024"))
