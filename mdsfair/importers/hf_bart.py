"""Hugging Face BART <-> fairseq BART.

``mdsfair-import hf-bart HF_DIR OUT_DIR`` reads a Hugging Face BART model
directory (``config.json``; ``model.safetensors`` or ``pytorch_model.bin``,
sharded or not; ``vocab.json`` and ``merges.txt``) and writes

* ``OUT_DIR/model.pt``: a fairseq ``bart`` checkpoint (today's layout, see
  :mod:`mdsfair.importers.fairseq_bart`) that ``fairseq-generate --path``
  loads and ``fairseq-train --restore-file`` restores into every BART-based
  architecture (``bart_*``, ``hierencdec_bart_*``, ``pagesum_bart_*``,
  ``sparse_bart_*``);
* ``OUT_DIR/dict.txt``, ``encoder.json``, ``vocab.bpe``: the files of
  ``mdsfair-preprocess --subword gpt2``, built so that the ids it writes are
  the Hugging Face tokenizer's.

``HF_DIR`` (and ``--tokenizer-dir``) may also name a model on the Hugging
Face Hub, ``ORG/NAME`` or ``ORG/NAME@REVISION`` (``facebook/bart-large-cnn``):
:mod:`mdsfair.importers.hf_hub` fetches the files above into the Hugging Face
cache, or finds them there offline, and ``OUT_DIR/mdsfair.json`` records the
id and commit.

The vocabulary. fairseq's BART ``dict.txt`` lists GPT-2 BPE ids as symbols
after its four specials ``<s> <pad> </s> <unk>`` (indices 0-3); Hugging Face
re-indexed ``vocab.json`` so that a token's id *is* that fairseq index. The
importer therefore writes ``encoder.json`` mapping every token to its
Hugging Face id and ``dict.txt`` whose symbol at index ``i`` is the string
``i`` (``<mask>`` where ``vocab.json`` has it, ``madeupwordNNNN`` for an
embedding row no token uses): the GPT-2 encoder maps a token to ``i``, the
dictionary maps ``"i"`` back to index ``i``. ``vocab.bpe`` holds the merges
in ``merges.txt``'s order (their ranks).

The weights map one to one (the same layer and projection names, the same
2-row offset of the learned position tables, fairseq's
``padding_idx + 1 = 2``), with these cases:

* ``scale_embedding``: fairseq's ``bart_*`` architectures fix
  ``no_scale_embedding=True`` and no command-line flag turns it off, so a
  model that multiplies its embeddings by ``sqrt(d_model)`` is converted by
  folding: the token embedding is multiplied by ``sqrt(d_model)``, and, when
  the output projection is tied to it, the last decoder layer's final
  LayerNorm (weight and bias, the last operation before the projection) is
  divided by it. The logits are the same; every BART-based architecture
  restores it.
* ``lm_head``: tied (``tie_word_embeddings``, every released BART: encoder,
  decoder and output share ``shared``) becomes ``--share-all-embeddings``.
  Untied, each of ``encoder.embed_tokens``, ``decoder.embed_tokens`` (both
  ``shared`` when the file has no key of their own) and ``lm_head`` is its
  own tensor, written with ``share_all_embeddings`` and
  ``share_decoder_input_output_embed`` off in the checkpoint's cfg, which
  ``fairseq-generate --path`` and the hub honour. fairseq's ``bart_*``
  architectures always tie, so ``--restore-file`` into them would overwrite
  the head with the embedding: the importer says so when it converts one.
* ``final_logits_bias``: fairseq's output projection has no bias. Hugging
  Face keeps it as a buffer that training never changes (zeros); a nonzero
  one is refused.
* ``<mask>`` present or absent, ``vocab_size`` below ``len(vocab.json)``
  (``bart-large-cnn``: 50,264 rows, ``<mask>`` unused), embedding rows no
  token uses: the dictionary has exactly one symbol per embedding row.

Refused with the file named: another ``model_type`` (mBART, PEGASUS, LED,
...), pre-LayerNorm or extra-LayerNorm configurations, an activation fairseq
lacks, weights other than BART's, special tokens at other ids than fairseq's
0-3, tokens the tokenizer adds beyond ``vocab.json``, ``add_prefix_space``.

``mdsfair-export hf-bart CKPT DICT OUT_DIR`` is the reverse for plain
``bart_*`` checkpoints (``config.json``, ``model.safetensors`` or
``pytorch_model.bin``, ``vocab.json``, ``merges.txt``,
``tokenizer_config.json``), with ``encoder.json`` / ``vocab.bpe`` read next
to ``DICT`` (a data-bin or an import's ``OUT_DIR`` has them) unless given.

Code: :mod:`mdsfair.importers.hf_bart_files` reads Hugging Face's files and
maps the tokenizer and vocabulary files both ways,
:mod:`mdsfair.importers.hf_bart_weights` maps the configuration and weights
both ways, :mod:`mdsfair.importers.hf_export` writes the Hugging Face
directory (as for LED); this module builds the fairseq architecture flags
and runs the two commands.
"""

