"""Linguistic-guided encoding (Ma et al., 2022, Section III-B, Eq. 5-11).

A dependency parse gives, for token pairs ``(t_i, t_j)`` linked by an arc, a
one-hot relation vector ``dep_ij = v_rel`` (Eq. 5; ``0`` without an arc). An
encoding function turns it into a scalar (Eq. 6-7)::

    m_ij = F_depEnc(dep_ij),   F_depEnc = Linear o LeakyReLU o Linear

which is repeated over the heads (``M = Stack_h(m)``, Eq. 11) and applied to
the softmaxed attention weights of the encoder self-attention (Eq. 8-10)::

    A~_ij = M_ij * A_ij + A_ij,    MHAtt_i = sum_j A~_ij V_j

Sparse by construction: ``F_depEnc`` applied to a one-hot vector only depends
on which relation is hot, so it is evaluated once on the ``R`` one-hot vectors
(a table of ``R`` scalars) and ``M`` is built by scattering one scalar per arc
into ``[B, T, T]``; no ``[T, T, R]`` tensor is ever built.

Arcs come from the side data ``src_dep_head`` (for each token the position of
its head word's first subword, ``-1`` for none; a ROOT points to itself),
``src_dep_rel`` (relation id in :data:`DEPENDENCY_RELATIONS`, ``-1`` for none)
and optionally ``src_dep_word`` (the first subword of the token's own word):
with it, the column of each arc is widened to every subword of the head word
("all subword pairs", see ``preprocess/producers/dependency_arcs.py``).

Choices the paper leaves open, made here and documented:

* pairs without an arc get ``M_ij = 0`` (the *mask* reading of Fig. 3);
  ``--dependency-no-arc-encoding`` instead gives them ``F_depEnc(0)`` (the
  literal reading of Eq. 5-6, a learned constant);
* arcs are symmetric by default (Eq. 5 speaks of "a dependency relation for
  t_i and t_j"): ``M_ij = M_ji = m(rel)``; ``--dependency-arc-direction``
  restricts them to dependent->head or head->dependent;
* one ``F_depEnc`` (one mask ``M``) is shared by all encoder layers that use
  it (``--dependency-layers``, all by default); the decoder is unchanged.

Table VI variants (``--dependency-encoder``): ``mlp`` (``F_depEnc``, the
paper's model), ``linear`` (one linear layer), ``arithmetic`` (fixed weights
1, (N-1)/N, ..., 1/N over the relations in order of frequency),
``arithmetic-core`` (the 8 core dependents of clausal predicates first),
``arithmetic-root`` (``ROOT`` first); ``--dependency-mask-on values`` is the
"added on values" variant: ``MHAtt_i = sum_j A_ij V_j + sum_j M_ij V_j``.
"""

from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.data.dependency_relations import DEPENDENCY_RELATIONS
from mdsfair.modules.heads import merge_heads, split_heads

# Relations by decreasing frequency in parsed source documents (spaCy's
# en_core_web_sm on the first 400 documents of ../shared/data/peersum_sample
# train, 182,705 tokens): the order of Table VI's "arithmetic sequence"
# ("according to the sequence of the occurrence of dependency relations in the
# source documents").
RELATIONS_BY_FREQUENCY: Tuple[str, ...] = (
    "punct",
    "det",
    "prep",
    "pobj",
    "amod",
    "nsubj",
    "compound",
    "ROOT",
    "dobj",
    "advmod",
    "aux",
    "conj",
    "dep",
    "cc",
    "ccomp",
    "mark",
    "nummod",
    "advcl",
    "acomp",
    "appos",
    "nmod",
    "poss",
    "auxpass",
    "xcomp",
    "nsubjpass",
    "attr",
    "relcl",
    "npadvmod",
    "neg",
    "acl",
    "pcomp",
    "agent",
    "quantmod",
    "meta",
    "expl",
    "oprd",
    "csubj",
    "prt",
    "intj",
    "case",
    "predet",
    "parataxis",
    "preconj",
    "dative",
    "csubjpass",
)

