"""``mdsfair-import hiersumm CKPT SPM_MODEL OUT_DIR``: the Hierarchical
Transformer that Liu & Lapata released with their code (nlpyang/hiersumm) as
an mdsfair ``hiertransformer_hiersumm`` checkpoint.

Their checkpoint is an OpenNMT-style ``torch.save`` dict: ``model`` (the
``Summarizer`` state dict: ``encoder.*``, ``decoder.*`` and, in their code's
saves, ``generator.0.weight`` / ``generator.0.bias``), ``opt`` (the training
``argparse.Namespace``: ``emb_size``, ``enc_layers``, ``inter_layers``,
``heads``, ``ff_size``, ...), ``optim``; older OpenNMT saves keep the
generator under a separate ``generator`` entry (``0.weight``, ``0.bias``) and
name LayerNorm parameters ``a_2`` / ``b_2``. Its vocabulary is the
SentencePiece model it was trained with (``spm9998_3.model``, whose special
pieces are ``<PAD> <S> </S> <T> <P> <Q>``).

``OUT_DIR`` receives

* ``model.pt``: a fairseq checkpoint of ``--arch hiertransformer_hiersumm``
  with their dimensions, layer counts and dropouts, computing what their
  ``Summarizer`` computes (tested against a reimplementation of their
  equations, tests/test_import_hiersumm.py);
* ``dict.txt``: fairseq's ``<s> <pad> </s> <unk>`` carry their ``<S>``,
  ``<PAD>``, ``</S>`` and unknown piece, then every other piece in the
  SentencePiece model's order, so the vocabulary is theirs, permuted (no
  entry added or lost, every embedding row and generator bias kept);
* ``spm.model`` (a copy of ``SPM_MODEL``) and ``mdsfair.json``, a data-bin
  manifest without splits, so that ``OUT_DIR`` serves as the data directory
  of the hub (``summarize()`` on raw clusters);

and the command prints how to binarize WikiSum clusters for it::

    mdsfair-preprocess --input-dir wikisum/ --destdir data-bin --spm-model OUT_DIR/spm.model \\
        --dict OUT_DIR/dict.txt --lowercase

Parameter names, old and new (``their`` -> ``ours``)::

    encoder.embeddings.weight [rows permuted]   -> encoder.embed_tokens.weight (= decoder's, tied)
    encoder.transformer_layers.{i} (local)      -> encoder.local_layers.{i}
        layer_norm / self_attn.linear_{query,keys,values} / final_linear / feed_forward.{layer_norm,w_1,w_2}
        -> self_attn_layer_norm / self_attn.{q,k,v}_proj / out_proj / final_layer_norm, fc1, fc2
    encoder.transformer_layers.{n_local + j}    -> encoder.global_layers.{j}
        layer_norm1 / pooling.linear_keys / pooling.linear_values / layer_norm2
        -> pooling_layer_norm / pooling.score_proj / pooling.value_proj / pooling.head_layer_norm
        inter_att.linear_{query,keys,values} (W [out, in]) -> inter_paragraph_attention.{query,key,value}_proj (W^T [1, in, out])
        linear / feed_forward.* -> context_proj / final_layer_norm, fc1, fc2
    encoder.layer_norm                          -> encoder.layer_norm
    decoder.transformer_layers.{i}              -> decoder.layers.{i}
        layer_norm_1 / self_attn.* / layer_norm_2 / context_attn.* / feed_forward.*
        -> self_attn_layer_norm / self_attn.* / encoder_attn_layer_norm / encoder_attn.* / final_layer_norm, fc1, fc2
    decoder.layer_norm                          -> decoder.layer_norm
    generator.0.bias [permuted]                 -> decoder.output_projection.bias

The buffers ``*.pos_emb.pe`` (checked against Eq. 7-8) and the decoder's
causal ``mask`` are not parameters and are dropped. What this arch cannot
represent is refused with the reason and the file: a flat (``-hier false``)
encoder, global layers that are not the top ones, untied embeddings, a
vocabulary that does not match the SentencePiece model.
"""

import argparse
import logging
import os
import shutil
import sys
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from fairseq.data import Dictionary

