"""Hub interface: summarize raw clusters with a trained mdsfair checkpoint.

::

    import torch
    summarizer = torch.hub.load(MDSFAIR_DIR, "hiertransformer", model_dir="checkpoints/",
                                data_name_or_path="data-bin/", source="local")
    summarizer.summarize([["first document ...", "second document ..."]], beam=5)

Raw text goes through exactly the pipeline ``mdsfair-preprocess`` ran on the
training data, rebuilt from the data-bin manifest (``mdsfair.json``): the
recorded text normalisation (``text_normalization``), paragraph and sentence
splitting (the manifest's ``sentence_splitter``, ``lowercase`` and
``title_document``), subword encoding with the data-bin's own
subword model, the side-data producers the manifest lists (one
:class:`mdsfair.preprocess.pipeline.ClusterEncoder`, the class
``mdsfair-preprocess`` encodes with), then the task's truncation and
special tokens (:meth:`MultiDocSummarizationTask.build_dataset_for_inference`)
and the task's ``inference_step``, so a cluster summarized here is encoded
token for token as it was for training.

Model families declare their entry point on the model class
(``hub_description``, ``from_pretrained``: :mod:`mdsfair.models.hub`);
:func:`hub_entries` collects them from fairseq's model registry and
``hubconf.py`` turns every entry into a ``torch.hub`` entry point.
"""

import copy
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from fairseq import hub_utils, utils
from fairseq.models import MODEL_REGISTRY
from omegaconf import open_dict
from torch import nn

import mdsfair
from mdsfair.data.manifest import MANIFEST_NAME, read_manifest
from mdsfair.generation.length_penalty import LENGTH_PENALTY_OPTION
from mdsfair.generation.sequence_generator import check_generation_settings
from mdsfair.generation.word_limits import WORD_LIMIT_OPTIONS

# The pipeline is the one public way from raw text to model inputs, shared
# with ``mdsfair-preprocess``; nothing else of preprocessing is used here.
from mdsfair.preprocess import pipeline
from mdsfair.tasks.model_inputs import unwrap_model
from mdsfair.tasks.multidoc_summarization import MultiDocSummarizationTask

# Explicit: the hub entries are read from fairseq's model registry, and loading
# checkpoints goes through the checks of mdsfair.fairseq_patches.
mdsfair.register()

logger = logging.getLogger(__name__)

USER_DIR = os.path.dirname(os.path.abspath(mdsfair.__file__))

Cluster = Union[Sequence[str], Dict[str, Any]]


# ------------------------------------------------------------ the registry


@dataclass(frozen=True)
class HubEntry:
    """One ``torch.hub`` entry point: a model family loaded by name.

    ``models`` are the fairseq model names (``@register_model``) whose
    checkpoints this entry accepts; empty accepts any mdsfair checkpoint.
    """

    name: str
    description: str
    models: Tuple[str, ...]


#: The entries of fairseq's own models trained on mdsfair data, and the
#: generic one; each mdsfair model class declares its own (``hub_description``).
STOCK_HUB_ENTRIES: Dict[str, HubEntry] = {
    entry.name: entry
    for entry in (
        HubEntry("summarizer", "any mdsfair checkpoint (task multidoc_summarization), whatever its model", ()),
        HubEntry(
            "transformer", "fairseq's stock transformer trained on mdsfair data (flat baseline)", ("transformer",)
        ),
        HubEntry(
            "bart",
            "fairseq's stock BART (bart_base / bart_large) fine-tuned on mdsfair data (flat baseline)",
            ("bart",),
        ),
    )
}


def hub_entries() -> Dict[str, HubEntry]:
    """Every ``torch.hub`` entry point: :data:`STOCK_HUB_ENTRIES` and one per
    registered model class whose own body sets ``hub_description``
    (:class:`mdsfair.models.hub.MultiDocHubModel`), named after its
    ``@register_model`` name."""
    entries = dict(STOCK_HUB_ENTRIES)
    for name, cls in sorted(MODEL_REGISTRY.items()):
        description = vars(cls).get("hub_description")
        if description:
            if not name.isidentifier():
                raise ValueError(f"model {name!r} declares a hub entry but its name is not a Python identifier")
            if name in entries:
                raise ValueError(f"hub entry {name!r} declared twice ({cls.__name__} and a stock entry)")
            entries[name] = HubEntry(name, description, (name,))
    return entries


#: The entries when this module was imported (after :func:`mdsfair.register`):
#: what ``hubconf.py`` exposes.
HUB_ENTRIES: Dict[str, HubEntry] = hub_entries()


