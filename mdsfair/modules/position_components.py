"""Encoder position components (``--encoder-positions``).

* ``learned``: BART's learned table, one position sequence over the source;
* ``sinusoidal``: fairseq's sinusoidal positions (Vaswani et al. 2017), no parameters;
* ``document-restart``: HierEncDec's position restart (Shen et al. 2023,
  Sec. 4.1.1): the learned table, positions counted from 0 again at every
  document (:mod:`mdsfair.modules.segment_positions`); a shorter table in a
  checkpoint is extended when it is loaded (Sec. 5.3, ``--position-tiling``).

The table (``encoder.embed_positions``, fairseq's module and parameter name)
has ``--max-encoder-positions`` rows (default: the task's
``--max-source-positions``).
"""
import logging
from typing import Optional

from torch import Tensor

from mdsfair.modules.components import Component, SourceStructure, register_component
from mdsfair.modules.segment_positions import TILING_METHODS, restarted_position_embedding, tile_position_table

logger = logging.getLogger(__name__)


class PositionComponent(Component):
    """Call shape of the role: :meth:`configure` the encoder's fairseq
    config before it builds its table, :meth:`embed` the positions of a batch."""

    learned: bool = True

    def configure(self, cfg) -> None:
        cfg.encoder.learned_pos = self.learned

    def embed(self, encoder, structure: SourceStructure) -> Optional[Tensor]:
        """``[B, T, C]`` positions added to the token embeddings (None: none)."""
        if encoder.embed_positions is None:
            return None
        return encoder.embed_positions(structure.src_tokens)


@register_component("encoder_positions", "learned")
class LearnedPositions(PositionComponent):
    """BART's learned positions over the whole source. A shorter table in a
    checkpoint (BART's 1,026 rows) is extended when it is loaded, as
    HierEncDec does (Sec. 5.3, ``--position-tiling``)."""

    defaults = {"position_tiling": "beltagy"}

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--position-tiling", choices=TILING_METHODS,
            help=("how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real "
                  "positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table "
                  "including fairseq/HF's two offset rows as the authors' code does"),
        )

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
                logger.info("extending %s from %d to %d rows by %s tiling", key, loaded.size(0), target_rows,
                            self.args.position_tiling)
                state_dict[key] = tile_position_table(loaded, target_rows, part.padding_idx, self.args.position_tiling)


@register_component("encoder_positions", "sinusoidal")
class SinusoidalPositions(PositionComponent):
    """fairseq's sinusoidal positions over the whole source (no parameters)."""

    learned = False


@register_component("encoder_positions", "document-restart")
class DocumentRestartPositions(LearnedPositions):
    """Positions restart at every document (HierEncDec Sec. 4.1.1), read
    from the learned table (extended on load as :class:`LearnedPositions`)."""

    uses_documents = True

    def side_inputs(self):
        return {"src_doc_ids": False}  # else one document per <s>-opened run

    def refusal(self, components):
        if getattr(self.args, "no_token_positional_embeddings", False):
            return "positions that restart per document are rows of the learned table, which " \
                   "--no-token-positional-embeddings removes"
        return None

    def embed(self, encoder, structure):
        if encoder.embed_positions is None:
            raise ValueError("--encoder-positions document-restart needs the learned position table; "
                             "drop --no-token-positional-embeddings")
        return restarted_position_embedding(structure.document_ids, encoder.embed_positions.weight,
                                            encoder.padding_idx)