from mdsfair.checkpoint_loading import UntrustedCheckpointError, load_checkpoint_file
from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import (
    check_dimension,
    check_divides,
    check_layer_count,
    checked_integer,
    config_integer,
)

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "model.pt"
#: The hiersumm code's special pieces (train_abstractive.py: ``spm.PieceToId``)
#: and the fairseq dictionary role each one takes.
HIERSUMM_ROLE_PIECES = {"bos": "<S>", "pad": "<PAD>", "eos": "</S>"}
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
#: Buffers of their modules, not parameters.
IGNORED_SUFFIXES = (".pos_emb.pe", ".mask")


class HiersummImportError(ValueError):
    """The input cannot be converted; the message names the file and why."""


# ------------------------------------------------------------- reading


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


# ---------------------------------------------------------- vocabulary


def sentencepiece_order(processor, path: str) -> Tuple[List[str], List[int]]:
    """The fairseq dictionary of an imported model and where each entry comes from.

    Returns ``symbols`` (the entries after fairseq's four specials, for
    ``dict.txt``) and ``order``: ``order[i]`` is the SentencePiece id behind
    fairseq index ``i``. fairseq's ``<s>``, ``<pad>``, ``</s>``, ``<unk>``
    (indices 0-3) take the ids of hiersumm's ``<S>``, ``<PAD>``, ``</S>`` and
    of the model's unknown piece; every other id follows in the model's order.
    A piece whose string is already taken (a control ``<s>`` beside ``<S>``,
    say) is listed as ``spm:ID:PIECE``; SentencePiece never emits control
    pieces, so no text maps to it.
    """
    unk_id = processor.unk_id()
    roles = {}
    for role, piece in HIERSUMM_ROLE_PIECES.items():
        piece_id = processor.piece_to_id(piece)
        if piece_id == unk_id and processor.id_to_piece(unk_id) != piece:
            raise HiersummImportError(
                f"{path}: the SentencePiece model has no piece {piece!r}, which the hiersumm code uses as "
                f"{role.upper()} (their symbols: <PAD> <S> </S> <T> <P> <Q>)"
            )
        roles[role] = piece_id
    head = [roles["bos"], roles["pad"], roles["eos"], unk_id]
    if len(set(head)) != 4:
        raise HiersummImportError(f"{path}: <S>, <PAD>, </S> and the unknown piece share ids {head}")
    taken = {"<s>", "<pad>", "</s>", "<unk>"}
    symbols, order = [], list(head)
    for piece_id in range(processor.get_piece_size()):
        if piece_id in head:
            continue
        piece = processor.id_to_piece(piece_id)
        symbol = piece if piece not in taken else f"spm:{piece_id}:{piece}"
        taken.add(symbol)
        symbols.append(symbol)
        order.append(piece_id)
    return symbols, order


def build_dictionary(symbols: Sequence[str]) -> Dictionary:
    dictionary = Dictionary()
    for symbol in symbols:
        dictionary.add_symbol(symbol)
    return dictionary


# ------------------------------------------------------------ weights


def layer_names(options: SimpleNamespace) -> List[Tuple[str, str]]:
    """``(theirs, ours)`` module-name pairs for every Linear / LayerNorm except
    the inter-paragraph attention (transposed) and the embeddings (permuted)."""
    pairs = []

    def attention(their: str, our: str):
        for a, b in (
            ("linear_query", "q_proj"),
            ("linear_keys", "k_proj"),
            ("linear_values", "v_proj"),
            ("final_linear", "out_proj"),
        ):
            pairs.append((f"{their}.{a}", f"{our}.{b}"))

    def feed_forward(their: str, our: str):
        pairs.extend(
            [
                (f"{their}.feed_forward.layer_norm", f"{our}.final_layer_norm"),
                (f"{their}.feed_forward.w_1", f"{our}.fc1"),
                (f"{their}.feed_forward.w_2", f"{our}.fc2"),
            ]
        )

    for i in range(options.num_local):
        their, our = f"encoder.transformer_layers.{i}", f"encoder.local_layers.{i}"
        attention(their + ".self_attn", our + ".self_attn")
        pairs.append((their + ".layer_norm", our + ".self_attn_layer_norm"))
        feed_forward(their, our)
    for j in range(options.num_global):
        their, our = f"encoder.transformer_layers.{options.num_local + j}", f"encoder.global_layers.{j}"
        pairs.extend(
            [
                (their + ".layer_norm1", our + ".pooling_layer_norm"),
                (their + ".pooling.linear_keys", our + ".pooling.score_proj"),
                (their + ".pooling.linear_values", our + ".pooling.value_proj"),
                (their + ".layer_norm2", our + ".pooling.head_layer_norm"),
                (their + ".linear", our + ".context_proj"),
            ]
        )
        feed_forward(their, our)
    pairs.append(("encoder.layer_norm", "encoder.layer_norm"))
    for i in range(options.decoder_layers):
        their, our = f"decoder.transformer_layers.{i}", f"decoder.layers.{i}"
        attention(their + ".self_attn", our + ".self_attn")
        attention(their + ".context_attn", our + ".encoder_attn")
        pairs.extend(
            [
                (their + ".layer_norm_1", our + ".self_attn_layer_norm"),
                (their + ".layer_norm_2", our + ".encoder_attn_layer_norm"),
            ]
        )
        feed_forward(their, our)
    pairs.append(("decoder.layer_norm", "decoder.layer_norm"))
    return pairs


