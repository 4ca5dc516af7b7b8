"""The dependency relations of the side data ``dep_rel``: relation id =
index in :data:`DEPENDENCY_RELATIONS`.

The producer ``preprocess/producers/dependency_arcs.py`` writes these ids, the
one check of a batch (:func:`mdsfair.data.side_inputs.check_side_inputs`)
bounds ``src_dep_rel`` by them, and DAPE's relation encoder
(:mod:`mdsfair.modules.dependency_attention`, Ma et al. 2022, Eq. 5-7) has one
one-hot dimension per relation. No torch here, so that ``mdsfair-preprocess
--help`` loads none.
"""

from typing import Tuple

#: spaCy's English parser labels (en_core_web_sm 3.x, ClearNLP scheme): 45
#: relations, as many as the paper's biaffine parser (DAPE, Ma et al. 2022). Relation id = index here.
DEPENDENCY_RELATIONS: Tuple[str, ...] = (
    "ROOT",
    "acl",
    "acomp",
    "advcl",
    "advmod",
    "agent",
    "amod",
    "appos",
    "attr",
    "aux",
    "auxpass",
    "case",
    "cc",
    "ccomp",
    "compound",
    "conj",
    "csubj",
    "csubjpass",
    "dative",
    "dep",
    "det",
    "dobj",
    "expl",
    "intj",
    "mark",
    "meta",
    "neg",
    "nmod",
    "npadvmod",
    "nsubj",
    "nsubjpass",
    "nummod",
    "oprd",
    "parataxis",
    "pcomp",
    "pobj",
    "poss",
    "preconj",
    "predet",
    "prep",
    "prt",
    "punct",
    "quantmod",
    "relcl",
    "xcomp",
)
