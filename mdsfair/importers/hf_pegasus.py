"""Hugging Face PEGASUS <-> mdsfair's ``pegasus`` model.

``mdsfair-import hf-pegasus HF_DIR OUT_DIR`` reads a Hugging Face
``PegasusForConditionalGeneration`` folder as the Hub stores
``google/pegasus-large`` and ``google/pegasus-multi_news`` (``config.json``
with ``model_type: pegasus``; ``model.safetensors`` or ``pytorch_model.bin``,
single or sharded, read as the other importers read them: tensors only,
never other pickled objects; ``spiece.model``), or a model id on the Hub
(:mod:`mdsfair.importers.hf_hub`), and writes:

* ``OUT_DIR/model.pt``: a ``pegasus`` checkpoint (``--arch pegasus_large``
  with every size as a flag), loadable by ``fairseq-generate --path`` and
  the hub;
* ``OUT_DIR/dict.txt``: PEGASUS's vocabulary one place after fairseq's
  ``<s>`` (fairseq index = Hugging Face id + 1), except that fairseq's
  ``<unk>`` (index 3) is PEGASUS's ``<unk>`` (id 105, what unknown text maps
  to) and index 106 is ``<mask_1>`` (id 2): :func:`fairseq_index`,
  :func:`pegasus_symbols`; one ``madeupwordNNNN`` per embedding row that no
  token names;
* ``OUT_DIR/spm.model`` (a copy of ``spiece.model``) and ``mdsfair.json``,
  a data-bin manifest without splits (SentencePiece subwords, text as
  written), so that ``OUT_DIR`` serves as the model's data directory.

The vocabulary is PegasusTokenizer's: ``<pad>`` 0, ``</s>`` 1, ``<mask_1>``
2, ``<mask_2>`` 3, ``<unk_2>`` ... ``<unk_102>`` 4-104 (``offset`` 103), then
SentencePiece piece ``i`` at id ``i + 103`` for ``i >= 2`` (``<unk>`` at 105).

Weights: ``shared`` is the embedding of both stacks and the output layer
(a ``lm_head`` or stack embedding that differs from it is refused: PEGASUS
ties them), its rows reordered as the dictionary and with a row of zeros for
``<s>``; the layers keep their names (BART's); each stack's ``layer_norm`` is
its final layer norm. ``final_logits_bias`` must be zero and the stored
position tables PEGASUS's sinusoids (:func:`mdsfair.modules.sinusoidal.halves_sinusoidal_table`);
neither is a parameter here.

``mdsfair-export hf-pegasus CHECKPOINT DICT OUT_DIR`` writes the folder back
(``config.json``, the weights, ``spiece.model`` copied from the dictionary's
``spm.model``, ``tokenizer_config.json``) for a ``pegasus`` checkpoint with
PEGASUS's own components (full attention, ``pegasus-sinusoidal`` positions)
and the ``dict.txt`` of its import.
"""

import os
import re
from typing import Dict, List, Optional, Tuple

from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import check_encoder_decoder_weights, read_encoder_decoder_sizes
from mdsfair.importers.hf_bart import generation_flags
from mdsfair.importers.hf_bart_files import load_hf_weights, read_json
from mdsfair.importers.hf_bart_weights import (
    ACTIVATIONS,
    DECODER_LAYER_MODULES,
    ENCODER_LAYER_MODULES,
    HF_ACTIVATIONS,
    cfg_value,
    hf_prefix,
    layer_keys,
)
from mdsfair.importers.hf_export import SENTENCEPIECE_FILES, HFDirectory, export_hf_directory, run_export_cli
from mdsfair.importers.hf_hub import resolve_model_source
from mdsfair.importers.hf_t5 import (
    SENTENCEPIECE_FILE,
    check_against_model,
    run_sentencepiece_import_cli,
    write_sentencepiece_import,
)