# Core dependents of clausal predicates (Universal Dependencies v1 for English:
# nsubj, nsubjpass, dobj, iobj, csubj, csubjpass, ccomp, xcomp; spaCy's label
# for iobj is "dative"), Table VI's "arithmetic sequence (core)".
CORE_DEPENDENTS: Tuple[str, ...] = (
    "nsubj",
    "nsubjpass",
    "dobj",
    "dative",
    "csubj",
    "csubjpass",
    "ccomp",
    "xcomp",
)

DEPENDENCY_ENCODERS = ("mlp", "linear", "arithmetic", "arithmetic-core", "arithmetic-root")
ARC_DIRECTIONS = ("both", "dependent-to-head", "head-to-dependent")
MASK_TARGETS = ("weights", "values")


def arithmetic_relation_order(variant: str) -> Tuple[str, ...]:
    """Relation order of Table VI's arithmetic-sequence variants."""
    if variant == "arithmetic":
        return RELATIONS_BY_FREQUENCY
    if variant == "arithmetic-core":
        first = CORE_DEPENDENTS
    elif variant == "arithmetic-root":
        first = ("ROOT",)
    else:
        raise ValueError(f"not an arithmetic-sequence variant: {variant!r}")
    return first + tuple(r for r in RELATIONS_BY_FREQUENCY if r not in first)


def arithmetic_relation_weights(order: Sequence[str]) -> Tensor:
    """Weights 1, (N-1)/N, ..., 1/N given in ``order``, indexed by relation id."""
    n = len(DEPENDENCY_RELATIONS)
    if sorted(order) != sorted(DEPENDENCY_RELATIONS):
        raise ValueError("the relation order must list every relation of DEPENDENCY_RELATIONS once")
    weights = torch.zeros(n)
    for rank, relation in enumerate(order):
        weights[DEPENDENCY_RELATIONS.index(relation)] = (n - rank) / n
    return weights


def build_dependency_mask(
    relation_weights: Tensor,
    dep_head: Tensor,
    dep_rel: Tensor,
    dep_word: Optional[Tensor] = None,
    direction: str = "both",
    no_arc_weight: Optional[Tensor] = None,
) -> Tensor:
    """The dependency relation mask ``m_ij`` (Eq. 6) as a ``[B, T, T]`` tensor.

    Args:
        relation_weights: ``[R]``, the scalar ``F_depEnc(v_rel)`` of each relation.
        dep_head: ``[B, T]`` long, position of the head (first subword of the
            head word) of each token's arc, ``-1`` for none.
        dep_rel: ``[B, T]`` long, relation id of that arc, ``-1`` for none.
        dep_word: optional ``[B, T]`` long, first subword of each token's own
            word (``-1`` at padding / special tokens): widens every arc's column
            to all subwords of the head word.
        direction: ``both`` (symmetric), ``dependent-to-head`` (row = dependent)
            or ``head-to-dependent`` (row = head).
        no_arc_weight: scalar for pairs without an arc (``None``: 0).

    Row ``i`` is the query, column ``j`` the key, as in the attention weights.
    The side data's shapes and ranges are the batch check's
    (:func:`mdsfair.data.side_inputs.check_side_inputs`, read before any layer
    runs); the indices are clamped into range so that a batch it refuses
    indexes nothing out of bounds before then.
    """
    if direction not in ARC_DIRECTIONS:
        raise ValueError(f"--dependency-arc-direction {direction!r}: choose from {ARC_DIRECTIONS}")
    batch_size, length = dep_head.shape
    num_relations = relation_weights.size(0)
    has_arc = (dep_head >= 0) & (dep_rel >= 0)
    arc_value = relation_weights[dep_rel.clamp(0, num_relations - 1)] * has_arc.to(relation_weights.dtype)
    column = dep_head.clamp(0, length - 1).unsqueeze(-1)
    # One scatter per row: row i receives its arc's scalar in its head's column
    # (rows without an arc write 0, which changes nothing).
    mask = arc_value.new_zeros(batch_size, length, length).scatter(2, column, arc_value.unsqueeze(-1))
    is_arc = has_arc.new_zeros(batch_size, length, length).scatter(2, column, has_arc.unsqueeze(-1))
    if dep_word is not None:
        # M[i, j] = M_first[i, word(j)]: every subword of the head word.
        word = dep_word.clamp(0, length - 1).unsqueeze(1).expand(batch_size, length, length)
        in_word = (dep_word >= 0).unsqueeze(1)
        mask = mask.gather(2, word) * in_word.to(mask.dtype)
        is_arc = is_arc.gather(2, word) & in_word
    if direction == "head-to-dependent":
        mask, is_arc = mask.transpose(1, 2), is_arc.transpose(1, 2)
    elif direction == "both":
        # A tree's arcs overlap their transposes only on ROOT self-arcs, whose
        # values are equal, so the symmetric mask is well defined.
        mask = torch.where(is_arc, mask, mask.transpose(1, 2))
        is_arc = is_arc | is_arc.transpose(1, 2)
    if no_arc_weight is not None:
        mask = torch.where(is_arc, mask, no_arc_weight.to(mask.dtype).expand_as(mask))
    return mask


