"""Clusters with several reference summaries (``"summaries": [...]``).

A raw cluster may carry one reference (``"summary"``) or several
(``"summaries"``; see :func:`mdsfair.raw_contract.cluster_references` for the
rule, ``summary`` first then the other entries of ``summaries``). FewSum's
``jsonl_multiref`` files have ``summaries`` only, three per cluster.

Training (``mdsfair-preprocess --multi-reference``):

* ``first`` (default): one example per cluster, the first reference as the
  target.
* ``each``: in a training split (``--train-splits``), one example per
  reference, all with the cluster's source: a cluster with three references
  is three rows, one after the other. Other splits keep one row per cluster.

Evaluation: every reference is kept in the data-bin as parallel text files,
one line per row of the split:

* ``{split}.summary.txt``: the reference the row's target encodes;
* ``{split}.summary.2.txt``, ``{split}.summary.3.txt``, ...: the row cluster's
  other references in order, an empty line where the cluster has fewer.

These are written only for a split in which some cluster has two references
or more; the split's manifest entry then lists them in ``reference_files``.
They are exactly the parallel REF files ``mdsfair-rouge`` takes (an empty
line = no reference from that file for that cluster)::

    mdsfair-rouge generate.log data-bin/test.summary.txt data-bin/test.summary.2.txt data-bin/test.summary.3.txt

and :func:`mdsfair.evaluation.references.data_bin_references` reads them by
the manifest.

SentencePiece is trained on the references the training examples use (the
first, or each).
"""

import os
from collections import Counter
from typing import Dict, List, Optional, Sequence

import numpy as np

from mdsfair.raw_contract import cluster_references

MULTI_REFERENCE_MODES = ("first", "each")


def clean_references(obj: Dict, clean) -> List[str]:
    """The record's references (:func:`~mdsfair.raw_contract.cluster_references`),
    each cleaned with ``clean`` and flattened to one line; empty ones and
    repeats after cleaning are left out. The first is the training target."""
    cleaned: List[str] = []
    for text in cluster_references(obj):
        text = " ".join(clean(text).split())
        if text and text not in cleaned:
            cleaned.append(text)
    return cleaned


def training_references(references: Sequence[str], mode: str) -> List[str]:
    """The references training examples are made from: the first, or each."""
    if mode not in MULTI_REFERENCE_MODES:
        raise ValueError(f"--multi-reference {mode!r}: choose from {MULTI_REFERENCE_MODES}")
    return list(references[:1]) if mode == "first" else list(references)


class ReferenceTargetEncoder:
    """Encodes a reference as a target token array, as
    :func:`~mdsfair.preprocess.pipeline.encode_cluster` encodes the first one.

    The whole cleaned reference is encoded at once: both subword models split
    on whitespace before merging (SentencePiece's ``split_by_whitespace``,
    GPT-2's pre-tokenizer, which keeps a word's leading space), so this equals
    encoding its sentences one by one, each later sentence continuing the
    text (tested on FewSum's references).
    """

    def __init__(self, data_dir: str, subword_manifest: Dict[str, str]):
        from fairseq.data import Dictionary

        from mdsfair.preprocess.subword import load_encoder_from_manifest

        self.encoder = load_encoder_from_manifest(data_dir, subword_manifest)
        self.dictionary = Dictionary.load(os.path.join(data_dir, "dict.txt"))

    def __call__(self, reference: str) -> np.ndarray:
        # the pipeline's lookup (never a control id; an unknown span is <unk>)
        return self.encoder.encode_sentences([reference], [False], self.dictionary).tokens


class MultiReferenceWriter:
    """Writes a split's other references and, with ``--multi-reference each``
    in a training split, its extra rows (one per reference after the first).

    Call :meth:`add` after the row of each cluster has been written; it writes
    the ``{split}.summary.{k}.txt`` lines of that row and of every extra row.
    """

    def __init__(self, prefix: str, expand: bool, data_dir: str, subword_manifest: Dict[str, str]):
        self.prefix = prefix
        self.expand = expand
        self.rows = 0
        self.multi_reference_clusters = 0
        self._files: List = []
        self._data_dir = data_dir
        self._subword_manifest = subword_manifest
        self._target_encoder: Optional[ReferenceTargetEncoder] = None

    def _write_others(self, others: Sequence[str]) -> None:
        while len(self._files) < len(others):
            handle = open(f"{self.prefix}.summary.{len(self._files) + 2}.txt", "w", encoding="utf-8")
            handle.write("\n" * self.rows)  # earlier rows have no reference in this file
            self._files.append(handle)
        for k, handle in enumerate(self._files):
            handle.write((others[k] if k < len(others) else "") + "\n")
        self.rows += 1

    def add(self, encoded, writers: Dict, side_data_names: Sequence[str], ids_file, summary_file) -> Counter:
        """Write the reference lines of ``encoded``'s row (already written) and,
        when expanding, one more row per further reference. Returns the counts
        the extra rows add (``examples``, ``target_tokens``, ``unknown_tokens``)."""
        references = list(encoded.references) or [encoded.summary]
        added = Counter()
        self.multi_reference_clusters += int(len(references) > 1)
        self._write_others(references[1:])
        if not self.expand or len(references) < 2:
            return added
        if self._target_encoder is None:
            self._target_encoder = ReferenceTargetEncoder(self._data_dir, self._subword_manifest)
        unk = self._target_encoder.dictionary.unk()
        for j in range(1, len(references)):
            target = self._target_encoder(references[j])
            writers["source"].add(encoded.tokens)
            writers["target"].add(target)
            writers["doc"].add(encoded.doc_ids)
            writers["para"].add(encoded.para_ids)
            writers["sent"].add(encoded.sent_ids)
            for name in side_data_names:
                writers[name].add(encoded.side_data[name])
            ids_file.write(encoded.id.replace("\n", " ") + "\n")
            summary_file.write(references[j] + "\n")
            self._write_others(references[:j] + references[j + 1 :])
            added["examples"] += 1
            added["target_tokens"] += len(target)
            added["unknown_tokens"] += int((target == unk).sum())
        return added

    def abort(self) -> None:
        """Close the extra reference files of a failed run (its folder is removed)."""
        for handle in self._files:
            if not handle.closed:
                handle.close()

    def close(self, split: str) -> Dict:
        """Close the files; returns the split report's additions:
        ``reference_files`` (when any cluster has several references) and
        ``multi_reference_clusters``."""
        for handle in self._files:
            handle.close()
        report: Dict = {}
        if self._files:
            names = [f"{split}.summary.txt"] + [f"{split}.summary.{k + 2}.txt" for k in range(len(self._files))]
            report["reference_files"] = names
            report["multi_reference_clusters"] = self.multi_reference_clusters
        return report
