"""Reading the checkpoint of the Hierarchical Transformer that Liu & Lapata
released with their code (nlpyang/hiersumm), for ``mdsfair-import hiersumm``
(:mod:`mdsfair.importers.hiersumm`).

Their checkpoint is an OpenNMT-style ``torch.save`` dict: ``model`` (the
``Summarizer`` state dict: ``encoder.*``, ``decoder.*`` and, in their code's
saves, ``generator.0.weight`` / ``generator.0.bias``), ``opt`` (the training
``argparse.Namespace``: ``emb_size``, ``enc_layers``, ``inter_layers``,
``heads``, ``ff_size``, ...), ``optim``; older OpenNMT saves keep the
generator under a separate ``generator`` entry (``0.weight``, ``0.bias``) and
name LayerNorm parameters ``a_2`` / ``b_2``. Their options are checked for
what ``hiertransformer_hiersumm`` can represent (a hierarchical encoder whose
global layers are the top ones, one model dimension) and against the sizes of
the tensors, before anything is built or written.
"""

import argparse
import logging
import os
from types import SimpleNamespace
from typing import Dict, Tuple

import torch

from mdsfair.checkpoint_loading import UntrustedCheckpointError, load_checkpoint_file
from mdsfair.importers.config_checks import (
    check_dimension,
    check_divides,
    check_layer_count,
    checked_integer,
    config_integer,
)

logger = logging.getLogger(__name__)

REQUIRED_OPTIONS = (
    "emb_size",
    "enc_hidden_size",
    "dec_hidden_size",
    "enc_layers",
    "dec_layers",
    "heads",
    "ff_size",
    "inter_layers",
    "inter_heads",
)
#: The options that are sizes: each a positive integer.
INTEGER_OPTIONS = tuple(name for name in REQUIRED_OPTIONS if name != "inter_layers")


class HiersummImportError(ValueError):
    """The input cannot be converted; the message names the file and why."""


def load_hiersumm_checkpoint(path: str) -> Tuple[Dict[str, torch.Tensor], argparse.Namespace]:
    """Their state dict (LayerNorm ``a_2``/``b_2`` renamed ``weight``/``bias``,
    a separate ``generator`` entry folded in as ``generator.*``) and ``opt``."""
    if not os.path.isfile(path):
        raise HiersummImportError(f"{path}: checkpoint not found")
    try:
        checkpoint = load_checkpoint_file(path)
    except UntrustedCheckpointError:
        raise
    except Exception as e:  # a truncated file, a zip of something else, ...
        raise HiersummImportError(f"{path}: cannot be read by torch.load ({type(e).__name__}: {e})") from None
    if not isinstance(checkpoint, dict) or "model" not in checkpoint or "opt" not in checkpoint:
        keys = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise HiersummImportError(
            f"{path}: not a hiersumm checkpoint (expected the entries 'model' and 'opt'; found {keys})"
        )
    state = {}
    for key, value in checkpoint["model"].items():
        state[rename_layer_norm(key)] = value
    generator = checkpoint.get("generator")
    if generator:
        for key, value in generator.items():
            state.setdefault("generator." + rename_layer_norm(key), value)
    opt = checkpoint["opt"]
    if isinstance(opt, dict):
        opt = argparse.Namespace(**opt)
    return state, opt


def rename_layer_norm(key: str) -> str:
    """OpenNMT's old LayerNorm names: ``x.a_2`` -> ``x.weight``, ``x.b_2`` -> ``x.bias``."""
    if key.endswith(".a_2"):
        return key[: -len("a_2")] + "weight"
    if key.endswith(".b_2"):
        return key[: -len("b_2")] + "bias"
    return key


