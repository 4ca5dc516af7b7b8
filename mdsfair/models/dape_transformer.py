"""Document-aware positional encoding and linguistic-guided encoding for
abstractive MDS (Ma et al., IJCNN 2022; ``../shared/papers/dape-linguistic-ma2022.txt``).

A flat Transformer encoder-decoder over the concatenated source documents with
two changes to the encoder (Fig. 1):

* **document-aware positional encoding** (Section III-A, Eq. 1-4): the input
  of the encoder is ``e + alpha * Stack_dim(f_doc(k)) + f_token(i)`` for the
  ``i``-th token of document ``k``
  (:class:`~mdsfair.modules.document_positional_encoding.DocumentAwarePositionalEncoding`);
* **linguistic-guided encoding** (Section III-B, Eq. 5-11): the encoder
  self-attention weights become ``A~ = M * A + A`` with ``M`` the dependency
  relation mask learned from the source's dependency arcs
  (:mod:`mdsfair.modules.dependency_attention`; arcs from
  ``mdsfair-preprocess --side-data dep_head dep_rel``).

Ablations (Table III): ``--no-doc-positions`` (fairseq's own token positions
over the concatenation), ``--no-dependency-encoding``. With both, the model is
fairseq's ``transformer`` with the same parameter names and outputs.

The encoder is mdsfair's component encoder
(:class:`mdsfair.models.component_model.ComponentEncoder`) with the
``dependency`` self-attention and ``document-aware`` positions
(:mod:`mdsfair.modules.components`), so both also combine with BART's
systems (``--arch multidoc_bart_* --encoder-self-attention dependency``). The
model stays a fairseq Transformer (its initialization, sinusoidal token
positions, no embedding layer norm), as the paper's. The decoder is fairseq's
Transformer decoder (the summary has no parse), so incremental decoding is
fairseq's.
"""

import logging

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel, base_architecture

from mdsfair.models.component_flags import build_components
from mdsfair.models.component_model import ComponentEncoder
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import Ablation, apply_ablations, choose
from mdsfair.models.side_input_forward import SideInputForward
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.position_components import DocumentAwarePositions
from mdsfair.modules.self_attention_components import DependencySelfAttention

logger = logging.getLogger(__name__)

#: The one source of the dape_transformer model's defaults
#: (``mdsfair.models.flag_defaults``): Ma et al. 2022's full model (Table III,
#: both encodings on), f_doc = sin with alpha 0.1 (Sec. IV-B, Table IV), the
#: MLP F_depEnc on the attention weights of every encoder layer (Eq. 7-9);
#: where the paper is silent (hidden size, LeakyReLU slope: PyTorch's, arc
#: direction, 0-based document index) the choices of examples/dape/README.md.
DEFAULTS = FlagDefaults(
    {
        "no_doc_positions": False,
        "no_dependency_encoding": False,
        **DocumentAwarePositions.flag_defaults(),
        **DependencySelfAttention.flag_defaults(),
        "encoder_self_attention": "dependency",
        "encoder_positions": "document-aware",
        "cross_attention": "full",
        # fairseq's Transformer flags where the paper differs from fairseq's base_architecture
        "encoder_layers": 8,
        "decoder_layers": 8,
        "share_all_embeddings": True,
    }
)


def dape_components(args) -> None:
    """DAPE's encoder components, each back to fairseq's under its Table III
    ablation flag; the decoder's cross-attention is fairseq's."""
    apply_ablations(args, "dape_transformer", DAPE_COMPONENTS, DAPE_ABLATIONS)
    DEFAULTS.fill(args, **DAPE_COMPONENTS)
    choose(args, "cross_attention", "full", "the dape_transformer architecture (fairseq's decoder)")


def fairseq_token_positions(args) -> str:
    """fairseq's own token positions: learned under ``--encoder-learned-pos``, else sinusoidal."""
    return "learned" if getattr(args, "encoder_learned_pos", False) else "sinusoidal"


#: DAPE's encoder (Ma et al. 2022, Fig. 1) as components.
DAPE_COMPONENTS = {"encoder_self_attention": "dependency", "encoder_positions": "document-aware"}
#: DAPE's Table III ablations: each encoding back to the Transformer's.
DAPE_ABLATIONS = (
    Ablation("no_dependency_encoding", "encoder_self_attention", "dependency", "full"),
    Ablation("no_doc_positions", "encoder_positions", "document-aware", fairseq_token_positions),
)


@register_model("dape_transformer")
class DapeTransformerModel(MultiDocHubModel, SideInputForward, TransformerModel):
    """Transformer with document-aware positional encoding and linguistic-guided
    encoding (Ma et al., 2022). Train on ``--task multidoc_summarization``
    with a data-bin preprocessed with ``--side-data dep_head dep_rel``."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "Transformer with document-aware positions and dependency-guided encoder attention (Ma et al. 2022); "
        "raw clusters are parsed with spaCy as in preprocessing"
    )

    def side_inputs(self):
        """Data-contract inputs the encoder's components read: name -> required."""
        return dict(self.encoder.side_input_declarations)

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument(
            "--no-doc-positions",
            action="store_true",
            help=(
                "ablation 'w/o doc-pos en' (Table III): fairseq's token positions over the concatenated "
                "source, no document encoding"
            ),
        )
        parser.add_argument(
            "--no-dependency-encoding",
            action="store_true",
            help="ablation 'w/o depen en' (Table III): plain encoder self-attention, no dependency arcs needed",
        )
        DocumentAwarePositions.add_args(parser)
        DependencySelfAttention.add_args(parser)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return ComponentEncoder(cfg, src_dict, embed_tokens, build_components(cfg))


@register_model_architecture("dape_transformer", "dape_transformer")
def dape_transformer_architecture(args):
    """The paper's model (Section IV-B): 8 encoder and 8 decoder layers,
    Transformer-base dimensions, dropout 0.1, shared source/target embeddings
    (one dictionary, as the OpenNMT Multi-News baseline it builds on).
    fairseq's ``base_architecture`` gives the rest (d 512, FFN 2048, 8
    heads, dropout 0.1); :data:`DEFAULTS` holds the fairseq Transformer
    flags where the paper differs from it."""
    dape_components(args)
    DEFAULTS.fill(args)
    base_architecture(args)


@register_model_architecture("dape_transformer", "dape_transformer_tiny")
def dape_transformer_tiny_architecture(args):
    """Tiny dimensions for tests: 2 + 2 layers, d 32, 4 heads, FFN 64."""
    set_tiny_dimensions(args)
    dape_transformer_architecture(args)