import argparse
import json
import os
import sys
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import check_encoder_decoder_weights, config_integer
from mdsfair.importers.hf_bart_files import MASK, bpe_files, hf_vocabulary, load_hf_weights, read_json, read_merges
from mdsfair.importers.hf_bart_weights import (
    BartShape,
    bart_shape,
    cfg_value,
    check_exportable,
    fairseq_state_from_hf,
    hf_state_from_fairseq,
)
from mdsfair.importers.hf_export import HFDirectory, export_hf_directory, hf_config, run_export_cli, tokenizer_config
from mdsfair.importers.hf_hub import ModelSource, found_where, resolve_model_source

# -------------------------------------------------------------- architecture


ARCH_DEFAULTS = {
    "bart_base": {"embed_dim": 768, "layers": 6, "heads": 12},
    "bart_large": {"embed_dim": 1024, "layers": 12, "heads": 16},
}


def architecture_flags(shape: BartShape, family: str = "bart") -> Tuple[str, List[str]]:
    """The ``--arch`` (``{family}_base`` or ``{family}_large``) closest to
    ``shape`` and the flags that make it exactly ``shape``: what to pass to
    ``fairseq-train`` with ``--restore-file``."""
    size = "base" if (shape.embed_dim, shape.encoder_layers) == (768, 6) else "large"
    defaults = ARCH_DEFAULTS[f"bart_{size}"]
    d = defaults["embed_dim"]
    expected = {
        "encoder_embed_dim": d,
        "decoder_embed_dim": d,
        "encoder_ffn_embed_dim": 4 * d,
        "decoder_ffn_embed_dim": 4 * d,
        "encoder_layers": defaults["layers"],
        "decoder_layers": defaults["layers"],
        "encoder_attention_heads": defaults["heads"],
        "decoder_attention_heads": defaults["heads"],
    }
    actual = {
        "encoder_embed_dim": shape.embed_dim,
        "decoder_embed_dim": shape.embed_dim,
        "encoder_ffn_embed_dim": shape.encoder_ffn_embed_dim,
        "decoder_ffn_embed_dim": shape.decoder_ffn_embed_dim,
        "encoder_layers": shape.encoder_layers,
        "decoder_layers": shape.decoder_layers,
        "encoder_attention_heads": shape.encoder_attention_heads,
        "decoder_attention_heads": shape.decoder_attention_heads,
    }
    flags: List[str] = []
    for name, value in actual.items():
        if value != expected[name]:
            flags += ["--" + name.replace("_", "-"), str(value)]
    if shape.activation_fn != "gelu":
        flags += ["--activation-fn", shape.activation_fn]
    return f"{family}_{size}", flags


def position_flags(shape: BartShape) -> List[str]:
    return ["--max-source-positions", str(shape.max_positions), "--max-target-positions", str(shape.max_positions)]


def training_flags(shape: BartShape, arch_flags: List[str]) -> List[str]:
    """The flags to add to ``--arch`` when fine-tuning: the shape, and the
    position tables when they differ from the architectures' 1,024
    (HierEncDec sets its own --max-source-positions and tiles the table)."""
    return arch_flags + (position_flags(shape) if shape.max_positions != 1024 else [])


