"""Encoder position components (``--encoder-positions``).

* ``learned``: BART's learned table, one position sequence over the source;
* ``sinusoidal``: fairseq's sinusoidal positions (Vaswani et al. 2017), no parameters;
* ``pegasus-sinusoidal``: the same encoding in PEGASUS's layout (Zhang et al.
  2020, as Hugging Face's PEGASUS): sines in the first half of the dimensions,
  cosines in the second, frequency ``10000^(-2i/d)``, positions from 0
  (:mod:`mdsfair.modules.sinusoidal`), no parameters;
* ``document-restart``: HierEncDec's position restart (Shen et al. 2023,
  Sec. 4.1.1): the learned table, positions counted from 0 again at every
  document (:mod:`mdsfair.modules.segment_positions`); a shorter table in a
  checkpoint is extended when it is loaded (Sec. 5.3, ``--position-tiling``);
* ``t5-relative-bias``: T5's relative position bias (Raffel et al. 2020,
  Sec. 2.1): no position embedding; one learned scalar per head and
  bucketed offset ``key - query`` added to the scores of every
  self-attention, computed once per stack (bidirectional in the encoder,
  causal in the decoder, each stack its own table;
  :class:`~mdsfair.modules.t5_layers.RelativePositionBias`);
* ``document-aware``: DAPE's positions (Ma et al. 2022, Eq. 1-4): the token
  positions of fairseq's table (sinusoidal unless ``--encoder-learned-pos``)
  plus ``alpha`` times an encoding of the document index
  (:mod:`mdsfair.modules.document_positional_encoding`).

The table (``encoder.embed_positions``, fairseq's module and parameter name)
has ``--max-encoder-positions`` rows (default: the task's
``--max-source-positions``).
"""

import logging
from dataclasses import dataclass
from typing import Optional

from torch import Tensor

from mdsfair.argument_types import at_least
from mdsfair.modules.components import Component, ComponentConfig, component_flag, flag_of, register_component
from mdsfair.modules.document_positional_encoding import (
    DOC_POSITION_FUNCTIONS,
    TOKEN_POSITION_MODES,
    DocumentAwarePositionalEncoding,
)
from mdsfair.modules.segment_positions import (
    TILING_METHODS,
    position_table_overflow,
    restarted_position_embedding,
    restarted_position_rows,
    tile_position_table,
)
from mdsfair.modules.sinusoidal import HalvesSinusoidalPositions
from mdsfair.modules.source_structure import SourceStructure
from mdsfair.modules.t5_layers import RelativePositionBias

logger = logging.getLogger(__name__)


class PositionComponent(Component):
    """Call shape of the role: :meth:`configure` the encoder's fairseq
    config before it builds its table, :meth:`embed` the positions of a batch."""

    learned: bool = True

    def configure(self, cfg) -> None:
        cfg.encoder.learned_pos = self.learned

    def prepare(self, encoder, structure: SourceStructure) -> None:
        """What :meth:`embed` will need, computed before the encoder's one
        host read (its checks wait in ``structure``); nothing by default."""

    def embed(self, encoder, structure: SourceStructure) -> Optional[Tensor]:
        """``[B, T, C]`` positions added to the token embeddings (None: none)."""
        if encoder.embed_positions is None:
            return None
        return encoder.embed_positions(structure.src_tokens)

    def attention_bias(self, encoder, structure: SourceStructure) -> Optional[Tensor]:
        """``[B * H, T, T]`` added to the scores of every encoder layer's
        self-attention, computed once per batch (None: nothing)."""
        return None

    def configure_decoder(self, cfg) -> None:
        """The decoder's fairseq config before it builds its positions; the
        decoder keeps fairseq's by default."""

    def build_decoder_modules(self, decoder) -> None:
        """Modules the decoder holds for this component (``decoder.<name>``)."""

    def decoder_attention_bias(self, decoder, prev_output_tokens: Tensor, incremental_state) -> Optional[Tensor]:
        """``[B * H, T, S]`` added to the scores of every decoder layer's
        self-attention for the target prefix ``prev_output_tokens [B, S]``
        (its last position only, ``T = 1``, in an incremental step), once
        per decoder pass (None: nothing)."""
        return None