def convert_state_dict(
    theirs: Dict[str, torch.Tensor], options: SimpleNamespace, order: Sequence[int], path: str
) -> Dict[str, torch.Tensor]:
    """Their parameters under our names (see the module docstring); every
    parameter of theirs is used exactly once, or the import fails naming the
    ones left over or missing."""
    used = set()

    def take(key: str) -> torch.Tensor:
        if key not in theirs:
            raise HiersummImportError(f"{path}: parameter {key!r} is missing from 'model'")
        used.add(key)
        return theirs[key]

    ours = {}
    for their, our in layer_names(options):
        ours[our + ".weight"] = take(their + ".weight")
        ours[our + ".bias"] = take(their + ".bias")
    for j in range(options.num_global):
        their = f"encoder.transformer_layers.{options.num_local + j}.inter_att"
        our = f"encoder.global_layers.{j}.inter_paragraph_attention"
        for a, b in (("linear_query", "query_proj"), ("linear_keys", "key_proj"), ("linear_values", "value_proj")):
            ours[f"{our}.{b}.weight"] = take(f"{their}.{a}.weight").t().unsqueeze(0)
            ours[f"{our}.{b}.bias"] = take(f"{their}.{a}.bias").unsqueeze(0)

    index = torch.as_tensor(order, dtype=torch.long)
    source_embeddings = take("encoder.embeddings.weight")
    target_embeddings = take("decoder.embeddings.weight")
    generator_weight = take("generator.0.weight") if "generator.0.weight" in theirs else target_embeddings
    if not torch.equal(source_embeddings, target_embeddings):
        raise HiersummImportError(
            f"{path}: source and target embeddings differ (trained without -share_embeddings); "
            "hiertransformer shares one embedding table"
        )
    if not torch.equal(generator_weight, target_embeddings):
        raise HiersummImportError(
            f"{path}: the generator weight is not tied to the decoder embeddings (trained without "
            "-share_decoder_embeddings); hiertransformer_hiersumm ties them"
        )
    if source_embeddings.size(0) != len(order):
        raise HiersummImportError(
            f"{path}: {source_embeddings.size(0)} embedding rows, but the SentencePiece model has {len(order)} pieces"
        )
    embeddings = source_embeddings[index].clone()
    ours["encoder.embed_tokens.weight"] = embeddings
    ours["decoder.embed_tokens.weight"] = embeddings
    ours["decoder.output_projection.weight"] = embeddings
    ours["decoder.output_projection.bias"] = take("generator.0.bias")[index].clone()

    check_position_tables(theirs, options.embed_dim, path)
    left = sorted(k for k in theirs if k not in used and not k.endswith(IGNORED_SUFFIXES))
    if left:
        raise HiersummImportError(
            f"{path}: parameters that hiertransformer_hiersumm has no place for: {left[:8]}"
            + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        )
    return ours