def checkpoint_namespace(
    shape: BartShape, arch: str, flags: List[str], extra: Iterable[str] = ()
) -> argparse.Namespace:
    """The training namespace recorded in the checkpoint (dropouts from the
    Hugging Face config, tying as converted)."""
    from mdsfair.importers.fairseq_bart import training_namespace

    dropouts = [
        "--dropout",
        str(shape.dropout),
        "--attention-dropout",
        str(shape.attention_dropout),
        "--activation-dropout",
        str(shape.activation_dropout),
        "--encoder-layerdrop",
        str(shape.encoder_layerdrop),
        "--decoder-layerdrop",
        str(shape.decoder_layerdrop),
    ]
    args = training_namespace(arch, [*flags, *position_flags(shape), *dropouts, *extra])
    if not shape.tied_output:
        args.share_all_embeddings = False
        args.share_decoder_input_output_embed = False
    return args


def generation_flags(model_dir: str) -> Tuple[List[str], List[str]]:
    """fairseq-generate flags equal to the model's Hugging Face generation
    defaults (``generation_config.json``, else ``config.json``), and notes on
    what has no fairseq flag. fairseq counts lengths without the decoder's
    start token and with the final ``</s>``: ``--min-len = min_length - 1``,
    ``--max-len-b = max_length - 2``."""
    settings: Dict = {}
    sources: Dict[str, str] = {}  # the file each setting was read from
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            values = {k: v for k, v in read_json(path, name, dict).items() if v is not None}
            settings.update(values)
            sources.update(dict.fromkeys(values, path))
    for key, minimum in (("num_beams", 1), ("min_length", 0), ("max_length", 0), ("no_repeat_ngram_size", 0)):
        if key in settings:
            config_integer(settings, key, sources[key], minimum=minimum)
    penalty = settings.get("length_penalty")
    if penalty is not None and (isinstance(penalty, bool) or not isinstance(penalty, (int, float))):
        raise ImportRefused(f"{sources['length_penalty']}: length_penalty must be a number, got {json.dumps(penalty)}")
    flags: List[str] = []
    notes: List[str] = []
    if "num_beams" in settings:
        flags += ["--beam", str(settings["num_beams"])]
    if "length_penalty" in settings:
        flags += ["--lenpen", str(settings["length_penalty"])]
    if settings.get("min_length"):
        flags += ["--min-len", str(max(settings["min_length"] - 1, 0))]
    if settings.get("max_length"):
        flags += ["--max-len-a", "0", "--max-len-b", str(max(settings["max_length"] - 2, 1))]
    if settings.get("no_repeat_ngram_size"):
        flags += ["--no-repeat-ngram-size", str(settings["no_repeat_ngram_size"])]
    if settings.get("forced_bos_token_id") is not None:
        notes.append(
            f"Hugging Face forces token {settings['forced_bos_token_id']} (<s>) as the first generated token; "
            "fairseq-generate does not (the model predicts it itself after fine-tuning that way)"
        )
    if settings.get("num_beams", 1) > 1 and settings.get("early_stopping") is False:
        notes.append("fairseq's beam search stops as Hugging Face's early_stopping=True does")
    return flags, notes


# ------------------------------------------------------------------- import


def prepare_out_dir(out_dir: str, names: Iterable[str], overwrite: bool) -> None:
    os.makedirs(out_dir, exist_ok=True)
    existing = [n for n in names if os.path.exists(os.path.join(out_dir, n))]
    if existing and not overwrite:
        raise ImportRefused(f"{out_dir}: {', '.join(existing)} already there; pass --overwrite to replace")


def source_record(kind: str, model: ModelSource, tokenizer: ModelSource, weights: str) -> Dict:
    """The import's ``imported_from``: the model folder and weight file, and
    the Hub id and commit of a model (and of a separate tokenizer) named by
    its id."""
    record = {"kind": kind, "path": os.path.abspath(model.path), "weights": weights, **model.record()}
    if tokenizer is not model and tokenizer.record():
        record["tokenizer"] = tokenizer.record()
    return record