class DependencyRelationEncoder(nn.Module):
    """``F_depEnc`` (Eq. 6-7) and the Table VI variants; builds ``M`` (Eq. 11
    before the head repetition) from sparse arcs."""

    def __init__(
        self,
        variant: str = "mlp",
        hidden_dim: int = 64,
        negative_slope: float = 0.01,
        direction: str = "both",
        encode_no_arc: bool = False,
    ):
        super().__init__()
        if variant not in DEPENDENCY_ENCODERS:
            raise ValueError(f"--dependency-encoder {variant!r}: choose from {DEPENDENCY_ENCODERS}")
        if direction not in ARC_DIRECTIONS:
            raise ValueError(f"--dependency-arc-direction {direction!r}: choose from {ARC_DIRECTIONS}")
        if encode_no_arc and variant.startswith("arithmetic"):
            raise ValueError("--dependency-no-arc-encoding needs a learned encoder (mlp or linear)")
        self.variant = variant
        self.direction = direction
        self.encode_no_arc = encode_no_arc
        num_relations = len(DEPENDENCY_RELATIONS)
        if variant == "mlp":
            self.relation_encoder = nn.Sequential(
                nn.Linear(num_relations, hidden_dim),
                nn.LeakyReLU(negative_slope),
                nn.Linear(hidden_dim, 1),
            )
        elif variant == "linear":
            self.relation_encoder = nn.Linear(num_relations, 1)
        else:
            self.relation_encoder = None
            self.register_buffer(
                "fixed_relation_weights", arithmetic_relation_weights(arithmetic_relation_order(variant))
            )

    def relation_weights(self) -> Tensor:
        """``F_depEnc(v_rel)`` for every one-hot relation vector: ``[R]``."""
        if self.relation_encoder is None:
            return self.fixed_relation_weights
        first = self.relation_encoder[0] if isinstance(self.relation_encoder, nn.Sequential) else self.relation_encoder
        one_hot = torch.eye(len(DEPENDENCY_RELATIONS), device=first.weight.device, dtype=first.weight.dtype)
        return self.relation_encoder(one_hot).squeeze(-1)

    def no_arc_weight(self) -> Optional[Tensor]:
        """``F_depEnc(0)`` when pairs without an arc are encoded, else None."""
        if not self.encode_no_arc:
            return None
        first = self.relation_encoder[0] if isinstance(self.relation_encoder, nn.Sequential) else self.relation_encoder
        zero = first.weight.new_zeros(1, len(DEPENDENCY_RELATIONS))
        return self.relation_encoder(zero).reshape(())

    def forward(self, dep_head: Tensor, dep_rel: Tensor, dep_word: Optional[Tensor] = None) -> Tensor:
        """The dependency relation mask ``[B, T, T]`` (``m_ij`` of Eq. 6)."""
        return build_dependency_mask(
            self.relation_weights(),
            dep_head,
            dep_rel,
            dep_word,
            direction=self.direction,
            no_arc_weight=self.no_arc_weight(),
        )