def check_position_tables(theirs: Dict[str, torch.Tensor], embed_dim: int, path: str) -> None:
    """Their stored sinusoid tables must be Eq. 7-8 (what this arch computes)."""
    from mdsfair.modules.sinusoidal import sinusoidal_encoding

    for key, dim in (("encoder.pos_emb.pe", embed_dim // 2), ("decoder.pos_emb.pe", embed_dim)):
        if key not in theirs:
            continue
        table = theirs[key].reshape(-1, theirs[key].size(-1))
        rows = min(table.size(0), 512)
        expected = sinusoidal_encoding(torch.arange(rows), dim)
        if table.size(-1) != dim or not torch.allclose(table[:rows].float(), expected, atol=1e-5):
            raise HiersummImportError(f"{path}: {key} is not the sinusoid table of Eq. 7-8 with dimension {dim}")


# ------------------------------------------------------------- writing


def model_arguments(options: SimpleNamespace, out_dir: str, max_target_positions: int) -> argparse.Namespace:
    from fairseq import options as fairseq_options

    import mdsfair

    mdsfair.register()  # the task and hiertransformer_hiersumm (--user-dir skips an mdsfair imported already)
    argv = [
        out_dir,
        "--user-dir",
        os.path.dirname(os.path.abspath(mdsfair.__file__)),
        "--task",
        "multidoc_summarization",
        "--arch",
        "hiertransformer_hiersumm",
        "--encoder-embed-dim",
        str(options.embed_dim),
        "--decoder-embed-dim",
        str(options.embed_dim),
        "--encoder-ffn-embed-dim",
        str(options.ffn_dim),
        "--decoder-ffn-embed-dim",
        str(options.ffn_dim),
        "--encoder-attention-heads",
        str(options.heads),
        "--decoder-attention-heads",
        str(options.heads),
        "--local-layers",
        str(options.num_local),
        "--global-layers",
        str(options.num_global),
        "--global-heads",
        str(options.global_heads),
        "--decoder-layers",
        str(options.decoder_layers),
        "--dropout",
        str(options.dropout),
        "--attention-dropout",
        str(options.dropout),
        "--activation-dropout",
        str(options.dropout),
        # the authors' test setting: the 40 best paragraphs (-trunc_src_nblock 40), targets up to 400 tokens
        "--max-paragraphs",
        "40",
        "--max-source-positions",
        "8192",
        "--max-target-positions",
        str(max_target_positions),
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.998)",
        "--adam-eps",
        "1e-9",
    ]
    return fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), argv)


def import_manifest(lowercase: bool, source: Dict[str, object]) -> Dict:
    """``mdsfair.json`` of the import: a data-bin without splits (SentencePiece)."""
    from mdsfair.data.manifest import MANIFEST_VERSION, STRUCTURE_STREAMS
    from mdsfair.preprocess.subword import SPM_MODEL_NAME

    manifest = {
        "format": "mdsfair-binarized",
        "version": MANIFEST_VERSION,
        "dictionary": "dict.txt",
        "subword": {"type": "sentencepiece", "model": SPM_MODEL_NAME},
        "sentence_splitter": "rule",
        "lowercase": lowercase,
        "title_document": False,
        "side_data": {},
        "side_data_args": {},
        "structure": list(STRUCTURE_STREAMS),
        "splits": {},
        "imported_from": source,
    }
    return manifest


