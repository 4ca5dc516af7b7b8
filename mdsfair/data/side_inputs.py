"""The side inputs of a batch: every stream collated beside ``src_tokens``.

One table, :data:`SIDE_INPUTS`, names each side input of the data contract
(``docs/data_contract.md``, "In a batch"): the ``net_input`` key, the stored
stream it is collated from (a structure stream of
:data:`~mdsfair.data.manifest.STRUCTURE_STREAMS` or a side-data stream of
``mdsfair-preprocess --side-data``), its dtype, its value at padding and its
shape rule. The collater (:func:`collate_side_inputs`), the one check of a
batch's side inputs (:func:`check_side_inputs`, run by the encoder that reads
them) and the documentation read this table.

A side-data stream the table does not list (a producer of a user's own,
registered with ``register_side_data_producer``) is collated as its kind
says (:func:`side_input_of_side_data`): ``src_`` plus its name, ``[B, T]`` for
the token kinds, ``[B, P, P]`` for ``paragraph_matrix``.
"""

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from fairseq.data import data_utils
from torch import Tensor

from mdsfair.data.side_data import SideDataSpec

#: shape rules: one value per source token, aligned to ``src_tokens``
TOKEN_ALIGNED = "[B, T]"
#: one value per pair of the example's paragraphs (rows and columns beyond its paragraphs: padding)
PARAGRAPH_MATRIX = "[B, P, P]"


@dataclass(frozen=True)
class SideInput:
    """One side input of a batch: its ``net_input`` key (``name``), the
    stored stream it comes from, its dtype, its value at padding, its shape
    rule (:data:`TOKEN_ALIGNED` or :data:`PARAGRAPH_MATRIX`) and what it holds."""

    name: str
    stream: str
    dtype: torch.dtype
    pad: int
    shape: str
    meaning: str

    def collate(self, values: Sequence[Tensor]) -> Tensor:
        """The examples' ``values`` as one batch tensor, right-padded with :attr:`pad`."""
        if self.shape == PARAGRAPH_MATRIX:
            size = max(value.size(0) for value in values)
            batch = values[0].new_full((len(values), size, size), self.pad)
            for row, value in enumerate(values):
                batch[row, : value.size(0), : value.size(1)] = value
            return batch
        return data_utils.collate_tokens(list(values), self.pad, left_pad=False)

    def misfit(self, value: Tensor, src_tokens: Tensor) -> Optional[str]:
        """Why ``value`` breaks this input's shape rule for ``src_tokens``, or None."""
        if self.shape == TOKEN_ALIGNED and value.shape != src_tokens.shape:
            return (
                f"{self.name} {list(value.shape)} is not aligned to src_tokens {list(src_tokens.shape)} "
                f"({self.shape}: one value per source token)"
            )
        if self.shape == PARAGRAPH_MATRIX and (
            value.dim() != 3 or value.size(0) != src_tokens.size(0) or value.size(1) != value.size(2)
        ):
            return (
                f"{self.name} {list(value.shape)} is not {self.shape} for the {src_tokens.size(0)} sources of "
                f"src_tokens {list(src_tokens.shape)}"
            )
        return None


#: The structure of every source token (``{split}.doc``, ``.para``, ``.sent``), renumbered
#: 0, 1, 2, ... after truncation; the inserted ``<s>`` takes the ids of the token after
#: it, the closing ``</s>`` those of the token before it.
STRUCTURE_INPUTS: Tuple[SideInput, ...] = (
    SideInput("src_doc_ids", "doc", torch.int64, -1, TOKEN_ALIGNED, "document of each token"),
    SideInput("src_para_ids", "para", torch.int64, -1, TOKEN_ALIGNED, "paragraph of each token (stream order)"),
    SideInput("src_sent_ids", "sent", torch.int64, -1, TOKEN_ALIGNED, "sentence of each token (stream order)"),
)

