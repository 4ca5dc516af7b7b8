"""The one dataset every mdsfair model trains on.

An example is a flat source token stream with, for every token, the index of
its document, paragraph and sentence (see ``preprocess/binarize.py``), a
target, and optional side data. This dataset applies the task's truncation
policies (all counted) and inserts the special tokens
(:mod:`mdsfair.data.source_truncation`), batches by size
(:mod:`mdsfair.data.batching`), and collates a batch::

    net_input = {
        "src_tokens":  LongTensor [B, T]   right-padded with pad
        "src_lengths": LongTensor [B]
        the side inputs: src_doc_ids, src_para_ids, src_sent_ids and the
        side data, as the table of mdsfair.data.side_inputs says
        "prev_output_tokens": LongTensor [B, T_tgt]
    }
"""

import functools
import itertools
import logging
from collections import Counter
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from mdsfair.data.batching import batch_indices_by_size
from mdsfair.data.manifest import STRUCTURE_STREAMS
from mdsfair.data.side_data import SideDataSpec
from mdsfair.data.side_inputs import collate_side_inputs
from mdsfair.data.source_truncation import POLICY_OPTIONS, TruncationConfig, truncate_source

logger = logging.getLogger(__name__)


class MultiDocSummarizationDataset(FairseqDataset):
    """Source stream + structure + side data, truncated and collated.

    Args:
        source, target: datasets of token-id tensors (target may be None);
        structure: ``{"doc"|"para"|"sent": dataset}`` of per-token ids;
        side_data: ``{name: (SideDataSpec, dataset)}``;
        dictionary: the shared fairseq dictionary;
        truncation: a :class:`TruncationConfig`;
        shuffle: shuffle in :meth:`ordered_indices` (training);
        name: the dataset in log lines (a data-bin split: ``DATA_DIR/SPLIT``);
        cluster_ids_file: the split's ``SPLIT.ids.txt`` (line ``i + 1``: the
            cluster id of example ``i``), read only to name a cluster in an error.
    """

    def __init__(
        self,
        source,
        target,
        structure: Dict[str, object],
        dictionary,
        truncation: TruncationConfig,
        side_data: Optional[Dict[str, tuple]] = None,
        shuffle: bool = True,
        name: str = "",
        cluster_ids_file: Optional[str] = None,
    ):
        self.source = source
        self.target = target
        self.structure = structure
        self.dictionary = dictionary
        self.truncation = truncation
        self.side_data = side_data or {}
        self.shuffle = shuffle
        self.name = name
        self.cluster_ids_file = cluster_ids_file
        for key in STRUCTURE_STREAMS:
            if len(structure[key]) != len(source):
                raise ValueError(
                    f"{name}: structure stream {key!r} has {len(structure[key])} items, source {len(source)}"
                )
        self.truncation_counts = Counter()
        self.src_sizes = np.zeros(len(source), dtype=np.int64)
        self.tgt_sizes = np.zeros(len(source), dtype=np.int64)
        #: Longest target served: --max-target-positions, lowered to the
        #: model's limit by :meth:`filter_indices_by_size`; None: no cut.
        self.target_limit = truncation.max_target_positions if truncation.truncate_target else None
        stored_sizes = getattr(source, "sizes", None)
        self.source_tokens_stored = int(
            np.sum(stored_sizes) if stored_sizes is not None else sum(len(tokens) for tokens in source)
        )
        self.source_tokens_kept = 0
        for index in range(len(source)):
            view = self._source_view(index, self.truncation_counts)
            self.src_sizes[index] = len(view["tokens"])
            self.source_tokens_kept += int((view["kept"] >= 0).sum())
            self.tgt_sizes[index] = self._target_length(index, self.truncation_counts)
        self.sizes = np.stack([self.src_sizes, self.tgt_sizes], axis=1) if target is not None else self.src_sizes

    # ------------------------------------------------------------- views

    def cluster_name(self, index: int) -> str:
        """Example ``index`` as its user knows it, for error messages:
        ``IDS_FILE:LINE: cluster 'ID'`` (the id mdsfair-preprocess copied
        from the raw data), or ``NAME: cluster INDEX`` (0-based, in the order
        given) when the dataset has no ids file."""
        if self.cluster_ids_file is not None:
            try:
                with open(self.cluster_ids_file, encoding="utf-8") as ids:
                    line = next(itertools.islice(ids, index, None), None)
            except (OSError, UnicodeDecodeError):
                line = None
            if line is not None:
                cluster_id = line.rstrip("\n")
                return f"{self.cluster_ids_file}:{index + 1}: cluster {cluster_id!r}"
        return f"{self.name}: cluster {index}"

    def _raw_item(self, index: int):
        tokens = np.asarray(self.source[index], dtype=np.int64)
        ids = {key: np.asarray(self.structure[key][index], dtype=np.int64) for key in STRUCTURE_STREAMS}
        for key, values in ids.items():
            if len(values) != len(tokens):
                raise ValueError(
                    f"{self.cluster_name(index)}: {key} ids ({len(values)}) not aligned to tokens ({len(tokens)})"
                )
        return tokens, ids

    def _source_view(self, index: int, counts: Optional[Counter] = None) -> Dict[str, np.ndarray]:
        """Example ``index`` truncated, its special tokens inserted
        (:func:`~mdsfair.data.source_truncation.truncate_source`), its cuts counted in ``counts``."""
        tokens, ids = self._raw_item(index)
        return truncate_source(
            tokens,
            ids,
            self.truncation,
            self.dictionary.bos(),
            self.dictionary.eos(),
            counts if counts is not None else Counter(),
            functools.partial(self.cluster_name, index),
        )

    def _target_length(self, index: int, counts: Counter) -> int:
        if self.target is None:
            return 0
        length = len(self.target[index]) + 1  # + eos
        limit = self.target_limit
        if limit is not None and length > limit:
            counts["target_examples_truncated"] += 1
            counts["target_tokens_truncated"] += length - limit
            return limit
        return length

    def _side_item(self, spec: SideDataSpec, array: np.ndarray, view: Dict[str, np.ndarray]):
        if spec.kind == "paragraph_matrix":
            num_paragraphs = int(round(np.sqrt(array.size)))
            matrix = np.asarray(array, dtype=np.float32).reshape(num_paragraphs, num_paragraphs)
            kept = view["kept_paragraphs"]
            return torch.from_numpy(np.ascontiguousarray(matrix[np.ix_(kept, kept)]))
        kept = view["kept"]
        values = np.full(len(kept), -1, dtype=np.int64)
        stored = kept >= 0
        values[stored] = np.asarray(array, dtype=np.int64)[kept[stored]]
        if spec.kind == "token_pointer":
            final_position_of = np.full(len(array), -1, dtype=np.int64)
            final_position_of[kept[stored]] = np.flatnonzero(stored)
            valid = values >= 0
            values[valid] = final_position_of[values[valid]]
        return torch.from_numpy(values)

    # --------------------------------------------------- FairseqDataset API

    def __getitem__(self, index: int):
        view = self._source_view(index)
        item = {
            "id": index,
            "source": torch.from_numpy(view["tokens"].astype(np.int64)),
            "structure": {key: torch.from_numpy(view[key].astype(np.int64)) for key in STRUCTURE_STREAMS},
            "side_data": {
                name: self._side_item(spec, dataset[index], view) for name, (spec, dataset) in self.side_data.items()
            },
        }
        if self.target is not None:
            target = torch.as_tensor(np.asarray(self.target[index], dtype=np.int64))
            target = torch.cat([target, target.new_tensor([self.dictionary.eos()])])
            item["target"] = target[: self.target_limit] if self.target_limit is not None else target
        return item

    def __len__(self):
        return len(self.source)

    def collater(self, samples: List[dict]) -> dict:
        if len(samples) == 0:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        samples = [s for s in samples if s["source"].numel() > 0]
        src_tokens = data_utils.collate_tokens([s["source"] for s in samples], pad, eos, left_pad=False)
        src_lengths = torch.LongTensor([s["source"].numel() for s in samples])
        net_input = {"src_tokens": src_tokens, "src_lengths": src_lengths}
        net_input.update(
            collate_side_inputs(
                [s["structure"] for s in samples],
                [s["side_data"] for s in samples],
                [spec for spec, _ in self.side_data.values()],
            )
        )
        batch = {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "net_input": net_input,
        }
        references = getattr(self, "reference_summaries", None)
        if references is not None:  # the task's --eval-rouge: every stored reference of each cluster
            batch["references"] = [references[s["id"]] for s in samples]
        if samples[0].get("target") is not None:
            targets = [s["target"] for s in samples]
            batch["target"] = data_utils.collate_tokens(targets, pad, eos, left_pad=False)
            batch["net_input"]["prev_output_tokens"] = data_utils.collate_tokens(
                targets, pad, eos, left_pad=False, move_eos_to_beginning=True
            )
            batch["ntokens"] = sum(t.numel() for t in targets)
        else:
            batch["ntokens"] = int(src_lengths.sum())
        return batch

    @staticmethod
    def source_length_order(batch: dict) -> torch.Tensor:
        """The rows of a collated ``batch`` by source length, longest first, as
        fairseq's ``LanguagePairDataset`` collates them (``collate``'s
        ``src_lengths.sort(descending=True)``): a packed RNN encoder
        (``pack_padded_sequence`` with ``enforce_sorted``, fairseq's
        ``LSTMEncoder``) needs that order. Ties keep the collated order."""
        return torch.sort(batch["net_input"]["src_lengths"], descending=True, stable=True).indices

    @staticmethod
    def batch_rows(batch: dict, order: torch.Tensor) -> dict:
        """``batch`` with its examples taken in ``order``: every per-example
        field alike, ``id``, ``target``, ``references`` and each tensor of
        ``net_input`` (batch-first, side inputs included)."""
        taken = dict(batch)
        taken["net_input"] = {
            name: value.index_select(0, order.to(value.device)) if torch.is_tensor(value) else value
            for name, value in batch["net_input"].items()
        }
        for name in ("id", "target"):
            if torch.is_tensor(batch.get(name)):
                taken[name] = batch[name].index_select(0, order.to(batch[name].device))
        if batch.get("references") is not None:
            taken["references"] = [batch["references"][i] for i in order.tolist()]
        return taken

    @classmethod
    def sorted_by_source_length(cls, batch: dict) -> dict:
        """``batch`` in :meth:`source_length_order`."""
        if not batch or "net_input" not in batch:
            return batch
        return cls.batch_rows(batch, cls.source_length_order(batch))

    def num_tokens(self, index: int) -> int:
        return int(max(self.src_sizes[index], self.tgt_sizes[index]))

    def num_tokens_vec(self, indices):
        return np.maximum(self.src_sizes[indices], self.tgt_sizes[indices])

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        """Group ``indices`` (in order) into batches of at most ``max_tokens``
        padded tokens and ``max_sentences`` examples, batch sizes rounded down
        to ``required_batch_size_multiple`` where possible.

        fairseq's compiled ``batch_by_size_vec`` in the fairseq build we
        install drops the last examples of the epoch when the multiple is
        above 1 (fairseq's default is 8), which would lose examples silently
        in training and generation; this greedy implementation serves every
        index exactly once.
        """
        return batch_indices_by_size(
            np.asarray(indices, dtype=np.int64),
            self.num_tokens_vec(np.asarray(indices, dtype=np.int64)),
            max_tokens=max_tokens,
            max_sentences=max_sentences,
            multiple=required_batch_size_multiple,
            name_of=self.cluster_name,
        )

    def size(self, index: int):
        if self.target is None:
            return int(self.src_sizes[index])
        return (int(self.src_sizes[index]), int(self.tgt_sizes[index]))

    def ordered_indices(self):
        if self.shuffle:
            indices = np.random.permutation(len(self)).astype(np.int64)
        else:
            indices = np.arange(len(self), dtype=np.int64)
        if self.target is not None:
            indices = indices[np.argsort(self.tgt_sizes[indices], kind="mergesort")]
        return indices[np.argsort(self.src_sizes[indices], kind="mergesort")]

    @property
    def supports_prefetch(self):
        return False

    def filter_indices_by_size(self, indices, max_sizes):
        """fairseq's size filter, with targets never a reason to drop an example.

        ``max_sizes`` is ``(source, target)``: the limits the task and the
        model agree on. A source above its limit is returned as ignored
        (fairseq then stops, or skips it with
        ``--skip-invalid-size-inputs-valid-test``). A target above the target
        limit (a model trained with a lower ``--max-target-positions`` than
        the task now has) is cut to it and counted, so every cluster of a
        generation subset gets a hypothesis whatever its reference's length.
        With ``--no-truncate-target`` long targets are filtered as fairseq does.
        """
        indices = np.asarray(indices, dtype=np.int64)
        max_source, max_target = max_sizes if isinstance(max_sizes, (tuple, list)) else (max_sizes, None)
        if self.target is not None and max_target is not None and self.target_limit is not None:
            if max_target < self.target_limit:
                self.set_target_limit(int(max_target))
        too_long = np.zeros(len(indices), dtype=bool)
        if max_source is not None:
            too_long |= self.src_sizes[indices] > max_source
        if self.target is not None and max_target is not None and self.target_limit is None:
            too_long |= self.tgt_sizes[indices] > max_target
        return indices[~too_long], indices[too_long].tolist()

    def set_target_limit(self, limit: int) -> None:
        """Cut targets at ``limit`` tokens (``</s>`` included) from now on; the
        target counts are recomputed and the new cut is logged."""
        self.target_limit = limit
        for key in ("target_examples_truncated", "target_tokens_truncated"):
            self.truncation_counts.pop(key, None)
        for index in range(len(self)):
            self.tgt_sizes[index] = self._target_length(index, self.truncation_counts)
        if self.target is not None:
            self.sizes = np.stack([self.src_sizes, self.tgt_sizes], axis=1)
        logger.info(
            "%s: targets cut at the model's limit of %d tokens (below --max-target-positions %d): %d of %d "
            "targets, %d tokens (the examples are kept, not filtered)",
            self.name,
            limit,
            self.truncation.max_target_positions,
            self.truncation_counts["target_examples_truncated"],
            len(self),
            self.truncation_counts["target_tokens_truncated"],
        )

    def example_truncation(self, index: int) -> Dict[str, object]:
        """What the truncation policies cut from example ``index``: stored and
        kept source tokens, documents and paragraphs, and the tokens each
        policy removed (``{"max_source_positions": 812, ...}``)."""
        counts: Counter = Counter()
        view = self._source_view(index, counts)
        _, ids = self._raw_item(index)
        return {
            "source_tokens": int(len(ids["doc"])),
            "source_tokens_kept": int((view["kept"] >= 0).sum()),
            "documents": int(len(np.unique(ids["doc"]))),
            "documents_kept": int(len(np.unique(view["doc"]))),
            "paragraphs": int(len(np.unique(ids["para"]))),
            "paragraphs_kept": int(len(view["kept_paragraphs"])),
            "tokens_cut_by": {
                key[: -len("_tokens")]: int(value) for key, value in counts.items() if key.endswith("_tokens") and value
            },
        }

    def truncation_report(self, label: Optional[str] = None) -> str:
        """One line for the log: ``label`` (default: the dataset's name), the
        share of source tokens kept, then what each policy cut (clusters,
        tokens, whole documents / paragraphs) and the targets cut."""
        counts = self.truncation_counts
        stored, kept = self.source_tokens_stored, self.source_tokens_kept
        share = 100.0 * kept / stored if stored else 100.0
        line = f"{label or self.name}: {len(self)} clusters, source tokens kept {share:.1f}% ({kept:,} of {stored:,})"
        cuts = []
        for policy, option in POLICY_OPTIONS:
            if not counts[f"{policy}_tokens"]:
                continue
            cut = f"{option} cut {counts[f'{policy}_tokens']:,} tokens in {counts[f'{policy}_examples']:,} clusters"
            for unit in ("documents", "paragraphs"):
                if counts[f"{policy}_{unit}"]:
                    cut += f" ({counts[f'{policy}_{unit}']:,} whole {unit})"
            cuts.append(cut)
        if counts["target_examples_truncated"]:
            cuts.append(
                f"targets cut at {self.target_limit} tokens: {counts['target_examples_truncated']:,} targets, "
                f"{counts['target_tokens_truncated']:,} tokens"
            )
        return line + ("; " + "; ".join(cuts) if cuts else "; nothing truncated")