def load_hub_entry(
    name: str,
    model_dir: str,
    checkpoint_file: str = "checkpoint_best.pt",
    data_name_or_path: str = ".",
    **kwargs,
) -> "MultiDocSummarizationHubInterface":
    """Load ``model_dir/checkpoint_file`` through the hub entry ``name``,
    checking that the checkpoint holds a model of that family."""
    entries = hub_entries()
    if name not in entries:
        raise KeyError(f"no hub entry {name!r}; registered: {sorted(entries)}")
    entry = entries[name]
    interface = MultiDocSummarizationHubInterface.from_pretrained(
        model_dir, checkpoint_file=checkpoint_file, data_name_or_path=data_name_or_path, **kwargs
    )
    if entry.models:
        for model in interface.models:
            model_name = fairseq_model_name(model)
            if model_name not in entry.models:
                raise ValueError(
                    f"{os.path.join(model_dir, checkpoint_file)} holds a {model_name!r} model; hub entry "
                    f"{name!r} loads {list(entry.models)} (use 'summarizer' to load any mdsfair checkpoint)"
                )
    return interface


def registered_model_name(cls: type) -> Optional[str]:
    """The ``@register_model`` name of the model class ``cls`` (None if unregistered)."""
    return next((name for name, registered in MODEL_REGISTRY.items() if registered is cls), None)


def fairseq_model_name(model: nn.Module) -> Optional[str]:
    """The ``@register_model`` name of ``model``'s exact class."""
    return registered_model_name(type(unwrap_model(model)))


# ------------------------------------------- data files a model dir needs


def inference_files(manifest: Dict) -> List[str]:
    """The data-bin files inference needs: manifest, dictionary, subword model."""
    subword = manifest.get("subword", {})
    subword_files = [subword[key] for key in ("model", "encoder_json", "vocab_bpe") if key in subword]
    return [MANIFEST_NAME, manifest.get("dictionary", "dict.txt")] + subword_files


def copy_inference_files(data_dir: str, model_dir: str) -> List[str]:
    """Copy what inference needs from a data-bin into a checkpoint directory,
    so that the directory alone loads (``data_name_or_path="."``).
    Returns the copied paths."""
    manifest = read_manifest(data_dir)
    os.makedirs(model_dir, exist_ok=True)
    copied = []
    for name in inference_files(manifest):
        source = os.path.join(data_dir, name)
        if not os.path.exists(source):
            raise FileNotFoundError(f"{source} is listed in {data_dir}/{MANIFEST_NAME} but missing")
        copied.append(shutil.copyfile(source, os.path.join(model_dir, name)))
    return copied


# --------------------------------------------------------- the interface