#: The side data of mdsfair's producers (``preprocess/producers/``), by stored stream.
SIDE_DATA_INPUTS: Tuple[SideInput, ...] = (
    SideInput(
        "src_dep_head",
        "dep_head",
        torch.int64,
        -1,
        TOKEN_ALIGNED,
        "position of each token's dependency head in the source, -1 for none",
    ),
    SideInput("src_dep_rel", "dep_rel", torch.int64, -1, TOKEN_ALIGNED, "dependency relation id of each token"),
    SideInput(
        "src_dep_word", "dep_word", torch.int64, -1, TOKEN_ALIGNED, "position of the first subword of each token's word"
    ),
    SideInput(
        "src_graph_similarity",
        "graph_similarity",
        torch.float32,
        0,
        PARAGRAPH_MATRIX,
        "tf-idf cosine similarity of the kept paragraphs",
    ),
    SideInput(
        "src_graph_discourse",
        "graph_discourse",
        torch.float32,
        0,
        PARAGRAPH_MATRIX,
        "approximate discourse graph of the kept paragraphs",
    ),
)

#: Every side input the table knows, by ``net_input`` key.
SIDE_INPUTS: Dict[str, SideInput] = {side_input.name: side_input for side_input in STRUCTURE_INPUTS + SIDE_DATA_INPUTS}


def side_input_of_side_data(spec: SideDataSpec) -> SideInput:
    """The side input a side-data stream is collated as: the table's row for
    mdsfair's producers, else one made from its kind (``src_`` + its name)."""
    for side_input in SIDE_DATA_INPUTS:
        if side_input.stream == spec.name:
            return side_input
    if spec.kind == "paragraph_matrix":
        return SideInput("src_" + spec.name, spec.name, torch.float32, 0, PARAGRAPH_MATRIX, "side data (paragraphs)")
    return SideInput("src_" + spec.name, spec.name, torch.int64, -1, TOKEN_ALIGNED, f"side data ({spec.kind})")


def collate_side_inputs(
    structures: Sequence[Mapping[str, Tensor]],
    side_data: Sequence[Mapping[str, Tensor]],
    side_data_specs: Iterable[SideDataSpec],
) -> Dict[str, Tensor]:
    """The side inputs of a batch: every structure stream (``structures``:
    one ``{stream: ids}`` per example) and every side-data stream of
    ``side_data_specs`` (``side_data``: one ``{name: values}`` per example),
    under their ``net_input`` keys."""
    collated = {
        side_input.name: side_input.collate([structure[side_input.stream] for structure in structures])
        for side_input in STRUCTURE_INPUTS
    }
    for spec in side_data_specs:
        side_input = side_input_of_side_data(spec)
        collated[side_input.name] = side_input.collate([values[spec.name] for values in side_data])
    return collated


def check_side_inputs(
    src_tokens: Tensor,
    given: Mapping[str, Tensor],
    declared: Mapping[str, bool],
    reader: str,
    readers_of: Optional[Mapping[str, List[str]]] = None,
) -> None:
    """The one check of a batch's side inputs, before the encoder reads them:
    ``given`` (name -> tensor) holds only inputs ``declared`` (name ->
    required) by ``reader`` (the model or its components, for the message),
    every required one, and each in its shape rule (:data:`SIDE_INPUTS`; a
    name the table does not know has no rule). Raises ``ValueError`` with one
    line per failure: the input, the shapes, and (``readers_of``: name ->
    the components that read it) who needs a missing one."""
    failures = []
    for name in sorted(set(given) - set(declared)):
        failures.append(
            f"side input {name} not declared by any component of this model ({reader}); "
            f"it reads {list(declared) or 'none'}"
        )
    for name, required in declared.items():
        if required and given.get(name) is None:
            needed_by = ", ".join((readers_of or {}).get(name) or [reader])
            failures.append(
                f"missing side input {name} (needed by {needed_by}; the multidoc_summarization task makes it "
                "from an mdsfair data-bin, docs/data_contract.md)"
            )
    for name, value in given.items():
        rule = SIDE_INPUTS.get(name)
        misfit = rule.misfit(value, src_tokens) if rule is not None and value is not None else None
        if misfit is not None:
            failures.append(misfit)
    if failures:
        raise ValueError("\n".join(failures))


def side_input_table() -> str:
    """The Markdown table of :data:`SIDE_INPUTS` that ``docs/data_contract.md`` holds."""
    rows = [
        "| `net_input` key | stored stream | dtype | at padding | shape | holds |",
        "|---|---|---|---|---|---|",
    ]
    for side_input in SIDE_INPUTS.values():
        stream = f"`{{split}}.{side_input.stream}`"
        dtype = str(side_input.dtype).replace("torch.", "")
        rows.append(
            f"| `{side_input.name}` | {stream} | {dtype} | {side_input.pad} | {side_input.shape} | "
            f"{side_input.meaning} |"
        )
    return "\n".join(rows)
