"""spaCy pipelines of preprocessing, loaded once per process, with their
matrix products on numpy's BLAS (``mdsfair-preprocess --spacy-gemm``).

Most of the CPU time of spaCy's small English pipeline goes to the matrix
products of its networks (80% of ``tok2vec`` with thinc's default ``blis``).
The ``blis`` wheel has kernels for Intel Haswell/Skylake-X and AMD Zen/Zen 2
but not for newer AMD processors: on this project's AMD EPYC (family 25, Zen 3)
it selects its portable ``generic`` kernels (``BLIS_ARCH_DEBUG=1`` prints
``selecting sub-configuration 'generic'``) and reaches 18 GFLOPS on
``tok2vec``'s shapes, where numpy's BLAS (OpenBLAS, Haswell kernels) reaches
71. So by default (``numpy``) every layer of the loaded components runs on
thinc's ``NumpyOps(use_blis=False)``: the same model, weights and operations,
1.8x the words per CPU-second of the parser here. Only the order of
floating-point sums changes: the parses of the 182,511 tokens of the
benchmark's sample are identical, and ``tests/test_dape.py`` checks it on real
PeerSum sentences. ``blis`` keeps thinc's default (the parser's transition
step always uses blis through thinc's C interface; it is not switched).
"""

import functools
from typing import Sequence

GEMM_CHOICES = ("numpy", "blis")
GEMM_HELP = (
    "matrix products of the spaCy pipelines (dependency arcs, --sentence-splitter spacy, graph_discourse's "
    "entities): numpy (numpy's BLAS; 1.8x faster than blis on this project's CPUs, identical parses on "
    "the tested data) or blis (thinc's default)"
)


def gemm_setting(args) -> str:
    """``--spacy-gemm`` of preprocessing arguments (``numpy`` where they
    predate the flag, e.g. the arguments of an older data-bin's manifest)."""
    return getattr(args, "spacy_gemm", None) or "numpy"


def use_numpy_gemm(nlp) -> int:
    """Run the matrix products of ``nlp``'s components with numpy's BLAS
    instead of blis: every layer on thinc's CPU ``NumpyOps`` gets
    ``NumpyOps(use_blis=False)`` (GPU layers are left alone). Returns the
    number of layers switched."""
    from thinc.api import NumpyOps

    numpy_ops = NumpyOps(use_blis=False)
    switched = 0
    for _, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is None or not hasattr(model, "walk"):
            continue
        for layer in model.walk():
            if isinstance(layer.ops, NumpyOps):
                layer.ops = numpy_ops
                switched += 1
    return switched


@functools.lru_cache(maxsize=None)
def load_spacy_pipeline(model: str, exclude: Sequence[str] = (), gemm: str = "numpy"):
    """``spacy.load(model, exclude=exclude)`` with the matrix products on
    ``gemm``; one pipeline per setting and process (the pipelines keep no
    state between texts, so sharing them is safe)."""
    import spacy

    if gemm not in GEMM_CHOICES:
        raise ValueError(f"--spacy-gemm {gemm!r}: choose from {GEMM_CHOICES}")
    nlp = spacy.load(model, exclude=list(exclude))
    if gemm == "numpy":
        use_numpy_gemm(nlp)
    return nlp
