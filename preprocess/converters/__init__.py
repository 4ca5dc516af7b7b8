"""Converters from public multi-document summarization releases to mdsfair's raw JSONL contract.

The raw contract (:mod:`mdsfair.raw_contract`, docs/data.md "The raw format", and
:mod:`.common`): one cluster per line,
``{"id": str, "documents": [str, ...], "summary": str}`` with an optional
``"title"`` and ``"summaries"``; paragraphs inside a document separated by
one blank line; summaries on one line.

Layout, as fairseq lays out its data readers:

* :mod:`.common`: what every format shares: the contract's normalisation,
  the validation and error policy (:class:`InputFormatError`; the
  :class:`ConversionOptions` of ``--skip-bad``, ``--allow-empty-summary`` and
  ``--error-on-empty-document``, which every format takes as ``options``), the
  field helpers and the :class:`ConversionReport`;
* :mod:`.readers`: the file readers, one module each: :mod:`.readers.text`
  (lines; gzip, UTF-8 and line bookkeeping), :mod:`.readers.json_files`
  (JSON lines / JSON lists), :mod:`.readers.csv_files`,
  :mod:`.readers.hierencdec_files` (HierEncDec's CSV / JSON files),
  :mod:`.readers.tables` (Parquet / Arrow / ``save_to_disk``) and
  :mod:`.readers.torch_shards` (``torch.save`` shards of examples);
* :mod:`.registry`: :func:`register_converter` and :data:`CONVERTERS`;
* one module per release format, each registering its generator (and its
  ``mdsfair-convert`` flags): :mod:`.multinews`, :mod:`.wcep`,
  :mod:`.multixscience`, :mod:`.hierencdec_csv` (``csv`` and ``mred``),
  :mod:`.wikisum`, :mod:`.wikisum_hiersumm` (hiersumm's ``.pt`` shards),
  :mod:`.peersum`, :mod:`.scientific_papers` (arXiv, PubMed),
  :mod:`.govreport`, :mod:`.rottentomatoes`, :mod:`.wikidomains`,
  :mod:`.mred_plus`, :mod:`.cnn_dailymail`, :mod:`.hf` (Parquet / Arrow /
  ``save_to_disk``); each module's docstring names the sources its field
  names come from;
* :mod:`.driver`: :func:`convert` and ``mdsfair-convert`` (:func:`cli_main`),
  whose subcommands are the registry's formats.

Importing this package imports every module in it (the registrations run),
so a new format is one new module here (the :mod:`.readers` subpackage holds
no format).
"""

import importlib as _importlib
import os as _os

from mdsfair.raw_contract import (  # re-exported (__all__)
    DUPLICATE_ID,
    EMPTY_CLUSTER,
    EMPTY_DOCUMENT,
    EMPTY_SUMMARY,
    INVALID_JSON,
    INVALID_UTF8,
    MALFORMED_CSV_ROW,
    MISALIGNED_FILES,
    MISSING_FILE,
    MISSING_KEY,
    REASON_DESCRIPTIONS,
    SECTION_MISMATCH,
    WRONG_TYPE,
    InputFormatError,
)
from mdsfair.text import PARAGRAPH_SEPARATOR  # re-exported (__all__)

from .common import (  # re-exported (__all__)
    TRAINING_SPLITS,
    ConversionOptions,
    ConversionReport,
    Inputs,
    PathLike,
    normalize_document,
    normalize_paragraph,
    normalize_summary,
)
from .driver import build_parser, cli_main, convert
from .registry import CONVERTER_ARGUMENTS, CONVERTERS, format_options, get_converter, register_converter

# Infrastructure modules; every other module of the package is a release format.
INFRASTRUCTURE_MODULES = ("common", "registry", "driver")


def _import_format_modules() -> None:
    """Import every format module beside this file, so that its ``register_converter`` runs."""
    directory = _os.path.dirname(__file__)
    for entry in sorted(_os.listdir(directory)):
        name, extension = _os.path.splitext(entry)
        if extension == ".py" and not name.startswith("_") and name not in INFRASTRUCTURE_MODULES:
            _importlib.import_module(f"{__name__}.{name}")


_import_format_modules()

from .cnn_dailymail import iter_cnn_dailymail  # noqa: E402
from .govreport import iter_govreport  # noqa: E402
from .hf import HF_PRESETS, iter_hf  # noqa: E402
from .hierencdec_csv import (  # noqa: E402
    CONTROL_PREFIX_CHOICES,
    HIERENCDEC_DOCUMENT_SEPARATOR,
    MRED_PARAGRAPH_SEPARATOR,
    iter_csv,
    iter_mred,
)
from .mred_plus import iter_mred_plus  # noqa: E402
from .multinews import MULTINEWS_RAW_SEPARATOR, MULTINEWS_STORY_SEPARATOR, iter_multinews  # noqa: E402
from .multixscience import iter_multixscience  # noqa: E402
from .peersum import PEERSUM_WRITERS, iter_peersum  # noqa: E402
from .rottentomatoes import iter_rottentomatoes  # noqa: E402
from .scientific_papers import iter_scientific_papers  # noqa: E402
from .wcep import iter_wcep  # noqa: E402
from .wikidomains import WIKIDOMAINS, iter_wikidomains  # noqa: E402
from .wikisum import iter_wikisum  # noqa: E402
from .wikisum_hiersumm import iter_wikisum_hiersumm  # noqa: E402

__all__ = [
    # the raw contract, errors and the report (common)
    "PARAGRAPH_SEPARATOR",
    "TRAINING_SPLITS",
    "REASON_DESCRIPTIONS",
    "INVALID_UTF8",
    "INVALID_JSON",
    "MALFORMED_CSV_ROW",
    "MISSING_KEY",
    "WRONG_TYPE",
    "EMPTY_CLUSTER",
    "EMPTY_DOCUMENT",
    "EMPTY_SUMMARY",
    "DUPLICATE_ID",
    "MISALIGNED_FILES",
    "SECTION_MISMATCH",
    "MISSING_FILE",
    "PathLike",
    "Inputs",
    "InputFormatError",
    "ConversionOptions",
    "ConversionReport",
    "normalize_paragraph",
    "normalize_document",
    "normalize_summary",
    # the registry and the driver
    "CONVERTERS",
    "CONVERTER_ARGUMENTS",
    "register_converter",
    "get_converter",
    "format_options",
    "convert",
    "build_parser",
    "cli_main",
    # the formats
    "iter_multinews",
    "MULTINEWS_STORY_SEPARATOR",
    "MULTINEWS_RAW_SEPARATOR",
    "iter_wcep",
    "iter_multixscience",
    "iter_csv",
    "iter_mred",
    "HIERENCDEC_DOCUMENT_SEPARATOR",
    "MRED_PARAGRAPH_SEPARATOR",
    "CONTROL_PREFIX_CHOICES",
    "iter_wikisum",
    "iter_wikisum_hiersumm",
    "iter_peersum",
    "PEERSUM_WRITERS",
    "iter_scientific_papers",
    "iter_govreport",
    "iter_rottentomatoes",
    "iter_wikidomains",
    "WIKIDOMAINS",
    "iter_mred_plus",
    "iter_cnn_dailymail",
    "iter_hf",
    "HF_PRESETS",
]
