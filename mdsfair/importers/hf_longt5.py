"""Hugging Face LongT5 -> mdsfair's ``longt5`` model (the component model on T5's backbone).

``mdsfair-import hf-longt5 HF_DIR OUT_DIR`` reads a Hugging Face
``LongT5ForConditionalGeneration`` folder in the layout of
``google/long-t5-{local,tglobal}-{base,large}`` (``config.json`` with
``model_type: longt5``, the weights and ``spiece.model``), or a model id on
the Hub, and writes what ``mdsfair-import hf-t5`` writes
(:mod:`mdsfair.importers.hf_t5`: the same reading of the files, dictionary,
``spm.model`` and manifest) with a ``longt5`` checkpoint:

* the encoder's attention is ``encoder_attention_type`` (``local`` or
  ``transient-global``) with ``local_radius`` and ``global_block_size``:
  ``--encoder-self-attention``, ``--local-radius``, ``--global-block-size``;
* the weights map as T5 v1.1's, the encoder's ``LocalSelfAttention`` or
  ``TransientGlobalSelfAttention`` in place of ``SelfAttention``; block 0's
  ``global_relative_attention_bias`` becomes
  ``encoder.global_relative_position_bias`` and layer ``i``'s
  ``global_input_layer_norm``
  ``encoder.layers.i.self_attn.global_input_layer_norm``;
* the output layer is ``shared`` (``--share-decoder-input-output-embed``, as
  LongT5 ties it): a file whose ``lm_head`` differs from ``shared`` is
  refused, and so is a configuration that scales the decoder output by
  ``d_model ** -0.5`` (transformers 5's ``scale_decoder_outputs``, or
  ``tie_word_embeddings`` not false in a configuration without it).
"""

import re
from typing import Dict, Iterator, List, Optional, Tuple

from mdsfair.importers import ImportRefused, hf_t5
from mdsfair.importers.config_checks import config_integer

#: Hugging Face's module of the encoder's self-attention, by ``encoder_attention_type``
ENCODER_ATTENTION_MODULES = {"local": "LocalSelfAttention", "transient-global": "TransientGlobalSelfAttention"}

#: ``--arch`` of each released size (d_model, d_ff, heads, encoder layers, decoder layers, attention)
RELEASED_SIZES = {
    (768, 2048, 12, 12, 12, "transient-global"): "longt5_tglobal_base",
    (768, 2048, 12, 12, 12, "local"): "longt5_local_base",
    (1024, 2816, 16, 24, 24, "transient-global"): "longt5_tglobal_large",
}


def longt5_configuration(config: Dict, path: str) -> Dict:
    """T5's sizes and settings (:func:`~mdsfair.importers.hf_t5.t5_configuration`)
    and LongT5's encoder attention, checked."""
    if config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True) is not False):
        raise ImportRefused(
            f"{path}: the decoder output is scaled by d_model ** -0.5 (scale_decoder_outputs, or tie_word_embeddings "
            "not false); the LongT5 releases, and mdsfair's longt5 model, do not scale it"
        )
    attention = config.get("encoder_attention_type", "local")
    if attention not in ENCODER_ATTENTION_MODULES:
        raise ImportRefused(
            f"{path}: encoder_attention_type {attention!r}: LongT5 has {', '.join(ENCODER_ATTENTION_MODULES)}"
        )
    return {
        **hf_t5.t5_configuration(config, path, model_type="longt5"),
        "encoder_attention_type": attention,
        "local_radius": config_integer(config, "local_radius", path, default=127),
        "global_block_size": config_integer(config, "global_block_size", path, default=16),
    }


def global_parameter_names(config: Dict) -> Iterator[Tuple[str, str]]:
    """``(fairseq name, Hugging Face name)`` of the transient-global
    attention's own tensors (none under local attention): block 0's global
    relative bias table and every layer's global input layer norm; the
    export (:mod:`mdsfair.importers.hf_longt5_export`) reads them the other way."""
    if config["encoder_attention_type"] != "transient-global":
        return
    attention = ENCODER_ATTENTION_MODULES["transient-global"]
    yield (
        "encoder.global_relative_position_bias.weight",
        f"encoder.block.0.layer.0.{attention}.global_relative_attention_bias.weight",
    )
    for index in range(config["num_layers"]):
        yield (
            f"encoder.layers.{index}.self_attn.global_input_layer_norm.weight",
            f"encoder.block.{index}.layer.0.{attention}.global_input_layer_norm.weight",
        )


def longt5_state_from_hf(state: Dict, config: Dict, weights_path: str) -> Dict:
    """The ``longt5`` state dict of Hugging Face's tensors (module docstring)."""
    import torch

    state = dict(state)
    attention = ENCODER_ATTENTION_MODULES[config["encoder_attention_type"]]
    out = {}
    for ours, theirs in global_parameter_names(config):
        out[ours] = hf_t5.pop_tensor(state, theirs, weights_path)
    lm_head = state.pop("lm_head.weight", None)
    if lm_head is not None and "shared.weight" in state and not torch.equal(lm_head, state["shared.weight"]):
        raise ImportRefused(
            f"{weights_path}: lm_head.weight differs from shared.weight; LongT5's output layer is the embedding"
        )
    # the encoder's attention under T5's name, for T5 v1.1's map (names in messages: Hugging Face's)
    ours_in_t5 = re.compile(rf"^(encoder\.block\.\d+\.layer\.0\.){attention}\.")
    in_t5 = {ours_in_t5.sub(r"\1SelfAttention.", name): value for name, value in state.items()}
    try:
        out.update(hf_t5.fairseq_state_from_hf(in_t5, config, weights_path))
    except ImportRefused as error:
        raise ImportRefused(
            re.sub(r"(encoder\.block\.\d+\.layer\.0\.)SelfAttention\.", rf"\1{attention}.", str(error))
        ) from None
    return out


def longt5_architecture_flags(config: Dict) -> Tuple[str, List[str]]:
    """The released architecture of these sizes and attention
    (``longt5_tglobal_base`` for others) and every size and setting as a flag."""
    _t5_arch, flags = hf_t5.architecture_flags(config)
    attention = config["encoder_attention_type"]
    key = (config["d_model"], config["d_ff"], config["num_heads"], config["num_layers"], config["num_decoder_layers"],
           attention)  # fmt: skip
    flags += [
        "--encoder-self-attention", attention,
        "--local-radius", str(config["local_radius"]),
        "--global-block-size", str(config["global_block_size"]),
        "--share-decoder-input-output-embed",
    ]  # fmt: skip
    return RELEASED_SIZES.get(key, "longt5_tglobal_base"), flags


#: LongT5: ``mdsfair-import hf-longt5``
LONGT5 = hf_t5.T5Family(
    "hf-longt5",
    "LongT5",
    "longt5",
    "google/long-t5-tglobal-base",
    longt5_configuration,
    longt5_state_from_hf,
    longt5_architecture_flags,
)


def import_hf_longt5(hf_dir: str, out_dir: str, overwrite: bool = False) -> Dict:
    """Convert a Hugging Face LongT5 folder (or Hub model id); returns a summary."""
    return hf_t5.import_hf_t5(hf_dir, out_dir, overwrite=overwrite, family=LONGT5)


def cli_main(argv: Optional[List[str]] = None) -> int:
    return hf_t5.cli_main(argv, family=LONGT5)