class DependencyGuidedMultiheadAttention(MultiheadAttention):
    """Encoder self-attention with the dependency relation mask (Eq. 8-11).

    Same parameters as fairseq's :class:`MultiheadAttention` (a checkpoint of
    one loads into the other); with ``dependency_mask=None`` it *is* fairseq's
    attention. With a mask ``M`` (``[B, T, T]``, repeated over heads, Eq. 11):

    * ``mask_on="weights"``: ``A~ = M * A + A`` on the softmaxed weights
      (Eq. 9), then attention dropout and ``A~ V`` (Eq. 8);
    * ``mask_on="values"``: ``A V + M V`` (Table VI, "added on values").
    """

    def __init__(self, *args, mask_on: str = "weights", **kwargs):
        super().__init__(*args, **kwargs)
        if mask_on not in MASK_TARGETS:
            raise ValueError(f"--dependency-mask-on {mask_on!r}: choose from {MASK_TARGETS}")
        if not self.self_attention or self.bias_k is not None or self.add_zero_attn:
            raise ValueError("dependency-guided attention is plain encoder self-attention (no bias_kv, zero attn)")
        self.mask_on = mask_on

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        *,
        dependency_mask: Optional[Tensor] = None,
        **options,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """``query`` is ``[T, B, C]``; ``dependency_mask`` ``[B, T, T]``, or None
        for fairseq's attention (``options``: its other keywords)."""
        if dependency_mask is None:
            return super().forward(query, key, value, key_padding_mask=key_padding_mask, **options)
        return self._guided_attention(query, dependency_mask, key_padding_mask, **options)

    def _guided_attention(
        self,
        query: Tensor,
        dependency_mask: Tensor,
        key_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        need_weights: bool = True,
        need_head_weights: bool = False,
        incremental_state=None,
        before_softmax: bool = False,
        static_kv: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. 8-11 on the self-attention of ``query`` (``static_kv`` changes
        nothing: the keys and values are the query's)."""
        if incremental_state is not None or before_softmax:
            raise ValueError("the dependency mask applies to full encoder self-attention only")
        length, batch_size, _ = query.size()
        if dependency_mask.shape != (batch_size, length, length):
            raise ValueError(
                f"dependency mask {tuple(dependency_mask.shape)} does not match [B, T, T] = "
                f"{(batch_size, length, length)}"
            )
        q = split_heads(self.q_proj(query) * self.scaling, self.num_heads)  # [B, H, T, d]
        k = split_heads(self.k_proj(query), self.num_heads)
        v = split_heads(self.v_proj(query), self.num_heads)
        scores = torch.matmul(q, k.transpose(-1, -2))  # [B, H, T, T]
        if attn_mask is not None:
            scores = scores + attn_mask
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, :], float("-inf"))
        weights_float = utils.softmax(scores, dim=-1)  # A, Eq. 10
        mask = dependency_mask.to(weights_float.dtype).unsqueeze(1)  # Stack_h, Eq. 11
        if key_padding_mask is not None:
            mask = mask.masked_fill(key_padding_mask.to(torch.bool)[:, None, None, :], 0.0)
        if self.mask_on == "weights":
            guided = weights_float * mask + weights_float  # Eq. 9
            attn = torch.matmul(self.dropout_module(guided.type_as(q)), v)  # Eq. 8
        else:
            attn = torch.matmul(self.dropout_module(weights_float.type_as(q)), v)
            attn = attn + torch.matmul(mask.type_as(v), v)
        attn = self.out_proj(merge_heads(attn))  # [T, B, C]
        attn_weights: Optional[Tensor] = None
        if need_weights or need_head_weights:
            attn_weights = (weights_float * mask + weights_float) if self.mask_on == "weights" else weights_float
            attn_weights = attn_weights.transpose(0, 1)  # [H, B, T, T], as fairseq returns them
            if not need_head_weights:
                attn_weights = attn_weights.mean(dim=0)
        return attn, attn_weights
