"""WikiSum as the Hierarchical Transformer's authors released it: ``.pt`` shards of SentencePiece ids.

Source: nlpyang/hiersumm (README, "Data Preparation": the WikiSum ranked by
their paragraph ranker, the top 40 paragraphs of each instance, as ``.pt``
files, and the SentencePiece model ``spm9998_3.model``). A shard
``WIKI.{train,valid,test}.N.pt`` is a list of examples
(:mod:`.readers.torch_shards`), each a dict that their
``src/abstractive/data_loader.py`` reads as ``ex['src'], ex['tgt'],
ex['tgt_str']``: ``src`` the ranked paragraphs, each a list of SentencePiece
ids; ``tgt`` the target's ids; ``tgt_str`` the target's text, the gold
summary their ``predictor_builder.py`` scores against once ``<t>``, ``</t>``
and the ``<Q>`` sentence markers are taken out. The pieces their code names
(``train_abstractive.py``: ``<PAD> <S> </S> <T> <P> <Q>``) must all be in the
SentencePiece model given: a model without them is not theirs.

Each paragraph is decoded with the SentencePiece model and becomes one
document, in the shard's order (the ranking), as ``wikisum`` does; ``<PAD>``,
``<S>`` and ``</S>`` ids are left out and ``<T>``, ``<P>`` and ``<Q>`` (ends of
title, paragraph and sentence) become spaces. The summary is ``tgt_str``
(default) or the decoded ``tgt``. Ids are ``{split}-{index}`` over the
split's shards in order.

Clone paragraphs (Liu & Lapata 2019, Sec. 4, "WikiSum Dataset"): "We further
removed clone paragraphs (which are exact copies of some parts of the
Wikipedia articles); these were paragraphs in the source documents whose
bigram recall against the target summary was higher than 0.8." The bigram
recall is ROUGE-2 recall with the target as the reference (their Sec. 3.1
takes "ROUGE-2 recall (of paragraph Pi against gold target text D)"): the
clipped count of the target's bigrams found in the paragraph over the number
of the target's bigrams (:func:`mdsfair.text.rouge_n_recall` over
:func:`mdsfair.text.words`, as ``mdsfair-rank``'s labels). A paragraph whose
recall is above 0.8 is dropped and counted as ``clone_paragraph``; exactly 0.8
is kept ("higher than"). On by default; ``keep_clone_paragraphs`` turns it off.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Dict, Iterator, List, Optional

from mdsfair.raw_contract import EMPTY_CLUSTER, MISSING_KEY, WRONG_TYPE
from mdsfair.text import rouge_n_recall, words

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PendingCounts,
    Record,
    has_type,
    normalize_paragraph,
    normalize_summary,
    require_field,
)
from .readers.torch_shards import iter_shard_records
from .registry import register_converter

#: The pieces the hiersumm code looks up (train_abstractive.py: ``spm.PieceToId``).
HIERSUMM_PIECES = ("<PAD>", "<S>", "</S>", "<T>", "<P>", "<Q>")
#: Left out of the text: padding, start and end of a sequence.
OMITTED_PIECES = ("<PAD>", "<S>", "</S>")
#: Ends of title, paragraph and sentence: a space in the text.
BREAK_PIECES = ("<T>", "<P>", "<Q>")
#: Liu & Lapata 2019, Sec. 4: a paragraph is a clone when its bigram recall against the target is higher than this.
CLONE_BIGRAM_RECALL = 0.8
TARGET_SOURCES = ("tgt_str", "tgt")
_TARGET_MARKUP = re.compile(r"</?t>", re.IGNORECASE)  # predictor_builder.py removes '<t>' and '</t>'
_SENTENCE_MARKER = re.compile(r"<q>", re.IGNORECASE)  # and turns '<Q>' into a space


class HiersummPieces:
    """Their SentencePiece model, decoding id lists checked against its size."""

    def __init__(self, spm_model: str):
        import sentencepiece

        try:
            self.processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
        except (OSError, RuntimeError) as error:
            raise ValueError(f"{spm_model}: not a SentencePiece model ({error})") from None
        self.size = self.processor.get_piece_size()
        unk_id = self.processor.unk_id()
        ids = {}
        for piece in HIERSUMM_PIECES:
            ids[piece] = self.processor.piece_to_id(piece)
            if ids[piece] == unk_id and self.processor.id_to_piece(unk_id) != piece:
                raise ValueError(
                    f"{spm_model}: the SentencePiece model has no piece {piece!r}; hiersumm's model "
                    f"(spm9998_3.model) has {' '.join(HIERSUMM_PIECES)}"
                )
        self.omitted = {ids[piece] for piece in OMITTED_PIECES}
        self.breaks = {ids[piece] for piece in BREAK_PIECES}

    def check(self, ids: Any, where: str) -> List[int]:
        """``ids`` when it is a list of ids of the model, else :class:`BadRecord` naming ``where``."""
        if not isinstance(ids, list):
            raise BadRecord(WRONG_TYPE, f"{where} must be a list of ids, got {type(ids).__name__}")
        if all(type(value) is int and 0 <= value < self.size for value in ids):
            return ids
        position, value = next((i, v) for i, v in enumerate(ids) if not (type(v) is int and 0 <= v < self.size))
        if not has_type(value, int):
            raise BadRecord(WRONG_TYPE, f"{where}[{position}] must be an int id, got {type(value).__name__}")
        raise BadRecord(
            WRONG_TYPE, f"{where}[{position}] = {value} is no id of the SentencePiece model ({self.size} pieces)"
        )

    def decode(self, ids: List[int]) -> str:
        """The text of checked ``ids``: omitted pieces left out, break pieces a space, whitespace collapsed."""
        runs: List[List[int]] = [[]]
        for value in ids:
            if value in self.breaks:
                runs.append([])
            elif value not in self.omitted:
                runs[-1].append(value)
        return normalize_paragraph(" ".join(self.processor.decode(run) for run in runs if run))


def add_wikisum_hiersumm_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert wikisum_hiersumm`` flags."""
    parser.add_argument(
        "--spm-model",
        required=True,
        metavar="MODEL",
        help="the authors' SentencePiece model (spm9998_3.model) the shards' ids are pieces of",
    )
    parser.add_argument(
        "--target-from",
        choices=TARGET_SOURCES,
        default="tgt_str",
        help="the summary: the target text their evaluation scores against (tgt_str) or the decoded "
        "target ids (tgt) (default: %(default)s)",
    )
    parser.add_argument(
        "--keep-clone-paragraphs",
        action="store_true",
        help="keep paragraphs whose bigram recall against the summary is higher than 0.8, which the "
        "paper removes as copies of the Wikipedia article (Liu & Lapata 2019, Sec. 4)",
    )
    parser.add_argument(
        "--shard-prefix",
        default="WIKI",
        help="file-name prefix of the shards in a folder input, the last part of their -data_path "
        "(folder/WIKI.SPLIT.N.pt; default: %(default)s)",
    )


