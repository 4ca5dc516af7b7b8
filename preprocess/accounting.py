"""What ``mdsfair-preprocess`` reports beyond its counts: which lines were
skipped and which documents dropped (the ``--skip-bad`` report file), repeated
cluster ids, the vocabulary size SentencePiece really reached, and a
training split with no valid cluster (found before SentencePiece runs).

The skip report ``{split}.skipped.txt`` (written with ``--skip-bad``, listed
in the split's manifest entry as ``skip_report``) has one line per skipped
line and per dropped document, in input order::

    raw/train.jsonl:7: skipped (invalid_json): not valid JSON (Expecting value at column 1)
    raw/train.jsonl:9: dropped document 2 of cluster 'c9' (empty_document: no text after cleaning)
"""

import logging
from collections import defaultdict
from typing import Dict, List, Optional

from mdsfair.preprocess.structure import InputFormatError, SentenceSplitter, iter_raw_lines, parse_cluster
from mdsfair.raw_contract import format_location

logger = logging.getLogger("mdsfair.preprocess")

#: Repeated ids shown in the warning (all of them go to the manifest).
SHOWN_DUPLICATE_IDS = 20


class SplitLog:
    """Per split: the skip report file (with ``skip_bad``) and repeated ids.

    :meth:`skipped` takes the :class:`~mdsfair.preprocess.structure.InputFormatError`
    of a skipped line; :meth:`written` a written cluster (its ``id``, ``line``
    and ``dropped_documents``).
    """

    def __init__(self, prefix: str, split: str, path: str, skip_bad: bool):
        self.split = split
        self.path = path
        self.report_name = f"{split}.skipped.txt" if skip_bad else None
        self._report = open(prefix + ".skipped.txt", "w", encoding="utf-8") if skip_bad else None
        self._lines_of_id: Dict[str, List[int]] = defaultdict(list)

    def skipped(self, error) -> None:
        if self._report is not None:
            self._report.write(
                f"{format_location(error.path, error.line)}: skipped ({error.reason}): {error.message}\n"
            )

    def written(self, encoded) -> None:
        line = getattr(encoded, "line", None)
        self._lines_of_id[encoded.id].append(line)
        if self._report is not None:
            for document in getattr(encoded, "dropped_documents", ()):
                self._report.write(
                    f"{format_location(self.path, line)}: dropped document {document} of cluster "
                    f"{encoded.id!r} (empty_document: no text after cleaning)\n"
                )

    def duplicate_ids(self) -> Dict[str, List[int]]:
        """Every id written more than once, with the lines it was read from."""
        return {key: lines for key, lines in self._lines_of_id.items() if len(lines) > 1}

    def abort(self) -> None:
        """Close the skip report of a failed run (its folder is removed)."""
        if self._report is not None and not self._report.closed:
            self._report.close()

    def close(self) -> Dict:
        """Close the report; warn about repeated ids. Returns the split
        report's additions (``skip_report``, ``duplicate_ids``)."""
        if self._report is not None:
            self._report.close()
        report: Dict = {}
        if self.report_name is not None:
            report["skip_report"] = self.report_name
        duplicates = self.duplicate_ids()
        if duplicates:
            shown = sorted(duplicates.items(), key=lambda item: item[1][0] or 0)
            listed = "; ".join(
                f"{key!r} (lines {', '.join(str(n) for n in lines)})" for key, lines in shown[:SHOWN_DUPLICATE_IDS]
            )
            more = (
                f"; and {len(shown) - SHOWN_DUPLICATE_IDS} more (all in mdsfair.json)"
                if len(shown) > SHOWN_DUPLICATE_IDS
                else ""
            )
            logger.warning(
                "%s: split %r has %d cluster ids that occur more than once: %s%s. Ids should name clusters "
                "uniquely (outputs and scores are matched to clusters by position, so nothing is mixed up, "
                "but reports by id are ambiguous)",
                self.path,
                self.split,
                len(duplicates),
                listed,
                more,
            )
            report["duplicate_ids"] = {key: lines for key, lines in shown}
        return report


def check_training_split_has_a_cluster(path: str, args) -> None:
    """Before SentencePiece is trained on ``path``: find its first valid
    cluster (reading only up to it). Without ``--skip-bad`` the first bad line
    before it is raised (``FILE:LINE: reason``, as binarization would a moment
    later); with ``--skip-bad`` a file whose every line is bad is an error
    naming the first one, since SentencePiece cannot train on nothing."""
    first_error: Optional[InputFormatError] = None
    lines = 0
    require_summary = args.spm_train_split in args.train_splits and not args.allow_empty_summary
    splitter = SentenceSplitter("rule")  # validity does not depend on the splitter
    for line_number, raw in iter_raw_lines(path):
        lines += 1
        try:
            parse_cluster(
                raw,
                path,
                line_number,
                splitter,
                require_summary=require_summary,
                drop_empty_documents=args.skip_bad,
                lowercase=args.lowercase,
            )
            return
        except InputFormatError as error:
            if not args.skip_bad:
                raise
            first_error = first_error or error
    if first_error is None:
        raise ValueError(f"{path}: no cluster to train SentencePiece on (the file has no non-blank line)")
    raise InputFormatError(
        first_error.path,
        first_error.line,
        first_error.reason,
        f"{first_error.message}; and no line of {path} is a valid cluster ({lines} lines, all skipped by "
        "--skip-bad), so there is nothing to train SentencePiece on",
    )


def sentencepiece_size_report(requested: int, pieces: int, dictionary_size: int) -> Dict:
    """Log the vocabulary SentencePiece reached (a warning when it is smaller
    than ``--vocab-size``); returns the manifest's ``vocabulary`` entry."""
    if pieces < requested:
        logger.warning(
            "SentencePiece: asked for %d pieces (--vocab-size), got %d: the training text supports no more; "
            "dict.txt has %d entries (fairseq's 4 special symbols included, padded to a multiple of 8)",
            requested,
            pieces,
            dictionary_size,
        )
    else:
        logger.info("SentencePiece: %d pieces; dict.txt has %d entries", pieces, dictionary_size)
    return {"requested_pieces": requested, "pieces": pieces, "dictionary_size": dictionary_size}
