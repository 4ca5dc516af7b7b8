"""The truncation policies of a multi-document source (:class:`TruncationConfig`)
and their application to one stored example, special tokens inserted
(:func:`truncate_source`; the dataset is :mod:`mdsfair.data.multidoc_dataset`).

Special tokens: with ``document_start_token`` every document starts with
``<s>`` (bos; HierEncDec's start-of-document token) and one ``</s>`` closes
the source. Inserted tokens take the structure ids of the token after them
(``</s>``: of the token before it), so ``src_doc_ids`` is non-decreasing and
every document block starts with its ``<s>``. Paragraph and sentence ids are
renumbered densely after truncation (0, 1, 2, ... in stream order), so a
model may use them directly as block indices.
"""

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np

from mdsfair.argument_types import UsageError
from mdsfair.data.manifest import STRUCTURE_STREAMS
from mdsfair.data.primera_layout import primera_truncation


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


def truncate_source(
    tokens: np.ndarray,
    ids: Dict[str, np.ndarray],
    cfg: TruncationConfig,
    bos: int,
    eos: int,
    counts: Counter,
    cluster_name: Callable[[], str],
) -> Dict[str, np.ndarray]:
    """Apply the truncation policies of ``cfg`` to one stored example (its
    ``tokens`` and their ``ids``, ``{"doc"|"para"|"sent": ids}``), counting
    what each cuts in ``counts``, and insert the special tokens (``bos``: a
    document's ``<s>``, ``eos``: the closing ``</s>``). ``cluster_name()``
    names the example in an error.

    Returns ``tokens``, ``doc``, ``para``, ``sent`` (final, with special
    tokens), ``kept`` (indices into the stored stream of every final
    position, -1 for inserted tokens) and ``kept_paragraphs`` (stored
    paragraph index of each final paragraph).
    """
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
                f"{cluster_name()}: --per-document-budget: {kept_documents} documents leave no "
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
            f"{cluster_name()}: no source token left after truncation to --max-source-positions "
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
    token_out = np.where(stored, tokens[structure_source], bos)
    if separated:
        token_out[separators] = cfg.document_separator
    source_of = np.where(positions >= 0, positions, -1)
    if cfg.append_eos:
        token_out = np.append(token_out, eos)
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


#: Truncation policies in the order they apply, with their task option.
POLICY_OPTIONS = (
    ("max_documents", "--max-documents"),
    ("max_paragraphs", "--max-paragraphs"),
    ("max_paragraph_tokens", "--max-paragraph-tokens"),
    ("per_document_budget", "--per-document-budget"),
    ("max_source_positions", "--max-source-positions"),
)
