"""Side data: per-example arrays stored beside the token stream.

Preprocessing may store, for every example, extra arrays aligned to the
source structure (a paragraph graph, dependency arcs, ...). Each has a *kind*
that tells the dataset how truncation and the inserted special tokens apply
to it, so that every model receives side data aligned to the tokens and
paragraphs it actually sees:

``token``
    one integer per stored source token (e.g. a dependency relation id);
    tokens that are cut are cut here too, inserted special tokens get ``-1``.
``token_pointer``
    one integer per stored source token whose *value* is the index of another
    stored source token (e.g. a dependency head), or ``-1``. Values are
    remapped to positions in the final source; pointers to cut tokens become
    ``-1``.
``paragraph_matrix``
    a ``P x P`` float matrix over the example's paragraphs in stream order
    (e.g. a similarity graph); rows and columns of cut paragraphs are removed.
"""

from dataclasses import dataclass

import numpy as np

SIDE_DATA_KINDS = ("token", "token_pointer", "paragraph_matrix")


@dataclass(frozen=True)
class SideDataSpec:
    """Name, kind and storage dtype of one side-data stream."""

    name: str
    kind: str
    dtype: str

    def __post_init__(self):
        if self.kind not in SIDE_DATA_KINDS:
            raise ValueError(f"side data {self.name!r}: unknown kind {self.kind!r}; choose from {SIDE_DATA_KINDS}")
        if not self.name.isidentifier():
            raise ValueError(f"side data name {self.name!r} must be a Python identifier")

    @property
    def numpy_dtype(self):
        return np.dtype(self.dtype)

    def to_json(self):
        return {"kind": self.kind, "dtype": self.dtype}

    @classmethod
    def from_json(cls, name, obj):
        return cls(name=name, kind=obj["kind"], dtype=obj["dtype"])
