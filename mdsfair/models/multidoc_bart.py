"""``multidoc_bart``: BART assembled from components by flags.

``--encoder-self-attention``, ``--encoder-positions`` and ``--cross-attention``
choose among the registered components (their table, generated from the
registry, is in ``docs/components.md``), plus each component's own flags
(:mod:`mdsfair.modules.components`); with the defaults it is BART.
HierEncDec (``hierencdec_bart_*``), LED/PRIMERA (``led_*``, ``primera``)
and the sparse decoder (``sparse_bart_*``) are presets of the same class
registered under their own names, as are the combinations
``primera_hierencdec``, ``led_sparse`` and ``hierencdec_sparse``.

A model with ``--cross-attention sparse`` trains its approximator with the
KL loss of ``--task multidoc_summarization_sparse --criterion sparse_kl``.
"""

from fairseq.models import register_model, register_model_architecture

from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import bart_dimensions, family_defaults

#: The one source of the multidoc_bart model's defaults: BART's components,
#: and each component's paper-faithful flags.
DEFAULTS = family_defaults()


@register_model("multidoc_bart")
class MultiDocBARTModel(MultiDocHubModel, ComponentBARTModel):
    """BART whose encoder self-attention, encoder positions and
    cross-attention are chosen by flags (see the module docstring)."""

    defaults = DEFAULTS
    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "BART assembled from components: --encoder-self-attention, --encoder-positions and --cross-attention "
        "(HierEncDec, LED/PRIMERA and the sparse decoder combined)"
    )


@register_model_architecture("multidoc_bart", "multidoc_bart_base")
def multidoc_bart_base(args):
    bart_dimensions(args, "base")
    DEFAULTS.fill(args)


@register_model_architecture("multidoc_bart", "multidoc_bart_large")
def multidoc_bart_large(args):
    bart_dimensions(args, "large")
    DEFAULTS.fill(args)


@register_model_architecture("multidoc_bart", "multidoc_bart_tiny")
def multidoc_bart_tiny(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``)."""
    bart_dimensions(args, "tiny")
    DEFAULTS.fill(args)