@dataclass
class PositionTilingConfig(ComponentConfig):
    """How a learned table longer than a checkpoint's is filled on load:
    HierEncDec's (Shen et al. 2023, Sec. 5.3), after Longformer."""

    position_tiling: Optional[str] = component_flag(
        "beltagy",
        "how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real "
        "positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table "
        "including fairseq/HF's two offset rows as the authors' code does, 'mirror' alternates the whole "
        "table and its reverse as LoBART's code does (the lobart architectures' default)",
        choices=TILING_METHODS,
    )


@register_component("encoder_positions", "learned")
class LearnedPositions(PositionComponent):
    """BART's learned positions over the whole source. A shorter table in a
    checkpoint (BART's 1,026 rows) is extended when it is loaded, as
    HierEncDec does (Sec. 5.3, ``--position-tiling``)."""

    config_class = PositionTilingConfig
    paper = "BART"
    summary = "one learned position sequence over the source (a shorter checkpoint table tiled on load)"
    implemented_in = ("mdsfair.modules.segment_positions",)

    def upgrade_state_dict(self, model, state_dict, prefix):
        """Extend a shorter position table of the checkpoint (Sec. 5.3), the
        encoder's and the decoder's, by ``--position-tiling``."""
        for name, part in (("encoder", model.encoder), ("decoder", model.decoder)):
            if part.embed_positions is None or not hasattr(part.embed_positions, "weight"):
                continue
            key = f"{prefix}{name}.embed_positions.weight"
            if key not in state_dict:
                continue
            target_rows = part.embed_positions.weight.size(0)
            loaded = state_dict[key]
            if loaded.size(0) != target_rows:
                logger.info(
                    "extending %s from %d to %d rows by %s tiling",
                    key,
                    loaded.size(0),
                    target_rows,
                    self.config.position_tiling,
                )
                state_dict[key] = tile_position_table(
                    loaded, target_rows, part.padding_idx, self.config.position_tiling
                )


@register_component("encoder_positions", "sinusoidal")
class SinusoidalPositions(PositionComponent):
    """fairseq's sinusoidal positions over the whole source (no parameters)."""

    paper = "the Transformer (Vaswani et al. 2017)"
    summary = "fairseq's sinusoidal positions, no parameters"
    learned = False


@register_component("encoder_positions", "pegasus-sinusoidal")
class PegasusSinusoidalPositions(SinusoidalPositions):
    """PEGASUS's sinusoidal positions over the whole source (Zhang et al.
    2020, whose Transformer keeps Vaswani et al.'s Sec. 3.5 encoding), laid
    out as Hugging Face's ``PegasusSinusoidalPositionalEmbedding``: the sines
    of the frequencies ``10000^(-2i/d)`` in the first half of the dimensions
    and their cosines in the second, the first token at position 0. fairseq's
    ``sinusoidal`` differs in the frequencies (``10000^(-i/(d/2-1))``) and
    starts at ``padding_idx + 1``. No parameters; the encoder's
    ``embed_positions`` (:class:`~mdsfair.modules.sinusoidal.HalvesSinusoidalPositions`)
    has ``--max-encoder-positions`` rows."""

    paper = "PEGASUS (Zhang et al. 2020)"
    summary = (
        "sinusoidal positions from 0, the sines in the first half of the dimensions and the cosines in the "
        "second (Hugging Face's PEGASUS), no parameters"
    )
    implemented_in = ("mdsfair.modules.sinusoidal",)

    def build_encoder_modules(self, encoder):
        if encoder.embed_positions is not None:  # (none under --no-token-positional-embeddings)
            encoder.embed_positions = HalvesSinusoidalPositions(
                encoder.max_source_positions, encoder.embed_tokens.embedding_dim, encoder.padding_idx
            )