def import_hf_bart(hf_dir: str, out_dir: str, overwrite: bool = False, tokenizer_dir: Optional[str] = None) -> Dict:
    """Convert a Hugging Face BART model (a folder, or a Hub model id
    ``ORG/NAME[@REVISION]``: :mod:`mdsfair.importers.hf_hub`); returns a
    summary (the commands that follow included)."""
    model = resolve_model_source(hf_dir)
    tokenizer = resolve_model_source(tokenizer_dir, weights=False) if tokenizer_dir else model
    hf_dir = model.path
    config_path = os.path.join(hf_dir, "config.json")
    config = read_json(config_path, "the model configuration", dict)
    shape = bart_shape(config, config_path)
    state, weights_path = load_hf_weights(hf_dir)
    check_encoder_decoder_weights(shape.sizes, state, weights_path)  # every size of config.json, before writing
    fairseq_state = fairseq_state_from_hf(state, shape, weights_path)
    num_rows = fairseq_state["decoder.embed_tokens.weight"].size(0)
    files = bpe_files(tokenizer.path, num_rows)
    arch, flags = architecture_flags(shape)
    args = checkpoint_namespace(shape, arch, flags)

    from mdsfair.importers.output import write_gpt2_import

    generate, generation_notes = generation_flags(hf_dir)  # checked before anything is written
    source = source_record("hf-bart", model, tokenizer, os.path.basename(weights_path))
    write_gpt2_import(out_dir, overwrite, "hf-bart", files, source, args, fairseq_state)
    notes = list(generation_notes)
    if shape.scale_embedding:
        notes.append(
            f"scale_embedding: sqrt(d_model) = {shape.embed_scale:g} folded into the token embedding"
            + (" and 1/sqrt(d_model) into the last decoder final LayerNorm" if shape.tied_output else "")
        )
    if not shape.tied_output:
        notes.append(
            "untied lm_head: exact with fairseq-generate --path and the hub; fairseq's bart_* architectures tie "
            "the output projection to the embedding, so --restore-file into them would replace the head"
        )
    return {
        "source": weights_path,
        "found": found_where(model, tokenizer),
        "out_dir": out_dir,
        "arch": arch,
        "arch_flags": training_flags(shape, flags),
        "generate_flags": generate,
        "dictionary_size": num_rows,
        "mask": MASK in files.symbols,
        "notes": notes,
    }


def print_summary(summary: Dict, out=None) -> None:
    print_import_summary(summary, ", <mask> included" if summary["mask"] else "", out)


def print_import_summary(summary: Dict, dictionary_note: str = "", out=None) -> None:
    """What a Hugging Face import (BART, LED) converted and wrote, its notes,
    and the commands that use it: mdsfair-preprocess (with the summary's
    ``preprocess_flags``), fairseq-train (``--restore-file``) and
    fairseq-generate (with its ``generate_task_flags``)."""
    out = out or sys.stdout
    out_dir = summary["out_dir"]
    for found in summary.get("found", ()):
        print(f"INFO: {found}", file=out)
    print(f"converted {summary['source']}", file=out)
    print(
        f"wrote {out_dir}/model.pt (arch {summary['arch']}), dict.txt ({summary['dictionary_size']} symbols"
        f"{dictionary_note}), encoder.json, vocab.bpe",
        file=out,
    )
    for note in summary["notes"]:
        print(f"note: {note}", file=out)
    print_next_preprocess_command(out_dir, out, summary.get("preprocess_flags", ()))
    print(
        f"  fairseq-train DATA --user-dir mdsfair --task multidoc_summarization --arch {summary['arch']} "
        f"{' '.join(summary['arch_flags'])} --restore-file {out_dir}/model.pt --reset-optimizer --reset-dataloader "
        "--reset-meters ...",
        file=out,
    )
    task_flags = "".join(flag + " " for flag in summary.get("generate_task_flags", ()))
    print(
        f"  fairseq-generate DATA --user-dir mdsfair --task multidoc_summarization {task_flags}--path "
        f"{out_dir}/model.pt {' '.join(summary['generate_flags'])}",
        file=out,
    )


def print_next_preprocess_command(out_dir: str, out, extra_flags: Iterable[str] = ()) -> None:
    """Print "next:" and the mdsfair-preprocess command that uses an import's
    GPT-2 files (and ``extra_flags``)."""
    print("next:", file=out)
    print(
        f"  mdsfair-preprocess --input-dir RAW --destdir DATA --subword gpt2 --gpt2-encoder-json {out_dir}/encoder.json "
        f"--gpt2-vocab-bpe {out_dir}/vocab.bpe --dict {out_dir}/dict.txt" + "".join(" " + flag for flag in extra_flags),
        file=out,
    )


