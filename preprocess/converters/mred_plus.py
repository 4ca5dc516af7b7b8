"""MReD+ (HierEncDec, Shen et al. 2023): a paper's reviews and the authors' rebuttals -> its meta-review.

MReD (Shen et al. 2022: ICLR reviews -> meta-review, format ``mred``) with
the rebuttals added to the input (HierEncDec paper Sec. 5.2; Table 4: 6.3
documents per example instead of MReD's 3.3). Layout, from github.com/
DAMO-NLP-SG/HierEncDec README ("the MReD+ data are under the mred/ folder,
ending with _rebuttal.json" of ``data/``, unzipped from
``HierEncDec_data.zip``) and ``run_summarization.py`` (``.json`` read with
``load_dataset("json")``: JSON lines or one JSON list of objects; text
column = the second-to-last column unless named, summary column = the last;
the text split on ``" <REVBREAK> "``, empty documents dropped). Paragraphs
inside a review are split on MReD's ``" <sep> "`` (``--paragraph-separator``,
MReD's CSVs use it; a text without it is one paragraph).

Documents: reviews and rebuttals in file order (the compiled text does not
mark which is which), empty ones dropped and counted. Summary: the
meta-review. Ids: ``--id-column`` or ``{split}-{index}``.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, Iterator, Optional

from .common import ConversionOptions, ConversionSession, Inputs, Record
from .readers.hierencdec_files import HierEncDecColumns, add_hierencdec_column_arguments, iter_hierencdec_records
from .registry import register_converter

MRED_PARAGRAPH_MARKER = "<sep>"


def add_mred_plus_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert mred_plus`` flags."""
    add_hierencdec_column_arguments(parser, "reviews and rebuttals", "meta-review", "SPLIT-INDEX")
    parser.add_argument(
        "--paragraph-separator",
        default=MRED_PARAGRAPH_MARKER,
        help="string between paragraphs inside a review (default: %(default)s, MReD's marker)",
    )


@register_converter("mred_plus", add_arguments=add_mred_plus_arguments)
def iter_mred_plus(
    inputs: Inputs,
    split: str = "train",
    *,
    text_column: Optional[str] = None,
    summary_column: Optional[str] = None,
    id_column: Optional[str] = None,
    paragraph_separator: Optional[str] = MRED_PARAGRAPH_MARKER,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """MReD+ (HierEncDec's mred/*_rebuttal.json) -> contract clusters.

    Reviews and rebuttals split on ``<REVBREAK>`` are the documents
    (paragraphs on ``paragraph_separator``), the meta-review the summary."""
    session = ConversionSession(options, "mred_plus", split, inputs)
    columns = HierEncDecColumns(text_column, summary_column, id_column)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        return columns.cluster(
            session, record, paragraph_separator=paragraph_separator or None, document_name="review or rebuttal"
        )

    yield from session.clusters(iter_hierencdec_records(session.paths, session), build)