class MultiDocSummarizationHubInterface(nn.Module):
    """Summarize raw document clusters with an ensemble of mdsfair models.

    Built from what :func:`fairseq.checkpoint_utils.load_model_ensemble_and_task`
    returns; use :meth:`from_pretrained` (or ``torch.hub.load``) to make one.
    Move it with ``.cuda()`` / ``.half()`` like any module.
    """

    def __init__(
        self,
        cfg,
        task: MultiDocSummarizationTask,
        models: List[nn.Module],
        side_data_args=None,
        sentence_splitter: Optional[str] = None,
    ):
        super().__init__()
        if not isinstance(task, MultiDocSummarizationTask):
            raise TypeError(f"the checkpoint's task is {type(task).__name__}, not multidoc_summarization")
        self.cfg = cfg
        self.task = task
        self.models = nn.ModuleList(models)
        self.dictionary = task.target_dictionary
        for model in self.models:
            model.prepare_for_inference_(cfg)
        self.cluster_encoder = pipeline.ClusterEncoder.from_data_bin(
            task.data_dir,
            task.manifest,
            task.source_dictionary,
            sentence_splitter=sentence_splitter,
            side_data_args=side_data_args,
        )
        self.max_positions = utils.resolve_max_positions(
            task.max_positions(), *[model.max_positions() for model in models]
        )
        # Tracks the device and floating dtype the interface was moved to.
        self.register_buffer("_float_tensor", torch.tensor([0], dtype=torch.float), persistent=False)

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str,
        checkpoint_file: str = "checkpoint_best.pt",
        data_name_or_path: str = ".",
        side_data_args: Optional[Dict[str, Any]] = None,
        sentence_splitter: Optional[str] = None,
        allow_dictionary_mismatch: bool = False,
        **overrides,
    ) -> "MultiDocSummarizationHubInterface":
        """Load ``model_dir/checkpoint_file`` (several joined by ``os.pathsep``
        form an ensemble).

        Args:
            data_name_or_path: the data-bin (manifest, ``dict.txt``, subword
                model), relative to ``model_dir`` when it starts with ``.``;
                :func:`copy_inference_files` puts them beside a checkpoint.
            side_data_args: producer flags that differ from their defaults.
            sentence_splitter: split raw text with this splitter instead of
                the one the data-bin was preprocessed with.
            allow_dictionary_mismatch: load even when the data-bin's
                dictionary or subword model differs from the one the
                checkpoint was trained with (by default that is an error
                naming both data-bins; see :mod:`mdsfair.checkpoints`).
            overrides: configuration overrides by name (``max_source_positions``,
                ``beam`` ...).
        """
        for checkpoint in checkpoint_file.split(os.pathsep):
            path = os.path.join(model_dir, checkpoint)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"checkpoint not found: {path}")
        data_dir = (
            os.path.join(model_dir, data_name_or_path) if data_name_or_path.startswith(".") else data_name_or_path
        )
        if not os.path.exists(os.path.join(data_dir, MANIFEST_NAME)):
            raise FileNotFoundError(
                f"{os.path.abspath(data_dir)} holds no {MANIFEST_NAME}: give data_name_or_path=<the data-bin> "
                "or copy the data-bin's inference files next to the checkpoint (copy_inference_files)"
            )
        loaded = hub_utils.from_pretrained(
            model_dir,
            checkpoint_file=checkpoint_file,
            data_name_or_path=os.path.abspath(data_dir),
            user_dir=USER_DIR,
            allow_dictionary_mismatch=allow_dictionary_mismatch,
            **overrides,
        )
        return cls(
            loaded["args"],
            loaded["task"],
            loaded["models"],
            side_data_args=side_data_args,
            sentence_splitter=sentence_splitter,
        )

    @property
    def device(self) -> torch.device:
        return self._float_tensor.device

    # ------------------------------------------------------- encoding

    def encode_cluster(self, cluster: Cluster, index: int = 0) -> "pipeline.EncodedCluster":
        """The stored form of a raw cluster (tokens, doc/para/sent ids, side
        data) exactly as ``mdsfair-preprocess`` would write it: both go through
        :class:`mdsfair.preprocess.pipeline.ClusterEncoder`."""
        return self.cluster_encoder.encode(cluster, index)

    def decode(self, tokens: torch.Tensor) -> str:
        """Hypothesis token ids -> text (special tokens removed)."""
        special = {self.dictionary.bos(), self.dictionary.eos(), self.dictionary.pad()}
        symbols = [self.dictionary[t] for t in tokens.tolist() if t not in special]
        return self.cluster_encoder.decode(symbols)

    def _batches(self, dataset, batch_size: int):
        """Collated batches of an inference dataset (longest sources first),
        moved to the device."""
        max_source = self.max_positions[0] if isinstance(self.max_positions, tuple) else self.max_positions
        if max_source is not None:
            too_long = np.flatnonzero(dataset.src_sizes > max_source)
            if len(too_long):
                raise ValueError(
                    f"cluster {int(too_long[0])} has {int(dataset.src_sizes[too_long[0]])} source tokens after the "
                    f"task's truncation, above the model's limit of {max_source}; load with "
                    f"max_source_positions={max_source}"
                )
        order = np.argsort(-dataset.src_sizes, kind="stable")
        float_dtype = self._float_tensor.dtype

        def to_device(tensor):
            tensor = tensor.to(self.device)
            return tensor.to(float_dtype) if tensor.is_floating_point() else tensor

        for start in range(0, len(order), batch_size):
            sample = dataset.collater([dataset[int(i)] for i in order[start : start + batch_size]])
            yield utils.apply_to_sample(to_device, sample)

    # ----------------------------------------------------- generation

    def generation_config(self, **generation_args):
        """The checkpoint's generation config with ``generation_args`` applied
        (any ``fairseq-generate`` option by its dest name, and
        ``length_penalty_form``, the task's ``--length-penalty-form``, and
        ``min_len_words`` / ``max_len_words``, the task's word limits; None
        keeps the configured value)."""
        config = copy.deepcopy(self.cfg.generation)
        with open_dict(config):
            for key, value in generation_args.items():
                if value is None:
                    continue
                if key not in config and key != LENGTH_PENALTY_OPTION and key not in WORD_LIMIT_OPTIONS:
                    raise ValueError(f"unknown generation option {key!r} (a fairseq-generate option by dest name)")
                setattr(config, key, value)
        return config

    @torch.no_grad()
    def generate(
        self,
        clusters: Sequence[Cluster],
        batch_size: int = 8,
        return_truncation: bool = False,
        **generation_args,
    ):
        """Beam search on raw clusters; returns, in input order, the
        hypotheses of each cluster (best first), as fairseq's
        ``SequenceGenerator`` gives them (``tokens``, ``score``,
        ``positional_scores`` ...).

        The task's truncation policies apply as in training; every cluster
        they cut is logged as a warning (see :meth:`summarize`). With
        ``return_truncation`` the result is ``(hypotheses, truncation)``,
        ``truncation`` holding one dict per cluster
        (:meth:`~mdsfair.data.multidoc_dataset.MultiDocSummarizationDataset.example_truncation`).
        """
        if clusters is None or isinstance(clusters, (str, bytes, dict)):  # None would summarize nothing, silently
            raise TypeError(
                f"clusters must be a list of clusters (each a list of documents or a raw-contract dict), "
                f"not {type(clusters).__name__}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        generation_config = self.generation_config(**generation_args)
        check_generation_settings(
            generation_config.beam,
            generation_config.min_len,
            generation_config.max_len_a,
            generation_config.max_len_b,
            match_source_len=getattr(generation_config, "match_source_len", False),
        )
        if not clusters:
            return ([], []) if return_truncation else []
        encoded = [self.encode_cluster(cluster, i) for i, cluster in enumerate(clusters)]
        dataset = self.task.build_dataset_for_inference(encoded)
        truncation = [dataset.example_truncation(i) for i in range(len(dataset))]
        for index, cut in enumerate(truncation):
            if cut["tokens_cut_by"]:
                logger.warning("cluster %d: %s", index, describe_truncation(cut))
        generator = self.task.build_generator(self.models, generation_config)
        results: List[Optional[List[Dict[str, torch.Tensor]]]] = [None] * len(encoded)
        for sample in self._batches(dataset, batch_size):
            hypotheses = self.task.inference_step(generator, self.models, sample)
            for index, hypos in zip(sample["id"].tolist(), hypotheses):
                results[index] = hypos
        report = getattr(generator, "report_page_totals", None)
        if report is not None:
            report()  # PageSum's page totals now, once, whenever the generator itself is collected
        return (results, truncation) if return_truncation else results

    def summarize(
        self,
        clusters: Sequence[Cluster],
        beam: Optional[int] = None,
        lenpen: Optional[float] = None,
        max_len_a: Optional[float] = None,
        max_len_b: Optional[int] = None,
        min_len: Optional[int] = None,
        no_repeat_ngram_size: Optional[int] = None,
        batch_size: int = 8,
        return_truncation: bool = False,
        **generation_args,
    ):
        """One summary per cluster, in input order.

        The model sees each cluster as the task's truncation policies leave it
        (``max_source_positions``, ``max_documents`` ...; the checkpoint's
        values unless overridden at load). Every cluster they cut is logged as
        a warning: source tokens kept of the total, whole documents and
        paragraphs dropped, tokens cut by each policy.

        Args:
            clusters: each a list of document strings (paragraphs separated by
                blank lines) or a raw-contract dict (``{"documents": [...],
                "title": ...}``).
            beam, lenpen, max_len_a, max_len_b, min_len, no_repeat_ngram_size:
                beam search options as in ``fairseq-generate``; None keeps the
                checkpoint's generation config (or the values given at load).
            batch_size: clusters per forward pass; does not change the output.
            return_truncation: return ``(summaries, truncation)``, with per
                cluster a dict: ``source_tokens`` / ``source_tokens_kept``,
                ``documents`` / ``documents_kept``, ``paragraphs`` /
                ``paragraphs_kept`` and ``tokens_cut_by`` (policy -> tokens).
            generation_args: any other ``fairseq-generate`` option by dest name,
                and ``length_penalty_form`` ("gnmt": GNMT's length penalty
                with ``lenpen`` as its alpha; :mod:`mdsfair.generation.length_penalty`).
        """
        hypotheses, truncation = self.generate(
            clusters,
            batch_size=batch_size,
            return_truncation=True,
            beam=beam,
            lenpen=lenpen,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            min_len=min_len,
            no_repeat_ngram_size=no_repeat_ngram_size,
            **generation_args,
        )
        summaries = [self.decode(hypos[0]["tokens"]) for hypos in hypotheses]
        return (summaries, truncation) if return_truncation else summaries


def describe_truncation(cut: Dict[str, Any]) -> str:
    """One line for a cluster's truncation (see ``return_truncation``)."""
    dropped = cut["source_tokens"] - cut["source_tokens_kept"]
    text = (
        f"the model sees {cut['source_tokens_kept']:,} of {cut['source_tokens']:,} source tokens "
        f"({dropped:,} cut), {cut['documents_kept']} of {cut['documents']} documents, "
        f"{cut['paragraphs_kept']} of {cut['paragraphs']} paragraphs"
    )
    policies = ", ".join(f"{policy} {tokens:,}" for policy, tokens in cut["tokens_cut_by"].items())
    return f"{text} (tokens cut by {policies})"
