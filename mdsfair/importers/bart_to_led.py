"""``mdsfair-import bart-to-led BART_MODEL.pt OUT.pt``: an ``led`` checkpoint
made from a fairseq BART one the way LED was made.

Beltagy et al. (2020), Sec. 6: LED is initialised from BART and its encoder
position table is extended to 16K positions by copying BART's 1K position
embeddings 16 times; the global attention projections start as copies of
the local ones (their Longformer pretraining, Sec. 5). The conversion script
``scripts/convert_bart_to_longformerencoderdecoder.py`` of allenai/longformer
(as found in its forks) does it as::

    k = 2; step = current_max_pos - 2
    while k < max_pos - 1:
        new_encoder_pos_embed[k:(k + step)] = model.model.encoder.embed_positions.weight[2:]
        k += step
    longformer_self_attn.query_global = copy.deepcopy(layer.self_attn.q_proj)   # key, value alike

This command does the same on fairseq state dicts: the encoder's learned
position rows ``2 ..`` (fairseq's offset, ``padding_idx + 1``) are tiled to
``--max-source-positions`` (the last copy cut where the table ends; rows 0-1
kept from BART, fairseq never reads them), ``q/k/v_global_proj`` are copies of
``q/k/v_proj`` in every encoder layer, the decoder (positions included) is
BART's unchanged. The written checkpoint records ``--arch led_base`` or
``led_large`` (BART's size) with BART's dimensions, ``--max-encoder-positions``,
``--attention-window`` and ``--global-attention``, so ``fairseq-train
--restore-file OUT.pt`` fine-tunes it (with those flags) and
``fairseq-generate --path OUT.pt`` decodes with it.

With an attention window covering the whole source (``window >= 2 x length``)
and only the first token global the converted model computes BART's output:
every token still sees every other once (global keys leave the window, as in
Hugging Face's LED) with BART's projections (tests/test_bart_to_led.py).
"""

import argparse
import os
from collections import OrderedDict
from typing import Dict, List, Optional

from mdsfair.argument_types import at_least
from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import (
    FAIRSEQ_BART_KEYS,
    check_encoder_decoder_weights,
    read_encoder_decoder_sizes,
)

# fairseq model-config fields copied from BART into the LED namespace.
SHAPE_FIELDS = (
    "encoder_embed_dim",
    "decoder_embed_dim",
    "encoder_ffn_embed_dim",
    "decoder_ffn_embed_dim",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "activation_fn",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "encoder_layerdrop",
    "decoder_layerdrop",
)


def tile_positions(table, max_positions: int, offset: int = 2):
    """BART's learned position table ``[offset + P, d]`` tiled to ``[offset +
    max_positions, d]``: row ``offset + i`` is BART's row ``offset + i mod P``."""
    import torch

    rows = table.size(0) - offset
    index = torch.arange(max_positions) % rows + offset
    return torch.cat([table[:offset], table[index]], dim=0)


def led_state_from_bart(state: Dict, max_positions: int) -> "OrderedDict":
    """The ``led`` state dict for a fairseq BART state dict (see the module docstring)."""
    out = OrderedDict()
    for key, tensor in state.items():
        if key == "encoder.embed_positions.weight":
            tensor = tile_positions(tensor, max_positions)
        out[key] = tensor
        if key.startswith("encoder.layers.") and ".self_attn." in key:
            for local in ("q_proj", "k_proj", "v_proj"):
                if f".self_attn.{local}." in key:
                    out[key.replace(f".{local}.", f".{local[0]}_global_proj.")] = tensor.clone()
    return out


def _get(cfg, name, default=None):
    value = cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)
    return default if value is None else value


def document_separator(dict_path: str) -> int:
    """The id of ``<doc-sep>`` in the dictionary the model is used with
    (``--global-attention doc-sep`` makes every ``<doc-sep>`` global); refused
    when the dictionary has none: the global tokens would never occur."""
    from fairseq.data import Dictionary

    if not os.path.isfile(dict_path):
        raise ImportRefused(
            f"{dict_path}: missing; --global-attention doc-sep needs the dictionary the model is used "
            "with (--dict), which must hold <doc-sep>"
        )
    try:
        dictionary = Dictionary.load(dict_path)
    except (ValueError, UnicodeDecodeError) as error:
        raise ImportRefused(f"{dict_path}: not a fairseq dictionary ({error})") from None
    if "<doc-sep>" not in dictionary.symbols:
        raise ImportRefused(
            f"{dict_path}: no <doc-sep> symbol, so --global-attention doc-sep would make no token global but the "
            "first; give a dictionary with <doc-sep> (mdsfair-preprocess --source-layout primera) or convert with "
            "--global-attention first or documents"
        )
    return dictionary.index("<doc-sep>")


