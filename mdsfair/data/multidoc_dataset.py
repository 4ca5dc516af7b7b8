"""The one dataset every mdsfair model trains on.

An example is a flat source token stream with, for every token, the index of
its document, paragraph and sentence (see ``preprocess/binarize.py``), a
target, and optional side data. This dataset applies the task's truncation
policies (all counted), inserts the special tokens, and collates a batch::

    net_input = {
        "src_tokens":  LongTensor [B, T]   right-padded with pad
        "src_lengths": LongTensor [B]
        the side inputs: src_doc_ids, src_para_ids, src_sent_ids and the
        side data, as the table of mdsfair.data.side_inputs says
        "prev_output_tokens": LongTensor [B, T_tgt]
    }

Special tokens: with ``document_start_token`` every document starts with
``<s>`` (bos; HierEncDec's start-of-document token) and one ``</s>`` closes
the source. Inserted tokens take the structure ids of the token after them
(``</s>``: of the token before it), so ``src_doc_ids`` is non-decreasing and
every document block starts with its ``<s>``. Paragraph and sentence ids are
renumbered densely after truncation (0, 1, 2, ... in stream order), so a
model may use them directly as block indices.
"""

import itertools
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from mdsfair.argument_types import UsageError
from mdsfair.data.manifest import STRUCTURE_STREAMS
from mdsfair.data.primera_layout import primera_truncation
from mdsfair.data.side_data import SideDataSpec
from mdsfair.data.side_inputs import collate_side_inputs

logger = logging.getLogger(__name__)


@dataclass
class TruncationConfig:
    """Truncation policies, applied in this order and each counted:

    1. ``max_documents``: keep the first documents;
    2. ``max_paragraphs``: keep the first paragraphs in stream (ranked) order;
    3. ``max_paragraph_tokens``: cut every paragraph to this many tokens;
    4. ``per_document_budget``: every document keeps its first
       ``(max_source_positions - n) // n`` tokens, n = the documents left and
       the ``n`` their ``<s>`` tokens (none without ``document_start_token``),
       as HierEncDec's ``--per_passage_source_length_limit`` does in the
       authors' ``run_summarization.py``; the closing ``</s>`` is not in that
       sum, so when every document fills its share and n divides the budget
       the source is one token over and step 5 cuts the last document's last
       token, as the authors cut to ``max_source_length - 1`` tokens plus
       ``</s>``;
    5. ``max_source_positions``: cut the whole source, special tokens
       included, at this length (``max_source_positions - 1`` tokens and the
       closing ``</s>``). A document whose first token falls past the cut is
       dropped whole with its ``<s>`` (the authors' code keeps such a lone
       ``<s>`` when it lands on the last position before ``</s>``).
    """

    max_source_positions: int = 1024
    max_target_positions: int = 1024
    max_documents: Optional[int] = None
    max_paragraphs: Optional[int] = None
    max_paragraph_tokens: Optional[int] = None
    per_document_budget: bool = False
    document_start_token: bool = True
    append_eos: bool = True
    truncate_target: bool = True
    #: PRIMERA's layout (``--source-layout primera``): the id of ``<doc-sep>``.
    #: The source is then ``<s> doc_1 <doc-sep> ... doc_n <doc-sep> </s>``
    #: (one ``<s>``, no per-document ``<s>``), and ``per_document_budget``
    #: keeps ``max_source_positions // n - 2`` tokens of every document, the
    #: rule of allenai/PRIMER ``script/dataloader.py`` (see
    #: :mod:`mdsfair.data.primera_layout`).
    document_separator: Optional[int] = None

    def special_tokens(self, num_documents: int) -> int:
        if self.document_separator is not None:
            return 1 + num_documents + int(self.append_eos)
        return num_documents * int(self.document_start_token) + int(self.append_eos)


def first_occurrence_mask(ids: np.ndarray) -> np.ndarray:
    """True where a sorted id sequence starts a new run."""
    mask = np.ones(len(ids), dtype=bool)
    mask[1:] = ids[1:] != ids[:-1]
    return mask