def run_import_cli(
    kind: str,
    description: str,
    hf_dir_help: str,
    tokenizer_dir_help: str,
    convert: Callable[..., Dict],
    print_result: Callable[[Dict], None],
    argv: Optional[List[str]],
) -> int:
    """``mdsfair-import KIND HF_DIR OUT_DIR`` of a Hugging Face model
    directory: ``convert(hf_dir, out_dir, overwrite=..., tokenizer_dir=...)``
    and ``print_result`` of its summary (a refusal reaches
    :mod:`mdsfair.importers.cli`, which prints it)."""
    parser = argparse.ArgumentParser(prog=f"mdsfair-import {kind}", description=description)
    parser.add_argument("hf_dir", help=hf_dir_help)
    parser.add_argument("out_dir", help="where model.pt, dict.txt, encoder.json and vocab.bpe are written")
    parser.add_argument("--tokenizer-dir", help=tokenizer_dir_help)
    parser.add_argument("--overwrite", action="store_true", help="replace files already in OUT_DIR")
    args = parser.parse_args(argv)
    summary = convert(args.hf_dir, args.out_dir, overwrite=args.overwrite, tokenizer_dir=args.tokenizer_dir)
    print_result(summary)
    return 0


def cli_main(argv: Optional[List[str]] = None) -> int:
    return run_import_cli(
        "hf-bart",
        "Convert a Hugging Face BART model directory into a fairseq BART checkpoint (model.pt) and the GPT-2 BPE "
        "files of mdsfair-preprocess (dict.txt, encoder.json, vocab.bpe) that reproduce the Hugging Face "
        "tokenizer's ids.",
        "Hugging Face model directory: config.json, model.safetensors or pytorch_model.bin (or their sharded "
        "index), vocab.json, merges.txt; or a Hugging Face model id ORG/NAME[@REVISION] (facebook/bart-large-cnn), "
        "fetched into the Hugging Face cache, or found there when offline (HF_HUB_OFFLINE=1)",
        "directory (or Hugging Face model id) with vocab.json and merges.txt when not in HF_DIR",
        import_hf_bart,
        print_summary,
        argv,
    )


def export_hf_bart(checkpoint: str, dict_path: str, out_dir: str, **options) -> Dict:
    """Write a Hugging Face BART directory for a plain fairseq ``bart_*``
    checkpoint (``options``: those of
    :func:`~mdsfair.importers.hf_export.export_hf_directory`)."""
    return export_hf_directory("hf-bart", hf_bart_directory, checkpoint, dict_path, out_dir, **options)


def hf_bart_directory(
    checkpoint: str, state: Dict, model_cfg, dict_path: str, encoder_json: str, vocab_bpe: str
) -> HFDirectory:
    """The Hugging Face BART directory of a plain fairseq ``bart_*``
    checkpoint's ``state`` and ``model_cfg``."""
    check_exportable(model_cfg, checkpoint)
    hf_state, tied, layers = hf_state_from_fairseq(state["model"], checkpoint)
    num_rows, d_model = hf_state["model.shared.weight"].shape
    positions = hf_state["model.encoder.embed_positions.weight"].size(0) - 2
    if hf_state["model.decoder.embed_positions.weight"].size(0) - 2 != positions:
        raise ImportRefused(
            f"{checkpoint}: encoder and decoder position tables differ in size; Hugging Face BART has one size"
        )
    vocab = hf_vocabulary(dict_path, encoder_json, num_rows)
    merges = read_merges(vocab_bpe)
    config = hf_config(
        "bart",
        "BartForConditionalGeneration",
        model_cfg,
        num_rows,
        d_model,
        layers,
        positions={"max_position_embeddings": positions},
        tied=tied,
        embedding={"scale_embedding": not cfg_value(model_cfg, "no_scale_embedding", True)},
        generation={"forced_eos_token_id": 2},
    )
    return HFDirectory(config, vocab, merges, tokenizer_config("BartTokenizer", positions), hf_state)


def export_cli_main(argv: Optional[List[str]] = None) -> int:
    return run_export_cli(
        "hf-bart",
        "Write a Hugging Face BART model directory (config.json, weights, vocab.json, merges.txt, "
        "tokenizer_config.json) for a plain fairseq bart_* checkpoint.",
        "fairseq checkpoint of a bart_* architecture (e.g. checkpoints/checkpoint_best.pt)",
        export_hf_bart,
        argv,
    )
