"""The side inputs of a batch: every stream collated beside ``src_tokens``.

One table, :data:`SIDE_INPUTS`, names each side input of the data contract
(``docs/data_contract.md``, "In a batch"): the ``net_input`` key, the stored
stream it is collated from (a structure stream of
:data:`~mdsfair.data.manifest.STRUCTURE_STREAMS` or a side-data stream of
``mdsfair-preprocess --side-data``), its dtype, its value at padding and its
shape rule, and the rule its values follow (:class:`ValueRule`: structure
ids in runs, positions in the source and relation ids in range, a paragraph graph that
covers the paragraphs). The collater (:func:`collate_side_inputs`), the one
check of a batch's side inputs (:func:`check_side_inputs`, run once per batch
by the encoder that reads them) and the documentation read this table; the
models and components only declare which inputs they read.

A side-data stream the table does not list (a producer of a user's own,
registered with ``register_side_data_producer``) is collated as its kind
says (:func:`side_input_of_side_data`): ``src_`` plus its name, ``[B, T]`` for
the token kinds, ``[B, P, P]`` for ``paragraph_matrix``.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from fairseq.data import data_utils
from torch import Tensor

from mdsfair.data.dependency_relations import DEPENDENCY_RELATIONS
from mdsfair.data.side_data import SideDataSpec

#: shape rules: one value per source token, aligned to ``src_tokens``
TOKEN_ALIGNED = "[B, T]"
#: one value per pair of the example's paragraphs (rows and columns beyond its paragraphs: padding)
PARAGRAPH_MATRIX = "[B, P, P]"


#: A check of a batch's values: a 0-dim bool tensor, True when the batch breaks
#: the rule, and the message, made only then (it reads where the batch breaks it).
ValueCheck = Tuple[Tensor, Callable[[], str]]


def first_offender(offending: Tensor) -> Tuple[int, ...]:
    """The index (example, position, ...) of the first True of ``offending``."""
    return tuple(offending.nonzero()[0].tolist())


def shape_of(value: Tensor) -> List[int]:
    return list(value.shape)


class ValueRule:
    """What the values of a side input must be at the source's real
    (non-padding) tokens, beyond its dtype and shape: :meth:`checks` gives
    the batch's checks without reading them, so that the encoder reads every
    check of a batch at once."""

    #: the rule in words, for the documentation (``docs/data_contract.md``)
    description = ""

    def checks(self, name: str, value: Tensor, padding_mask: Tensor, given: Mapping[str, Tensor]) -> List[ValueCheck]:
        """The checks of ``value`` (side input ``name``) for the source whose
        ``padding_mask`` ([B, T], True at padding) is given, beside the batch's
        other side inputs ``given``."""
        raise NotImplementedError


class StructureRuns(ValueRule):
    """Structure ids (``doc``, ``para``, ``sent``): negative at padding (the
    data contract pads with -1), every real token has a ``unit`` (an id >=
    0), and the ids never decrease along an example, so each unit is one run
    of tokens (the data contract renumbers them 0, 1, 2, ... in stream order)."""

    def __init__(self, unit: str):
        self.unit = unit
        self.description = (
            f"negative at padding (-1), >= 0 at every other token, non-decreasing along the example "
            f"(one run per {unit})"
        )

    def checks(self, name, value, padding_mask, given):
        # a real token without a unit, or padding with one
        misplaced = value.lt(0) != padding_mask
        # a real token whose id is below its predecessor's (padding is negative, below every id)
        decreasing = value[:, 1:].lt(value[:, :-1]) & ~padding_mask[:, 1:]

        def misplaced_message():
            row, position = first_offender(misplaced)
            found = int(value[row, position])
            if bool(padding_mask[row, position]):
                return (
                    f"{name} {shape_of(value)} holds {found} at padding of src_tokens {shape_of(padding_mask)} "
                    f"(example {row}, position {position}); the data contract pads it with -1"
                )
            return (
                f"{name} {shape_of(value)} is negative at a non-pad token of src_tokens {shape_of(padding_mask)} "
                f"(example {row}, position {position}: {found}); every source token needs a {self.unit}"
            )

        def decreasing_message():
            row, position = first_offender(decreasing)
            return (
                f"{name} {shape_of(value)} must be non-decreasing runs along each example (one run per "
                f"{self.unit}), but example {row} goes from {int(value[row, position])} to "
                f"{int(value[row, position + 1])} at position {position + 1}"
            )

        return [(misplaced.any(), misplaced_message), (decreasing.any(), decreasing_message)]


class IndexRange(ValueRule):
    """Indices, -1 for none: pointers into the source (``count`` None: below
    its length ``T``) or ids of an inventory of ``count`` entries (``what``)."""

    def __init__(self, count: Optional[int] = None, what: str = ""):
        self.count, self.what = count, what
        self.description = (
            "-1 (none) or a position of the source, below its length T"
            if count is None
            else f"-1 (none) or an id below {count} ({what})"
        )

    def checks(self, name, value, padding_mask, given):
        limit = value.size(1) if self.count is None else self.count
        outside = value.lt(-1) | value.ge(limit)

        def message():
            row, position = first_offender(outside)
            allowed = (
                f"a position below the {limit} tokens of src_tokens {shape_of(padding_mask)}"
                if self.count is None
                else f"an id below {limit} ({self.what})"
            )
            return (
                f"{name} {shape_of(value)} holds {int(value[row, position])} at example {row}, position "
                f"{position}: -1 for none, else {allowed}"
            )

        return [(outside.any(), message)]


class CoversParagraphs(ValueRule):
    """A paragraph matrix ``[B, P, P]`` has a row and a column for every
    paragraph the tokens name (``src_para_ids``, when the batch has them):
    ``P`` above every paragraph id."""

    description = "P > every paragraph id of src_para_ids (when given)"

    def checks(self, name, value, padding_mask, given):
        paragraph_ids = given.get("src_para_ids")
        if paragraph_ids is None or paragraph_ids.shape != padding_mask.shape:
            return []
        size = value.size(1)
        beyond = paragraph_ids.ge(size) & ~padding_mask

        def message():
            row, position = first_offender(beyond)
            paragraphs = int(paragraph_ids[row].max()) + 1
            return (
                f"{name} {shape_of(value)} has {size} paragraph rows, but example {row} of src_para_ids "
                f"{shape_of(paragraph_ids)} has {paragraphs} paragraphs: expected [B, P, P] with P >= {paragraphs}"
            )

        return [(beyond.any(), message)]


@dataclass(frozen=True)
class SideInput:
    """One side input of a batch: its ``net_input`` key (``name``), the
    stored stream it comes from, its dtype, its value at padding, its shape
    rule (:data:`TOKEN_ALIGNED` or :data:`PARAGRAPH_MATRIX`), what it holds
    and the rule of its values (``values``; None: any value of its dtype)."""

    name: str
    stream: str
    dtype: torch.dtype
    pad: int
    shape: str
    meaning: str
    values: Optional[ValueRule] = None

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
        """Why ``value`` breaks this input's dtype or shape rule for ``src_tokens``, or None."""
        if value.dtype.is_floating_point != self.dtype.is_floating_point or value.dtype == torch.bool:
            kind = "floating-point" if self.dtype.is_floating_point else "integer"
            return (
                f"{self.name} {list(value.shape)} is {str(value.dtype).replace('torch.', '')}, not {kind} "
                f"({str(self.dtype).replace('torch.', '')} in the data contract)"
            )
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
    SideInput(
        "src_doc_ids", "doc", torch.int64, -1, TOKEN_ALIGNED, "document of each token", StructureRuns("document")
    ),
    SideInput(
        "src_para_ids",
        "para",
        torch.int64,
        -1,
        TOKEN_ALIGNED,
        "paragraph of each token (stream order)",
        StructureRuns("paragraph"),
    ),
    SideInput(
        "src_sent_ids",
        "sent",
        torch.int64,
        -1,
        TOKEN_ALIGNED,
        "sentence of each token (stream order)",
        StructureRuns("sentence"),
    ),
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
        IndexRange(),
    ),
    SideInput(
        "src_dep_rel",
        "dep_rel",
        torch.int64,
        -1,
        TOKEN_ALIGNED,
        "dependency relation id of each token",
        IndexRange(len(DEPENDENCY_RELATIONS), "the relations of mdsfair.data.dependency_relations"),
    ),
    SideInput(
        "src_dep_word",
        "dep_word",
        torch.int64,
        -1,
        TOKEN_ALIGNED,
        "position of the first subword of each token's word",
        IndexRange(),
    ),
    SideInput(
        "src_graph_similarity",
        "graph_similarity",
        torch.float32,
        0,
        PARAGRAPH_MATRIX,
        "tf-idf cosine similarity of the kept paragraphs",
        CoversParagraphs(),
    ),
    SideInput(
        "src_graph_discourse",
        "graph_discourse",
        torch.float32,
        0,
        PARAGRAPH_MATRIX,
        "approximate discourse graph of the kept paragraphs",
        CoversParagraphs(),
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
    *,
    padding_mask: Tensor,
    pending: Optional[List[ValueCheck]] = None,
) -> None:
    """The one check of a batch's side inputs, before the encoder reads them:
    ``given`` (name -> tensor) holds only inputs ``declared`` (name ->
    required) by ``reader`` (the model or its components, for the message),
    every required one, each in its dtype and shape rule, and each one's
    values in its value rule at the tokens ``padding_mask`` ([B, T], True at
    padding) leaves (:data:`SIDE_INPUTS`; a name the table does not know has
    no rule).

    The names, dtypes and shapes are known without reading the batch: a
    failure raises ``ValueError`` with one line per failure, naming the
    input, the shapes, and (``readers_of``: name -> the components that read
    it) who needs a missing one. The values are then checked on the batch's
    device; their checks are appended to ``pending`` (the encoder's
    :class:`~mdsfair.modules.source_structure.SourceStructure` reads them with
    its other checks of the batch, in one host read), or, without
    ``pending``, read here, in one host read, each failure naming the example
    and the position."""
    failures = []
    for name in sorted(set(given) - set(declared)):
        failures.append(
            f"side input {name} not declared by any component of this model ({reader}); "
            f"it reads {list(declared) or 'none'}"
        )
    for name, required in declared.items():
        if required and given.get(name) is None:
            needed_by = ", ".join((readers_of or {}).get(name) or [reader])
            rule = SIDE_INPUTS.get(name)
            made_by = (
                f"an mdsfair data-bin preprocessed with mdsfair-preprocess --side-data {rule.stream}"
                if rule in SIDE_DATA_INPUTS
                else "an mdsfair data-bin"
            )
            failures.append(
                f"missing side input {name} (needed by {needed_by}; the multidoc_summarization task makes it "
                f"from {made_by}, docs/data_contract.md)"
            )
    for name, value in given.items():
        rule = SIDE_INPUTS.get(name)
        misfit = rule.misfit(value, src_tokens) if rule is not None and value is not None else None
        if misfit is not None:
            failures.append(misfit)
    if failures:
        raise ValueError("\n".join(failures))
    value_checks = [
        check
        for name, value in given.items()
        if value is not None and SIDE_INPUTS.get(name) is not None and SIDE_INPUTS[name].values is not None
        for check in SIDE_INPUTS[name].values.checks(name, value, padding_mask, given)
    ]
    if pending is not None:
        pending.extend(value_checks)
    elif value_checks:
        failed = torch.stack([flag for flag, _ in value_checks]).tolist()
        messages = [message() for broken, (_, message) in zip(failed, value_checks) if broken]
        if messages:
            raise ValueError("\n".join(messages))


def side_input_table() -> str:
    """The Markdown table of :data:`SIDE_INPUTS` that ``docs/data_contract.md`` holds."""
    rows = [
        "| `net_input` key | stored stream | dtype | at padding | shape | holds | values |",
        "|---|---|---|---|---|---|---|",
    ]
    for side_input in SIDE_INPUTS.values():
        stream = f"`{{split}}.{side_input.stream}`"
        dtype = str(side_input.dtype).replace("torch.", "")
        values = side_input.values.description if side_input.values is not None else "any"
        rows.append(
            f"| `{side_input.name}` | {stream} | {dtype} | {side_input.pad} | {side_input.shape} | "
            f"{side_input.meaning} | {values} |"
        )
    return "\n".join(rows)
