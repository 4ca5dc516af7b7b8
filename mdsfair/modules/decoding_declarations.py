"""What a generator declares in the ``incremental_state`` it drives, for
the decoders to skip work whose result it discards.

fairseq's ``SequenceGenerator`` keeps every step's ``attn`` (the alignment
layer's attention over the source, averaged over heads) for
``--print-alignment``, so a decoder computes it at every step. mdsfair's
static-shape generator (:mod:`mdsfair.generation.static_decoding`) keeps it
only with ``keep_attention``; otherwise it calls
:func:`declare_alignment_unused`, and mdsfair's component decoder
(:class:`~mdsfair.models.component_model.ComponentDecoder`) then computes
no alignment unless its caller names an ``alignment_layer``. The beam
groups of the in-place self-attention caches are declared the same way
(:func:`~mdsfair.modules.beam_cached_self_attention.declare_beam_groups`).
"""
from typing import Dict, Optional

#: ``incremental_state`` entry of a generator that discards the decoder's attention over the source
ALIGNMENT_UNUSED = "mdsfair.alignment_unused"


def declare_alignment_unused(incremental_state: Dict) -> None:
    """Declare that the generator driving ``incremental_state`` discards the
    ``attn`` its decoder steps return (see the module docstring)."""
    incremental_state[ALIGNMENT_UNUSED] = True


def alignment_unused(incremental_state: Optional[Dict]) -> bool:
    """Whether :func:`declare_alignment_unused` was called on ``incremental_state``."""
    return incremental_state is not None and ALIGNMENT_UNUSED in incremental_state
