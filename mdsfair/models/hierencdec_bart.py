"""HierEncDec: hierarchical encoding and decoding on BART (Shen et al.,
Findings of EMNLP 2023), without new parameters.

Input (Sec. 4.1, the data contract's default): every document starts with
``<s>``, its start-of-document (SOD) token, and one ``</s>`` closes the source.

* Hierarchical encoder (Sec. 4.1): tokens attend within their document, SOD
  tokens also to every other SOD token
  (:mod:`mdsfair.modules.document_blocked_attention`, computed per document
  block rather than as a masked ``T x T`` matrix);
* position restart (Sec. 4.1.1): encoder positions restart at every document
  (:mod:`mdsfair.modules.segment_positions`);
* hierarchical decoder (Sec. 4.2, Eq. 3-5): cross-attention softmax within
  each document scaled by a softmax over the SOD scores
  (:mod:`mdsfair.modules.hierarchical_cross_attention`).

The model is the component model (:mod:`mdsfair.models.component_model`)
with the ``document`` encoder attention, ``document-restart`` positions and
``document-scaled`` cross-attention (:mod:`mdsfair.models.presets`). The
ablation flags switch each part off (Table 3); with all of them off the
model computes exactly BART. The document structure is carried in the
encoder output (``src_doc_ids``) and reordered with it, so beam search runs
at any batch size. A BART checkpoint's 1,026-row position table is extended
by tiling when the checkpoint is loaded (Sec. 5.3).
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import (
    HIERENCDEC,
    HIERENCDEC_ABLATIONS,
    PRIMERA_HIERENCDEC,
    apply_ablations,
    apply_built_ablations,
    bart_dimensions,
    family_defaults,
    hierencdec_source_positions,
)

#: The one source of the hierencdec_bart model's defaults
#: (``mdsfair.models.flag_defaults``): Shen et al. 2023, every part of the
#: hierarchy on (Table 3 row 0), position tables extended by tiling as
#: Beltagy et al. (Sec. 5.3), the blocked encoder attention (same numbers as
#: the authors' dense mask).
DEFAULTS = family_defaults(**HIERENCDEC)


@register_model("hierencdec_bart")
class HierEncDecBARTModel(MultiDocHubModel, ComponentBARTModel):
    """BART with HierEncDec's hierarchical encoder and decoder; no new parameters.

    Table 3 rows as flags (``<s>`` tokens are the task's default, removed by
    the task's ``--no-document-start-token``):

    ====  =================================================================
    row   flags
    ====  =================================================================
    0     (defaults)
    1     ``--no-position-restart``
    2     ``--no-hierarchical-decoder``
    3     ``--no-hierarchical-decoder --no-position-restart``
    4     ``--no-hierarchical-encoder --no-hierarchical-decoder --no-position-restart``
    5     row 4 + task ``--no-document-start-token`` (= BART)
    ====  =================================================================
    """

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "HierEncDec on BART (Shen et al., 2023): "
        "document-restricted encoder, Eq. 3-5 cross-attention, beam search at any batch size"
    )

    @staticmethod
    def add_family_args(parser):
        parser.add_argument(
            "--no-hierarchical-encoder",
            action="store_true",
            help=(
                "full encoder self-attention over all documents instead of attention within each document "
                "plus the start-of-document exchange (Sec. 4.1; Table 3 'HierEnc' off; = "
                "--encoder-self-attention full)"
            ),
        )
        parser.add_argument(
            "--no-hierarchical-decoder",
            action="store_true",
            help="stock cross-attention softmax instead of Eq. 3-5 (Sec. 4.2; Table 3 'HierDec' off; = "
            "--cross-attention full)",
        )
        parser.add_argument(
            "--no-position-restart",
            action="store_true",
            help=(
                "one position sequence over the whole source instead of restarting at every document "
                "(Sec. 4.1.1; Table 3 'posres' off; = --encoder-positions learned)"
            ),
        )

    @classmethod
    def build_model(cls, args, task):
        """The Table 3 ablation flags switch their part off at build time too,
        so a flag set on a configuration whose components were filled before
        (a checkpoint's) takes effect; one whose part the configuration does
        not have is refused (:func:`mdsfair.models.presets.apply_built_ablations`)."""
        apply_built_ablations(args, HIERENCDEC_ABLATIONS)
        return super().build_model(args, task)


def hierencdec_architecture(args, size: str, **values):
    apply_ablations(args, f"hierencdec_bart_{size}", HIERENCDEC, HIERENCDEC_ABLATIONS)
    hierencdec_source_positions(args)
    bart_dimensions(args, size)
    DEFAULTS.fill(args, **values)


@register_model_architecture("hierencdec_bart", "hierencdec_bart_large")
def hierencdec_bart_large(args):
    hierencdec_architecture(args, "large")


@register_model_architecture("hierencdec_bart", "hierencdec_bart_base")
def hierencdec_bart_base(args):
    hierencdec_architecture(args, "base")


@register_model_architecture("hierencdec_bart", "hierencdec_bart_tiny")
def hierencdec_bart_tiny(args):
    """Tiny dims for tests (the shape of ``tests.utils.TINY_BART_ARGS``)."""
    hierencdec_architecture(args, "tiny")


# ------------------------------------------------------------ combinations


def primera_hierencdec_architecture(args, arch: str, size: str):
    """PRIMERA's Longformer encoder (4,096 positions, window 512) with
    HierEncDec's document positions and document-scaled cross-attention.
    The sources keep HierEncDec's layout (every document opens with its
    ``<s>``, the start-of-document token Eq. 3-5 read), and those ``<s>`` are
    the global tokens (``--global-attention documents``), as PRIMERA makes its
    document boundaries global. A PRIMERA import (``mdsfair-import hf-led``)
    restores into it with ``--restore-file``: no new parameters, the position
    table is PRIMERA's. ``--no-hierarchical-encoder`` is refused: the encoder
    attention is PRIMERA's, not HierEncDec's document attention."""
    apply_ablations(args, arch, PRIMERA_HIERENCDEC, HIERENCDEC_ABLATIONS)
    bart_dimensions(args, size)
    DEFAULTS.fill(args, **PRIMERA_HIERENCDEC)


@register_model_architecture("hierencdec_bart", "primera_hierencdec")
def primera_hierencdec(args):
    primera_hierencdec_architecture(args, "primera_hierencdec", "large")


@register_model_architecture("hierencdec_bart", "primera_hierencdec_tiny")
def primera_hierencdec_tiny(args):
    """Tiny dims for tests; window 8 (several windows per test source)."""
    args.attention_window = getattr(args, "attention_window", None) or "8"
    primera_hierencdec_architecture(args, "primera_hierencdec_tiny", "tiny")
