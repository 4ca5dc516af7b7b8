"""Multi-XScience: a paper's abstract and the abstracts it cites -> its related-work section.

``data/{train,val,test}.json``: one JSON list of objects with ``aid``
(arXiv id), ``mid``, ``abstract``, ``related_work`` and ``ref_abstract``, a
dict ``cite_N -> {"mid", "abstract"}``. Source: github.com/yaolu/
Multi-XScience README and the Hugging Face ``multi_x_science_sum.py``
loader (``json.load``; it re-lays ``ref_abstract`` as columns
``{"cite_N": [...], "mid": [...], "abstract": [...]}``, also accepted).
The format has no flags beyond the common ones.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from mdsfair.raw_contract import WRONG_TYPE

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    Record,
    normalize_document,
    normalize_summary,
    optional_field,
    require_field,
)
from .readers.json_files import iter_json_records
from .registry import register_converter


def _multixscience_references(ref_abstract: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """(cite key, abstract) pairs from the release layout or Hugging Face's columnar layout."""
    if isinstance(ref_abstract.get("abstract"), list):
        abstracts = ref_abstract["abstract"]
        keys = ref_abstract.get("cite_N")
        if not isinstance(keys, list) or len(keys) != len(abstracts):
            keys = [f"#{position}" for position in range(len(abstracts))]
        return list(zip((str(k) for k in keys), abstracts))
    pairs = []
    for key, reference in ref_abstract.items():
        pairs.append((key, require_field(reference, "abstract", (str, type(None)), f"ref_abstract[{key!r}]")))
    return pairs


@register_converter("multixscience")
def iter_multixscience(
    inputs: Inputs, split: str = "train", *, options: ConversionOptions = ConversionOptions()
) -> Iterator[Dict[str, Any]]:
    """Multi-XScience JSON (one list per file, or JSONL) -> contract clusters.

    Documents: the paper's ``abstract`` followed by the cited abstracts of
    ``ref_abstract`` in file order (empty cited abstracts are dropped and
    counted as ``empty_cited_abstract``); summary: ``related_work``; id:
    ``aid``."""
    session = ConversionSession(options, "multixscience", split, inputs)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        paper = record.payload
        abstract = require_field(paper, "abstract", str)
        related_work = require_field(paper, "related_work", str)
        ref_abstract = require_field(paper, "ref_abstract", dict)
        documents = [Document(normalize_document(abstract), "abstract")]
        for key, cited in _multixscience_references(ref_abstract):
            if cited is not None and not isinstance(cited, str):
                raise BadRecord(WRONG_TYPE, f"ref_abstract[{key!r}] abstract must be str, got {type(cited).__name__}")
            documents.append(
                Document(normalize_document(cited or ""), f"cited abstract {key}", empty_reason="empty_cited_abstract")
            )
        return session.finish(
            record,
            cluster_id=optional_field(paper, "aid", (str, int)),
            documents=documents,
            summary=normalize_summary(related_work),
        )

    yield from session.clusters(iter_json_records(session.paths, session), build)
