"""GovReport (Huang et al. 2021): one GAO or CRS report per JSON file -> its sections as documents.

Release layout (``gov-report/``, linked from github.com/luyang-huang96/
LongDocSum and gov-report-data.github.io; read as the TensorFlow Datasets
loader ``summarization/gov_report/gov_report.py`` and its ``dummy_data``
read it): ``crs/<id>.json`` and ``gao/<id>.json``, one report per file, and
``split_ids/{crs,gao}_{train,valid,test}.ids`` listing the ids of each
split, one per line. A section is ``{"section_title", "paragraphs",
"subsections"}``, nested to any depth:

* CRS: ``reports`` is the root section (its title usually empty, its
  paragraphs a preamble, its subsections the top-level sections);
  ``summary`` is a list of paragraphs;
* GAO: ``report`` is the list of top-level sections; ``highlight`` is a list
  of ``{"section_title", "paragraphs"}`` whose paragraphs form the summary
  (section titles left out, as the loader's ``whitespace`` style, "the format
  used by original paper", does).

Documents: one per section at ``section_depth`` (1 = top-level sections);
a section is flattened into its title (its own paragraph) followed by its
paragraphs and, depth first, those of its subsections; paragraphs that a
section holds before its subsections at a shallower depth form their own
document (e.g. CRS's untitled preamble). PageSum's GovReport setting
(``mdsfair.importers.pagesum`` preset ``govreport``) is spatial locality
with 20 pages, which splits the sentence stream whatever the documents are;
the section documents also give discourse (``--discourse-unit section``)
and document locality their units. Ids: ``id``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from mdsfair.argument_types import at_least
from mdsfair.raw_contract import WRONG_TYPE
from mdsfair.text import PARAGRAPH_SEPARATOR

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    Record,
    normalize_paragraph,
    normalize_summary,
    optional_field,
    require_field,
    string_list,
)
from .readers.json_files import read_json_file_record
from .readers.text import iter_lines
from .registry import register_converter

GOVREPORT_SUBSETS = ("crs", "gao")
# --split names -> the split name of split_ids/{subset}_{name}.ids
_SPLIT_FILE_NAMES = {"val": "valid", "validation": "valid", "dev": "valid"}


def _own_paragraphs(section: Any, where: str) -> Tuple[str, List[str]]:
    """A section's title and its own paragraphs (not those of its subsections), each on one line."""
    title = normalize_paragraph(require_field(section, "section_title", str, where))
    paragraphs = string_list(require_field(section, "paragraphs", list, where), f"{where}.paragraphs")
    return title, [normalize_paragraph(p) for p in paragraphs]


def _section_paragraphs(section: Any, where: str) -> List[str]:
    """Title (when not empty) and paragraphs of a section and, depth first, of its subsections.

    A section with no paragraph anywhere below it gives nothing (not even its title)."""
    title, body = _own_paragraphs(section, where)
    for number, child in enumerate(optional_field(section, "subsections", list, where) or []):
        body += _section_paragraphs(child, f"{where}.subsections[{number}]")
    body = [p for p in body if p]
    return ([title] if title and body else []) + body


def _section_documents(sections: Sequence[Any], depth: int, where: str) -> List[Document]:
    """Documents for ``sections`` at depth 1 of ``depth``: each section flattened, or split further."""
    documents = []
    for number, section in enumerate(sections):
        name = f"{where}[{number}]"
        if depth <= 1:
            documents.append(
                Document(
                    PARAGRAPH_SEPARATOR.join(_section_paragraphs(section, name)),
                    f"section {name}",
                    empty_reason="empty_section",
                )
            )
            continue
        documents += _preamble_documents(section, name)
        documents += _section_documents(
            optional_field(section, "subsections", list, name) or [], depth - 1, f"{name}.subsections"
        )
    return documents


def _preamble_documents(section: Any, where: str) -> List[Document]:
    """A section's own title and paragraphs (without its subsections) as one document, if it has paragraphs."""
    title, paragraphs = _own_paragraphs(section, where)
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        return []
    return [Document(PARAGRAPH_SEPARATOR.join(([title] if title else []) + paragraphs), f"preamble of {where}")]


