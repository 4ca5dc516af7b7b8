"""The two encoder self-attentions of Huang et al. (2021, "Efficient Attentions
for Long Document Summarization", Sec. 3 and Table 2; PageSum's comparison
settings) as components of ``--encoder-self-attention``:

* ``lsh``: Reformer's LSH attention (Kitaev et al. 2020;
  :mod:`mdsfair.modules.lsh_attention`);
* ``sinkhorn``: Sparse Sinkhorn attention (Tay et al. 2020;
  :mod:`mdsfair.modules.sinkhorn_attention`).

The defaults are the authors' (``luyang-huang96/LongDocSum``,
``Model/longbart/longbartmodel.py``): ``--bucket_size 64`` is both the LSH
chunk and the Sinkhorn block, 4 hashing rounds, the number of buckets from the
longest source (:func:`mdsfair.modules.lsh_attention.default_bucket_count`),
7 Sinkhorn iterations at temperature 0.7. Their encoder alternates these
layers with sliding-window ones unless ``--encoder_not_hybrid``; here every
encoder layer takes the chosen attention.

In evaluation every forward draws its random rotations (LSH) or Gumbel noise
(Sinkhorn) from a generator seeded with ``--lsh-seed`` / ``--sinkhorn-seed``,
so a source's summary does not depend on the batches before it; in training
they come from the global generator, as the authors draw them always.
"""

from dataclasses import dataclass
from typing import Optional

import torch

from mdsfair.modules.components import ComponentConfig, component_flag, register_component
from mdsfair.modules.lsh_attention import LSHSelfAttention, default_bucket_count
from mdsfair.modules.self_attention_components import SelfAttentionComponent
from mdsfair.modules.sinkhorn_attention import SinkhornSelfAttention


def evaluation_generator(encoder, device, seed: int) -> Optional[torch.Generator]:
    """A generator seeded with ``seed`` for one forward of an encoder in
    evaluation; None in training (the global generator)."""
    if encoder.training:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


@dataclass
class LSHAttentionConfig(ComponentConfig):
    """Reformer's LSH attention as Huang et al. (2021) set it."""

    lsh_chunk_length: Optional[int] = component_flag(
        64,
        "LSH attention: slots per chunk of the sorted sequence; each chunk attends to itself and the chunk "
        "before (the authors' --bucket_size)",
        type=int,
        metavar="N",
    )
    lsh_hashes: Optional[int] = component_flag(
        4, "LSH attention: hashing rounds, each with its own random rotation", type=int, metavar="N"
    )
    lsh_buckets: Optional[int] = component_flag(
        None,
        "LSH attention: buckets per hashing round (even); unset, the largest power of two not above "
        "2 * (max source positions // chunk length), as the authors compute it",
        type=int,
        metavar="N",
    )
    lsh_seed: Optional[int] = component_flag(
        1, "LSH attention: the seed of the random rotations of every forward in evaluation", type=int, metavar="N"
    )


@register_component("encoder_self_attention", "lsh")
class LSHSelfAttentionComponent(SelfAttentionComponent):
    """Reformer's LSH self-attention (Kitaev et al. 2020) in every encoder layer."""

    config_class = LSHAttentionConfig
    paper = "Huang et al. 2021 (Sec. 3, Table 2; Reformer, Kitaev et al. 2020)"
    summary = "shared-QK attention within chunks of tokens sorted by random-rotation hash buckets"
    implemented_in = ("mdsfair.modules.lsh_attention",)

    def build(self, layer, embed_dim, cfg):
        config = self.config
        buckets = config.lsh_buckets
        if buckets is None:
            buckets = default_bucket_count(cfg.max_source_positions, config.lsh_chunk_length)
        return LSHSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            chunk_length=config.lsh_chunk_length,
            num_hashes=config.lsh_hashes,
            num_buckets=buckets,
            dropout=cfg.attention_dropout,
        )

    def prepare(self, encoder, structure):
        return evaluation_generator(encoder, structure.src_tokens.device, self.config.lsh_seed)

    def attend(self, attention, x, padding_mask, context, layer_index):
        return attention.forward_lsh(x, padding_mask, generator=context)


@dataclass
class SinkhornAttentionConfig(ComponentConfig):
    """Sparse Sinkhorn attention as Huang et al. (2021) set it."""

    sinkhorn_block_size: Optional[int] = component_flag(
        64, "Sinkhorn attention: tokens per block (the authors' --bucket_size)", type=int, metavar="N"
    )
    sinkhorn_iterations: Optional[int] = component_flag(
        7, "Sinkhorn attention: row and column normalisations of the block sorting matrix", type=int, metavar="N"
    )
    sinkhorn_temperature: Optional[float] = component_flag(
        0.7, "Sinkhorn attention: the Gumbel-Sinkhorn temperature", type=float, metavar="T"
    )
    sinkhorn_seed: Optional[int] = component_flag(
        1, "Sinkhorn attention: the seed of the Gumbel noise of every forward in evaluation", type=int, metavar="N"
    )


@register_component("encoder_self_attention", "sinkhorn")
class SinkhornSelfAttentionComponent(SelfAttentionComponent):
    """Sparse Sinkhorn self-attention (Tay et al. 2020) in every encoder layer."""

    config_class = SinkhornAttentionConfig
    paper = "Huang et al. 2021 (Sec. 3, Table 2; Sinkhorn, Tay et al. 2020)"
    summary = "attention within the block and a block sorted to it by Gumbel-Sinkhorn over block scores"
    implemented_in = ("mdsfair.modules.sinkhorn_attention",)

    def build(self, layer, embed_dim, cfg):
        config = self.config
        return SinkhornSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            block_size=config.sinkhorn_block_size,
            iterations=config.sinkhorn_iterations,
            temperature=config.sinkhorn_temperature,
            dropout=cfg.attention_dropout,
        )

    def prepare(self, encoder, structure):
        return evaluation_generator(encoder, structure.src_tokens.device, self.config.sinkhorn_seed)

    def attend(self, attention, x, padding_mask, context, layer_index):
        return attention.forward_sinkhorn(x, padding_mask, generator=context)