def hiersumm_options(opt: argparse.Namespace, path: str) -> SimpleNamespace:
    """The model options of ``opt``, validated for this arch."""
    missing = [name for name in REQUIRED_OPTIONS if not hasattr(opt, name)]
    if missing:
        raise HiersummImportError(f"{path}: 'opt' lacks the model options {missing}")
    if not getattr(opt, "hier", True):
        raise HiersummImportError(
            f"{path}: a flat model (opt.hier = False); only the hierarchical encoder (-hier) converts to "
            "hiertransformer_hiersumm"
        )
    size = {name: config_integer(vars(opt), name, path, aliases={}, prefix="opt.") for name in INTEGER_OPTIONS}
    if len({size["emb_size"], size["enc_hidden_size"], size["dec_hidden_size"]}) != 1:
        raise HiersummImportError(
            f"{path}: emb_size {size['emb_size']}, enc_hidden_size {size['enc_hidden_size']} and dec_hidden_size "
            f"{size['dec_hidden_size']} differ; their Summarizer (and this arch) needs one model dimension"
        )
    inter_layers = opt.inter_layers
    if isinstance(inter_layers, str):
        pieces = [piece.strip() for piece in inter_layers.split(",") if piece.strip()]
        if not all(piece.isdigit() for piece in pieces):
            raise HiersummImportError(
                f"{path}: opt.inter_layers {inter_layers!r} is not a comma-separated list of layer numbers"
            )
        inter_layers = [int(piece) for piece in pieces]
    if not isinstance(inter_layers, (list, tuple)):
        raise HiersummImportError(f"{path}: opt.inter_layers must be a list of layer numbers, got {inter_layers!r}")
    inter_layers = sorted(checked_integer(i, "opt.inter_layers", path, minimum=0) for i in inter_layers)
    num_global = len(inter_layers)
    num_local = size["enc_layers"] - num_global
    if inter_layers != list(range(num_local, size["enc_layers"])):
        raise HiersummImportError(
            f"{path}: inter_layers {inter_layers} of {opt.enc_layers} encoder layers; hiertransformer runs all "
            "local layers first and the global layers on top, so the inter layers must be the last ones"
        )
    for heads in ("heads", "inter_heads"):
        check_divides(path, "opt." + heads, size[heads], "opt.emb_size", size["emb_size"])

    def probability(name: str) -> float:
        value = float(getattr(opt, name, 0.1))
        if not 0.0 <= value < 1.0:
            logger.warning(
                "%s: opt.%s = %s is not a dropout probability; recording 0.1 (the README's)", path, name, value
            )
            return 0.1
        return value

    enc_dropout, dec_dropout = probability("enc_dropout"), probability("dec_dropout")
    if enc_dropout != dec_dropout:
        logger.warning(
            "%s: enc_dropout %s and dec_dropout %s differ; hiertransformer has one --dropout, set to %s "
            "(it matters for further training only)",
            path,
            enc_dropout,
            dec_dropout,
            enc_dropout,
        )
    return SimpleNamespace(
        embed_dim=size["emb_size"],
        heads=size["heads"],
        ffn_dim=size["ff_size"],
        num_local=num_local,
        num_global=num_global,
        global_heads=size["inter_heads"],
        decoder_layers=size["dec_layers"],
        dropout=enc_dropout,
    )


def check_options_against_weights(options: SimpleNamespace, theirs: Dict[str, torch.Tensor], path: str) -> None:
    """The sizes of ``opt`` are those of the tensors in ``model``, before
    anything is built or written: ``emb_size`` the embedding width,
    ``ff_size`` the rows of every ``feed_forward.w_1``, ``enc_layers`` /
    ``dec_layers`` the layers present, ``heads`` the rows of every global
    layer's pooling scores (``pooling.linear_keys``: one per head)."""
    embeddings = "encoder.embeddings.weight"
    if embeddings in theirs:
        check_dimension(path, "opt.emb_size", options.embed_dim, path, embeddings, theirs[embeddings], 1)
    for part, layers in (("encoder", options.num_local + options.num_global), ("decoder", options.decoder_layers)):
        name = "opt.enc_layers" if part == "encoder" else "opt.dec_layers"
        check_layer_count(path, f"{name} {layers}", layers, theirs, f"{part}.transformer_layers", path)
    for key, tensor in theirs.items():
        if key.endswith(".feed_forward.w_1.weight"):
            check_dimension(path, "opt.ff_size", options.ffn_dim, path, key, tensor, 0)
        elif key.endswith(".pooling.linear_keys.weight"):
            check_dimension(path, "opt.heads", options.heads, path, key, tensor, 0)
