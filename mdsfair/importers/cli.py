"""``mdsfair-import KIND ...`` and ``mdsfair-export KIND ...``.

The first positional argument names the source kind; the rest goes to
``mdsfair.importers.<kind with - as _>.cli_main`` (``export_cli_main`` for
exports, of the module ``<kind with - as _>_export`` where the kind has one:
``hf_t5_export`` imports the importer ``hf_t5`` it inverts, which therefore
cannot import it). Listing the kinds (``--help``) and one kind's ``--help`` import
nothing heavy; any other run calls :func:`mdsfair.register` first, since
``import mdsfair`` in a process that has not imported fairseq registers
nothing (fairseq's registries and mdsfair's checkpoint checks, without which
``checkpoint_utils.load_checkpoint_to_cpu`` fails on torch >= 2.6).
"""

import importlib
import importlib.util
import sys
from typing import Dict, List, Optional

IMPORT_KINDS: Dict[str, str] = {
    "hf-bart": "Hugging Face BART model directory (config.json, model.safetensors or pytorch_model.bin, "
    "vocab.json, merges.txt) or model id (facebook/bart-large) -> fairseq BART model.pt + dict.txt, encoder.json, "
    "vocab.bpe",
    "pagesum": "PageSum's released PageSumModel state dict (yixinL7/PageSum) + its BART config (or model id) "
    "-> a pagesum_bart checkpoint with the authors' page settings",
    "hiersumm": "hiersumm's released OpenNMT-style checkpoint (nlpyang/hiersumm) + its SentencePiece "
    "model -> a hiertransformer_hiersumm checkpoint, dictionary and data-bin manifest",
    "bart-to-led": "a fairseq BART checkpoint -> an led_* checkpoint as LED was made (encoder positions copied to "
    "--max-source-positions, global q/k/v = local q/k/v), for fairseq-train --restore-file",
    "hf-led": "Hugging Face LED / PRIMERA model directory or model id (allenai/PRIMERA-multinews) -> an led "
    "checkpoint (led_*, primera) + dict.txt, encoder.json, vocab.bpe",
    "hf-t5": "Hugging Face T5 v1.1 model directory (config.json, model.safetensors or pytorch_model.bin, "
    "spiece.model) or model id (google/t5-v1_1-base) -> a t5_v1_1 checkpoint + dict.txt, spm.model",
    "hf-pegasus": "Hugging Face PEGASUS model directory (config.json, model.safetensors or pytorch_model.bin, "
    "spiece.model) or model id (google/pegasus-multi_news) -> a pegasus checkpoint + dict.txt, spm.model",
    "hf-longt5": "Hugging Face LongT5 model directory (local or transient-global; config.json, weights, "
    "spiece.model) or model id (google/long-t5-tglobal-base) -> a longt5 checkpoint + dict.txt, spm.model",
}

EXPORT_KINDS: Dict[str, str] = {
    "hf-bart": "a plain fairseq bart_* checkpoint + its dict.txt -> a Hugging Face BART model directory",
    "hf-led": "an led checkpoint (led_*, primera) + its dict.txt -> a Hugging Face LED model directory",
    "hf-pegasus": "a pegasus checkpoint + its dict.txt and spm.model -> a Hugging Face PEGASUS model directory",
    "hf-t5": "a t5_v1_1 checkpoint + its dict.txt and spm.model -> a Hugging Face T5 v1.1 model directory",
    "hf-longt5": "a longt5 checkpoint + its dict.txt and spm.model -> a Hugging Face LongT5 model directory",
}


HELP_FLAGS = frozenset({"-h", "--help"})


def usage(program: str, kinds: Dict[str, str]) -> str:
    lines = [f"usage: {program} KIND ARGS...   ({program} KIND --help for the arguments of one kind)", "", "kinds:"]
    width = max(len(kind) for kind in kinds)
    lines += [f"  {kind.ljust(width)}  {description}" for kind, description in kinds.items()]
    return "\n".join(lines)


def dispatch(
    program: str, kinds: Dict[str, str], entry: str, argv: Optional[List[str]], own_module: Optional[str] = None
) -> int:
    """Run ``entry`` of the module of ``argv``'s kind: ``mdsfair.importers.<kind with - as _>``, or that name
    followed by ``own_module`` when the kind has such a module."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in HELP_FLAGS:
        print(usage(program, kinds))
        return 0 if argv else 2
    kind, rest = argv[0], argv[1:]
    if kind not in kinds:
        print(f"{program}: unknown kind {kind!r}\n\n{usage(program, kinds)}", file=sys.stderr)
        return 2
    name = f"mdsfair.importers.{kind.replace('-', '_')}"
    if own_module and importlib.util.find_spec(name + own_module) is not None:
        name += own_module
    if importlib.util.find_spec(name) is None:
        print(f"{program}: kind {kind!r} is not part of this installation ({name} missing)", file=sys.stderr)
        return 2
    module = importlib.import_module(name)
    if not HELP_FLAGS & set(rest):
        import mdsfair

        mdsfair.register()
    from mdsfair.argument_types import os_error_message
    from mdsfair.importers import ImportRefused

    try:
        result = getattr(module, entry)(rest)
    except ImportRefused as error:
        print(f"{program} {kind}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a read-only file system, no permission, a full disk: the path and the reason
        print(f"{program} {kind}: error: {os_error_message(error)}; nothing written", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the output's staging folder is already removed (mdsfair.importers.output)
        print(
            f"{program} {kind}: interrupted; nothing written (the output is as it was before the run)", file=sys.stderr
        )
        return 130
    return int(result or 0)


def import_main(argv: Optional[List[str]] = None) -> int:
    return dispatch("mdsfair-import", IMPORT_KINDS, "cli_main", argv)


def export_main(argv: Optional[List[str]] = None) -> int:
    return dispatch("mdsfair-export", EXPORT_KINDS, "export_cli_main", argv, own_module="_export")


if __name__ == "__main__":
    sys.exit(import_main())
