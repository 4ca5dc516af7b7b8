"""PageSum's released models -> ``pagesum_bart`` checkpoints.

``mdsfair-import pagesum STATE_DICT HF_CONFIG OUT_DIR --preset multinews``

The authors (github.com/yixinL7/PageSum) released the state dicts of their
``PageSumModel`` (arXiv spatial and section, PubMed, Multi-News, GovReport),
loaded with ``model.load_state_dict(torch.load(path))`` on a
``facebook/bart-large-cnn`` configuration. Its keys are those of
``BartForConditionalGeneration`` (``model.shared``, ``model.encoder.*``,
``model.decoder.*``, ``lm_head``, ``final_logits_bias``) plus ``lin``, the
``Linear(d, 1)`` that scores every page's decoder state (Eq. 7). The BART
part converts as :mod:`mdsfair.importers.hf_bart` converts any BART, ``lin``
becomes ``decoder.page_confidence``, and the checkpoint's cfg records the
authors' page settings:

* ``--locality``, ``--num-pages``, ``--page-tokens`` (their ``page_type``,
  ``num_pages``, ``page_max_len``; ``--max-source-positions`` becomes
  pages x page length, the most the authors read);
* ``--spatial-remainder-to-last-page`` for spatial locality (their chunking:
  ``len // num_pages`` sentences per page, the rest on the last page);
* ``--page-overflow truncate`` (they drop the documents past the last page);
* ``--empty-pages filler`` (cfg field ``empty_pages: "filler"``): they fill
  a page with no text with ``"."`` (tokenized ``<s> . </s>``), and that page
  takes part in the confidence softmax like any other; the model finds the
  ids of ``"."`` with the data-bin's subword model when it is built (GPT-2
  BPE and BART's ``dict.txt``: ``0 4 2``). ``--empty-pages mask`` records
  mdsfair's default instead (the page is left out of the softmax), which is
  not how the released models were trained.

The printed ``fairseq-generate`` flags are those of their ``generate()``
call (beam 4, length penalty 2.0, trigram blocking, their length limits).
Two details of their transformers 4.6 beam search have no fairseq flag: it
ran with ``early_stopping=False`` (fairseq stops a sentence once it has beam
size finished hypotheses), and its length normalization counts the decoder's
start token (fairseq counts the generated tokens).

``HF_CONFIG`` is the ``facebook/bart-large-cnn`` directory (``config.json``
and the tokenizer's ``vocab.json`` / ``merges.txt``, which give ``dict.txt``,
``encoder.json``, ``vocab.bpe`` as for ``hf-bart``) or its ``config.json``
with ``--tokenizer-dir``. ``--preset`` sets the authors' configuration of one
released model (their ``config.py``); explicit flags override it.
"""

import argparse
import os
import sys
from typing import Dict, List, Optional, Tuple

from mdsfair.argument_types import at_least
from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import check_encoder_decoder_weights
from mdsfair.importers.hf_bart import (
    architecture_flags,
    checkpoint_namespace,
    print_next_preprocess_command,
)
from mdsfair.importers.hf_bart_files import bpe_files, load_tensor_file, read_json
from mdsfair.importers.hf_bart_weights import bart_shape, fairseq_state_from_hf
from mdsfair.importers.hf_hub import ModelSource, found_where, resolve_model_source
from mdsfair.modules.pages import EMPTY_PAGE_POLICIES

# The authors' configurations (config.py of yixinL7/PageSum): pages and
# locality (page_type None = spatial, "multi_doc" = one page per article item:
# a document for Multi-News, a section for arXiv with datatype "section"),
# page length 1024, and the generation lengths of main.py's generate() call
# (max_length = gen_max_len + 2, min_length = gen_min_len + 1, length penalty
# 2.0, no_repeat_ngram_size 3, num_beams 4 from the bart-large-cnn config).
PRESETS: Dict[str, Dict] = {
    "arxiv-spatial": dict(locality="spatial", pages=7, page_length=1024, gen_min_len=100, gen_max_len=350),
    "arxiv-section": dict(
        locality="discourse", discourse_unit="section", pages=8, page_length=1024, gen_min_len=100, gen_max_len=350
    ),
    "pubmed": dict(locality="spatial", pages=7, page_length=1024, gen_min_len=150, gen_max_len=400),
    "govreport": dict(locality="spatial", pages=20, page_length=1024, gen_min_len=500, gen_max_len=900),
    "multinews": dict(locality="document", pages=7, page_length=1024, gen_min_len=150, gen_max_len=400),
}
LOCALITIES = ("spatial", "discourse", "document")
CONFIDENCE_KEYS = ("lin.weight", "lin.bias")
# The model's --empty-pages value of the authors' data code (a page with no
# text holds "." and joins the softmax over pages).
AUTHORS_EMPTY_PAGES = "filler"


