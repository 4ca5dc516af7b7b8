"""mdsfair's ``longt5`` -> a Hugging Face LongT5 folder.

``mdsfair-export hf-longt5 CHECKPOINT DICT OUT_DIR`` writes what
``mdsfair-export hf-t5`` writes (:mod:`mdsfair.importers.hf_t5_export`:
``config.json``, the weights, ``spiece.model``, ``tokenizer_config.json``)
for a ``longt5`` checkpoint, the inverse of ``mdsfair-import hf-longt5``
(:mod:`mdsfair.importers.hf_longt5`), so that
``LongT5ForConditionalGeneration.from_pretrained`` loads it:

* ``config.json`` is ``model_type: longt5`` with the encoder's attention
  (``encoder_attention_type``: ``--encoder-self-attention`` local or
  transient-global), ``local_radius`` and ``global_block_size``;
* the encoder's self-attention is ``LocalSelfAttention`` or
  ``TransientGlobalSelfAttention`` where T5 has ``SelfAttention``, with
  block 0's ``global_relative_attention_bias`` and every layer's
  ``global_input_layer_norm`` under transient-global attention;
* there is no ``lm_head``: LongT5's output layer is ``shared``, unscaled, and
  its releases store only ``shared.weight`` (a checkpoint whose output layer
  is not its embedding is refused).
"""

import argparse
import re
from typing import Dict, List, Optional

from mdsfair.importers import ImportRefused
from mdsfair.importers.hf_longt5 import ENCODER_ATTENTION_MODULES, global_parameter_names
from mdsfair.importers.hf_t5 import pop_tensor
from mdsfair.importers.hf_t5_export import (
    T5Export,
    export_t5_family,
    hf_t5_state_from_fairseq,
    run_t5_family_export_cli,
)


def longt5_fields(flags: argparse.Namespace, checkpoint: str) -> Dict:
    """LongT5's fields of ``config.json`` beyond T5's."""
    if flags.encoder_self_attention not in ENCODER_ATTENTION_MODULES:
        raise ImportRefused(
            f"{checkpoint}: --encoder-self-attention {flags.encoder_self_attention}: LongT5's encoder attention is "
            f"{' or '.join(ENCODER_ATTENTION_MODULES)}"
        )
    return {
        "model_type": "longt5",
        "architectures": ["LongT5ForConditionalGeneration"],
        "encoder_attention_type": flags.encoder_self_attention,
        "local_radius": flags.local_radius,
        "global_block_size": flags.global_block_size,
    }


def hf_longt5_state_from_fairseq(state: Dict, config: Dict, checkpoint: str) -> Dict:
    """Hugging Face's LongT5 tensors of a ``longt5`` state dict (module docstring)."""
    import torch

    state = dict(state)
    attention = ENCODER_ATTENTION_MODULES[config["encoder_attention_type"]]
    out = {}
    for fairseq_name, hf_name in global_parameter_names(config):
        out[hf_name] = pop_tensor(state, fairseq_name, checkpoint)
    in_t5 = hf_t5_state_from_fairseq(state, config, checkpoint)
    if not torch.equal(in_t5.pop("lm_head.weight"), in_t5["shared.weight"]):
        raise ImportRefused(f"{checkpoint}: the output layer is not the embedding; LongT5's is (shared.weight)")
    encoder_attention = re.compile(r"^(encoder\.block\.\d+\.layer\.0\.)SelfAttention\.")
    out.update({encoder_attention.sub(rf"\1{attention}.", name): value for name, value in in_t5.items()})
    return out


#: LongT5: ``mdsfair-export hf-longt5``
LONGT5 = T5Export("hf-longt5", "LongT5", "longt5", longt5_fields, hf_longt5_state_from_fairseq)


def export_hf_longt5(checkpoint: str, dict_path: str, out_dir: str, **options) -> Dict:
    """Write a Hugging Face LongT5 folder for a ``longt5`` checkpoint
    (:func:`~mdsfair.importers.hf_t5_export.export_t5_family`)."""
    return export_t5_family(LONGT5, checkpoint, dict_path, out_dir, **options)


def export_cli_main(argv: Optional[List[str]] = None) -> int:
    return run_t5_family_export_cli(LONGT5, export_hf_longt5, argv)
