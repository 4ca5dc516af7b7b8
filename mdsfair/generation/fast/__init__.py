"""Decoding speed-ups, kept apart from the reference layers.

The layers of :mod:`mdsfair.modules` and the models of :mod:`mdsfair.models`
state each algorithm once, as its paper does. This package holds the
variants that compute the same values faster during generation: each one is
a subclass of a reference module (same parameters, same state-dict keys),
registered with :func:`fast_variant_of`, that runs the reference ``forward``
whenever it is not inside a generation step it knows how to speed up
(training, autograd, a full forward, fairseq's own generator).

:func:`make_generation_fast_` swaps them in, in place, as fairseq's
``make_generation_fast_`` hooks prepare a model for inference: the
static-shape generator (:mod:`mdsfair.generation.static_decoding`) calls it
on its models. Each variant is guarded by float64 equivalence tests against
its reference (the same logits and beams).
"""

from typing import Dict, Type

from torch import nn

from mdsfair._autoimport import import_all_submodules

#: reference module class -> its fast variant (a subclass)
_FAST_VARIANTS: Dict[Type[nn.Module], Type[nn.Module]] = {}


def fast_variant_of(reference_class: Type[nn.Module]):
    """Class decorator: register the decorated class, a subclass of
    ``reference_class`` with no parameters of its own, as the variant
    :func:`make_generation_fast_` puts in place of every module whose class
    is exactly ``reference_class``."""

    def register(fast_class):
        if not issubclass(fast_class, reference_class):
            raise TypeError(f"{fast_class.__name__} must subclass {reference_class.__name__} to replace it")
        if reference_class in _FAST_VARIANTS and _FAST_VARIANTS[reference_class] is not fast_class:
            raise ValueError(
                f"{reference_class.__name__} already has the fast variant {_FAST_VARIANTS[reference_class].__name__}"
            )
        _FAST_VARIANTS[reference_class] = fast_class
        return fast_class

    return register


def fast_variants() -> Dict[Type[nn.Module], Type[nn.Module]]:
    """The registered ``{reference class: fast variant}`` pairs."""
    return dict(_FAST_VARIANTS)


def make_generation_fast_(model: nn.Module) -> nn.Module:
    """Put the registered fast variant in place of every submodule of
    ``model`` whose class is exactly a registered reference class (the
    module's class is changed; its parameters, buffers and state dict stay
    as they are), then call each swapped module's ``became_fast()`` if it
    has one. Idempotent; returns ``model``."""
    for module in model.modules():
        fast_class = _FAST_VARIANTS.get(type(module))
        if fast_class is None:
            continue
        module.__class__ = fast_class
        became_fast = getattr(module, "became_fast", None)
        if became_fast is not None:
            became_fast()
    return model


import_all_submodules(__name__, __file__)