def config_location(hf_config: str) -> Tuple[str, ModelSource]:
    """``(config.json path, the model folder)`` for a config file, a folder or
    a Hugging Face model id (its configuration and tokenizer files only: the
    weights are the state dict's)."""
    if os.path.isfile(hf_config) or hf_config.endswith(".json"):  # a missing one is named by read_json
        return hf_config, ModelSource(os.path.dirname(os.path.abspath(hf_config)))
    model = resolve_model_source(hf_config, weights=False)
    return os.path.join(model.path, "config.json"), model


def page_flags(settings: Dict, max_positions: int) -> List[str]:
    locality, pages, page_length = settings["locality"], settings["pages"], settings["page_length"]
    flags = [
        "--locality",
        locality,
        "--num-pages",
        str(pages),
        "--page-tokens",
        str(page_length),
        "--max-page-positions",
        str(max_positions),
        "--page-overflow",
        "truncate",
        "--max-source-positions",
        str(pages * page_length),
        "--max-target-positions",
        str(max_positions),
    ]
    if locality == "discourse":
        flags += ["--discourse-unit", settings.get("discourse_unit") or "paragraph"]
    if locality == "spatial":
        flags.append("--spatial-remainder-to-last-page")
    flags += ["--empty-pages", settings.get("empty_pages") or AUTHORS_EMPTY_PAGES]
    return flags


def generation_flags(settings: Dict) -> List[str]:
    """fairseq-generate flags for the authors' generate() call (see PRESETS)."""
    if "gen_min_len" not in settings:
        return []
    return [
        "--beam",
        "4",
        "--lenpen",
        "2.0",
        "--no-repeat-ngram-size",
        "3",
        "--min-len",
        str(settings["gen_min_len"]),
        "--max-len-a",
        "0",
        "--max-len-b",
        str(settings["gen_max_len"]),
    ]


def import_pagesum(
    state_dict_path: str,
    hf_config: str,
    out_dir: str,
    settings: Dict,
    tokenizer_dir: Optional[str] = None,
    overwrite: bool = False,
) -> Dict:
    """Convert a PageSumModel state dict; ``settings`` holds ``locality``,
    ``pages``, ``page_length`` (and ``discourse_unit``, ``empty_pages``:
    the model's ``--empty-pages``, default the authors' ``filler``)."""
    if settings.get("locality") not in LOCALITIES:
        raise ImportRefused(f"--locality must be one of {', '.join(LOCALITIES)} (or give --preset)")
    if not settings.get("pages") or not settings.get("page_length"):
        raise ImportRefused("--pages and --page-length are required without --preset")
    if (settings.get("empty_pages") or AUTHORS_EMPTY_PAGES) not in EMPTY_PAGE_POLICIES:
        raise ImportRefused(f"--empty-pages must be one of {', '.join(EMPTY_PAGE_POLICIES)}")
    config_path, model = config_location(hf_config)
    tokenizer = resolve_model_source(tokenizer_dir, weights=False) if tokenizer_dir else model
    shape = bart_shape(read_json(config_path, "the BART configuration (facebook/bart-large-cnn)", dict), config_path)
    if settings["page_length"] > shape.max_positions:
        raise ImportRefused(
            f"--page-length {settings['page_length']} exceeds the model's position table "
            f"(max_position_embeddings {shape.max_positions} in {config_path})"
        )
    if not os.path.isfile(state_dict_path):
        raise ImportRefused(f"{state_dict_path}: missing (the PageSumModel state dict)")
    state = load_tensor_file(state_dict_path)
    check_encoder_decoder_weights(shape.sizes, state, state_dict_path)  # every size of config.json, before writing
    missing = [key for key in CONFIDENCE_KEYS if key not in state]
    if missing:
        raise ImportRefused(
            f"{state_dict_path}: {', '.join(missing)} missing; not a PageSumModel state dict (its page confidence "
            "layer 'lin' scores every page, Eq. 7)"
        )
    weight, bias = state["lin.weight"], state["lin.bias"]
    if tuple(weight.shape) != (1, shape.embed_dim) or tuple(bias.shape) != (1,):
        raise ImportRefused(
            f"{state_dict_path}: lin.weight {tuple(weight.shape)} / lin.bias {tuple(bias.shape)} are not "
            f"Linear({shape.embed_dim}, 1)"
        )
    fairseq_state = fairseq_state_from_hf(state, shape, state_dict_path, ignored=CONFIDENCE_KEYS)
    if shape.scale_embedding and shape.tied_output:
        # The folded scale leaves the decoder states divided by sqrt(d) (see
        # hf_bart); the scorer reads them, so its weight takes the factor back.
        weight = weight * shape.embed_scale
    fairseq_state["decoder.page_confidence.weight"] = weight
    fairseq_state["decoder.page_confidence.bias"] = bias
    num_rows = fairseq_state["decoder.embed_tokens.weight"].size(0)
    files = bpe_files(tokenizer.path, num_rows)
    arch, shape_flags = architecture_flags(shape, family="pagesum_bart")
    flags = page_flags(settings, shape.max_positions)
    args = checkpoint_namespace(shape, arch, shape_flags, extra=flags)

    from mdsfair.importers.output import write_gpt2_import

    source = {"kind": "pagesum", "path": os.path.abspath(state_dict_path)}
    source.update({name: s.record() for name, s in (("hf_config", model), ("tokenizer", tokenizer)) if s.record()})
    write_gpt2_import(out_dir, overwrite, "pagesum", files, source, args, fairseq_state)
    return {
        "source": state_dict_path,
        "found": found_where(model, tokenizer),
        "out_dir": out_dir,
        "arch": arch,
        "arch_flags": shape_flags + flags,
        "generate_flags": generation_flags(settings),
        "dictionary_size": num_rows,
        "settings": settings,
    }


