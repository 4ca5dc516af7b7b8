"""mdsfair's ``t5_v1_1`` (the component model on T5's backbone) -> a Hugging Face T5 v1.1 folder.

``mdsfair-export hf-t5 CHECKPOINT DICT OUT_DIR`` writes, for a ``t5_v1_1``
checkpoint (imported with ``mdsfair-import hf-t5`` or trained here) and the
``dict.txt`` it was trained with, the folder that
``T5ForConditionalGeneration.from_pretrained`` and ``T5Tokenizer`` load:

* ``config.json``: ``model_type: t5`` with the checkpoint's sizes, its
  feed-forward (``feed_forward_proj``: ``gated-gelu`` for v1.1), T5's
  special ids (``pad`` 0, ``eos`` 1, the decoder starting from ``pad``) and
  an output layer of its own that scales nothing: ``tie_word_embeddings:
  false`` as the Hub's v1.1 folders say, and ``scale_decoder_outputs:
  false``, the field transformers 5 reads (its ``T5Config`` sets
  ``tie_word_embeddings`` true whatever the file says and derives the
  output scaling from the file's value unless ``scale_decoder_outputs`` is
  given; with both fields, transformers 4 and 5 read the same model);
* the weights (``model.safetensors`` or ``pytorch_model.bin``):
  :mod:`mdsfair.importers.hf_t5`'s map read the other way
  (:func:`~mdsfair.importers.hf_t5.t5_parameter_names`); the embedding
  (``shared``) and the output layer (``lm_head``) lose the row of fairseq's
  ``<s>``, since fairseq index ``i + 1`` is Hugging Face id ``i``;
* ``spiece.model`` (a copy of the dictionary's SentencePiece model:
  ``spm.model`` next to ``DICT``, as an import's folder and a SentencePiece
  data-bin hold it, or ``--sentencepiece-model``) and
  ``tokenizer_config.json`` (``T5Tokenizer``, the dictionary's sentinels as
  ``extra_ids``).

``dict.txt`` must be the vocabulary of that SentencePiece model in T5's
order, as ``mdsfair-import hf-t5`` writes it
(:func:`~mdsfair.importers.hf_t5.t5_symbols`): otherwise the exported
tokenizer's ids would not be the model's, and the export is refused, naming
the file and the first entry that differs.
"""

import argparse
import functools
import re
from typing import Callable, Dict, List, NamedTuple, Optional

from mdsfair.importers import ImportRefused
from mdsfair.importers.hf_bart_weights import cfg_value
from mdsfair.importers.hf_export import (
    SENTENCEPIECE_FILES,
    HFDirectory,
    export_hf_directory,
    run_export_cli,
)
from mdsfair.importers.hf_t5 import SENTENCEPIECE_FILE, pop_tensor, t5_parameter_names, t5_symbols

#: The fields of ``config.json`` that come from the checkpoint's flags.
CONFIG_FLAGS = {
    "d_model": "encoder_embed_dim",
    "d_kv": "attention_head_dim",
    "d_ff": "encoder_ffn_embed_dim",
    "num_layers": "encoder_layers",
    "num_decoder_layers": "decoder_layers",
    "num_heads": "encoder_attention_heads",
    "relative_attention_num_buckets": "relative_attention_num_buckets",
    "relative_attention_max_distance": "relative_attention_max_distance",
    "layer_norm_epsilon": "rms_norm_eps",
    "dropout_rate": "dropout",
}

#: What Hugging Face's T5 computes, as the component model's choices: a checkpoint with others is refused.
T5_CHOICES = {"encoder_positions": "t5-relative-bias", "cross_attention": "full", "normalization": "rmsnorm",
              "linear_biases": "off", "attention_scaling": "none"}  # fmt: skip


class T5Export(NamedTuple):
    """What one member of the T5 family exports differently: its kind
    (``hf-t5``), its name, its fairseq model (registered name), the fields
    of its ``config.json`` beyond T5's (``fields(flags, checkpoint)``, which
    refuses flags the Hugging Face model cannot compute) and its weights
    (``weights(state, config, checkpoint)``: Hugging Face's tensors of the
    fairseq state dict)."""

    kind: str
    name: str
    model: str
    fields: Callable[[argparse.Namespace, str], Dict]
    weights: Callable[[Dict, Dict, str], Dict]