@register_component("encoder_positions", "document-restart")
class DocumentRestartPositions(LearnedPositions):
    """Positions restart at every document (HierEncDec Sec. 4.1.1), read
    from the learned table (extended on load as :class:`LearnedPositions`)."""

    paper = "HierEncDec (Shen et al. 2023, Sec. 4.1.1)"
    summary = "positions restart at every document"
    side_input_notes = {"src_doc_ids": "optional: else one document per `<s>`"}
    uses_documents = True

    def side_inputs(self):
        return {"src_doc_ids": False}  # else one document per <s>-opened run

    def refusal(self, components):
        if getattr(self.args, "no_token_positional_embeddings", False):
            return (
                "positions that restart per document are rows of the learned table, which "
                "--no-token-positional-embeddings removes"
            )
        return None

    def prepare(self, encoder, structure):
        if encoder.embed_positions is None:
            return
        runs = structure.document_runs()  # shared with the document layout
        rows = restarted_position_rows(structure.document_ids, encoder.padding_idx, runs)
        structure.check(*position_table_overflow(rows, encoder.embed_positions.weight, encoder.padding_idx, runs))
        structure.prepared["restarted_position_rows"] = rows

    def embed(self, encoder, structure):
        if encoder.embed_positions is None:
            raise ValueError(
                "--encoder-positions document-restart needs the learned position table; "
                "drop --no-token-positional-embeddings"
            )
        return restarted_position_embedding(
            structure.document_ids,
            encoder.embed_positions.weight,
            encoder.padding_idx,
            structure.prepared.get("restarted_position_rows"),
        )


@dataclass
class RelativePositionBiasConfig(ComponentConfig):
    """T5's buckets (Raffel et al. 2020, Sec. 2.1; google/t5-v1_1-*'s config.json)."""

    relative_attention_num_buckets: Optional[int] = component_flag(
        32,
        "buckets of --encoder-positions t5-relative-bias per stack, half of them for exact offsets (T5's 32)",
        type=at_least(2),
        metavar="N",
    )
    relative_attention_max_distance: Optional[int] = component_flag(
        128,
        "offsets from this distance on share the last bucket of --encoder-positions t5-relative-bias (T5's 128)",
        type=at_least(1),
        metavar="N",
    )


def per_row(bias: Tensor, rows: int) -> Tensor:
    """``bias [1, H, T, S]`` as the attention's mask per row and head ``[rows * H, T, S]``."""
    return bias.expand(rows, -1, -1, -1).reshape(-1, bias.size(2), bias.size(3))


@register_component("encoder_positions", "t5-relative-bias")
class T5RelativePositionBias(PositionComponent):
    """T5's positions (Raffel et al. 2020, Sec. 2.1): no position embedding
    in either stack; each stack adds its own learned bias, one scalar per
    head and bucket of the offset ``key - query``
    (:func:`~mdsfair.modules.t5_layers.relative_position_bucket`), to the
    scores of every self-attention layer, computed once per stack:
    ``encoder.relative_position_bias`` tells left from right,
    ``decoder.relative_position_bias`` sees the past only (in an incremental
    step, the row of the step's position). The offsets are those of the
    whole source, so left padding changes nothing (the padded keys are masked)."""

    config_class = RelativePositionBiasConfig
    paper = "T5 (Raffel et al. 2020, Sec. 2.1)"
    summary = (
        "no position embedding; a learned bias per head and bucketed offset added to every self-attention's "
        "scores (bidirectional in the encoder, causal in the decoder)"
    )
    implemented_in = ("mdsfair.modules.t5_layers", "mdsfair.modules.biased_self_attention")
    learned = False
    takes_head_width = True

    def refusal(self, components):
        attention = components["encoder_self_attention"]
        if not getattr(attention, "takes_position_bias", False):
            return (
                f"the relative position bias is added to the scores of every self-attention layer, and "
                f"{flag_of(attention.role)} {attention.name} takes no bias per head (full and document do)"
            )
        return None

    def configure(self, cfg) -> None:
        cfg.no_token_positional_embeddings = True

    def configure_decoder(self, cfg) -> None:
        cfg.no_token_positional_embeddings = True

    def position_bias(self, heads: int, bidirectional: bool) -> RelativePositionBias:
        config = self.config
        return RelativePositionBias(
            heads, config.relative_attention_num_buckets, config.relative_attention_max_distance, bidirectional
        )

    def build_encoder_modules(self, encoder):
        encoder.relative_position_bias = self.position_bias(self.args.encoder_attention_heads, bidirectional=True)

    def build_decoder_modules(self, decoder):
        decoder.relative_position_bias = self.position_bias(self.args.decoder_attention_heads, bidirectional=False)

    def embed(self, encoder, structure):
        return None

    def attention_bias(self, encoder, structure):
        rows, length = structure.src_tokens.shape
        return per_row(encoder.relative_position_bias(length, length), rows)

    def decoder_attention_bias(self, decoder, prev_output_tokens, incremental_state):
        rows, length = prev_output_tokens.shape
        if incremental_state is None:
            return per_row(decoder.relative_position_bias(length, length), rows)
        return per_row(decoder.relative_position_bias(1, length, first_query=length - 1), rows)


