"""The typed context of one batch of sources.

:class:`SourceStructure` is what the encoder knows about a batch before its
layers run (the tokens, the padding, the checked side inputs, each token's
document) and the host reads its components wait for, made once per batch
by the encoder. :class:`SourceContext` is what the decoder's cross-attention
reads of the source: one entry of the encoder output
(``encoder_out["source_context"]``), batch-first, which reorders itself with
the hypotheses of a beam search (:meth:`SourceContext.index_select`), so a
component names no encoder-output key and lists none for reordering.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from mdsfair.modules.segment_positions import SegmentRuns, segment_runs

#: The encoder-output entry that holds the :class:`SourceContext` (a list of none or one).
SOURCE_CONTEXT = "source_context"


@dataclass
class SourceStructure:
    """What the encoder knows about a batch of sources before its layers run,
    computed once: the tokens, the padding, the side inputs the task handed
    over (checked once, :func:`~mdsfair.data.side_inputs.check_side_inputs`),
    and (when a component works on documents) each token's document.
    Components read the structure by what it is (:attr:`document_ids`,
    :attr:`sentence_ids`, :attr:`paragraph_ids`, :meth:`side_input`)."""

    src_tokens: Tensor
    padding_mask: Tensor  # [B, T] True at padding
    side_inputs: Dict[str, Tensor]
    document_ids: Optional[Tensor] = None  # [B, T], -1 at padding
    #: what components computed for their later steps (e.g. the position rows)
    prepared: Dict[str, Any] = field(default_factory=dict)
    #: checks of the input waiting for the host: (0-dim bool tensor, True when failed; message)
    pending_checks: List[Tuple[Tensor, Any]] = field(default_factory=list)

    def check(self, failed: Tensor, message) -> None:
        """Refuse the batch with ``message`` if ``failed`` (a 0-dim bool
        tensor) is True, read at the next :meth:`read`: the checks of every
        component then cost one host read together, not one each."""
        self.pending_checks.append((failed, message))

    #: values a later step needs on the host, read with the next :meth:`read` (see :meth:`value`)
    requested: Dict[str, Tensor] = field(default_factory=dict)
    values: Dict[str, int] = field(default_factory=dict)

    def request(self, name: str, value: Tensor) -> None:
        """Read ``value`` (a 0-dim tensor) with the next :meth:`read`; then
        :meth:`value` gives it."""
        self.requested[name] = value

    @property
    def sentence_ids(self) -> Optional[Tensor]:
        """``src_sent_ids [B, T]``: the sentence of every token, when the batch has it."""
        return self.side_inputs.get("src_sent_ids")

    @property
    def paragraph_ids(self) -> Optional[Tensor]:
        """``src_para_ids [B, T]``: the paragraph of every token, when the batch has it."""
        return self.side_inputs.get("src_para_ids")

    def side_input(self, name: str) -> Optional[Tensor]:
        """The side input ``name`` (``src_dep_head``, ...; ``docs/data_contract.md``), or None."""
        return self.side_inputs.get(name)

    def document_runs(self) -> SegmentRuns:
        """The runs of :attr:`document_ids` (each document's start, every
        token's document and offset within it), computed once per batch and
        shared by the position restart and the document layout (HierEncDec,
        Shen et al. 2023, Sec. 4.1)."""
        cached = self.prepared.get("document_runs")
        if cached is None or cached[0] is not self.document_ids:
            cached = self.prepared["document_runs"] = (self.document_ids, segment_runs(self.document_ids))
        return cached[1]

    def value(self, name: str) -> int:
        """A requested value, read now if no :meth:`read` has happened since."""
        if name in self.requested:
            self.read()
        return self.values[name]

    def read(self, *values: Tensor) -> List[int]:
        """The elements of ``values`` (integer or bool tensors, each read whole,
        in order) as Python ints, every requested value and every pending
        check, in one host read (one synchronization on a GPU); raises
        ``ValueError`` with the first failed check's message."""
        checks, self.pending_checks = self.pending_checks, []
        requested, self.requested = self.requested, {}
        tensors = list(values) + list(requested.values()) + [failed for failed, _ in checks]
        if not tensors:
            return []
        numbers = read_integers(tensors)
        value_count = sum(value.numel() for value in values)
        requested_numbers = numbers[value_count : value_count + len(requested)]
        for failed, (_, message) in zip(numbers[value_count + len(requested) :], checks):
            if failed:  # a message may be a function: the details of a refusal are read only then
                raise ValueError(message() if callable(message) else message)
        self.values.update(zip(requested, requested_numbers))
        return numbers[:value_count]


def read_integers(tensors: List[Tensor]) -> List[int]:
    """The elements of the integer and bool ``tensors`` as Python ints,
    tensor after tensor, in one host read (``tolist``). The tensors of each
    dtype are joined, and each join converted to int64 once rather than each
    tensor on its own."""
    indices_by_dtype: Dict[torch.dtype, List[int]] = {}
    for index, tensor in enumerate(tensors):
        indices_by_dtype.setdefault(tensor.dtype, []).append(index)
    joined = [torch.cat([tensors[index].view(-1) for index in indices]).long() for indices in indices_by_dtype.values()]
    numbers = torch.cat(joined).tolist()
    elements, position = {}, 0
    for index in [index for indices in indices_by_dtype.values() for index in indices]:  # the order of ``numbers``
        count = tensors[index].numel()
        elements[index] = numbers[position : position + count]
        position += count
    return [number for index in range(len(tensors)) for number in elements[index]]


@dataclass
class SourceContext:
    """The source as the decoder's cross-attention reads it, one per batch:
    batch-first tensors of the source (``[B, ...]``), each None when the
    cross-attention needs none. A component that reads more (its own states
    derived from the encoder's) subclasses it with typed fields."""

    #: ``[B, T]`` the document of every source token, -1 at padding
    document_ids: Optional[Tensor] = None
    #: ``[B, T]`` the sentence of every source token, -1 at padding
    sentence_ids: Optional[Tensor] = None
    #: ``[B, S, C]`` one state per source sentence, derived from the encoder states
    sentence_states: Optional[Tensor] = None
    #: ``[B, S]`` True at the sentence slots a source does not fill
    sentence_padding_mask: Optional[Tensor] = None

    def index_select(self, new_order: Tensor) -> "SourceContext":
        """The context of the rows ``new_order`` (beam search: each hypothesis
        reads its source's row): every tensor field ``index_select``-ed along
        the batch, every other value kept."""
        return dataclasses.replace(
            self,
            **{
                item.name: getattr(self, item.name).index_select(0, new_order)
                for item in dataclasses.fields(self)
                if torch.is_tensor(getattr(self, item.name))
            },
        )


def source_context_of(encoder_out: Dict[str, List[Any]], reader: str) -> SourceContext:
    """The :class:`SourceContext` an encoder output holds; ``reader`` (the
    component that needs it) names the refusal when it holds none."""
    stored = encoder_out.get(SOURCE_CONTEXT, []) if encoder_out is not None else []
    if len(stored) == 0:
        raise ValueError(f"{reader} needs the encoder output's source context ({SOURCE_CONTEXT!r}), which it lacks")
    return stored[0]
