"""PRIMERA's source layout and per-document truncation (Xiao et al., 2022).

PRIMERA joins a cluster's documents as

    <s> [<mask> x mask_num] doc_1 <doc-sep> doc_2 <doc-sep> ... doc_n <doc-sep> </s>

and cuts every document *before* joining to an equal share of the budget.
The rule is that of ``SummarizationDataset.__getitem__`` in
allenai/PRIMER ``script/dataloader.py``, join method
``concat_start_wdoc_global`` (the one ``script/primer_hf_main.py`` and the
``run_bash/*primer*.sh`` scripts use):

* each document is encoded on its own with
  ``tokenizer.encode(doc, truncation=True, max_length=(max_input_len - mask_num) // n)``;
  that ``max_length`` counts the tokenizer's own ``<s>`` and ``</s>``, which
  ``[1:-1]`` then strips, so a document keeps at most
  ``(max_input_len - mask_num) // n - 2`` content tokens;
* a ``<doc-sep>`` follows *every* document, the last one included;
* what a short document leaves of its share is not given to the others
  (no redistribution), and the remainder of the integer division is unused;
* ``mask_num`` defaults to 0 for fine-tuning and testing (``--mask_num``
  in ``primer_hf_main.py``); one ``<s>`` opens and one ``</s>`` closes the
  source, outside the shares, so the joined source has
  ``2 + mask_num + sum(min(len_i, share - 2) + 1)`` tokens, at most
  ``max_input_len + 2 - n``: one over the budget for a single document.
"""

from typing import Dict, List, Optional, Sequence

#: The symbol PRIMERA inserts after every document (allenai/PRIMER
#: ``script/primer_hf_main.py`` adds it to the tokenizer as an additional
#: special token; the released tokenizers give it id 50,265).
DOCUMENT_SEPARATOR = "<doc-sep>"

#: The source layouts a data-bin can record (``mdsfair-preprocess
#: --source-layout``, the manifest's ``source_layout``) and the task applies.
SOURCE_LAYOUTS = ("documents", "primera")


def source_layout_manifest_entry(layout: str, dictionary, dictionary_path: str) -> Dict[str, object]:
    """The manifest's ``source_layout`` entry of a data-bin written with
    ``mdsfair-preprocess --source-layout LAYOUT`` and ``dictionary``.

    ``documents``: ``{"name": "documents"}``. ``primera``: also the
    separator symbol, its id in ``dictionary`` and ``per_document_budget:
    true`` (PRIMERA's per-document truncation, :func:`primera_truncation`,
    is part of its layout: the task applies it on such a data-bin). A dictionary without ``<doc-sep>`` is an
    error naming ``dictionary_path``: the separator must be the imported
    model's symbol, not a new one.
    """
    if layout not in SOURCE_LAYOUTS:
        raise ValueError(f"source layout {layout!r}: expected one of {', '.join(SOURCE_LAYOUTS)}")
    if layout == "documents":
        return {"name": "documents"}
    if DOCUMENT_SEPARATOR not in dictionary.indices:
        raise ValueError(
            f"{dictionary_path}: --source-layout primera needs the {DOCUMENT_SEPARATOR} symbol in the dictionary, "
            f"and this one has none; give the dict.txt of an imported PRIMERA model (mdsfair-import hf-led writes "
            f"it, with {DOCUMENT_SEPARATOR} at the id of the model's embedding row) with --dict"
        )
    return {
        "name": "primera",
        "document_separator": DOCUMENT_SEPARATOR,
        "document_separator_id": dictionary.index(DOCUMENT_SEPARATOR),
        "per_document_budget": True,
    }


def check_source_layout_entry(entry: object, dictionary, path: str) -> Optional[Dict[str, object]]:
    """The manifest's ``source_layout`` entry, checked against the data-bin's
    ``dictionary``; ``None`` when the manifest (``path``) records none. A
    damaged entry, or a ``<doc-sep>`` id that is not this dictionary's (its
    ``dict.txt`` replaced after preprocessing), is an error naming ``path``."""
    if entry is None:
        return None
    if not isinstance(entry, dict) or entry.get("name") not in SOURCE_LAYOUTS:
        raise ValueError(
            f"{path}: source_layout {entry!r} is not one of {', '.join(SOURCE_LAYOUTS)}; rebuild the data-bin with "
            "mdsfair-preprocess"
        )
    if entry["name"] == "primera":
        recorded = entry.get("document_separator_id")
        actual = dictionary.index(DOCUMENT_SEPARATOR) if DOCUMENT_SEPARATOR in dictionary.indices else None
        if recorded != actual:
            raise ValueError(
                f"{path}: the PRIMERA layout was preprocessed with {DOCUMENT_SEPARATOR} = {recorded}, but the "
                f"data-bin's dictionary gives {'no such symbol' if actual is None else actual}; the dict.txt was "
                "replaced after preprocessing: rebuild the data-bin with mdsfair-preprocess --source-layout primera"
            )
    return entry


def primera_document_share(num_documents: int, max_input_len: int, mask_num: int = 0) -> int:
    """The ``max_length`` each document is encoded with, ``<s>``/``</s>`` included."""
    if num_documents < 1:
        raise ValueError("PRIMERA's layout needs at least one document")
    return (max_input_len - mask_num) // num_documents


def primera_truncation(document_lengths: Sequence[int], max_input_len: int, mask_num: int = 0) -> Dict[str, object]:
    """Content tokens each document keeps under PRIMERA's rule, and what is cut.

    ``document_lengths`` are the documents' token counts without special
    tokens. Returns ``kept`` (per document), ``cut`` (per document, the
    tokens removed, to be counted in the truncation report), ``share`` and
    ``source_length`` (the joined source, ``<s>``, masks, ``<doc-sep>`` s and
    ``</s>`` included). A share that leaves no content token (below 3) is an
    error naming the numbers rather than a silent empty document.
    """
    share = primera_document_share(len(document_lengths), max_input_len, mask_num)
    content = share - 2
    if content < 1:
        raise ValueError(
            f"PRIMERA's per-document share ({max_input_len} - {mask_num}) // {len(document_lengths)} "
            f"= {share} leaves no content token after <s> and </s>; lower the number of documents "
            f"or raise the budget"
        )
    kept: List[int] = [min(int(length), content) for length in document_lengths]
    cut = [int(length) - k for length, k in zip(document_lengths, kept)]
    return {
        "share": share,
        "kept": kept,
        "cut": cut,
        "source_length": 2 + mask_num + sum(k + 1 for k in kept),
    }
