"""Task ``multidoc_summarization``: one task for every mdsfair model.

Loads a data-bin directory written by ``mdsfair-preprocess`` and serves
:class:`~mdsfair.data.multidoc_dataset.MultiDocSummarizationDataset` batches:
flat ``src_tokens [B, T]`` plus the structure tensors (document, paragraph,
sentence of every token) and any side data. Each model builds the view it
needs from them; stock fairseq models (``transformer``, ``bart_base``,
``bart_large``) receive only the inputs their ``forward`` accepts, so they
train and generate on the same data as flat baselines. The task's flags are
:class:`~mdsfair.tasks.multidoc_config.MultiDocSummarizationConfig`; what it
hands a model is :func:`~mdsfair.tasks.model_inputs.net_input_for`.
"""

import logging
import os
import weakref
from typing import Dict, Optional, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary
from fairseq.tasks import FairseqTask, register_task

from mdsfair.argument_types import UsageError, check_config_sizes
from mdsfair.checkpoints import fingerprints
from mdsfair.checkpoints.record import RECORD_KEY, make_record
from mdsfair.data.indexed import NumpyMMapDataset
from mdsfair.data.manifest import (
    MANIFEST_NAME,
    STRUCTURE_STREAMS,
    read_manifest,
    recorded_source_layout,
    require_listed_split,
)
from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset
from mdsfair.data.primera_layout import DOCUMENT_SEPARATOR
from mdsfair.data.side_data import SideDataSpec
from mdsfair.data.source_truncation import TruncationConfig
from mdsfair.generation.length_penalty import LENGTH_PENALTY_FORMS
from mdsfair.generation.sequence_generator import build_sequence_generator, choose_generator
from mdsfair.generation.settings_checks import prefix_within_summaries
from mdsfair.tasks.checkpoint_limits import (
    CHECKPOINT,
    describe_input_limits,
    option_defaults,
    resolve_input_limits,
    with_data_bin_layout,
)
from mdsfair.tasks.data_paths import EpochShard, check_data_paths, data_bin_folders, open_epoch_shards
from mdsfair.tasks.eval_rouge import EvalRouge, log_rouge_means, validation_references
from mdsfair.tasks.model_inputs import net_input_for, reads_length_sorted_batches
from mdsfair.tasks.multidoc_config import MultiDocSummarizationConfig
from mdsfair.tasks.summary_word_limits import add_word_limits
from mdsfair.tasks.training_setup import check_not_fully_sharded, check_training_setup

logger = logging.getLogger(__name__)


def describe_size_filter(dataset, ignored, total, max_positions, cfg, skip_flag_given: bool) -> str:
    """Why ``ignored`` examples of ``dataset`` exceed ``max_positions`` (the
    smaller of the task's and the model's limits) and what to do instead of
    dropping them."""
    max_source, max_target = max_positions if isinstance(max_positions, (tuple, list)) else (max_positions, None)
    ignored = np.asarray(ignored, dtype=np.int64)
    long_sources = int((dataset.src_sizes[ignored] > max_source).sum()) if max_source is not None else 0
    long_targets = len(ignored) - long_sources
    reasons = []
    if long_sources:
        reasons.append(
            f"{long_sources} with a source above the model's limit of {max_source} tokens after the task's "
            f"truncation (--max-source-positions {cfg.max_source_positions}): give --max-source-positions "
            f"{max_source} so the task cuts them to fit (counted in the truncation report)"
        )
    if long_targets:
        reasons.append(
            f"{long_targets} with a reference above {max_target} tokens under --no-truncate-target: drop "
            "--no-truncate-target so long references are cut and counted instead"
        )
    action = (
        "--skip-invalid-size-inputs-valid-test would drop them from generation and scoring without a word, "
        "so mdsfair refuses it for validation and test splits"
        if skip_flag_given
        else "do not add --skip-invalid-size-inputs-valid-test: it would drop them from "
        "generation and scoring without a word"
    )
    first = int(ignored[0])
    return (
        f"{dataset.name}: {len(ignored)} of {total} clusters do not fit ({'; '.join(reasons)}). {action}. "
        f"First: cluster {first} of size {dataset.size(first)}"
    )


