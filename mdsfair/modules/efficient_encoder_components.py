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
7 Sinkhorn iterations at temperature 0.7.

**The layers that take them** (``--efficient-attention-layers``). The authors'
encoder (``SparseTransformerEncoder``) is a hybrid unless
``--encoder_not_hybrid``: layer ``i`` (0 = the bottom one) is built by
``build_sparse_encoder_layer`` when ``i % 2 == 0`` and by
``build_lsh_encoder_layer`` / ``build_sinkhorn_layer`` otherwise, so the
first, third, ... layers take sliding-window attention and the second,
fourth, ... LSH or Sinkhorn attention: BART-large's 12 encoder layers are 6
of each. ``hybrid`` (the default) builds that pattern; ``all`` is their
``--encoder_not_hybrid``, every layer LSH or Sinkhorn. Their sliding window
is Longformer's ``sliding_chunks_matmul_qk`` with ``--window 128`` tokens on
each side and no global token; here it is
:class:`mdsfair.modules.longformer_attention.LongformerSelfAttention` without
global projections (the window of ``--hybrid-sliding-window``, 256, counts
both sides, as Hugging Face's ``attention_window``). Their sliding-window
layer exists only under their ``--sw`` flag: without it (their released
``Model/train_script/finetune_sinkhorn_hepos.sh`` passes ``--sinkhorn`` and
neither ``--sw`` nor ``--encoder_not_hybrid``) their hybrid encoder raises
``NotImplementedError`` when it is built.

**Checkpoints saved before the layer pattern.** A checkpoint whose saved
configuration lacks ``efficient_attention_layers`` was trained when LSH or
Sinkhorn attention took every encoder layer; under today's default it would
load its tensors (the same names and shapes) into the hybrid encoder, a
different model. :func:`every_layer_before_the_layer_pattern`, a
configuration upgrade (:mod:`mdsfair.checkpoints.config_upgrades`) that runs
on every checkpoint fairseq loads (``fairseq-generate``, the hub, resuming),
sets ``all`` for it and logs one INFO line saying so; a checkpoint that saved
the flag keeps its value.

In evaluation every forward draws its random rotations (LSH) or Gumbel noise
(Sinkhorn) from a generator seeded with ``--lsh-seed`` / ``--sinkhorn-seed``,
so a source's summary does not depend on the batches before it; in training
they come from the global generator, as the authors draw them always.
"""

import logging
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

import torch

from mdsfair.checkpoints.config_upgrades import register_config_upgrade
from mdsfair.modules.components import ComponentConfig, component_flag, register_component
from mdsfair.modules.longformer_attention import LongformerSelfAttention
from mdsfair.modules.lsh_attention import LSHSelfAttention, default_bucket_count
from mdsfair.modules.self_attention_components import SelfAttentionComponent
from mdsfair.modules.sinkhorn_attention import SinkhornSelfAttention

logger = logging.getLogger(__name__)


def evaluation_generator(encoder, device, seed: int) -> Optional[torch.Generator]:
    """A generator seeded with ``seed`` for one forward of an encoder in
    evaluation; None in training (the global generator)."""
    if encoder.training:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


#: ``--efficient-attention-layers``: the authors' hybrid encoder, or every layer.
LAYER_PATTERNS = ("hybrid", "all")


def takes_efficient_attention(layer_index: int, pattern: str) -> bool:
    """Whether encoder layer ``layer_index`` (0 = the bottom one) takes the
    LSH or Sinkhorn attention: every layer under ``all``; under ``hybrid`` the
    odd-numbered ones (1, 3, ...), the others taking sliding-window attention,
    as the authors' ``SparseTransformerEncoder`` builds them (``i % 2 == 0``:
    the sliding-window layer)."""
    if pattern not in LAYER_PATTERNS:
        raise ValueError(f"--efficient-attention-layers must be one of {LAYER_PATTERNS}, got {pattern!r}")
    return pattern == "all" or layer_index % 2 == 1


@dataclass
class HybridEncoderConfig(ComponentConfig):
    """The layer pattern both attentions share (one pair of flags)."""

    efficient_attention_layers: Optional[str] = component_flag(
        "hybrid",
        "lsh, sinkhorn: the encoder layers that take that attention: 'hybrid' = the second, fourth, ... "
        "layers, the others sliding-window attention (the authors' encoder unless --encoder_not_hybrid); "
        "'all' = every encoder layer",
        choices=LAYER_PATTERNS,
    )
    hybrid_sliding_window: Optional[int] = component_flag(
        256,
        "lsh, sinkhorn under --efficient-attention-layers hybrid: the window of the sliding-window layers, "
        "even; each token sees window/2 tokens on each side (the authors' --window 128 on each side)",
        type=int,
        metavar="N",
    )


class HybridEncoderAttention(SelfAttentionComponent):
    """An efficient attention in the layers :func:`takes_efficient_attention`
    picks and sliding-window attention in the others; subclasses build and
    run the efficient one."""

    def build_efficient(self, embed_dim: int, cfg):
        raise NotImplementedError

    def attend_efficient(self, attention, x, padding_mask, generator):
        raise NotImplementedError

    def build(self, layer, embed_dim, cfg):
        config = self.config
        if takes_efficient_attention(layer.layer_index, config.efficient_attention_layers):
            return self.build_efficient(embed_dim, cfg)
        window = config.hybrid_sliding_window
        if window <= 0 or window % 2:
            raise ValueError(
                f"--hybrid-sliding-window {window}: the window must be a positive even number (window/2 tokens on "
                "each side)"
            )
        return LongformerSelfAttention(
            embed_dim, cfg.encoder.attention_heads, window, dropout=cfg.attention_dropout, global_projections=False
        )

    def attend(self, attention, x, padding_mask, context, layer_index):
        if isinstance(attention, LongformerSelfAttention):
            return attention(x, padding_mask)
        return self.attend_efficient(attention, x, padding_mask, context)


@dataclass
class LSHAttentionConfig(HybridEncoderConfig):
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
class LSHSelfAttentionComponent(HybridEncoderAttention):
    """Reformer's LSH self-attention (Kitaev et al. 2020) in the encoder
    layers of ``--efficient-attention-layers``."""

    config_class = LSHAttentionConfig
    paper = "Huang et al. 2021 (Sec. 3, Table 2; Reformer, Kitaev et al. 2020)"
    summary = (
        "shared-QK attention within chunks of tokens sorted by random-rotation hash buckets, in every second "
        "encoder layer (the authors' hybrid: sliding-window attention in the others) or in all"
    )
    implemented_in = ("mdsfair.modules.lsh_attention", "mdsfair.modules.longformer_attention")

    def build_efficient(self, embed_dim, cfg):
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

    def attend_efficient(self, attention, x, padding_mask, generator):
        return attention.forward_lsh(x, padding_mask, generator=generator)


@dataclass
class SinkhornAttentionConfig(HybridEncoderConfig):
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
class SinkhornSelfAttentionComponent(HybridEncoderAttention):
    """Sparse Sinkhorn self-attention (Tay et al. 2020) in the encoder layers
    of ``--efficient-attention-layers``."""

    config_class = SinkhornAttentionConfig
    paper = "Huang et al. 2021 (Sec. 3, Table 2; Sinkhorn, Tay et al. 2020)"
    summary = (
        "attention within the block and a block sorted to it by Gumbel-Sinkhorn over block scores, in every "
        "second encoder layer (the authors' hybrid: sliding-window attention in the others) or in all"
    )
    implemented_in = ("mdsfair.modules.sinkhorn_attention", "mdsfair.modules.longformer_attention")

    def build_efficient(self, embed_dim, cfg):
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

    def attend_efficient(self, attention, x, padding_mask, generator):
        return attention.forward_sinkhorn(x, padding_mask, generator=generator)


#: The encoder self-attentions whose layers ``--efficient-attention-layers`` picks.
HYBRID_ENCODER_ATTENTIONS = (LSHSelfAttentionComponent.name, SinkhornSelfAttentionComponent.name)


@register_config_upgrade
def every_layer_before_the_layer_pattern(saved: Mapping[str, Any], path: str) -> Dict[str, Any]:
    """``{"efficient_attention_layers": "all"}`` for a checkpoint at ``path``
    of an LSH or Sinkhorn encoder whose saved configuration lacks the flag:
    it was trained with that attention in every encoder layer (module
    docstring); ``{}`` for any other checkpoint."""
    attention = saved.get("encoder_self_attention")
    if attention not in HYBRID_ENCODER_ATTENTIONS or "efficient_attention_layers" in saved:
        return {}
    logger.info(
        "%s: saved before --efficient-attention-layers existed, with %s attention in every encoder layer: "
        "loaded with --efficient-attention-layers all",
        path,
        attention,
    )
    return {"efficient_attention_layers": "all"}
