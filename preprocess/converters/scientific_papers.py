"""arXiv and PubMed (Cohan et al. 2018): one paper per line -> its sections as documents, abstract as summary.

Release layout (``arxiv-dataset/`` and ``pubmed-dataset/`` with ``train.txt``,
``val.txt``, ``test.txt``; source: github.com/armancohan/long-summarization
README "Format of the data" and ``scripts/json_to_bin.py``): JSON lines, one
paper per line, sentence-tokenized::

    {"article_id": str, "abstract_text": [str], "article_text": [str],
     "section_names": [str], "sections": [[str]]}

``abstract_text`` sentences are wrapped in ``<S> ... </S>`` markers, which the
authors' ``data.py`` and the Hugging Face ``scientific_papers.py`` loader both
remove (here too); ``json_to_bin.py`` pairs ``section_names[i]`` with
``sections[i]`` (an empty name becomes ``'None'`` there; here the section is
kept without a name line and counted as ``unnamed_section``).

Documents: one per section, its name as the first paragraph and its sentences
joined by spaces as the second, so a contract document is a titled section,
what PageSum's discourse locality reads with ``--discourse-unit section``
(:mod:`mdsfair.modules.pages`; the paper's Sec. 5.3 concatenates section
name and content, its ``arxiv-section`` setting has 8 such pages).
``whole_article`` makes ``article_text`` one document instead (spatial
locality needs no sections). Summary: the abstract's sentences joined by
spaces. Id: ``article_id``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Dict, Iterator, List, Optional

from mdsfair.raw_contract import SECTION_MISMATCH
from mdsfair.text import PARAGRAPH_SEPARATOR

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PendingCounts,
    Record,
    normalize_paragraph,
    normalize_summary,
    optional_field,
    require_field,
    string_list,
)
from .readers.json_files import iter_json_records
from .registry import register_converter

# The sentence markers of ``abstract_text`` (long-summarization's SENTENCE_START / SENTENCE_END).
_SENTENCE_MARKERS = re.compile(r"</?S>")


def abstract_sentences_text(sentences: List[str]) -> str:
    """The abstract as one line: ``<S>``/``</S>`` markers removed, sentences joined by spaces."""
    return normalize_summary(" ".join(_SENTENCE_MARKERS.sub(" ", sentence) for sentence in sentences))


def add_scientific_papers_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert scientific_papers`` flags."""
    parser.add_argument(
        "--whole-article",
        action="store_true",
        help="make article_text one document instead of one document per section "
        "(section names and boundaries are then lost)",
    )
    parser.add_argument(
        "--omit-section-names",
        action="store_true",
        help="leave the section name out of each section document (default: the name is the "
        "section's first paragraph, as PageSum's section pages have it)",
    )


@register_converter("scientific_papers", add_arguments=add_scientific_papers_arguments)
def iter_scientific_papers(
    inputs: Inputs,
    split: str = "train",
    *,
    whole_article: bool = False,
    omit_section_names: bool = False,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """arXiv / PubMed JSONL of Cohan et al. 2018 (train.txt, val.txt, test.txt) -> contract clusters.

    One document per section (``section_names[i]`` as its first paragraph,
    ``sections[i]`` as its text), or ``article_text`` as one document with
    ``whole_article``. ``section_names`` and ``sections`` of different lengths
    are bad input (``section_mismatch``); a section without sentences is
    dropped and counted as ``empty_section``. Summary: ``abstract_text``
    without its ``<S>``/``</S>`` markers. Id: ``article_id``."""
    session = ConversionSession(options, "scientific_papers", split, inputs)

    def section_documents(paper: Dict[str, Any], pending: PendingCounts) -> List[Document]:
        names = string_list(require_field(paper, "section_names", list), "section_names")
        sections = require_field(paper, "sections", list)
        if len(names) != len(sections):
            raise BadRecord(SECTION_MISMATCH, f"{len(names)} section_names but {len(sections)} sections")
        documents = []
        for number, (name, sentences) in enumerate(zip(names, sections), start=1):
            text = normalize_paragraph(" ".join(string_list(sentences, f"sections[{number - 1}]")))
            title = normalize_paragraph(name)
            if text and not title:
                pending.notes["unnamed_section"] += 1
            if text and title and not omit_section_names:
                text = title + PARAGRAPH_SEPARATOR + text
            documents.append(Document(text, f"section {number} ({title or 'unnamed'})", empty_reason="empty_section"))
        return documents

    def build(record: Record) -> Optional[Dict[str, Any]]:
        paper = record.payload
        abstract = string_list(require_field(paper, "abstract_text", list), "abstract_text")
        pending = PendingCounts()
        if whole_article:
            sentences = string_list(require_field(paper, "article_text", list), "article_text")
            documents = [Document(normalize_paragraph(" ".join(sentences)), "article_text")]
        else:
            documents = section_documents(paper, pending)
        return session.finish(
            record,
            cluster_id=optional_field(paper, "article_id", (str, int)),
            documents=documents,
            summary=abstract_sentences_text(abstract),
            pending=pending,
        )

    yield from session.clusters(iter_json_records(session.paths, session), build)