@register_converter("wikisum_hiersumm", add_arguments=add_wikisum_hiersumm_arguments)
def iter_wikisum_hiersumm(
    inputs: Inputs,
    split: str = "train",
    *,
    spm_model: str,
    target_from: str = "tgt_str",
    keep_clone_paragraphs: bool = False,
    shard_prefix: str = "WIKI",
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """hiersumm's WikiSum ``.pt`` shards (a folder or shard files, with their SentencePiece model) -> clusters.

    Each ranked paragraph of ``src``, decoded with ``spm_model``, is one
    document in the shards' order; the summary is ``tgt_str`` without its
    ``<t>``/``</t>``/``<Q>`` markup, or the decoded ``tgt`` with
    ``target_from="tgt"``. Paragraphs whose bigram recall against the summary
    is higher than 0.8 are dropped as clones (the paper's filter) unless
    ``keep_clone_paragraphs``. A folder input is read for ``split``
    (``{shard_prefix}.{split}.N.pt``). Ids: ``{split}-{index}``."""
    if target_from not in TARGET_SOURCES:
        raise ValueError(f"target_from must be one of {TARGET_SOURCES}, got {target_from!r}")
    session = ConversionSession(options, "wikisum_hiersumm", split, inputs)
    pieces = HiersummPieces(spm_model)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        example = record.payload
        if not isinstance(example, dict):
            raise BadRecord(
                WRONG_TYPE, f"an example is a dict with 'src', 'tgt', 'tgt_str', got {type(example).__name__}"
            )
        missing = [key for key in ("src", "tgt", "tgt_str") if key not in example]
        if missing:
            raise BadRecord(
                MISSING_KEY, f"{missing[0]!r} (keys: {sorted(map(str, example))}; hiersumm's loader reads all three)"
            )
        paragraphs = [pieces.check(ids, f"src[{n}]") for n, ids in enumerate(require_field(example, "src", list))]
        target_ids = pieces.check(example["tgt"], "tgt")
        target_text = require_field(example, "tgt_str", str)
        if target_from == "tgt":
            summary = normalize_summary(pieces.decode(target_ids))
        else:
            summary = normalize_summary(_SENTENCE_MARKER.sub(" ", _TARGET_MARKUP.sub("", target_text)))
        pending = PendingCounts()
        documents = [
            Document(pieces.decode(ids), f"src[{n}]", empty_reason="empty_paragraph")
            for n, ids in enumerate(paragraphs)
        ]
        if not keep_clone_paragraphs:
            documents = _without_clones(documents, summary, pending)
        return session.finish(record, cluster_id=None, documents=documents, summary=summary, pending=pending)

    yield from session.clusters(iter_shard_records(session.paths, session, split, shard_prefix), build)


def _without_clones(documents: List[Document], summary: str, pending: PendingCounts) -> List[Document]:
    """``documents`` without the clone paragraphs (bigram recall against ``summary`` above
    :data:`CLONE_BIGRAM_RECALL`), counted in ``pending``; a cluster of clones only is bad input."""
    target = words(summary)
    kept = [doc for doc in documents if rouge_n_recall(words(doc.text), target, 2) <= CLONE_BIGRAM_RECALL]
    clones = len(documents) - len(kept)
    if not clones:
        return documents
    if not any(doc.text for doc in kept):
        raise BadRecord(
            EMPTY_CLUSTER,
            f"all {clones} non-empty paragraphs are clones (bigram recall against the summary above "
            f"{CLONE_BIGRAM_RECALL}); --keep-clone-paragraphs keeps them",
        )
    pending.dropped_documents["clone_paragraph"] += clones
    return kept