#: PegasusTokenizer's ``offset``: ids 2-104 are its mask and pre-training ``<unk_N>`` tokens.
OFFSET = 103
#: The tokens before the SentencePiece pieces, by Hugging Face id.
SPECIAL_TOKENS = ("<pad>", "</s>", "<mask_1>", "<mask_2>") + tuple(f"<unk_{i}>" for i in range(2, OFFSET))
#: Hugging Face ids of PEGASUS's ``<unk>`` (SentencePiece piece 2) and of ``<mask_1>``, whose fairseq
#: indices are exchanged: fairseq's ``<unk>`` is index 3, where the shift would put ``<mask_1>``.
HF_UNK, HF_MASK_1 = 2 + OFFSET, 2
#: fairseq's ``<unk>``.
FAIRSEQ_UNK = 3
#: Hugging Face's ids that PEGASUS's configuration must state (the dictionary's order depends on them).
TOKEN_IDS = {"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}
#: PegasusConfig's dropouts where a configuration states none.
DROPOUT_DEFAULTS = {"dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0}
#: The position table of both stacks.
POSITION_KEYS = {"encoder": "max_position_embeddings", "decoder": "max_position_embeddings"}
#: PEGASUS's components (what Hugging Face's model computes).
PEGASUS_COMPONENTS = {
    "encoder_self_attention": "full",
    "encoder_positions": "pegasus-sinusoidal",
    "cross_attention": "full",
}


def fairseq_index(hf_id: int) -> int:
    """The fairseq dictionary index of Hugging Face id ``hf_id`` (module docstring)."""
    if hf_id == HF_UNK:
        return FAIRSEQ_UNK
    if hf_id == HF_MASK_1:
        return HF_UNK + 1
    return hf_id + 1


def hf_row_order(num_rows: int, path: str) -> List[int]:
    """For every fairseq row ``1 .. num_rows`` the Hugging Face id it holds
    (``path``: the weights, named when they have too few rows)."""
    if num_rows <= HF_UNK:
        raise ImportRefused(
            f"{path}: the embedding has {num_rows} rows; PEGASUS's vocabulary has {OFFSET} special ids and at least "
            "<pad>, </s> and <unk> after them"
        )
    order = [0] * num_rows
    for hf_id in range(num_rows):
        order[fairseq_index(hf_id) - 1] = hf_id
    return order


# -------------------------------------------------------------- configuration


def pegasus_configuration(config: Dict, path: str) -> Dict:
    """The sizes and settings of ``config.json``, checked."""
    if config.get("model_type") != "pegasus":
        raise ImportRefused(f"{path}: model_type is {config.get('model_type')!r}, not 'pegasus'")
    for name, value in TOKEN_IDS.items():
        if config.get(name, value) != value:
            raise ImportRefused(
                f"{path}: {name}={config[name]}, but PEGASUS's vocabulary has <pad> 0 and </s> 1 and its decoder "
                "starts from <pad> (0)"
            )
    if config.get("tie_word_embeddings", True) is False:
        raise ImportRefused(f"{path}: tie_word_embeddings is false; PEGASUS's output layer is its shared embedding")
    activation = config.get("activation_function", "gelu")  # (PegasusConfig's defaults where a file says nothing)
    if activation not in ACTIVATIONS:
        raise ImportRefused(
            f"{path}: activation_function {activation!r} has no fairseq equivalent (supported: {', '.join(ACTIVATIONS)})"
        )
    sizes = read_encoder_decoder_sizes(config, path, POSITION_KEYS, position_offset=0)
    try:
        dropouts = {name: float(config.get(name, default)) for name, default in DROPOUT_DEFAULTS.items()}
    except (TypeError, ValueError) as error:
        raise ImportRefused(f"{path}: a dropout is not a number ({error})") from None
    return {
        "sizes": sizes,
        "activation_fn": ACTIVATIONS[activation],
        "scale_embedding": bool(config.get("scale_embedding", False)),
        **dropouts,
    }


def architecture_flags(config: Dict) -> Tuple[str, List[str]]:
    """``pegasus_large`` and every size and setting of ``config`` as a flag."""
    sizes = config["sizes"]
    positions = str(sizes.value("encoder_positions"))
    flags = [
        "--encoder-embed-dim", str(sizes.value("width")),
        "--decoder-embed-dim", str(sizes.value("width")),
        "--encoder-ffn-embed-dim", str(sizes.value("encoder_ffn")),
        "--decoder-ffn-embed-dim", str(sizes.value("decoder_ffn")),
        "--encoder-layers", str(sizes.value("encoder_layers")),
        "--decoder-layers", str(sizes.value("decoder_layers")),
        "--encoder-attention-heads", str(sizes.value("encoder_heads")),
        "--decoder-attention-heads", str(sizes.value("decoder_heads")),
        "--activation-fn", config["activation_fn"],
        "--dropout", repr(config["dropout"]),
        "--attention-dropout", repr(config["attention_dropout"]),
        "--activation-dropout", repr(config["activation_dropout"]),
        "--max-source-positions", positions,
        "--max-target-positions", positions,
        "--max-encoder-positions", positions,
    ]  # fmt: skip
    if not config["scale_embedding"]:
        flags.append("--no-scale-embedding")
    return "pegasus_large", flags


# ----------------------------------------------------------------- vocabulary


def pegasus_pieces(spm_path: str) -> List[str]:
    """The pieces of PEGASUS's SentencePiece model, whose ``<pad>``,
    ``</s>``, ``<unk>`` must be ids 0, 1, 2."""
    import sentencepiece

    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    except (OSError, RuntimeError) as error:
        raise ImportRefused(f"{spm_path}: not a SentencePiece model ({error})") from None
    if (processor.pad_id(), processor.eos_id(), processor.unk_id()) != (0, 1, 2):
        raise ImportRefused(
            f"{spm_path}: PEGASUS's SentencePiece model has <pad> 0, </s> 1, <unk> 2; this one has pad "
            f"{processor.pad_id()}, eos {processor.eos_id()}, unk {processor.unk_id()}"
        )
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def pegasus_symbols(spm_path: str, num_rows: int) -> List[str]:
    """The dictionary entries after fairseq's four specials (``<s> <pad>
    </s> <unk>``): the Hugging Face vocabulary in :func:`fairseq_index`
    order, then one made-up word per unnamed embedding row."""
    pieces = pegasus_pieces(spm_path)
    named = list(SPECIAL_TOKENS) + pieces[2:]  # Hugging Face's order: piece i at id i + OFFSET
    if len(named) > num_rows:
        raise ImportRefused(
            f"{spm_path}: {len(named)} tokens ({len(pieces)} pieces after {OFFSET} special ids) but the embedding "
            f"has {num_rows} rows"
        )
    taken = set(SPECIAL_TOKENS) | {"<s>"}
    clashes = [piece for piece in pieces[3:] if piece in taken or re.fullmatch(r"madeupword\d{4}", piece)]
    if clashes or len(set(pieces)) != len(pieces):
        raise ImportRefused(f"{spm_path}: pieces that fairseq's dictionary cannot hold twice: {clashes[:5]}")
    named += [f"madeupword{index:04d}" for index in range(num_rows - len(named))]
    by_index = {fairseq_index(hf_id): token for hf_id, token in enumerate(named)}
    return [by_index[index] for index in range(FAIRSEQ_UNK + 1, num_rows + 1)]


# -------------------------------------------------------------------- weights


def fairseq_state_from_hf(state: Dict, config: Dict, weights_path: str) -> Dict:
    """The ``pegasus`` state dict of Hugging Face's tensors (module docstring)."""
    import torch

    from mdsfair.modules.sinusoidal import halves_sinusoidal_table

    prefix = hf_prefix(state)
    state = dict(state)

    def take(name: str):
        if name not in state:
            raise ImportRefused(f"{weights_path}: no tensor {name!r}")
        return state.pop(name)

    embedding_names = [prefix + "shared.weight", prefix + "encoder.embed_tokens.weight"]
    present = [name for name in embedding_names if name in state]
    if not present:
        raise ImportRefused(f"{weights_path}: no token embedding ({', '.join(embedding_names)})")
    shared = state[present[0]]
    for name in present + [prefix + "decoder.embed_tokens.weight", "lm_head.weight"]:
        if name in state and not torch.equal(state.pop(name), shared):
            raise ImportRefused(f"{weights_path}: {name} differs from {present[0]}; PEGASUS ties them")
    bias = state.pop("final_logits_bias", None)
    if bias is not None and bias.abs().max().item() != 0:
        raise ImportRefused(
            f"{weights_path}: final_logits_bias is nonzero (max |b| = {bias.abs().max().item():.3g}); PEGASUS's is "
            "zero and mdsfair's output layer has no bias"
        )
    order = torch.tensor(hf_row_order(len(shared), weights_path))
    embedding = torch.cat([shared.new_zeros(1, shared.size(1)), shared[order]])
    out = {
        "encoder.version": torch.Tensor([3]),
        "decoder.version": torch.Tensor([3]),
        "encoder.embed_tokens.weight": embedding,
        "decoder.embed_tokens.weight": embedding,
        "decoder.output_projection.weight": embedding,
    }
    sizes = config["sizes"]
    for part, modules in (("encoder", ENCODER_LAYER_MODULES), ("decoder", DECODER_LAYER_MODULES)):
        positions = state.pop(f"{prefix}{part}.embed_positions.weight", None)
        if positions is not None:
            expected = halves_sinusoidal_table(positions.size(0), positions.size(1)).to(positions)
            if not torch.allclose(positions, expected, atol=1e-6, rtol=0):
                raise ImportRefused(
                    f"{weights_path}: {prefix}{part}.embed_positions.weight is not PEGASUS's sinusoidal table "
                    "(sines in the first half, cosines in the second, from position 0)"
                )
        for key in layer_keys(f"{part}.layer_norm"):
            out[key] = take(prefix + key)
        for layer in range(sizes.value(f"{part}_layers")):
            for module in modules:
                for key in layer_keys(f"{part}.layers.{layer}.{module}"):
                    out[key] = take(prefix + key)
    if state:
        raise ImportRefused(f"{weights_path}: tensors a PEGASUS model does not have: {', '.join(sorted(state)[:8])}")
    return out


# --------------------------------------------------------------------- import


def import_hf_pegasus(hf_dir: str, out_dir: str, overwrite: bool = False) -> Dict:
    """Convert a Hugging Face PEGASUS folder (or Hub model id); returns a summary."""

    from mdsfair.importers.fairseq_bart import training_namespace

    model = resolve_model_source(hf_dir)
    config_path = os.path.join(model.path, "config.json")
    config = pegasus_configuration(read_json(config_path, "the model configuration", dict), config_path)
    spm_path = os.path.join(model.path, SENTENCEPIECE_FILE)
    if not os.path.isfile(spm_path):
        raise ImportRefused(f"{model.path}: no {SENTENCEPIECE_FILE} (PEGASUS's SentencePiece model)")
    state, weights_path = load_hf_weights(model.path)
    check_encoder_decoder_weights(config["sizes"], state, weights_path)  # every size of config.json
    fairseq_state = fairseq_state_from_hf(state, config, weights_path)
    num_rows = fairseq_state["encoder.embed_tokens.weight"].size(0) - 1
    symbols = pegasus_symbols(spm_path, num_rows)
    arch, flags = architecture_flags(config)
    args = training_namespace(arch, flags)
    check_against_model(args, symbols, fairseq_state, weights_path)
    generate, generation_notes = generation_flags(model.path)  # checked before anything is written
    summary = write_sentencepiece_import(
        out_dir, overwrite, "hf-pegasus", model, weights_path, symbols, spm_path, args, fairseq_state, flags
    )
    return {**summary, "generate_flags": generate, "notes": generation_notes}


def cli_main(argv: Optional[List[str]] = None) -> int:
    return run_sentencepiece_import_cli(
        "hf-pegasus",
        "Convert a Hugging Face PEGASUS model (config.json, model.safetensors or pytorch_model.bin, spiece.model) "
        "to a pegasus fairseq checkpoint with its dictionary (fairseq index = Hugging Face id + 1, <unk> and "
        "<mask_1> exchanged).",
        "google/pegasus-multi_news",
        import_hf_pegasus,
        argv,
    )


# --------------------------------------------------------------------- export


def pegasus_flags(model_cfg, checkpoint: str):
    """The checkpoint's flags with its architecture's defaults filled, after
    checking that it is a ``pegasus`` checkpoint with PEGASUS's components."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    arch = cfg_value(model_cfg, "_name") or cfg_value(model_cfg, "arch")
    if ARCH_MODEL_NAME_REGISTRY.get(arch) != "pegasus":
        raise ImportRefused(f"{checkpoint}: arch {arch!r} is not a pegasus architecture; mdsfair-export hf-pegasus "
                            "writes PEGASUS")  # fmt: skip
    values = vars(model_cfg) if isinstance(model_cfg, argparse.Namespace) else dict(model_cfg)
    flags = argparse.Namespace(**{name: value for name, value in values.items() if value is not None})
    ARCH_CONFIG_REGISTRY[arch](flags)
    others = [f"--{role.replace('_', '-')} {getattr(flags, role)}" for role, name in PEGASUS_COMPONENTS.items()
              if getattr(flags, role) != name]  # fmt: skip
    if others:
        raise ImportRefused(
            f"{checkpoint}: {', '.join(others)}: Hugging Face's PEGASUS computes full attention with PEGASUS's "
            "sinusoidal positions only"
        )
    return flags


def check_pegasus_dictionary(dict_path: str, spm_path: str, num_rows: int) -> None:
    """``dict.txt`` is ``spm_path``'s vocabulary in the import's order
    (:func:`pegasus_symbols`), one entry per embedding row."""
    from fairseq.data import Dictionary

    symbols = Dictionary.load(dict_path).symbols
    if len(symbols) != num_rows + 1:
        raise ImportRefused(
            f"{dict_path}: {len(symbols)} entries, but the checkpoint's embedding has {num_rows + 1} rows"
        )
    expected = ["<s>", "<pad>", "</s>", "<unk>"] + pegasus_symbols(spm_path, num_rows)
    for index, (found, wanted) in enumerate(zip(symbols, expected)):
        if found != wanted:
            raise ImportRefused(
                f"{dict_path}: entry {index} is {found!r} where {spm_path}'s PEGASUS vocabulary has {wanted!r} "
                "(as mdsfair-import hf-pegasus writes dict.txt); export with the dictionary of the import"
            )


def hf_state_from_fairseq(state: Dict, flags, checkpoint: str) -> Dict:
    """Hugging Face's tensors of a ``pegasus`` state dict (the inverse of
    :func:`fairseq_state_from_hf`, the position tables and the zero
    ``final_logits_bias`` added)."""
    import torch

    from mdsfair.modules.sinusoidal import halves_sinusoidal_table

    state = dict(state)

    def take(name: str):
        if name not in state:
            raise ImportRefused(f"{checkpoint}: no tensor {name!r}")
        return state.pop(name)

    embedding = take("encoder.embed_tokens.weight")
    for name in ("decoder.embed_tokens.weight", "decoder.output_projection.weight"):
        if name in state and not torch.equal(state.pop(name), embedding):
            raise ImportRefused(f"{checkpoint}: {name} differs from the encoder's embedding; PEGASUS ties them")
    num_rows = embedding.size(0) - 1
    rows = torch.tensor([fairseq_index(hf_id) for hf_id in range(num_rows)])
    shared = embedding[rows]
    positions = halves_sinusoidal_table(position_rows(flags), embedding.size(1)).to(embedding)
    out = {
        "model.shared.weight": shared,
        "model.encoder.embed_tokens.weight": shared,
        "model.decoder.embed_tokens.weight": shared,
        "lm_head.weight": shared,
        "model.encoder.embed_positions.weight": positions,
        "model.decoder.embed_positions.weight": positions,
        "final_logits_bias": embedding.new_zeros(1, num_rows),
    }
    for part, modules in (("encoder", ENCODER_LAYER_MODULES), ("decoder", DECODER_LAYER_MODULES)):
        state.pop(f"{part}.version", None)
        keys = list(layer_keys(f"{part}.layer_norm"))
        for layer in range(getattr(flags, f"{part}_layers")):
            for module in modules:
                keys += layer_keys(f"{part}.layers.{layer}.{module}")
        for key in keys:
            out["model." + key] = take(key)
    if state:
        raise ImportRefused(f"{checkpoint}: tensors Hugging Face's PEGASUS has no place for: "
                            f"{', '.join(sorted(state)[:8])}")  # fmt: skip
    return out


def position_rows(flags) -> int:
    """``max_position_embeddings``: the rows of both stacks' tables (the larger of the two)."""
    return max(flags.max_encoder_positions, flags.max_target_positions)


def hf_pegasus_config(flags, num_rows: int) -> Dict:
    """``config.json`` of ``PegasusForConditionalGeneration``."""
    return {
        "model_type": "pegasus",
        "architectures": ["PegasusForConditionalGeneration"],
        "vocab_size": num_rows,
        "d_model": flags.encoder_embed_dim,
        "encoder_layers": flags.encoder_layers,
        "decoder_layers": flags.decoder_layers,
        "encoder_attention_heads": flags.encoder_attention_heads,
        "decoder_attention_heads": flags.decoder_attention_heads,
        "encoder_ffn_dim": flags.encoder_ffn_embed_dim,
        "decoder_ffn_dim": flags.decoder_ffn_embed_dim,
        "max_position_embeddings": position_rows(flags),
        "activation_function": HF_ACTIVATIONS[flags.activation_fn],
        "dropout": flags.dropout,
        "attention_dropout": flags.attention_dropout,
        "activation_dropout": flags.activation_dropout,
        "scale_embedding": not flags.no_scale_embedding,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "forced_eos_token_id": 1,
        "decoder_start_token_id": 0,
    }


def hf_pegasus_directory(checkpoint: str, state: Dict, model_cfg, dict_path: str, spm_path: str) -> HFDirectory:
    """The Hugging Face PEGASUS folder of a ``pegasus`` checkpoint."""
    flags = pegasus_flags(model_cfg, checkpoint)
    num_rows = state["model"]["encoder.embed_tokens.weight"].size(0) - 1
    check_pegasus_dictionary(dict_path, spm_path, num_rows)
    tokenizer = {
        "tokenizer_class": "PegasusTokenizer",
        "model_max_length": flags.max_source_positions,
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "mask_token": "<mask_2>",
        "mask_token_sent": "<mask_1>",
        "offset": OFFSET,
    }
    weights = hf_state_from_fairseq(state["model"], flags, checkpoint)
    return HFDirectory(
        hf_pegasus_config(flags, num_rows), None, None, tokenizer, weights, copied={SENTENCEPIECE_FILE: spm_path}
    )


def export_hf_pegasus(checkpoint: str, dict_path: str, out_dir: str, **options) -> Dict:
    """Write a Hugging Face PEGASUS folder for a ``pegasus`` checkpoint
    (``options``: those of :func:`~mdsfair.importers.hf_export.export_hf_directory`,
    and ``sentencepiece_model``)."""
    return export_hf_directory(
        "hf-pegasus", hf_pegasus_directory, checkpoint, dict_path, out_dir, tokenizer_files=SENTENCEPIECE_FILES,
        **options,
    )  # fmt: skip


def export_cli_main(argv: Optional[List[str]] = None) -> int:
    return run_export_cli(
        "hf-pegasus",
        "Write a Hugging Face PEGASUS model directory (config.json, weights, spiece.model, tokenizer_config.json) "
        "for a pegasus checkpoint and the dict.txt of its import.",
        "fairseq checkpoint of a pegasus architecture (an import's model.pt, checkpoints/checkpoint_best.pt)",
        export_hf_pegasus,
        argv,
        tokenizer_files=SENTENCEPIECE_FILES,
    )