def resolve_source_layout(
    explicit: Optional[str], recorded: Optional[Dict], data_dir: str, from_checkpoint: bool = False
) -> str:
    """The task's source layout: ``--source-layout`` when given (or, in
    generation, the checkpoint's: ``from_checkpoint``), else the data-bin's
    record (``mdsfair-preprocess --source-layout``), else ``documents``. A
    layout that contradicts the recorded one is refused: the data-bin was
    prepared for the other (and a PRIMERA model decoded without
    ``<doc-sep>``, or the reverse, gives wrong summaries without an error)."""
    recorded_name = (recorded or {}).get("name")
    manifest = os.path.join(os.path.abspath(data_dir), MANIFEST_NAME)
    if explicit is not None and recorded_name is not None and str(explicit) != recorded_name and from_checkpoint:
        raise UsageError(
            f"the checkpoint was trained with --source-layout {explicit}, which contradicts the layout "
            f"{recorded_name!r} that {manifest} records (mdsfair-preprocess --source-layout {recorded_name}): "
            f"generate on a data-bin preprocessed as the training data was, or give --source-layout {recorded_name} "
            "to decode with the data-bin's layout anyway"
        )
    if explicit is not None and recorded_name is not None and str(explicit) != recorded_name:
        raise ValueError(
            f"--source-layout {explicit} contradicts the layout {recorded_name!r} that "
            f"{manifest} records (mdsfair-preprocess --source-layout "
            f"{recorded_name}): drop --source-layout to use the data-bin's, or preprocess the data into another "
            f"--destdir with --source-layout {explicit}"
        )
    return str(explicit) if explicit is not None else recorded_name or "documents"


