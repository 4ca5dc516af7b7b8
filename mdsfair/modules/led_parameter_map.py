"""LED's parameter names in fairseq (mdsfair's ``led`` model) and in Hugging
Face's ``LEDForConditionalGeneration``: the one table, read by the model
family (:mod:`mdsfair.models.led`) and by the importer and exporter
(:mod:`mdsfair.importers.hf_led`). See :mod:`mdsfair.models.led` for the
whole correspondence.
"""

from typing import Dict

import torch
from torch import Tensor

#: Hugging Face's encoder self-attention names -> fairseq's (encoder layers only).
HF_TO_FAIRSEQ_ENCODER_ATTENTION = {
    ".self_attn.longformer_self_attn.query.": ".self_attn.q_proj.",
    ".self_attn.longformer_self_attn.key.": ".self_attn.k_proj.",
    ".self_attn.longformer_self_attn.value.": ".self_attn.v_proj.",
    ".self_attn.longformer_self_attn.query_global.": ".self_attn.q_global_proj.",
    ".self_attn.longformer_self_attn.key_global.": ".self_attn.k_global_proj.",
    ".self_attn.longformer_self_attn.value_global.": ".self_attn.v_global_proj.",
    ".self_attn.output.": ".self_attn.out_proj.",
}
#: The inverse: fairseq's names -> Hugging Face's (the exporter).
FAIRSEQ_TO_HF_ENCODER_ATTENTION = {fairseq: hf for hf, fairseq in HF_TO_FAIRSEQ_ENCODER_ATTENTION.items()}


def rename_encoder_attention(name: str, table: Dict[str, str]) -> str:
    """``name`` with its first matching fragment of ``table`` replaced (encoder names only)."""
    if name.startswith("encoder."):
        for old, new in table.items():
            if old in name:
                return name.replace(old, new)
    return name


def led_state_dict_from_hf(hf_state: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """The state dict of :class:`LEDModel` from that of Hugging Face's
    ``LEDForConditionalGeneration`` (or ``LEDModel``, keys without ``led.``),
    by the table of the module docstring. Position tables gain fairseq's two
    unused leading rows (zeros). The output projection is ``lm_head`` (or the
    shared embedding when absent); a nonzero ``final_logits_bias`` is refused
    (fairseq's projection has no bias). Unknown keys are refused by name."""
    state = dict(hf_state)
    prefix = "led." if any(k.startswith("led.") for k in state) else ""
    out: Dict[str, Tensor] = {}
    bias = state.pop("final_logits_bias", None)
    if bias is not None and bias.abs().max().item() != 0:
        raise ValueError("final_logits_bias is nonzero; fairseq's output projection has no bias")
    shared = state.pop(f"{prefix}shared.weight")
    lm_head = state.pop("lm_head.weight", shared)
    out["encoder.embed_tokens.weight"] = state.pop(f"{prefix}encoder.embed_tokens.weight", shared)
    out["decoder.embed_tokens.weight"] = state.pop(f"{prefix}decoder.embed_tokens.weight", shared)
    out["decoder.output_projection.weight"] = lm_head
    for key, tensor in state.items():
        if not key.startswith(prefix + "encoder.") and not key.startswith(prefix + "decoder."):
            raise ValueError(f"unexpected Hugging Face LED weight {key!r}")
        name = key[len(prefix) :]
        if name.endswith("embed_positions.weight"):
            tensor = torch.cat([tensor.new_zeros(2, tensor.size(1)), tensor], dim=0)
        out[rename_encoder_attention(name, HF_TO_FAIRSEQ_ENCODER_ATTENTION)] = tensor
    return out
