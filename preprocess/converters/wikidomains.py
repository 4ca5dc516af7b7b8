"""WikiDomains (HierEncDec, Shen et al. 2023): a Wikipedia article's section texts -> its lead section.

HierEncDec compiled four domains of WikiAsp (Hayashi et al. 2021) --
``Film``, ``MeanOfTransportation``, ``Software``, ``Town`` -- pairing each
article's section texts (the documents) with its lead section from WikiSum
(the summary; paper Sec. 5.2 and Ethics). Layout, from github.com/DAMO-NLP-SG/
HierEncDec README ("the 4 Wikipedia domains data are stored under the folders
of Film/, MeanOfTransportation/, Software/, and Town/" of ``data/``, unzipped
from ``HierEncDec_data.zip``) and ``run_summarization.py`` (files read with
``load_dataset(extension)``, ``csv`` or ``json``; text column = the
second-to-last column unless named, summary column = the last; the text
split on ``" <REVBREAK> "``, empty documents dropped).

Documents: one per section text, in file order (empty ones dropped and
counted as ``empty_section``). Ids: ``--id-column`` when given, else
``{Domain}-{split}-{index}`` when the file lies in one of the four domain
folders (so the four domains can share one output without id clashes),
else ``{split}-{index}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from .common import ConversionOptions, ConversionSession, Inputs, Record
from .readers.hierencdec_files import HierEncDecColumns, add_hierencdec_column_arguments, iter_hierencdec_records
from .registry import register_converter

WIKIDOMAINS = ("Film", "MeanOfTransportation", "Software", "Town")


def add_wikidomains_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert wikidomains`` flags."""
    add_hierencdec_column_arguments(parser, "section texts", "lead section", "DOMAIN-SPLIT-INDEX")


@register_converter("wikidomains", add_arguments=add_wikidomains_arguments)
def iter_wikidomains(
    inputs: Inputs,
    split: str = "train",
    *,
    text_column: Optional[str] = None,
    summary_column: Optional[str] = None,
    id_column: Optional[str] = None,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """WikiDomains (HierEncDec's Film/, MeanOfTransportation/, Software/, Town/ csv/json) -> contract clusters.

    Section texts split on ``<REVBREAK>`` are the documents, the lead
    section the summary; ids carry the domain of the file's folder."""
    session = ConversionSession(options, "wikidomains", split, inputs)
    columns = HierEncDecColumns(text_column, summary_column, id_column)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        domain = Path(record.path).resolve().parent.name
        default_id = f"{domain}-{split}-{record.index}" if domain in WIKIDOMAINS else None
        return columns.cluster(
            session, record, document_name="section", empty_reason="empty_section", default_id=default_id
        )

    yield from session.clusters(iter_hierencdec_records(session.paths, session), build)