def import_hiersumm(
    checkpoint: str, spm_model: str, out_dir: str, lowercase: bool = True, overwrite: bool = False
) -> str:
    """Convert; returns the path of the written fairseq checkpoint."""
    import sentencepiece
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from mdsfair.checkpoints.record import RECORD_KEY
    from mdsfair.importers.output import ImportOutput, import_record
    from mdsfair.models.hiertransformer import HierarchicalTransformerModel
    from mdsfair.preprocess.subword import SPM_MODEL_NAME

    theirs, opt = load_hiersumm_checkpoint(checkpoint)
    options = hiersumm_options(opt, checkpoint)
    check_options_against_weights(options, theirs, checkpoint)
    if not os.path.isfile(spm_model):
        raise HiersummImportError(f"{spm_model}: SentencePiece model not found")
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    except Exception as e:
        raise HiersummImportError(f"{spm_model}: not a SentencePiece model ({e})") from None
    symbols, order = sentencepiece_order(processor, spm_model)
    dictionary = build_dictionary(symbols)
    state = convert_state_dict(theirs, options, order, checkpoint)

    out_dir = os.path.abspath(out_dir)
    decoder_table = theirs.get("decoder.pos_emb.pe")
    max_target_positions = (
        int(decoder_table.reshape(-1, decoder_table.size(-1)).size(0)) if decoder_table is not None else 1024
    )
    args = model_arguments(options, out_dir, max_target_positions)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = HierarchicalTransformerModel.build_model(args, task)
    # fairseq's version buffers: without them load_state_dict "upgrades" the
    # decoder as a pre-2019 one and drops its final LayerNorm
    state.update({k: v for k, v in model.state_dict().items() if k.endswith(".version")})
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise HiersummImportError(
            f"{checkpoint}: the converted parameters do not fit hiertransformer_hiersumm (missing {missing[:8]}, "
            f"unexpected {unexpected[:8]})"
        )
    for key, value in model.state_dict().items():
        if key in state and value.shape != state[key].shape:
            raise HiersummImportError(
                f"{checkpoint}: {key} has shape {tuple(state[key].shape)}, expected {tuple(value.shape)}"
            )

    source = {
        "system": "hiersumm (Liu & Lapata 2019)",
        "checkpoint": os.path.basename(checkpoint),
        "sentencepiece": os.path.basename(spm_model),
        "fairseq_specials": {
            "<s>": processor.id_to_piece(order[0]),
            "<pad>": processor.id_to_piece(order[1]),
            "</s>": processor.id_to_piece(order[2]),
            "<unk>": processor.id_to_piece(order[3]),
        },
    }
    path = os.path.join(out_dir, CHECKPOINT_NAME)
    manifest = import_manifest(lowercase, source)
    with ImportOutput(out_dir, overwrite, "mdsfair-import hiersumm") as output:  # lock, stage, commit
        dictionary.save(output.path("dict.txt"))
        shutil.copyfile(spm_model, output.path(SPM_MODEL_NAME))
        model_state = model.state_dict()
        checkpoint_utils.torch_persistent_save(
            {
                "cfg": convert_namespace_to_omegaconf(args),
                "args": None,
                "model": model_state,
                "task_state": {RECORD_KEY: import_record(output.staging, out_dir, manifest, model_state)},
                # no optimizer state: `fairseq-train --restore-file` starts a fresh optimizer at update 0
                "optimizer_history": [
                    {
                        "criterion_name": "LabelSmoothedCrossEntropyCriterion",
                        "optimizer_name": "FairseqAdam",
                        "lr_scheduler_state": {"best": None},
                        "num_updates": 0,
                    }
                ],
                "extra_state": {
                    "train_iterator": {"epoch": 1, "iterations_in_epoch": 0, "shuffle": True, "version": 2}
                },
                "last_optimizer_state": None,
            },
            output.path(CHECKPOINT_NAME),
        )
        output.commit(manifest)
    logger.info(
        "%s: hiertransformer_hiersumm, d %d, %d local + %d global layers, %d decoder layers, %d types",
        path,
        options.embed_dim,
        options.num_local,
        options.num_global,
        options.decoder_layers,
        len(dictionary),
    )
    return path


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdsfair-import hiersumm",
        description="Convert the Hierarchical Transformer checkpoint released with nlpyang/hiersumm (and its "
        "SentencePiece model) into a hiertransformer_hiersumm fairseq checkpoint, dict.txt and a "
        "data-bin manifest.",
    )
    parser.add_argument("checkpoint", metavar="CKPT", help="their checkpoint (model_step_*.pt: 'model', 'opt' entries)")
    parser.add_argument("spm_model", metavar="SPM_MODEL", help="their SentencePiece model (spm9998_3.model)")
    parser.add_argument(
        "out_dir", metavar="OUT_DIR", help="output directory (model.pt, dict.txt, spm.model, mdsfair.json)"
    )
    parser.add_argument(
        "--cased",
        action="store_true",
        help="record lowercase=false in the manifest; by default the hub lowercases raw text, as the authors' "
        "WikiSum data (and their gold summaries) are lowercased",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier import in OUT_DIR (only the files its mdsfair.json lists)",
    )
    return parser


def cli_main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    args = get_parser().parse_args(argv)
    try:
        path = import_hiersumm(
            args.checkpoint, args.spm_model, args.out_dir, lowercase=not args.cased, overwrite=args.overwrite
        )
    except (HiersummImportError, ImportRefused) as e:
        print(f"mdsfair-import hiersumm: error: {e}", file=sys.stderr)
        return 1
    out_dir = os.path.dirname(path)
    lowercase = "" if args.cased else " --lowercase"
    print(
        f"wrote {path}\n"
        f"binarize clusters for it:\n"
        f"  mdsfair-preprocess --input-dir RAW_DIR --destdir DATA_BIN --spm-model {out_dir}/spm.model "
        f"--dict {out_dir}/dict.txt{lowercase}\n"
        f"generate (the authors tested on 40 paragraphs with beam 5 and 20-400 tokens):\n"
        f"  fairseq-generate DATA_BIN --user-dir mdsfair --task multidoc_summarization --path {path} "
        f"--max-paragraphs 40 --max-source-positions 8192 --beam 5 --min-len 20 --max-len-b 400"
    )
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