def add_govreport_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert govreport`` flags."""
    parser.add_argument(
        "--section-depth",
        type=at_least(1),
        default=1,
        help="nesting depth whose sections become documents, deeper ones flattened into them "
        "(default: %(default)s = top-level sections)",
    )
    parser.add_argument(
        "--subset",
        choices=GOVREPORT_SUBSETS + ("both",),
        default="both",
        help="with a gov-report/ folder as input: which agency's reports to read (default: %(default)s)",
    )


@register_converter("govreport", add_arguments=add_govreport_arguments)
def iter_govreport(
    inputs: Inputs,
    split: str = "train",
    *,
    section_depth: int = 1,
    subset: str = "both",
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """GovReport report JSON files, or the gov-report/ folder with its split_ids -> contract clusters.

    An input folder is the release root: the reports listed in
    ``split_ids/{crs,gao}_{split}.ids`` are read (``val``/``validation``/``dev``
    read ``valid``), a listed report that does not exist is bad input
    (``missing_file``) at its line of the ids file. An input file is one
    report, CRS or GAO told apart by its keys. Documents: sections at
    ``section_depth`` (see the module docstring); summary: CRS ``summary`` /
    GAO ``highlight`` paragraphs; id: ``id``."""
    if section_depth < 1:
        raise ValueError(f"section_depth must be at least 1, got {section_depth}")
    if subset not in GOVREPORT_SUBSETS + ("both",):
        raise ValueError(f"subset must be one of {GOVREPORT_SUBSETS + ('both',)}, got {subset!r}")
    session = ConversionSession(options, "govreport", split, inputs)
    subsets = GOVREPORT_SUBSETS if subset == "both" else (subset,)
    split_name = _SPLIT_FILE_NAMES.get(split.strip().lower(), split)

    def records() -> Iterator[Record]:
        for path in session.paths:
            if not path.is_dir():
                record = read_json_file_record(Path(path), session)
                if record is not None:
                    yield record
                continue
            for name in subsets:
                ids_file = path / "split_ids" / f"{name}_{split_name}.ids"
                if not ids_file.is_file():
                    raise FileNotFoundError(
                        f"{ids_file} not found: is {path} the gov-report/ folder, and is "
                        f"{split_name!r} one of its splits (train, valid, test)?"
                    )
                for line_number, report_id in iter_lines(ids_file):
                    if report_id.strip():
                        record = read_json_file_record(
                            path / name / f"{report_id.strip()}.json", session, listed_at=(str(ids_file), line_number)
                        )
                        if record is not None:
                            yield record

    def build(record: Record) -> Optional[Dict[str, Any]]:
        data = record.payload
        if isinstance(data, dict) and "reports" in data:  # CRS
            root = require_field(data, "reports", dict)
            documents = _preamble_documents(root, "reports")
            documents += _section_documents(
                optional_field(root, "subsections", list, "reports") or [], section_depth, "reports.subsections"
            )
            summary = " ".join(string_list(require_field(data, "summary", list), "summary"))
        elif isinstance(data, dict) and "report" in data:  # GAO
            documents = _section_documents(require_field(data, "report", list), section_depth, "report")
            summary_paragraphs = []
            for number, part in enumerate(require_field(data, "highlight", list)):
                summary_paragraphs += string_list(
                    require_field(part, "paragraphs", list, f"highlight[{number}]"), f"highlight[{number}].paragraphs"
                )
            summary = " ".join(summary_paragraphs)
        else:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise BadRecord(
                WRONG_TYPE,
                f"neither a CRS report ('reports', 'summary') nor a GAO report ('report', 'highlight'): {keys}",
            )
        return session.finish(
            record,
            cluster_id=optional_field(data, "id", (str, int)),
            documents=documents,
            summary=normalize_summary(summary),
        )

    yield from session.clusters(records(), build)
