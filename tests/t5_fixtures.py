"""Tiny Hugging Face T5 v1.1 and LongT5 folders as the Hub stores them, for
the T5 export and flag tests, from :mod:`tests.hf_t5_family`'s tokenizer
files, configuration and perturbed save. T5's ``lm_head`` is either a matrix
of its own (the Hub's v1.1 folders) or the embedding (a model transformers 5
saved tied: the file has no ``lm_head``); LongT5's is the embedding, its
encoder attention local or transient-global (radius 3, global blocks of 4)."""

import os
from typing import Optional

import torch

from tests.hf_t5_family import TINY_CONFIG, save_perturbed, save_t5_tokenizer, transformers


def tiny_hf_t5(folder: str, own_lm_head: bool = True, longt5_attention: Optional[str] = None, **config) -> str:
    """Write the tiny T5 v1.1 folder, or with ``longt5_attention`` (``local``,
    ``transient-global``) the tiny LongT5 folder (module docstring), into
    ``folder``; ``config``: fields of the configuration other than
    :data:`~tests.hf_t5_family.TINY_CONFIG`'s. Returns ``folder``."""
    os.makedirs(folder, exist_ok=True)
    save_t5_tokenizer(folder)
    torch.manual_seed(0)
    if longt5_attention is not None:
        longt5_config = transformers.LongT5Config(
            **{**TINY_CONFIG, **config}, encoder_attention_type=longt5_attention, local_radius=3, global_block_size=4
        )
        return save_perturbed(transformers.LongT5ForConditionalGeneration(longt5_config), folder)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**{**TINY_CONFIG, **config}))
    if own_lm_head:  # transformers 5 ties lm_head to shared when it builds the model
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight) * model.config.d_model**-0.5)
    return save_perturbed(model, folder)