def print_summary(summary: Dict, out=None) -> None:
    out = out or sys.stdout
    out_dir = summary["out_dir"]
    settings = summary["settings"]
    for found in summary.get("found", ()):
        print(f"INFO: {found}", file=out)
    print(f"converted {summary['source']}", file=out)
    empty_pages = settings.get("empty_pages") or AUTHORS_EMPTY_PAGES
    empty = (
        "empty pages hold '.' and are weighted, as the authors'"
        if empty_pages == AUTHORS_EMPTY_PAGES
        else "empty pages masked out of the softmax, unlike the authors'"
    )
    print(
        f"wrote {out_dir}/model.pt (arch {summary['arch']}; locality {settings['locality']}, {settings['pages']} pages "
        f"of {settings['page_length']} tokens, {empty}), dict.txt "
        f"({summary['dictionary_size']} symbols), encoder.json, vocab.bpe",
        file=out,
    )
    if summary["generate_flags"]:
        print(
            "note: the generation flags are the authors' generate() call; its early_stopping=False and length "
            "normalization over the decoder start token have no fairseq flag",
            file=out,
        )
    print_next_preprocess_command(out_dir, out)
    budget = settings["pages"] * settings["page_length"]
    print(
        f"  fairseq-generate DATA --user-dir mdsfair --task multidoc_summarization --path {out_dir}/model.pt "
        f"--max-source-positions {budget} {' '.join(summary['generate_flags'])}",
        file=out,
    )


def cli_main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mdsfair-import pagesum",
        description="Convert a PageSum PageSumModel state dict (yixinL7/PageSum) into a pagesum_bart checkpoint "
        "with the authors' page settings, plus dict.txt, encoder.json and vocab.bpe.",
    )
    parser.add_argument("state_dict", help="the released model.bin (torch.save of PageSumModel.state_dict())")
    parser.add_argument(
        "hf_config",
        help="facebook/bart-large-cnn directory (config.json, vocab.json, merges.txt), its config.json, or the "
        "Hugging Face model id facebook/bart-large-cnn (its configuration and tokenizer files fetched into the "
        "Hugging Face cache, or found there when offline, HF_HUB_OFFLINE=1)",
    )
    parser.add_argument("out_dir", help="where model.pt, dict.txt, encoder.json and vocab.bpe are written")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="the authors' configuration of a released model (config.py): "
        + "; ".join(f"{name}: {p['locality']}, {p['pages']} pages" for name, p in PRESETS.items()),
    )
    parser.add_argument(
        "--locality",
        choices=LOCALITIES,
        help="spatial (their page_type None), document "
        "(page_type multi_doc on multi-document input) or discourse (multi_doc on sections)",
    )
    parser.add_argument("--pages", type=at_least(1), help="pages per example (their num_pages)")
    parser.add_argument(
        "--page-length", type=at_least(3), help="tokens per page including <s> and </s> (their page_max_len)"
    )
    parser.add_argument(
        "--discourse-unit", choices=("paragraph", "section"), help="discourse locality unit (arXiv sections: section)"
    )
    parser.add_argument(
        "--empty-pages",
        choices=EMPTY_PAGE_POLICIES,
        help="the model's --empty-pages: 'filler' (default), the authors' data code: a page "
        "with no text holds '.' and is weighted in the softmax over pages, as their models "
        "were trained; 'mask' leaves such a page out of the softmax (mdsfair's default for "
        "models trained here)",
    )
    parser.add_argument(
        "--tokenizer-dir",
        help="directory (or Hugging Face model id) with vocab.json and merges.txt (default: HF_CONFIG's)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace files already in OUT_DIR")
    args = parser.parse_args(argv)
    settings = dict(PRESETS.get(args.preset, {}))
    for name in ("locality", "pages", "page_length", "discourse_unit", "empty_pages"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    # a refusal reaches mdsfair.importers.cli, which prints it
    summary = import_pagesum(
        args.state_dict, args.hf_config, args.out_dir, settings, args.tokenizer_dir, args.overwrite
    )
    print_summary(summary)
    return 0