@dataclass
class DocumentAwarePositionsConfig(ComponentConfig):
    """DAPE's document positional encoding (Ma et al. 2022): f_doc = sin with
    alpha 0.1 (Sec. IV-B, Table IV), token positions restarting at every
    document (t_i^k of Eq. 1), the 0-based document index."""

    doc_position_fn: Optional[str] = component_flag(
        "sin",
        "document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, "
        "sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), "
        "linear = slope*k, same = one value for all documents, random = fixed random value per document",
        choices=DOC_POSITION_FUNCTIONS,
    )
    doc_position_alpha: Optional[float] = component_flag(
        0.1, "alpha of Eq. 2, the weight of the document encoding (the paper's)", type=float
    )
    doc_position_linear_slope: Optional[float] = component_flag(
        1.0, "slope of --doc-position-fn linear (Table V: 1, 2, 5, 10)", type=float
    )
    doc_position_offset: Optional[int] = component_flag(
        0,
        "k = 0-based document index + offset (0: the reading under which the paper's sin/cos "
        "comparison of Table IV holds; 1: k = 1..q as in its notation)",
        type=int,
    )
    doc_token_positions: Optional[str] = component_flag(
        "per-document",
        "token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream "
        "(positions over the concatenated source)",
        choices=TOKEN_POSITION_MODES,
    )


@register_component("encoder_positions", "document-aware")
class DocumentAwarePositions(PositionComponent):
    """DAPE's document-aware positional encoding (Eq. 4:
    ``E = e + alpha * f_doc(k) + f_token(i)``), ``encoder.document_positional_encoding``."""

    config_class = DocumentAwarePositionsConfig
    paper = "DAPE (Ma et al. 2022, Eq. 1-4)"
    summary = "token positions plus alpha times an encoding of the document index"
    side_input_notes = {"src_doc_ids": "optional: else one document per `<s>`"}
    implemented_in = ("mdsfair.modules.document_positional_encoding",)

    def configure(self, cfg) -> None:
        """fairseq's token table as the model's flags say (``--encoder-learned-pos``)."""

    def side_inputs(self):
        return {"src_doc_ids": False}

    def build_encoder_modules(self, encoder):
        config = self.config
        encoder.document_positional_encoding = DocumentAwarePositionalEncoding(
            encoder.embed_tokens.embedding_dim,
            encoder.padding_idx,
            function=config.doc_position_fn,
            alpha=config.doc_position_alpha,
            linear_slope=config.doc_position_linear_slope,
            offset=config.doc_position_offset,
            token_positions=config.doc_token_positions,
        )

    def embed(self, encoder, structure):
        return encoder.document_positional_encoding(
            structure.src_tokens, structure.side_input("src_doc_ids"), encoder.embed_positions
        )