def model_flags(model_cfg, checkpoint: str, family: T5Export) -> argparse.Namespace:
    """The checkpoint's flags with its architecture's defaults filled, after
    checking that its architecture is one of the family's model."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    arch = cfg_value(model_cfg, "_name") or cfg_value(model_cfg, "arch")
    if ARCH_MODEL_REGISTRY.get(arch) is not MODEL_REGISTRY[family.model]:
        raise ImportRefused(
            f"{checkpoint}: arch {arch!r} is not a {family.model} architecture; mdsfair-export {family.kind} "
            f"writes {family.name}"
        )
    values = vars(model_cfg) if isinstance(model_cfg, argparse.Namespace) else dict(model_cfg)
    flags = argparse.Namespace(**{name: value for name, value in values.items() if value is not None})
    ARCH_CONFIG_REGISTRY[arch](flags)
    return flags


def feed_forward_proj(flags: argparse.Namespace, checkpoint: str) -> str:
    """Hugging Face's ``feed_forward_proj`` of the checkpoint's feed-forward
    (``--feed-forward gated-gelu``, or fairseq's with ``--activation-fn relu``)."""
    if flags.feed_forward == "gated-gelu":
        return "gated-gelu"
    if flags.activation_fn == "relu":
        return "relu"
    raise ImportRefused(
        f"{checkpoint}: --feed-forward {flags.feed_forward} --activation-fn {flags.activation_fn}: Hugging Face's T5 "
        "has the gated GELU (gated-gelu) and ReLU (fairseq with --activation-fn relu)"
    )


def hf_t5_config(flags: argparse.Namespace, num_rows: int, checkpoint: str) -> Dict:
    """``config.json`` of ``T5ForConditionalGeneration`` (module docstring);
    a checkpoint whose choices Hugging Face's T5 does not compute
    (:data:`T5_CHOICES`) is refused."""
    from mdsfair.modules.components import flag_of

    others = [f"{flag_of(name)} {getattr(flags, name)}" for name, value in T5_CHOICES.items()
              if getattr(flags, name) != value]  # fmt: skip
    if others:
        computed = ", ".join(f"{flag_of(name)} {value}" for name, value in T5_CHOICES.items())
        raise ImportRefused(f"{checkpoint}: {', '.join(others)}: Hugging Face's T5 computes {computed}")
    return {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": num_rows,
        **{field: getattr(flags, flag) for field, flag in CONFIG_FLAGS.items()},
        "feed_forward_proj": feed_forward_proj(flags, checkpoint),
        "initializer_factor": 1.0,
        "tie_word_embeddings": False,
        "scale_decoder_outputs": False,
        "is_encoder_decoder": True,
        "use_cache": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }


def t5_v1_1_fields(flags: argparse.Namespace, checkpoint: str) -> Dict:
    """T5 v1.1 has T5's fields only; its encoder attends to the whole source."""
    if getattr(flags, "encoder_self_attention", "full") != "full":
        raise ImportRefused(
            f"{checkpoint}: --encoder-self-attention {flags.encoder_self_attention}: Hugging Face's T5 attends to "
            "the whole source (mdsfair-export hf-longt5 writes LongT5's local and transient-global attention)"
        )
    return {}


def hf_t5_state_from_fairseq(state: Dict, config: Dict, checkpoint: str) -> Dict:
    """Hugging Face's ``shared``, ``lm_head`` and block tensors of a
    ``t5_v1_1`` state dict (the inverse of
    :func:`mdsfair.importers.hf_t5.fairseq_state_from_hf`)."""
    import torch

    state = dict(state)

    def take(name: str):
        return pop_tensor(state, name, checkpoint)

    for stack in ("encoder", "decoder"):
        state.pop(f"{stack}.version", None)  # fairseq's stack version, no weight
    embedding = take("encoder.embed_tokens.weight")
    if not torch.equal(take("decoder.embed_tokens.weight"), embedding):
        raise ImportRefused(f"{checkpoint}: the encoder and decoder embeddings differ; T5 shares one (shared.weight)")
    out = {"shared.weight": embedding[1:], "lm_head.weight": take("decoder.output_projection.weight")[1:]}
    for hf_name, fairseq_name in t5_parameter_names(config):
        out[hf_name] = take(fairseq_name)
    if state:
        raise ImportRefused(f"{checkpoint}: tensors T5 v1.1 does not have: {', '.join(sorted(state)[:8])}")
    return out


#: T5 v1.1: ``mdsfair-export hf-t5``
T5_V1_1 = T5Export("hf-t5", "T5 v1.1", "t5_v1_1", t5_v1_1_fields, hf_t5_state_from_fairseq)


def sentinel_count(dict_path: str, spm_path: str, num_rows: int) -> int:
    """The sentinels of ``dict.txt``, after checking that it is the
    SentencePiece model's vocabulary in T5's order, one place after
    fairseq's ``<s>``, with one entry per embedding row."""
    from fairseq.data import Dictionary

    symbols = Dictionary.load(dict_path).symbols
    if len(symbols) != num_rows + 1:
        raise ImportRefused(
            f"{dict_path}: {len(symbols)} entries, but the checkpoint's embedding has {num_rows + 1} rows"
        )
    extra_ids = sum(1 for symbol in symbols if re.fullmatch(r"<extra_id_\d+>", symbol))
    expected = ["<s>", "<pad>", "</s>", "<unk>"] + t5_symbols(spm_path, extra_ids, num_rows)
    for index, (found, wanted) in enumerate(zip(symbols, expected)):
        if found != wanted:
            raise ImportRefused(
                f"{dict_path}: entry {index} is {found!r} where {spm_path}'s T5 vocabulary has {wanted!r} (fairseq "
                "index = T5 id + 1, as mdsfair-import hf-t5 writes dict.txt); export with the dictionary of the import"
            )
    return extra_ids


def t5_family_directory(
    family: T5Export, checkpoint: str, state: Dict, model_cfg, dict_path: str, spm_path: str
) -> HFDirectory:
    """The Hugging Face folder of a checkpoint of the ``family``'s model:
    its ``state`` and model configuration (module docstring)."""
    flags = model_flags(model_cfg, checkpoint, family)
    num_rows = state["model"]["encoder.embed_tokens.weight"].size(0) - 1
    config = {**hf_t5_config(flags, num_rows, checkpoint), **family.fields(flags, checkpoint)}
    weights = family.weights(state["model"], config, checkpoint)
    tokenizer = {
        "tokenizer_class": "T5Tokenizer",
        "model_max_length": flags.max_source_positions,
        "extra_ids": sentinel_count(dict_path, spm_path, num_rows),
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
    }
    return HFDirectory(config, None, None, tokenizer, weights, copied={SENTENCEPIECE_FILE: spm_path})


def export_t5_family(family: T5Export, checkpoint: str, dict_path: str, out_dir: str, **options) -> Dict:
    """Write the Hugging Face folder of a checkpoint of the ``family``'s
    model (``options``: those of
    :func:`~mdsfair.importers.hf_export.export_hf_directory`, and
    ``sentencepiece_model``)."""
    build = functools.partial(t5_family_directory, family)
    return export_hf_directory(
        family.kind, build, checkpoint, dict_path, out_dir, tokenizer_files=SENTENCEPIECE_FILES, **options
    )


def export_hf_t5(checkpoint: str, dict_path: str, out_dir: str, **options) -> Dict:
    """Write a Hugging Face T5 v1.1 folder for a ``t5_v1_1`` checkpoint (:func:`export_t5_family`)."""
    return export_t5_family(T5_V1_1, checkpoint, dict_path, out_dir, **options)


def run_t5_family_export_cli(family: T5Export, export: Callable[..., Dict], argv: Optional[List[str]]) -> int:
    """``mdsfair-export KIND CHECKPOINT DICT OUT_DIR`` of a T5 family member."""
    return run_export_cli(
        family.kind,
        f"Write a Hugging Face {family.name} model directory (config.json, weights, spiece.model, "
        f"tokenizer_config.json) for a {family.model} checkpoint and the dict.txt of its import (Hugging Face id "
        "= fairseq index - 1).",
        f"fairseq checkpoint of a {family.model} architecture (an import's model.pt, checkpoints/checkpoint_best.pt)",
        export,
        argv,
        tokenizer_files=SENTENCEPIECE_FILES,
    )


def export_cli_main(argv: Optional[List[str]] = None) -> int:
    return run_t5_family_export_cli(T5_V1_1, export_hf_t5, argv)
