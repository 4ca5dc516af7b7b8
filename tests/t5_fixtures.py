"""Tiny Hugging Face T5 v1.1 and LongT5 folders as the Hub stores them, for
the T5 export and flag tests: T5's tokenizer files
(:mod:`tests.hf_t5_family`) and random weights of a gated-GELU model with 4
unnamed embedding rows. T5's ``lm_head`` is either a matrix of its own (the
Hub's v1.1 folders) or the embedding (a model transformers 5 saved tied: the
file has no ``lm_head``); LongT5's is the embedding, its encoder attention
local or transient-global (radius 3, global blocks of 4)."""

import os
from typing import Optional

import torch

from tests.hf_t5_family import save_t5_tokenizer, transformers

#: 80 SentencePiece pieces, 100 sentinels, 4 unnamed embedding rows
T5_VOCAB_ROWS = 184


def tiny_hf_t5(folder: str, own_lm_head: bool = True, longt5_attention: Optional[str] = None, seed: int = 0) -> str:
    """Write the tiny T5 v1.1 folder, or with ``longt5_attention`` (``local``,
    ``transient-global``) the tiny LongT5 folder (module docstring), into
    ``folder``; the weights are moved off their initial values (layer norms
    away from 1, a spread of logits). Returns ``folder``."""
    os.makedirs(folder, exist_ok=True)
    save_t5_tokenizer(folder)
    sizes = dict(
        vocab_size=T5_VOCAB_ROWS,
        d_model=32,
        d_ff=64,
        d_kv=8,
        num_heads=4,
        num_layers=2,
        num_decoder_layers=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,  # no output scaling (v1.1)
        dropout_rate=0.0,
        layer_norm_epsilon=1e-6,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    if longt5_attention is None:
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(**sizes))
    else:
        config = transformers.LongT5Config(
            **sizes, encoder_attention_type=longt5_attention, local_radius=3, global_block_size=4
        )
        model = transformers.LongT5ForConditionalGeneration(config)
    with torch.no_grad():
        if own_lm_head and longt5_attention is None:  # transformers 5 ties lm_head to shared when it builds T5
            model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight) * sizes["d_model"] ** -0.5)
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    return folder