@register_task("multidoc_summarization", dataclass=MultiDocSummarizationConfig)
class MultiDocSummarizationTask(FairseqTask):
    """Multi-document summarization on mdsfair's binarized data contract."""

    cfg: MultiDocSummarizationConfig

    def __init__(self, cfg: MultiDocSummarizationConfig, dictionary: Dictionary, shards: Sequence[EpochShard]):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.shards = tuple(shards)  # the data-bin folders of --data, one per epoch, with their manifests
        self.manifest = self.shards[0].manifest
        self.side_data_specs = [
            SideDataSpec.from_json(name, obj) for name, obj in self.manifest.get("side_data", {}).items()
        ]
        self._data_fingerprint: Optional[Dict] = None
        self._trained_model = None  # weak reference to the model build_model returned last
        self.eval_rouge: Optional[EvalRouge] = None  # built with the model under --eval-rouge
        self.recorded_layout = recorded_source_layout(self.manifest, self.data_dir, dictionary)
        self.source_layout = resolve_source_layout(cfg.source_layout, self.recorded_layout, self.data_dir)

    @classmethod
    def setup_task(cls, cfg: MultiDocSummarizationConfig, **kwargs):
        # a limit of 0 would drop every cluster, document or paragraph silently
        check_config_sizes(
            cfg,
            ("max_source_positions", "max_target_positions", "max_documents", "max_paragraphs", "max_paragraph_tokens"),
        )
        paths = data_bin_folders(cfg.data)
        if not paths:
            raise ValueError("--data (the data-bin directory) is required for task multidoc_summarization")
        check_data_paths(cfg.data, paths)
        check_not_fully_sharded(cfg)
        manifest = read_manifest(paths[0])
        dictionary = Dictionary.load(os.path.join(paths[0], manifest.get("dictionary", "dict.txt")))
        shards = open_epoch_shards(paths, dictionary, manifest)
        logger.info("dictionary: %d types; side data: %s", len(dictionary), sorted(manifest.get("side_data", {})))
        return cls(cfg, dictionary, shards)

    # ------------------------------------------------------------- data

    @property
    def data_dir(self) -> str:
        """The first data-bin folder of ``--data``: its dictionary, subword model and validation splits."""
        return self.shards[0].folder

    def subword_encoder(self):
        """The subword encoder of this task's data-bin (the SentencePiece or
        GPT-2 BPE model its manifest names), for a model that encodes fixed
        text when it is built (PageSum's filler page); None when the manifest
        names none."""
        if "subword" not in self.manifest:
            return None
        from mdsfair.preprocess.subword import load_encoder_from_manifest

        return load_encoder_from_manifest(self.data_dir, self.manifest["subword"])

    # ------------------------------------------- checkpoint provenance

    def data_fingerprint(self) -> Dict:
        """The dictionary and subword model this task's data-bin uses
        (:func:`mdsfair.checkpoints.fingerprints.data_fingerprint`)."""
        if self._data_fingerprint is None:
            folders = [shard.folder for shard in self.shards]
            self._data_fingerprint = fingerprints.data_fingerprint(folders, self.dictionary, self.manifest)
        return self._data_fingerprint

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's ``build_model``; the model then refuses, at
        ``load_state_dict``, a checkpoint trained on a data-bin with another
        dictionary or subword model (unless ``--allow-dictionary-mismatch``),
        and its weights are checksummed into the checkpoints this task saves.
        A model built for training (not from a checkpoint) first passes
        :func:`~mdsfair.tasks.training_setup.check_training_setup`."""
        if not from_checkpoint:
            check_training_setup(self.cfg)
        model = super().build_model(cfg, from_checkpoint)
        model.register_load_state_dict_pre_hook(
            fingerprints.dictionary_check_hook(self.data_fingerprint, lambda: self.cfg.allow_dictionary_mismatch)
        )
        self._trained_model = weakref.ref(model)
        if self.cfg.eval_rouge:
            self.eval_rouge = EvalRouge.build(self, model)
        return model

    def state_dict(self):
        """fairseq stores this in every checkpoint (``task_state``): the
        task's state plus mdsfair's record (data fingerprint, weight checksum)."""
        state = dict(super().state_dict())
        model = self._trained_model() if self._trained_model is not None else None
        model_state = model.state_dict() if model is not None and not self.cfg.no_checkpoint_checksum else None
        state[RECORD_KEY] = make_record(self.data_fingerprint(), model_state)
        return state

    def load_state_dict(self, state_dict):
        """The task's own state; mdsfair's record is checked where the weights
        load (see :mod:`mdsfair.checkpoints`)."""
        super().load_state_dict({k: v for k, v in state_dict.items() if k != RECORD_KEY})

    @property
    def source_layout_explicit(self) -> bool:
        """Whether ``--source-layout`` was given (else the data-bin's record, or 'documents', decides)."""
        return self.cfg.source_layout is not None

    @property
    def per_document_budget(self) -> bool:
        """``--per-document-budget``, or a data-bin that records PRIMERA's
        layout: its per-document truncation is part of that layout
        (``mdsfair-preprocess --source-layout primera``), whether or not
        ``--source-layout primera`` is repeated on the command line (the
        primera architecture sets it)."""
        return bool(self.cfg.per_document_budget or (self.recorded_layout or {}).get("per_document_budget"))

    def document_separator(self) -> Optional[int]:
        """The dictionary id of ``<doc-sep>`` under the PRIMERA layout
        (``--source-layout primera`` or the data-bin's record)."""
        if self.source_layout != "primera":
            return None
        index = self.dictionary.index(DOCUMENT_SEPARATOR)
        if index == self.dictionary.unk():
            raise ValueError(
                f"--source-layout primera: the dictionary of {os.path.abspath(self.data_dir)} has no "
                f"{DOCUMENT_SEPARATOR} symbol; preprocess with it in the dictionary (an imported "
                f"PRIMERA dict.txt has it)"
            )
        return index

    def truncation_config(self) -> TruncationConfig:
        cfg = self.cfg
        separator = self.document_separator()
        return TruncationConfig(
            max_source_positions=cfg.max_source_positions,
            max_target_positions=cfg.max_target_positions,
            max_documents=cfg.max_documents,
            max_paragraphs=cfg.max_paragraphs,
            max_paragraph_tokens=cfg.max_paragraph_tokens,
            per_document_budget=self.per_document_budget,
            document_start_token=not cfg.no_document_start_token and separator is None,
            truncate_target=not cfg.no_truncate_target,
            document_separator=separator,
        )

    def take_checkpoint_input_limits(self, checkpoint_cfg, split: str) -> None:
        """Generation's input limits (:mod:`mdsfair.tasks.checkpoint_limits`):
        a limit given on the command line wins, every other takes the value of
        the checkpoint's task configuration ``checkpoint_cfg``. The task's
        configuration then holds them, so its truncation, ``max_positions``
        (which fairseq-generate resolves against the model's positions: a
        source past those is refused with the limit to give, as before) and
        messages follow; one INFO line lists them and where each came from."""
        limits = resolve_input_limits(self.cfg, checkpoint_cfg, option_defaults(MultiDocSummarizationConfig))
        for name, limit in limits.items():
            setattr(self.cfg, name, limit.value)
        layout = limits["source_layout"]
        self.source_layout = resolve_source_layout(
            layout.value, self.recorded_layout, self.data_dir, from_checkpoint=layout.origin == CHECKPOINT
        )
        logger.info(
            describe_input_limits(with_data_bin_layout(limits, self.source_layout, self.recorded_layout), split)
        )

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, task_cfg=None, **kwargs):
        """The split ``split`` of the epoch's data-bin folder. ``task_cfg`` is
        the checkpoint's task configuration, which fairseq-generate and
        fairseq-validate hand over (:meth:`take_checkpoint_input_limits`);
        training and its validation give none."""
        if task_cfg is not None:
            self.take_checkpoint_input_limits(task_cfg, split)
        shard = self.shards[(epoch - 1) % len(self.shards)]
        data_dir = shard.folder
        require_listed_split(data_dir, split, shard.manifest)  # files of splits the manifest does not list are stale
        prefix = os.path.join(data_dir, split)

        def open_stream(name: str):
            path = f"{prefix}.{name}"
            if not NumpyMMapDataset.exists(path):
                raise FileNotFoundError(f"{path}.bin / .idx not found (split {split!r} of {data_dir})")
            return NumpyMMapDataset(path)

        source = open_stream("source")
        target = open_stream("target") if NumpyMMapDataset.exists(prefix + ".target") else None
        structure = {key: open_stream(key) for key in STRUCTURE_STREAMS}
        side_data = {spec.name: (spec, open_stream(spec.name)) for spec in self.side_data_specs}
        dataset = MultiDocSummarizationDataset(
            source,
            target,
            structure,
            self.dictionary,
            self.truncation_config(),
            side_data=side_data,
            shuffle=True,
            name=f"{data_dir}/{split}",
            cluster_ids_file=f"{prefix}.ids.txt",
        )
        # One line per split; mdsfair-rouge finds the data-bin and split of a
        # fairseq-generate log by this line (REPORT_LINE_RE).
        logger.info(dataset.truncation_report(label=f"split {split} of data-bin {os.path.abspath(data_dir)}"))
        if self.cfg.eval_rouge and split != (getattr(self.cfg, "train_subset", None) or "train"):
            dataset.reference_summaries = validation_references(data_dir, split)
        self.datasets[split] = dataset
        return dataset

    def build_dataset_for_inference(self, encoded_clusters, **kwargs) -> MultiDocSummarizationDataset:
        """A dataset over clusters encoded in memory (``mdsfair.preprocess.binarize.
        EncodedCluster`` objects), with the task's truncation policies."""
        structure = {
            "doc": [c.doc_ids for c in encoded_clusters],
            "para": [c.para_ids for c in encoded_clusters],
            "sent": [c.sent_ids for c in encoded_clusters],
        }
        side_data = {
            spec.name: (spec, [c.side_data[spec.name] for c in encoded_clusters]) for spec in self.side_data_specs
        }
        return MultiDocSummarizationDataset(
            [c.tokens for c in encoded_clusters],
            None,
            structure,
            self.dictionary,
            self.truncation_config(),
            side_data=side_data,
            shuffle=False,
            name="inference",
        )

    def max_positions(self):
        return (self.cfg.max_source_positions, self.cfg.max_target_positions)

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's size filter, except that no cluster of a validation or
        test split is ever dropped: fairseq's advice
        ``--skip-invalid-size-inputs-valid-test`` would leave those clusters
        without a hypothesis and out of every score, silently. For such a
        split the clusters above the limits are counted and refused, with
        what to change instead (:func:`describe_size_filter`). The training
        split keeps fairseq's behaviour (too-long examples skipped, counted
        in a warning)."""
        kept, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored) == 0:
            return kept
        is_training_split = dataset.name.rsplit("/", 1)[-1] == (getattr(self.cfg, "train_subset", None) or "train")
        if is_training_split and ignore_invalid_inputs:
            logger.warning(
                "%s: %d of %d training examples are above max_positions=%s and are skipped",
                dataset.name,
                len(ignored),
                len(indices),
                max_positions,
            )
            return kept
        raise ValueError(
            describe_size_filter(
                dataset, ignored, len(indices), max_positions, self.cfg, ignore_invalid_inputs and not is_training_split
            )
        )

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    # ------------------------------------------- stock models as baselines

    @staticmethod
    def _sample_for(model, sample):
        """The sample with the inputs ``model`` declares (:func:`net_input_for`)."""
        if not sample or "net_input" not in sample:
            return sample
        if reads_length_sorted_batches(model):
            sample = MultiDocSummarizationDataset.sorted_by_source_length(sample)
        return {**sample, "net_input": net_input_for(model, sample["net_input"])}

    @staticmethod
    def _sample_for_encoders(models, sample):
        """The sample with the inputs every model of the ensemble declares."""
        net_input = sample["net_input"]
        for model in models:
            net_input = net_input_for(model, net_input)
        return {**sample, "net_input": net_input}

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        return super().train_step(self._sample_for(model, sample), model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(self._sample_for(model, sample), model, criterion)
        if self.cfg.eval_rouge and sample and "references" in sample:
            logging_output.update(self.eval_rouge.batch_logs(self, sample, model))
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        """fairseq's, plus ``--eval-rouge``'s ROUGE F1 means over the clusters."""
        super().reduce_metrics(logging_outputs, criterion)
        if self.cfg.eval_rouge:
            log_rouge_means(logging_outputs)

    # ------------------------------------------------------- generation

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
        """The fixed-shape beam search of :mod:`mdsfair.generation.static_decoding`
        wherever it gives fairseq's beams, else (or with ``--fairseq-generator``)
        fairseq's generator, with one INFO line saying why
        (:func:`~mdsfair.generation.sequence_generator.choose_generator`); with
        mdsfair's vectorized n-gram blocker (fairseq's blocks nothing)."""
        seq_gen_cls, extra_gen_cls_kwargs = choose_generator(
            args,
            seq_gen_cls,
            extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn,
            static_decoding=getattr(self.cfg, "static_decoding", False),
            fairseq_generator=getattr(self.cfg, "fairseq_generator", False),
            bucket_sizes=getattr(self.cfg, "static_decoding_buckets", ""),
            length_penalty_form=getattr(self.cfg, "length_penalty_form", LENGTH_PENALTY_FORMS[0]),
        )
        generator = build_sequence_generator(
            self, models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
        )
        return add_word_limits(self, generator, args)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """fairseq's step on the sample the models' encoders read; a
        ``--prefix-size`` prefix (``fairseq-generate``'s first tokens of each
        reference) that runs past its summary is kept to the summary's tokens
        (:func:`~mdsfair.generation.settings_checks.prefix_within_summaries`).
        A prefix given otherwise (the hub, a caller's own tokens) is forced as
        it is, ``</s>`` included, as fairseq's search forces it. A model that
        reads length-sorted batches (:func:`reads_length_sorted_batches`)
        generates on the rows longest source first; the hypotheses come back
        in the batch's order."""
        if prefix_tokens is not None and self._is_reference_prefix(sample, prefix_tokens):
            ids = sample["id"].tolist() if torch.is_tensor(sample.get("id")) else None
            prefix_tokens = prefix_within_summaries(
                prefix_tokens, self.target_dictionary.eos(), self.target_dictionary.pad(), ids
            )
        if not any(reads_length_sorted_batches(model) for model in models):
            return super().inference_step(
                generator, models, self._sample_for_encoders(models, sample), prefix_tokens, constraints
            )
        # a packed RNN encoder: generate on the rows longest source first, return the hypotheses in the batch's order
        order = MultiDocSummarizationDataset.source_length_order(sample)
        sorted_sample = MultiDocSummarizationDataset.batch_rows(sample, order)
        if prefix_tokens is not None:
            prefix_tokens = prefix_tokens.index_select(0, order.to(prefix_tokens.device))
        if torch.is_tensor(constraints):
            constraints = constraints.index_select(0, order.to(constraints.device))
        hypotheses = super().inference_step(
            generator, models, self._sample_for_encoders(models, sorted_sample), prefix_tokens, constraints
        )
        in_batch_order = [None] * len(hypotheses)
        for row, original_row in enumerate(order.tolist()):
            in_batch_order[original_row] = hypotheses[row]
        return in_batch_order

    @staticmethod
    def _is_reference_prefix(sample, prefix_tokens) -> bool:
        """Whether ``prefix_tokens`` are the references' first tokens, as
        ``fairseq-generate --prefix-size`` takes them (``target[:, :N]``)."""
        target = sample.get("target")
        width = prefix_tokens.size(1)
        return (
            torch.is_tensor(target)
            and target.shape[0] == prefix_tokens.shape[0]
            and target.size(1) >= width
            and torch.equal(target[:, :width], prefix_tokens)
        )