def convert_bart_to_led(
    bart_checkpoint: str,
    out_path: str,
    max_source_positions: int = 16384,
    attention_window: str = "1024",
    global_attention: str = "first",
    overwrite: bool = False,
    dict_path: Optional[str] = None,
) -> Dict:
    """Write ``out_path``; returns a summary with the fairseq-train flags."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.bart import BARTModel

    import mdsfair
    from mdsfair.checkpoints.record import RECORD_KEY, make_record
    from mdsfair.importers.fairseq_bart import save_fairseq_checkpoint, training_namespace
    from mdsfair.importers.hf_led import expected_parameter_names, parameter_mismatch
    from mdsfair.importers.output import single_file_output
    from mdsfair.modules.self_attention_components import parse_attention_window

    mdsfair.register()  # the led architectures; the checkpoint checks that load fairseq checkpoints on torch >= 2.6
    if not os.path.isfile(bart_checkpoint):
        raise ImportRefused(
            f"{bart_checkpoint}: missing (the fairseq BART checkpoint, e.g. an mdsfair-import hf-bart model.pt)"
        )
    if os.path.isdir(out_path):
        raise ImportRefused(f"{out_path}: is a directory; give the path of the led checkpoint file to write")
    if os.path.lexists(out_path) and not overwrite:
        raise ImportRefused(f"{out_path}: already there; pass --overwrite to replace")
    separator = None
    if global_attention == "doc-sep":
        separator = document_separator(
            dict_path or os.path.join(os.path.dirname(os.path.abspath(bart_checkpoint)), "dict.txt")
        )
    state = checkpoint_utils.load_checkpoint_to_cpu(bart_checkpoint)
    cfg = state["cfg"]["model"] if state.get("cfg") is not None else state["args"]
    arch = _get(cfg, "_name") or _get(cfg, "arch")
    if ARCH_MODEL_REGISTRY.get(arch) is not BARTModel:
        raise ImportRefused(
            f"{bart_checkpoint}: arch {arch!r} is not a plain fairseq bart architecture (bart_base, "
            "bart_large, an mdsfair-import hf-bart model.pt)"
        )
    model_state = state["model"]
    if any("_global_proj." in key for key in model_state):
        raise ImportRefused(f"{bart_checkpoint}: already has global projections (an LED checkpoint?)")
    table = model_state.get("encoder.embed_positions.weight")
    if table is None:
        raise ImportRefused(f"{bart_checkpoint}: no learned encoder position table (encoder.embed_positions.weight)")
    bart_positions = table.size(0) - 2
    if max_source_positions < bart_positions:
        raise ImportRefused(
            f"--max-source-positions {max_source_positions} is below BART's {bart_positions}; LED "
            "extends the table, it does not cut it"
        )
    stated = {key: _get(cfg, key) for key in FAIRSEQ_BART_KEYS.values() if _get(cfg, key) is not None}
    sizes = read_encoder_decoder_sizes(
        stated, bart_checkpoint, {}, keys=FAIRSEQ_BART_KEYS, vocabulary_key=None, prefix="cfg.model.", aliases={}
    )
    check_encoder_decoder_weights(sizes, model_state, bart_checkpoint)  # before anything is built or written
    layers = sizes.value("encoder_layers")
    try:
        windows = parse_attention_window(attention_window, layers)
    except ValueError as error:
        raise ImportRefused(str(error)) from error
    embed_dim = sizes.value("width")
    size = "base" if (embed_dim, layers) == (768, 6) else "large"
    led_arch = f"led_{size}"
    flags: List[str] = []
    for name in SHAPE_FIELDS:
        value = _get(cfg, name)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    flags += [
        "--max-encoder-positions",
        str(max_source_positions),
        "--max-source-positions",
        str(max_source_positions),
        "--max-target-positions",
        str(model_state["decoder.embed_positions.weight"].size(0) - 2),
        "--attention-window",
        attention_window,
        "--global-attention",
        global_attention,
    ]
    args = training_namespace(led_arch, flags)
    for name in ("share_all_embeddings", "share_decoder_input_output_embed"):
        setattr(args, name, bool(_get(cfg, name, True)))
    converted = led_state_from_bart(model_state, max_source_positions)
    rows = converted["encoder.embed_tokens.weight"].size(0)
    expected = expected_parameter_names(args, rows, separator)
    mismatch = parameter_mismatch(converted, expected)
    if mismatch:
        raise ImportRefused(f"{bart_checkpoint}: does not convert to {led_arch} ({mismatch})")
    converted = OrderedDict((key, converted[key]) for key in expected)
    if args.share_all_embeddings:
        converted["decoder.embed_tokens.weight"] = converted["encoder.embed_tokens.weight"]
    if args.share_decoder_input_output_embed and "decoder.output_projection.weight" in converted:
        converted["decoder.output_projection.weight"] = converted["decoder.embed_tokens.weight"]
    for part in ("encoder", "decoder"):
        converted[f"{part}.version"] = torch.Tensor([3])
    # The BART checkpoint's record (the fingerprints of the dictionary and subword files it was trained or
    # imported with) holds for the converted one too: the same rows mean the same tokens.
    data = ((state.get("task_state") or {}).get(RECORD_KEY) or {}).get("data")
    record = make_record(data, converted) if data else None
    with single_file_output(out_path, overwrite) as temporary:  # a whole file or none (error, Ctrl-C)
        save_fairseq_checkpoint(temporary, args, converted, record)
    return {
        "out": out_path,
        "arch": led_arch,
        "bart_positions": bart_positions,
        "copies": -(-max_source_positions // bart_positions),
        "windows": windows,
        "train_flags": flags,
    }


def cli_main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mdsfair-import bart-to-led",
        description="Make an led checkpoint from a fairseq BART checkpoint as LED was made (Beltagy et al. 2020, "
        "Sec. 6): the encoder position table copied until it has --max-source-positions rows, global "
        "q/k/v projections initialised from the local ones.",
    )
    parser.add_argument(
        "bart_checkpoint", help="fairseq bart_* checkpoint (e.g. OUT_DIR/model.pt of mdsfair-import hf-bart)"
    )
    parser.add_argument("out", help="the led checkpoint to write (for fairseq-train --restore-file)")
    parser.add_argument(
        "--max-source-positions",
        type=at_least(1),
        default=16384,
        help="rows of the new encoder position table (default 16384: LED's, BART's 1,024 copied 16 times)",
    )
    parser.add_argument(
        "--attention-window",
        default="1024",
        help="Longformer window, one even number or one per encoder layer (default 1024, allenai/led-*-16384's)",
    )
    parser.add_argument(
        "--global-attention",
        choices=("first", "doc-sep", "documents"),
        default="first",
        help="global tokens recorded in the checkpoint (default first: LED's)",
    )
    parser.add_argument(
        "--dict",
        help="with --global-attention doc-sep: the dictionary the model is used with, which "
        "must hold <doc-sep> (default: dict.txt beside BART_CHECKPOINT)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace OUT when it exists")
    args = parser.parse_args(argv)
    summary = convert_bart_to_led(  # a refusal reaches mdsfair.importers.cli, which prints it
        args.bart_checkpoint,
        args.out,
        args.max_source_positions,
        args.attention_window,
        args.global_attention,
        args.overwrite,
        args.dict,
    )
    print(
        f"wrote {summary['out']} (arch {summary['arch']}): encoder positions {summary['bart_positions']} -> "
        f"{args.max_source_positions} ({summary['copies']} copies), global q/k/v = local q/k/v"
    )
    print("next:")
    print(
        f"  fairseq-train DATA --user-dir mdsfair --task multidoc_summarization --arch {summary['arch']} "
        f"{' '.join(summary['train_flags'])} --restore-file {summary['out']} --reset-optimizer --reset-dataloader "
        "--reset-meters ..."
    )
    return 0
