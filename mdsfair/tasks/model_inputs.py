"""What task ``multidoc_summarization`` hands a model: the base inputs of
every fairseq encoder-decoder and the side inputs the model declares
(:func:`net_input_for`), the model inside its distributed wrappers, and
whether its encoder reads length-sorted batches."""

from typing import Dict

import torch
from fairseq.models.lstm import LSTMEncoder


def unwrap_model(model):
    """The fairseq model inside DDP / legacy distributed wrappers."""
    while hasattr(model, "module"):
        model = model.module
    return model


#: The net-input entries of every fairseq encoder-decoder.
BASE_INPUTS = ("src_tokens", "src_lengths", "prev_output_tokens")


def declared_side_inputs(model) -> Dict[str, bool]:
    """The data-contract side inputs ``model`` reads, as it declares them
    (``side_inputs()``: name -> required; mdsfair's models, from their
    components); none for a stock fairseq model."""
    declare = getattr(unwrap_model(model), "side_inputs", None)
    return dict(declare()) if callable(declare) else {}


def reads_length_sorted_batches(model) -> bool:
    """Whether ``model``'s encoder packs its input with ``pack_padded_sequence``
    on sorted lengths (fairseq's ``LSTMEncoder``), so it needs the batch ordered
    by source length, longest first."""
    return isinstance(getattr(unwrap_model(model), "encoder", None), LSTMEncoder)


def net_input_for(model, net_input: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``net_input`` with exactly the base inputs and the side inputs
    ``model`` declares; the encoder then checks them, once
    (:func:`mdsfair.data.side_inputs.check_side_inputs`: a required one the
    batch lacks is refused there, by name)."""
    declared = declared_side_inputs(model)
    return {name: value for name, value in net_input.items() if name in BASE_INPUTS or name in declared}