def rank_within_runs(ids: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... inside each run of equal consecutive ids."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(first_occurrence_mask(ids))
    run_lengths = np.diff(np.append(starts, len(ids)))
    return np.arange(len(ids)) - np.repeat(starts, run_lengths)


def dense_renumber(ids: np.ndarray) -> np.ndarray:
    """Map a non-decreasing id sequence with gaps onto 0, 1, 2, ..."""
    if len(ids) == 0:
        return ids
    return np.cumsum(first_occurrence_mask(ids)) - 1


def batch_indices_by_size(indices, num_tokens, max_tokens=None, max_sentences=None, multiple=1, name_of=None):
    """Greedy batching with fairseq's semantics (cost of a batch = its size
    times its longest example), returning every index exactly once; an
    example longer than ``max_tokens`` is refused, named by ``name_of(index)``
    (default ``example INDEX``)."""
    max_tokens = max_tokens if max_tokens and max_tokens > 0 else None
    max_sentences = max_sentences if max_sentences and max_sentences > 0 else None
    multiple = max(1, multiple or 1)
    batches, start, longest = [], 0, 0
    for position in range(len(indices)):
        length = int(num_tokens[position])
        if max_tokens is not None and length > max_tokens:
            name = name_of(int(indices[position])) if name_of is not None else f"example {indices[position]}"
            raise UsageError(f"{name}: {length} tokens, more than --max-tokens {max_tokens}; raise --max-tokens")

        def overflows(size, longest_with_new):
            return size > 0 and (
                (max_tokens is not None and longest_with_new * (size + 1) > max_tokens)
                or (max_sentences is not None and size + 1 > max_sentences)
            )

        while overflows(position - start, max(longest, length)):
            size = position - start
            keep = size - size % multiple if size >= multiple else size
            batches.append(indices[start : start + keep])
            start += keep
            longest = int(num_tokens[start:position].max()) if start < position else 0
        candidate_longest = max(longest, length)
        longest = candidate_longest
    while start < len(indices):
        end = len(indices)
        if max_sentences is not None:
            end = min(end, start + max_sentences)
        if max_tokens is not None:
            running = np.maximum.accumulate(num_tokens[start:end]) * np.arange(1, end - start + 1)
            end = start + max(1, int((running <= max_tokens).sum()))
        batches.append(indices[start:end])
        start = end
    return batches


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
        """Apply the truncation policies and insert special tokens.

        Returns ``tokens``, ``doc``, ``para``, ``sent`` (final, with special
        tokens), ``kept`` (indices into the stored stream of every final
        position, -1 for inserted tokens) and ``kept_paragraphs`` (stored
        paragraph index of each final paragraph).
        """
        cfg = self.truncation
        tokens, ids = self._raw_item(index)
        counts = counts if counts is not None else Counter()
        keep = np.ones(len(tokens), dtype=bool)
        num_documents = int(ids["doc"].max()) + 1 if len(tokens) else 0

        def cut(mask: np.ndarray, policy: str) -> None:
            removed = int((keep & ~mask).sum())
            if removed:
                counts[f"{policy}_examples"] += 1
                counts[f"{policy}_tokens"] += removed
            keep[:] &= mask

        if cfg.max_documents is not None and num_documents > cfg.max_documents:
            counts["max_documents_documents"] += num_documents - cfg.max_documents
            cut(ids["doc"] < cfg.max_documents, "max_documents")
        if cfg.max_paragraphs is not None:
            extra = int(ids["para"][keep].max()) + 1 - cfg.max_paragraphs if keep.any() else 0
            if extra > 0:
                counts["max_paragraphs_paragraphs"] += extra
                cut(ids["para"] < cfg.max_paragraphs, "max_paragraphs")
        if cfg.max_paragraph_tokens is not None:
            cut(rank_within_runs(ids["para"]) < cfg.max_paragraph_tokens, "max_paragraph_tokens")
        kept_documents = len(np.unique(ids["doc"][keep]))
        separated = cfg.document_separator is not None
        if cfg.per_document_budget and kept_documents and separated:
            # allenai/PRIMER script/dataloader.py: encode(doc, max_length=M // n)[1:-1]
            share = primera_truncation([0] * kept_documents, cfg.max_source_positions)["share"] - 2
            position_in_document = np.zeros(len(tokens), dtype=np.int64)
            position_in_document[keep] = rank_within_runs(ids["doc"][keep])
            cut(position_in_document < share, "per_document_budget")
        elif cfg.per_document_budget and kept_documents:
            document_starts = kept_documents * int(cfg.document_start_token)
            share = (cfg.max_source_positions - document_starts) // kept_documents
            if share < 1:
                raise UsageError(
                    f"{self.cluster_name(index)}: --per-document-budget: {kept_documents} documents leave no "
                    f"tokens in a budget of {cfg.max_source_positions} (--max-source-positions); lower "
                    f"--max-documents or raise --max-source-positions"
                )
            position_in_document = np.zeros(len(tokens), dtype=np.int64)
            position_in_document[keep] = rank_within_runs(ids["doc"][keep])
            cut(position_in_document < share, "per_document_budget")
        # The total budget counts the special tokens of the documents that remain.
        kept_index = np.flatnonzero(keep)
        if len(kept_index):
            doc_of_kept = ids["doc"][kept_index]
            if separated:
                # one <s> first; every earlier document closed by its <doc-sep>;
                # the token's own document still needs its <doc-sep> after it
                specials_before = 1 + np.cumsum(first_occurrence_mask(doc_of_kept)) - 1
                final_position = np.arange(len(kept_index)) + specials_before + 1
            else:
                specials_before = np.cumsum(first_occurrence_mask(doc_of_kept)) * int(cfg.document_start_token)
                final_position = np.arange(len(kept_index)) + specials_before  # position after insertion
            limit = cfg.max_source_positions - int(cfg.append_eos)
            over = final_position >= limit
            if over.any():
                dropped_documents = len(np.unique(doc_of_kept)) - len(np.unique(doc_of_kept[~over]))
                counts["max_source_positions_documents"] += dropped_documents
                mask = np.ones(len(tokens), dtype=bool)
                mask[kept_index[over]] = False
                cut(mask, "max_source_positions")
                kept_index = np.flatnonzero(keep)
        if len(kept_index) == 0:
            raise UsageError(
                f"{self.cluster_name(index)}: no source token left after truncation to --max-source-positions "
                f"{cfg.max_source_positions}"
            )
        if keep.sum() < len(tokens):
            counts["examples_truncated"] += 1

        positions = kept_index
        doc = ids["doc"][positions]
        if separated:
            ends = np.flatnonzero(np.append(doc[1:] != doc[:-1], True)) + 1
            positions = np.insert(positions, ends, -2)
            positions = np.insert(positions, 0, -1)
        elif cfg.document_start_token:
            starts = np.flatnonzero(first_occurrence_mask(doc))
            positions = np.insert(positions, starts, -1)
        stored = positions >= 0
        # An inserted <s> takes the structure of the stored token after it,
        # an inserted <doc-sep> that of the token before it (its document).
        structure_source = positions.copy()
        inserted = np.flatnonzero(positions == -1)
        structure_source[inserted] = positions[inserted + 1]
        separators = np.flatnonzero(positions == -2)
        structure_source[separators] = positions[separators - 1]
        out = {key: ids[key][structure_source] for key in STRUCTURE_STREAMS}
        token_out = np.where(stored, tokens[structure_source], self.dictionary.bos())
        if separated:
            token_out[separators] = cfg.document_separator
        source_of = np.where(positions >= 0, positions, -1)
        if cfg.append_eos:
            token_out = np.append(token_out, self.dictionary.eos())
            source_of = np.append(source_of, -1)
            for key in STRUCTURE_STREAMS:
                out[key] = np.append(out[key], out[key][-1])
        kept_paragraphs = np.unique(out["para"])
        out["para"] = dense_renumber(out["para"])
        out["sent"] = dense_renumber(out["sent"])
        out["doc"] = dense_renumber(out["doc"])
        out["tokens"] = token_out
        out["kept"] = source_of
        out["kept_paragraphs"] = kept_paragraphs
        return out

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

    #: Truncation policies in the order they apply, with their task option.
    POLICY_OPTIONS = (
        ("max_documents", "--max-documents"),
        ("max_paragraphs", "--max-paragraphs"),
        ("max_paragraph_tokens", "--max-paragraph-tokens"),
        ("per_document_budget", "--per-document-budget"),
        ("max_source_positions", "--max-source-positions"),
    )

    def truncation_report(self, label: Optional[str] = None) -> str:
        """One line for the log: ``label`` (default: the dataset's name), the
        share of source tokens kept, then what each policy cut (clusters,
        tokens, whole documents / paragraphs) and the targets cut."""
        counts = self.truncation_counts
        stored, kept = self.source_tokens_stored, self.source_tokens_kept
        share = 100.0 * kept / stored if stored else 100.0
        line = f"{label or self.name}: {len(self)} clusters, source tokens kept {share:.1f}% ({kept:,} of {stored:,})"
        cuts = []
        for policy, option in self.POLICY_OPTIONS:
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
