"""PageSum pages (Liu et al. 2022, Sec. 3, Eq. 5) built from the data contract.

PageSum views a source as non-overlapping *pages*, ``D := {P_1, ..., P_n}``
(Eq. 5), grouped by a principle of locality:

* ``spatial``: the sentences of the (flat, multi-document) stream are split
  into ``num_pages`` contiguous chunks of equal sentence count (chunk sizes
  differ by at most one sentence; fewer sentences than pages: one sentence per
  page); the authors' ``PageSumDataset`` gives every chunk
  ``S // num_pages`` sentences and the remainder to the last page, so with
  fewer sentences than pages every sentence is on the last page, available
  with ``spatial_remainder_to_last_page``;
* ``discourse``: every discourse unit is a page, a paragraph
  (``discourse_unit="paragraph"``) or a section (``"section"``: a document of
  the raw contract is a titled group of paragraphs, e.g. one arXiv section
  whose first paragraph is its title, as the paper's Sec. 5.3 concatenates
  section name and content);
* ``document``: every document of the cluster is a page.

When an example has more units than ``num_pages`` the overflow policy decides,
and nothing is dropped silently (the authors' code drops them): ``truncate``
keeps the first ``num_pages`` units and counts the dropped units and tokens,
``merge`` puts the remaining units into the last page (counted too).

Every page is laid out as ``<s> tokens </s>`` (what BART's encoder was
pre-trained on) and capped at ``page_tokens`` positions, special tokens
included; tokens past the cap are cut and counted. The ``<s>``/``</s>`` the
task inserts into the flat stream are dropped first, so with one page the
page equals the stream ``<s> tokens </s>`` that stock BART reads.

A page with no source token (fewer units than pages) is handled by
``empty_pages``:

* ``mask`` (default): the layout runs up to the last page any example of the
  batch uses, an empty page holds ``<s> </s>`` (encodable) and ``page_mask`` is
  False there, so the decoder leaves it out of the softmax over pages (Eq. 8
  over the pages the example has; the paper lets "each example have different
  numbers of pages", Sec. 5.3);
* ``filler``: the authors' ``PageSumDataset``: every example has exactly
  ``num_pages`` pages, an empty page holds the text ``"."`` tokenized like a
  page (``<s> . </s>``; BART's ids ``0 4 2``) and takes part in the softmax
  like any page. The ids of ``"."`` come from the data's subword model
  (:func:`filler_page_tokens`).

Everything is vectorized index arithmetic over ``[B, T]``: no Python loop over
examples, units or pages.
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from mdsfair.argument_types import check_choice

LOCALITIES = ("spatial", "discourse", "document")
DISCOURSE_UNITS = ("paragraph", "section")
OVERFLOW_POLICIES = ("truncate", "merge")
EMPTY_PAGE_POLICIES = ("mask", "filler")
# What the authors' PageSumDataset puts into a page with no text.
AUTHORS_EMPTY_PAGE_TEXT = "."


@dataclass
class PageLayout:
    """Pages of a batch and what building them cost.

    Attributes:
        tokens: ``[B, P, L]`` page tokens ``<s> ... </s>``, right-padded; an
            empty page holds ``<s> </s>`` (``empty_pages="mask"``: encodable,
            never an all-padding row) or ``<s> filler </s>``
            (``empty_pages="filler"``).
        page_mask: ``[B, P]`` True at the pages the decoder combines: pages
            with source tokens, and filler pages.
        filler_mask: ``[B, P]`` True at pages holding the filler.
        source_position: ``[B, P, L]`` index in ``src_tokens`` of every page
            slot, -1 at ``<s>``, ``</s>`` and padding.
        dropped_units: ``[B]`` units past the last page dropped by the
            ``truncate`` overflow policy.
        dropped_tokens: ``[B]`` the tokens of those units.
        merged_units: ``[B]`` units merged into the last page by ``merge``.
        cut_tokens: ``[B]`` tokens cut because a page exceeded ``page_tokens``.
    """

    tokens: Tensor
    page_mask: Tensor
    filler_mask: Tensor
    source_position: Tensor
    dropped_units: Tensor
    dropped_tokens: Tensor
    merged_units: Tensor
    cut_tokens: Tensor

    @property
    def num_pages(self) -> int:
        return self.tokens.size(1)

    @property
    def page_length(self) -> int:
        return self.tokens.size(2)


def unit_rank(unit_ids: Tensor, content_mask: Tensor) -> Tensor:
    """0, 1, 2, ... for the consecutive runs of equal ``unit_ids`` among the
    content tokens of each example (-1 elsewhere), so ids with gaps, or
    numbered across a truncated cluster, still give dense unit numbers.
    ``unit_ids``: ``[B, T]``, every content token's unit, one run per unit
    (the data contract's structure ids, as the batch check passed them:
    :func:`mdsfair.data.side_inputs.check_side_inputs`)."""
    # The id of the previous content token (padding and specials skipped).
    running_max = unit_ids.masked_fill(~content_mask, -1).cummax(1).values
    previous_id = torch.nn.functional.pad(running_max[:, :-1], (1, 0), value=-1)
    starts = content_mask & (unit_ids != previous_id)
    rank = starts.long().cumsum(1) - 1
    return rank.masked_fill(~content_mask, -1)


def spatial_pages(sentence_rank: Tensor, num_pages: int, remainder_to_last_page: bool = False) -> Tensor:
    """Page of every token for spatial locality: sentences in ``num_pages``
    contiguous chunks of equal sentence count (sizes differ by at most one;
    fewer sentences than pages: one per page).

    With ``remainder_to_last_page``, the authors' ``PageSumDataset``
    arithmetic: ``num = S // num_pages``, sentence ``s`` goes to page
    ``s // num`` for the first ``num * num_pages`` sentences and the rest to
    the last page; with ``S < num_pages`` (``num = 0``) every sentence is on
    the last page."""
    num_sentences = (sentence_rank.max(dim=1, keepdim=True).values + 1).clamp(min=1)
    last_page = torch.full_like(sentence_rank, num_pages - 1)
    if remainder_to_last_page:
        chunk = num_sentences // num_pages
        page = torch.minimum(sentence_rank // chunk.clamp(min=1), last_page)
        page = torch.where(chunk > 0, page, last_page)
    else:
        balanced = sentence_rank * num_pages // num_sentences
        page = torch.where(num_sentences >= num_pages, balanced, sentence_rank)
    return page.masked_fill(sentence_rank < 0, -1)


class PageBuilder:
    """Builds :class:`PageLayout` from ``src_tokens`` and the structure tensors.

    Args:
        locality: ``spatial``, ``discourse`` or ``document``.
        num_pages: pages per example (spatial: exactly this many chunks;
            discourse/document: the maximum).
        page_tokens: positions per page, ``<s>`` and ``</s>`` included.
        bos, eos, pad: the dictionary's special symbols.
        discourse_unit: ``paragraph`` or ``section`` (discourse locality).
        overflow: ``truncate`` or ``merge`` (more units than pages).
        spatial_remainder_to_last_page: the authors' spatial chunking.
        empty_pages: ``mask`` or ``filler`` (see the module docstring).
        filler_tokens: the ids between ``<s>`` and ``</s>`` of a filler page
            (``empty_pages="filler"``; :func:`filler_page_tokens`); may be
            given later with :meth:`set_filler_tokens`.
    """

    def __init__(
        self,
        locality: str,
        num_pages: int,
        page_tokens: int,
        bos: int,
        eos: int,
        pad: int,
        discourse_unit: str = "paragraph",
        overflow: str = "truncate",
        spatial_remainder_to_last_page: bool = False,
        empty_pages: str = "mask",
        filler_tokens: Optional[Sequence[int]] = None,
    ):
        check_choice("locality", locality, LOCALITIES)
        check_choice("discourse unit", discourse_unit, DISCOURSE_UNITS)
        check_choice("page overflow policy", overflow, OVERFLOW_POLICIES)
        check_choice("--empty-pages", empty_pages, EMPTY_PAGE_POLICIES)
        if num_pages < 1:
            raise ValueError(f"--num-pages must be at least 1, got {num_pages}")
        if page_tokens < 3:
            raise ValueError(f"--page-tokens must leave room for <s>, one token and </s> (>= 3), got {page_tokens}")
        self.locality = locality
        self.num_pages = num_pages
        self.page_tokens = page_tokens
        self.bos, self.eos, self.pad = bos, eos, pad
        self.discourse_unit = discourse_unit
        self.overflow = overflow
        self.spatial_remainder_to_last_page = spatial_remainder_to_last_page
        self.empty_pages = empty_pages
        self.filler_tokens: Optional[List[int]] = None
        if filler_tokens is not None:
            self.set_filler_tokens(filler_tokens)

    def set_filler_tokens(self, filler_tokens: Sequence[int]) -> None:
        """The ids a filler page holds between ``<s>`` and ``</s>``."""
        filler_tokens = [int(t) for t in filler_tokens]
        if not filler_tokens:
            raise ValueError("the filler page needs at least one token")
        if len(filler_tokens) > self.page_tokens - 2:
            raise ValueError(
                f"the filler page's {len(filler_tokens)} tokens do not fit --page-tokens {self.page_tokens} "
                "with <s> and </s>"
            )
        if any(t in (self.bos, self.eos, self.pad) for t in filler_tokens):
            raise ValueError(f"filler tokens {filler_tokens} contain <s>, </s> or <pad>")
        self.filler_tokens = filler_tokens

    def unit_ids(
        self,
        doc_ids: Optional[Tensor],
        para_ids: Optional[Tensor],
        sent_ids: Optional[Tensor],
    ) -> Tensor:
        """The structure tensor whose runs are this locality's units
        (:meth:`unit_input` names it)."""
        return {"src_doc_ids": doc_ids, "src_para_ids": para_ids, "src_sent_ids": sent_ids}[self.unit_input()]

    def unit_input(self) -> str:
        """The side input whose runs are this locality's units: the sentences
        (spatial), the paragraphs (discourse, by paragraph) or the documents
        (discourse by section, document)."""
        if self.locality == "spatial":
            return "src_sent_ids"
        if self.locality == "discourse" and self.discourse_unit == "paragraph":
            return "src_para_ids"
        return "src_doc_ids"

    def page_of_token(self, rank: Tensor):
        """Page index of every token (-1: not in any page) and the overflow
        counts ``(dropped_units, merged_units)``, each ``[B]``."""
        num_units = rank.max(dim=1).values + 1
        overflow_units = (num_units - self.num_pages).clamp(min=0)
        zeros = torch.zeros_like(overflow_units)
        if self.locality == "spatial":
            return spatial_pages(rank, self.num_pages, self.spatial_remainder_to_last_page), zeros, zeros
        if self.overflow == "merge":
            page = rank.clamp(max=self.num_pages - 1).masked_fill(rank < 0, -1)
            return page, zeros, overflow_units
        page = rank.masked_fill(rank >= self.num_pages, -1)
        return page, overflow_units, zeros

    def __call__(
        self,
        src_tokens: Tensor,
        src_doc_ids: Optional[Tensor] = None,
        src_para_ids: Optional[Tensor] = None,
        src_sent_ids: Optional[Tensor] = None,
    ) -> PageLayout:
        unit_ids = self.unit_ids(src_doc_ids, src_para_ids, src_sent_ids)
        content_mask = src_tokens.ne(self.pad) & src_tokens.ne(self.bos) & src_tokens.ne(self.eos)
        if not bool(content_mask.any(dim=1).all()):
            raise ValueError("an example has no source token besides <s>, </s> and padding; it cannot form a page")
        rank = unit_rank(unit_ids, content_mask)
        page, dropped_units, merged_units = self.page_of_token(rank)
        in_page = page >= 0
        dropped_tokens = (content_mask & ~in_page).sum(dim=1)
        batch_size, length = src_tokens.shape
        fill = self.empty_pages == "filler"
        if fill and self.filler_tokens is None:
            raise ValueError(
                "PageBuilder with empty_pages='filler' has no filler tokens; PageSumBARTModel.build_model sets "
                "them from the data's subword model (set_filler_tokens)"
            )
        # The authors' pages: always num_pages of them; masked: up to the last page used in the batch.
        num_pages = self.num_pages if fill else int(page.max()) + 1

        # Position of every token inside its page: pages are contiguous runs of
        # the content tokens, so it is the running count minus the count
        # before the page starts.
        page_index = page.clamp(min=0)
        flat_page = torch.arange(batch_size, device=page.device).unsqueeze(1) * num_pages + page_index
        tokens_per_page = torch.zeros(batch_size * num_pages, dtype=torch.long, device=page.device)
        tokens_per_page.scatter_add_(0, flat_page[in_page], torch.ones_like(flat_page[in_page]))
        tokens_per_page = tokens_per_page.view(batch_size, num_pages)
        tokens_before_page = tokens_per_page.cumsum(1) - tokens_per_page
        running = in_page.long().cumsum(1) - 1
        position = running - tokens_before_page.gather(1, page_index)

        capacity = self.page_tokens - 2
        kept = in_page & (position < capacity)
        cut_tokens = (in_page & ~kept).sum(dim=1)
        content_length = tokens_per_page.clamp(max=capacity)
        empty_page = tokens_per_page == 0
        filler_mask = empty_page & fill
        if fill:
            content_length = content_length.masked_fill(filler_mask, len(self.filler_tokens))
        page_length = int(content_length.max()) + 2

        slot = (flat_page * page_length + position + 1)[kept]
        page_tokens = src_tokens.new_full((batch_size * num_pages * page_length,), self.pad)
        page_tokens[slot] = src_tokens[kept]
        source_position = torch.full_like(page_tokens, -1)
        token_index = torch.arange(length, device=src_tokens.device).expand(batch_size, length)
        source_position[slot] = token_index[kept]
        page_tokens = page_tokens.view(batch_size, num_pages, page_length)
        page_tokens[:, :, 0] = self.bos
        if bool(filler_mask.any()):
            filler = torch.tensor(self.filler_tokens, dtype=page_tokens.dtype, device=page_tokens.device)
            filler_slots = page_tokens[:, :, 1 : 1 + len(filler)]
            filler_slots.copy_(torch.where(filler_mask.unsqueeze(2), filler, filler_slots))
        page_tokens.scatter_(2, (content_length + 1).unsqueeze(2), self.eos)
        return PageLayout(
            tokens=page_tokens,
            page_mask=~empty_page | filler_mask,
            filler_mask=filler_mask,
            source_position=source_position.view(batch_size, num_pages, page_length),
            dropped_units=dropped_units,
            dropped_tokens=dropped_tokens,
            merged_units=merged_units,
            cut_tokens=cut_tokens,
        )


def filler_page_tokens(subword_encoder, dictionary, text: str = AUTHORS_EMPTY_PAGE_TEXT) -> List[int]:
    """Dictionary ids of ``text`` (the authors' ``"."``) encoded as a page's
    text: the subword model the data was made with (``encode(text)``, no
    leading space, as ``BartTokenizer`` encodes a page), then the fairseq
    dictionary. With GPT-2 BPE, ``"."`` is BPE id 13, whose symbol ``13`` is
    the first entry of BART's ``dict.txt``, so id 4 (after ``<s> <pad> </s>
    <unk>``), the id ``BartTokenizer`` gives ``"."``.

    Raises ``ValueError`` when the encoding is empty or a piece is not in the
    dictionary."""
    symbols = subword_encoder.encode(text)
    ids = subword_encoder.symbol_ids(symbols, dictionary).tolist()  # the pipeline's lookup: never a control id
    if not ids or dictionary.unk() in ids:
        raise ValueError(
            f"the filler page text {text!r} encodes to {symbols}, which the dictionary "
            f"({len(dictionary)} types) does not hold; --empty-pages filler needs it"
        )
    return ids
