"""The fast variant of mdsfair's decoder layer
(:class:`~mdsfair.modules.transformer_layers.ComponentDecoderLayer`) for the
steps of a static beam search:

* its feed-forward products (``fc1``, ``fc2``) become
  :class:`~mdsfair.generation.fast.step_linear.StepProductLinear` (the same
  parameters), taken as ``W x^T`` where that is faster on a CPU;
* when the generator discards the attention over the source (no
  ``keep_attention``: fairseq's generator keeps every step's alignment-layer
  attention for ``--print-alignment``, the static one only when asked), the
  layer computes none: the cross-attention component is not asked for its
  averaged weights, which changes none of the layer's other outputs.

Outside a static beam search the layer is its reference.
"""

from torch import nn

from mdsfair.generation.fast import fast_variant_of
from mdsfair.generation.fast.static_beam_search import FollowsStaticBeamSearch
from mdsfair.generation.fast.step_linear import StepProductLinear
from mdsfair.modules.transformer_layers import ComponentDecoderLayer


@fast_variant_of(ComponentDecoderLayer)
class StaticStepDecoderLayer(ComponentDecoderLayer, FollowsStaticBeamSearch):
    """:class:`ComponentDecoderLayer` with the speed-ups of the module
    docstring in a static beam search's steps."""

    def became_fast(self) -> None:
        """``fc1`` and ``fc2`` (fairseq's ``nn.Linear``; one with quantization
        noise keeps its own class and hooks) become step-product linears."""
        for linear in (self.fc1, self.fc2):
            if type(linear) is nn.Linear and not linear._forward_pre_hooks and not linear._forward_hooks:
                linear.__class__ = StepProductLinear

    def forward(self, *args, incremental_state=None, need_attn: bool = False, **options):
        """The reference's forward (the same arguments), without the alignment
        layer's attention in the steps whose generator discards it."""
        search = self.static_beam_search
        if search is not None and not search.keep_attention and self.in_static_step(incremental_state):
            need_attn = False
        return super().forward(*args, incremental_state=incremental_state, need_attn=need_attn, **options)
