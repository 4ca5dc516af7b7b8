"""PageSum (Liu et al., EMNLP 2022): "Leveraging Locality in Abstractive Text
Summarization", on fairseq's BART.

The source is split into non-overlapping pages by a principle of locality
(Eq. 5; :mod:`mdsfair.modules.pages`). Every page is encoded independently
(Eq. 6), all pages of a batch in one batched encoder call, so no token attends
across pages and encoder memory grows linearly with the input (Eq. 10). The
decoder runs once per page, in one batched call where each copy cross-attends
to its own page only, and gives local hidden states ``h_i^(j)`` (Eq. 6); a
linear layer scores each (Eq. 7), a softmax over the pages normalizes the
scores (Eq. 8), and the confidence-weighted sum of the hidden states goes
through BART's output projection (Eq. 9): the mixing is on hidden states,
before the vocabulary projection, as in the authors' code.

A page with no source text (fewer documents than ``--num-pages``) is left out
of Eq. 8's softmax by default (``--empty-pages mask``: the paper's pages are
the ones an example has); ``--empty-pages filler`` is the authors' data code,
where such a page holds ``<s> . </s>`` and is weighted like any other page
(model config field ``empty_pages``, so a checkpoint trained that way decodes
that way).

``--global-decoding`` is the Table 7 alternative: pages are still encoded
separately, and one decoder cross-attends to their concatenation.

A fairseq BART checkpoint (e.g. ``bart.large.cnn``, the paper's
initialization) restores into the model; the confidence layer, absent from it,
keeps its fresh initialization (:meth:`PageSumBARTModel.upgrade_state_dict_named`).

Generation with fairseq's :class:`~fairseq.sequence_generator.SequenceGenerator`:
the encoder runs once; ``reorder_encoder_out`` and the decoder's incremental
state are indexed over ``batch x beam x pages`` (``new_order`` entry ``b``
becomes rows ``b * P + i``).
"""

import copy
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.logging import metrics
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from torch import Tensor

from mdsfair.argument_types import at_least
from mdsfair.data.side_inputs import check_side_inputs
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.side_input_forward import SideInputForward
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.pages import (
    DISCOURSE_UNITS,
    EMPTY_PAGE_POLICIES,
    LOCALITIES,
    OVERFLOW_POLICIES,
    PageBuilder,
    PageLayout,
    filler_page_tokens,
)

#: The one source of the pagesum_bart model's defaults
#: (``mdsfair.models.flag_defaults``): Liu et al. 2022's multi-document
#: setting, document locality (Table 5) with 7 pages (their arXiv/PubMed/
#: MultiNews count) of 1,024 tokens (Sec. 5.2), in BART's 1,024-row position
#: table; empty pages masked out of Eq. 8 (the authors' code fills them).
DEFAULTS = FlagDefaults(
    {
        "locality": "document",
        "num_pages": 7,
        "page_tokens": 1024,
        "max_page_positions": 1024,
        "discourse_unit": "paragraph",
        "page_overflow": "truncate",
        "spatial_remainder_to_last_page": False,
        "empty_pages": "mask",
        "global_decoding": False,
    }
)

logger = logging.getLogger(__name__)

PAGE_STATISTICS = ("dropped_units", "dropped_tokens", "merged_units", "cut_tokens")


def log_page_totals(counts: Sequence[int], examples: int, settings: str) -> Optional[str]:
    """Log page totals (``counts`` in :data:`PAGE_STATISTICS` order, over
    ``examples`` examples): a warning when anything was dropped, merged or
    cut; returns the message (None before any example)."""
    if not examples:
        return None
    cuts = ", ".join(f"{int(count):,} {name.replace('_', ' ')}" for name, count in zip(PAGE_STATISTICS, counts))
    message = f"PageSum pages over the {examples:,} examples this encoder encoded: {cuts} ({settings})"
    (logger.warning if any(int(count) for count in counts) else logger.info)(message)
    return message


def page_order(new_order: Tensor, num_pages: int) -> Tensor:
    """Rows of the ``[N * P]`` page batch for a reordering ``new_order`` of the
    ``N`` examples (or hypotheses): entry ``b`` becomes ``b * P + i``."""
    pages = torch.arange(num_pages, device=new_order.device, dtype=new_order.dtype)
    return (new_order.unsqueeze(1) * num_pages + pages).view(-1)


class PageSumEncoder(TransformerEncoderBase):
    """BART's encoder applied to every page independently (Eq. 6).

    ``forward`` takes the flat source and its structure tensors, builds the
    pages and encodes ``[B * P, L]`` page rows in one call. The output is the
    stock encoder dictionary over the page rows plus ``page_mask [B, P]``; with
    ``global_decoding`` the page rows are concatenated back per example
    (``[P * L, B, d]``, empty pages masked) for a single decoder.
    """

    def __init__(self, cfg, dictionary, embed_tokens, page_builder: PageBuilder, global_decoding: bool = False):
        super().__init__(cfg, dictionary, embed_tokens)
        self.page_builder = page_builder
        self.global_decoding = global_decoding
        # Running totals of PAGE_STATISTICS, kept on the model's device (not saved in checkpoints).
        self.register_buffer("page_counts", torch.zeros(len(PAGE_STATISTICS), dtype=torch.long), persistent=False)
        self.examples_encoded = 0

    def side_inputs(self) -> Dict[str, bool]:
        """Data-contract inputs this encoder reads: name -> required (the
        structure ids whose runs are the pages' units, :meth:`PageBuilder.unit_input`,
        are required; the other structure ids are handed over when the batch
        has them)."""
        unit = self.page_builder.unit_input()
        return {name: name == unit for name in ("src_doc_ids", "src_para_ids", "src_sent_ids")}

    def forward(
        self,
        src_tokens,
        src_lengths: Optional[Tensor] = None,
        src_doc_ids: Optional[Tensor] = None,
        src_para_ids: Optional[Tensor] = None,
        src_sent_ids: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        if token_embeddings is not None:
            raise ValueError("PageSum builds its pages from src_tokens; precomputed token_embeddings are not supported")
        given = {"src_doc_ids": src_doc_ids, "src_para_ids": src_para_ids, "src_sent_ids": src_sent_ids}
        check_side_inputs(
            src_tokens,
            {name: value for name, value in given.items() if value is not None},
            self.side_inputs(),
            f"pagesum_bart --locality {self.page_builder.locality}",
            padding_mask=src_tokens.eq(self.padding_idx),
        )
        layout = self.page_builder(src_tokens, src_doc_ids, src_para_ids, src_sent_ids)
        self.record_page_statistics(layout)
        batch_size, num_pages, page_length = layout.tokens.shape
        encoder_out = self.forward_scriptable(
            layout.tokens.view(batch_size * num_pages, page_length), None, return_all_hiddens
        )
        encoder_out["page_mask"] = [layout.page_mask]
        if self.global_decoding:
            encoder_out = self.concatenate_pages(encoder_out, layout.page_mask)
        return encoder_out

    def record_page_statistics(self, layout: PageLayout):
        """Count what building the pages dropped, merged or cut, on the
        device, with no host synchronization in the forward pass: added to
        the ``page_counts`` buffer (this encoder's running totals;
        ``examples_encoded`` counts the examples) and logged as fairseq
        metrics ``page_dropped_units``, ``page_dropped_tokens``,
        ``page_merged_units``, ``page_cut_tokens`` (summed tensors: fairseq
        reads them at its log intervals and reports their sums over the epoch
        at its end, training and validation alike). :meth:`log_page_totals`
        logs the running totals when asked; generation asks when it ends."""
        counts = torch.stack([getattr(layout, name).sum() for name in PAGE_STATISTICS]).to(self.page_counts)
        self.page_counts.add_(counts)
        self.examples_encoded += layout.tokens.size(0)
        for index, name in enumerate(PAGE_STATISTICS):
            metrics.log_scalar_sum(f"page_{name}", counts[index], round=0)

    def page_settings(self) -> str:
        builder = self.page_builder
        return (
            f"locality {builder.locality}, --num-pages {builder.num_pages}, --page-tokens {builder.page_tokens}, "
            f"--page-overflow {builder.overflow}"
        )

    def page_totals(self) -> Tuple[Tensor, int]:
        """A snapshot of the running totals, for :meth:`log_page_totals`'s
        ``since``: a copy of ``page_counts`` on its device (no host
        synchronization) and ``examples_encoded``."""
        return self.page_counts.clone(), self.examples_encoded

    def log_page_totals(self, since: Optional[Tuple[Tensor, int]] = None) -> Optional[str]:
        """Log (and return) the page totals of every example encoded so far,
        or since the :meth:`page_totals` snapshot ``since`` (one host
        synchronization). Generation reports them when it ends
        (:func:`mdsfair.generation.sequence_generator.report_page_totals_when_done`);
        training through fairseq's metrics (:meth:`record_page_statistics`)."""
        counts, examples = self.page_counts, self.examples_encoded
        if since is not None:
            counts, examples = counts - since[0], examples - since[1]
        return log_page_totals(counts.tolist(), examples, self.page_settings())

    @staticmethod
    def concatenate_pages(encoder_out: Dict[str, List[Tensor]], page_mask: Tensor) -> Dict[str, List[Tensor]]:
        """Page rows ``[L, B * P, d]`` -> one sequence per example
        ``[P * L, B, d]`` (Table 7's global decoding); the tokens of empty
        pages are masked."""
        batch_size, num_pages = page_mask.shape

        def time_major(x: Tensor) -> Tensor:
            length, _, dim = x.shape
            return (
                x.view(length, batch_size, num_pages, dim)
                .permute(2, 0, 1, 3)
                .reshape(num_pages * length, batch_size, dim)
            )

        padding_mask = encoder_out["encoder_padding_mask"][0]
        padding_mask = (padding_mask.view(batch_size, num_pages, -1) | ~page_mask.unsqueeze(-1)).view(batch_size, -1)
        embedding = encoder_out["encoder_embedding"][0]
        return {
            "encoder_out": [time_major(encoder_out["encoder_out"][0])],
            "encoder_padding_mask": [padding_mask],
            "encoder_embedding": [embedding.reshape(batch_size, -1, embedding.size(-1))],
            "encoder_states": [time_major(state) for state in encoder_out["encoder_states"]],
            "src_tokens": [],
            "src_lengths": [(~padding_mask).sum(dim=1, dtype=torch.int32).view(-1, 1)],
            "page_mask": [page_mask],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder over examples x beams; the page rows of example ``b`` follow it."""
        page_mask = encoder_out["page_mask"][0]
        rows = new_order if self.global_decoding else page_order(new_order, page_mask.size(1))
        reordered = super().reorder_encoder_out(encoder_out, rows)
        reordered["page_mask"] = [page_mask.index_select(0, new_order)]
        return reordered

    def max_positions(self):
        """The whole source is bounded by the task's ``--max-source-positions``;
        what does not fit ``--num-pages`` pages of ``--page-tokens`` is
        dropped, merged or cut by the page builder and counted."""
        return int(1e6)


class PageSumDecoder(TransformerDecoderBase):
    """BART's decoder run on every page, with confidence-weighted mixing of
    the local hidden states (Eq. 6-9).

    ``extra["page_weights"]`` holds the normalized confidences ``[B, T, P]``
    (Eq. 8), the page importance of Fig. 3.
    """

    def __init__(self, cfg, dictionary, embed_tokens, global_decoding: bool = False, no_encoder_attn: bool = False):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        # L_conf of Eq. 7: d -> 1 with bias (the authors' ``lin``).
        self.page_confidence = None if global_decoding else nn.Linear(self.output_embed_dim, 1)

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if self.page_confidence is None:
            return self.extract_features_scriptable(
                prev_output_tokens,
                encoder_out,
                incremental_state,
                full_context_alignment,
                alignment_layer,
                alignment_heads,
            )
        if encoder_out is None or "page_mask" not in encoder_out:
            raise ValueError("PageSumDecoder needs the output of PageSumEncoder (with its page_mask)")
        page_mask = encoder_out["page_mask"][0]
        batch_size, num_pages = page_mask.shape
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "pages", {"num_pages": torch.tensor(num_pages)})
        # Eq. 6: h_i^(j) = Decoder(Encoder(P_j), S_<i) for every page j at once.
        page_states, extra = self.extract_features_scriptable(
            prev_output_tokens.repeat_interleave(num_pages, dim=0),
            encoder_out,
            incremental_state,
            full_context_alignment,
            alignment_layer,
            alignment_heads,
        )
        page_states = page_states.view(batch_size, num_pages, page_states.size(1), page_states.size(2))
        features, page_weights = self.combine_pages(page_states, page_mask)
        # Cross-attention is over page rows, not over src_tokens positions.
        extra["attn"] = [None]
        extra["page_weights"] = [page_weights]
        return features, extra

    def combine_pages(self, page_states: Tensor, page_mask: Tensor):
        """Eq. 7-9 up to the vocabulary projection.

        Args:
            page_states: ``[B, P, T, d]`` local hidden states ``h_i^(j)``.
            page_mask: ``[B, P]`` True at the pages to combine (pages with
                source tokens, and filler pages).

        Returns:
            ``sum_j c_ij h_i^(j)`` ``[B, T, d]`` and the weights ``c_ij``
            ``[B, T, P]`` (zero at pages ``page_mask`` leaves out: empty pages
            under ``--empty-pages mask``).
        """
        confidence = self.page_confidence(page_states).squeeze(-1)  # Eq. 7: [B, P, T]
        confidence = confidence.masked_fill(~page_mask.unsqueeze(-1), float("-inf"))
        weights = utils.softmax(confidence, dim=1).type_as(page_states)  # Eq. 8
        features = torch.einsum("bpt,bptd->btd", weights, page_states)  # Eq. 9
        return features, weights.transpose(1, 2)

    def reorder_incremental_state_scripting(
        self,
        incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
        new_order: Tensor,
    ):
        """The cached self-attention keys/values are over page copies: expand
        the reordering of hypotheses to their pages."""
        pages = self.get_incremental_state(incremental_state, "pages")
        if pages is not None:
            new_order = page_order(new_order, int(pages["num_pages"]))
        super().reorder_incremental_state_scripting(incremental_state, new_order)


@register_model("pagesum_bart")
class PageSumBARTModel(MultiDocHubModel, SideInputForward, BARTModel):
    """PageSum on BART (Liu et al. 2022); see the module docstring."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "PageSum (Liu et al. 2022): BART encoding pages independently, decoding with confidence-weighted pages"
    )

    def side_inputs(self):
        """Data-contract inputs this model reads: name -> required (its
        encoder's: the structure ids that make its pages)."""
        return self.encoder.side_inputs()

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument(
            "--locality",
            choices=LOCALITIES,
            help=(
                "how pages are formed (Sec. 3): 'spatial' = sentences in --num-pages equal chunks, "
                "'discourse' = one page per discourse unit, 'document' = one page per document (the paper's "
                "choice for multi-document summarization, Table 5)"
            ),
        )
        parser.add_argument(
            "--num-pages",
            type=at_least(1),
            help=(
                "pages per example: the spatial chunk count, or the maximum number of discourse units / "
                "documents (the paper: 7 for arXiv/PubMed/MultiNews, 8 for arXiv sections, 20 for GovReport)"
            ),
        )
        parser.add_argument(
            "--page-tokens",
            type=at_least(3),
            help=(
                "maximum tokens per page including <s> and </s> (the paper's page size, Sec. 5.2); longer pages "
                "are cut and counted"
            ),
        )
        parser.add_argument(
            "--max-page-positions",
            type=at_least(1),
            help=(
                "rows of the encoder's learned position table (BART's pre-trained table); --page-tokens may not "
                "exceed it"
            ),
        )
        parser.add_argument(
            "--discourse-unit",
            choices=DISCOURSE_UNITS,
            help=(
                "discourse locality unit: 'paragraph', or 'section' = a document's titled group of "
                "paragraphs, e.g. an arXiv section given as one document with its title first"
            ),
        )
        parser.add_argument(
            "--page-overflow",
            choices=OVERFLOW_POLICIES,
            help=(
                "more discourse units/documents than --num-pages: 'truncate' keeps the first pages and counts "
                "the dropped units and tokens (the paper's maximum page count), 'merge' puts the rest into the "
                "last page"
            ),
        )
        parser.add_argument(
            "--spatial-remainder-to-last-page",
            action="store_true",
            help=(
                "authors' spatial chunking: every page gets S // num_pages sentences and the last page the "
                "remainder, so with fewer sentences than pages all of them are on the last page (off: chunk "
                "sizes differ by at most one sentence, the paper's equal split)"
            ),
        )
        parser.add_argument(
            "--empty-pages",
            choices=EMPTY_PAGE_POLICIES,
            help=(
                "a page with no source text (fewer documents/units than --num-pages, or the authors' spatial "
                "chunking with fewer sentences than pages): 'mask' leaves it out of the softmax over pages "
                "(Eq. 8 over the pages the example has); 'filler' is the authors' data_utils.py: "
                "every example has --num-pages pages, an empty one holds '.' (<s> . </s>, the '.' ids from "
                "the data's subword model) and is weighted like any page; needed to run their checkpoints "
                "as trained"
            ),
        )
        parser.add_argument(
            "--global-decoding",
            action="store_true",
            help=(
                "Table 7 alternative: encode pages separately but run one decoder over their concatenation "
                "(no confidence layer)"
            ),
        )

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        if cfg.page_tokens > cfg.max_page_positions:
            raise ValueError(
                f"--page-tokens {cfg.page_tokens} exceeds the encoder's position table "
                f"(--max-page-positions {cfg.max_page_positions})"
            )
        page_builder = PageBuilder(
            locality=cfg.locality,
            num_pages=cfg.num_pages,
            page_tokens=cfg.page_tokens,
            bos=src_dict.bos(),
            eos=src_dict.eos(),
            pad=src_dict.pad(),
            discourse_unit=cfg.discourse_unit,
            overflow=cfg.page_overflow,
            spatial_remainder_to_last_page=cfg.spatial_remainder_to_last_page,
            empty_pages=cfg.empty_pages,
        )
        # --max-source-positions is the task's whole-source budget; the encoder
        # sees one page at a time and keeps BART's per-page position table.
        page_cfg = copy.copy(cfg)
        page_cfg.max_source_positions = cfg.max_page_positions
        return PageSumEncoder(page_cfg, src_dict, embed_tokens, page_builder, global_decoding=cfg.global_decoding)

    @classmethod
    def build_model(cls, args, task):
        """BART's ``build_model``; with ``--empty-pages filler`` the filler
        page's ids are then encoded with the data's subword model."""
        model = super().build_model(args, task)
        page_builder = model.encoder.page_builder
        if page_builder.empty_pages == "filler":
            page_builder.set_filler_tokens(authors_filler_tokens(task))
        return model

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return PageSumDecoder(
            cfg, tgt_dict, embed_tokens, global_decoding=cfg.global_decoding, no_encoder_attn=cfg.no_cross_attention
        )

    def set_beam_size(self, beam):
        """Keep one copy of the pages per hypothesis. BART's beamable
        cross-attention shares one encoder row per example across its beams
        in ``[batch, beam]`` order, which does not hold for the
        ``[batch, beam, page]`` decoder batch."""

    def upgrade_state_dict_named(self, state_dict, name):
        """Restore a fairseq BART checkpoint: the confidence layer it lacks
        keeps this model's fresh initialization (Sec. 3, "Fine-tuning from
        Pre-trained Models")."""
        super().upgrade_state_dict_named(state_dict, name)
        if self.decoder.page_confidence is None:
            return
        prefix = name + "." if name != "" else ""
        for key, value in self.decoder.page_confidence.state_dict().items():
            full_key = f"{prefix}decoder.page_confidence.{key}"
            if full_key not in state_dict:
                logger.info("%s not in the checkpoint: newly initialized", full_key)
                state_dict[full_key] = value


def authors_filler_tokens(task) -> List[int]:
    """The ids of the authors' empty-page text ``"."`` in ``task``'s data:
    encoded with the subword model of the task's data-bin
    (:meth:`MultiDocSummarizationTask.subword_encoder`), looked up in the
    task's dictionary."""
    encoder = task.subword_encoder() if hasattr(task, "subword_encoder") else None
    if encoder is None:
        data_dir = getattr(task, "data_dir", "the data directory")
        raise ValueError(
            f"--empty-pages filler encodes the authors' '.' page with the data's subword model, and "
            f"{data_dir} has no manifest naming one (use the multidoc_summarization task on an "
            "mdsfair-preprocess data-bin)"
        )
    return filler_page_tokens(encoder, task.source_dictionary)


@register_model_architecture("pagesum_bart", "pagesum_bart_large")
def pagesum_bart_large_architecture(args):
    """BART-large (bart.large.cnn is the paper's initialization)."""
    DEFAULTS.fill(args)
    bart_large_architecture(args)


@register_model_architecture("pagesum_bart", "pagesum_bart_base")
def pagesum_bart_base_architecture(args):
    DEFAULTS.fill(args)
    bart_base_architecture(args)


@register_model_architecture("pagesum_bart", "pagesum_bart_tiny")
def pagesum_bart_tiny_architecture(args):
    """Tiny dims for tests (those of ``tests.utils.TINY_BART_ARGS``)."""
    set_tiny_dimensions(args)
    pagesum_bart_base_architecture(args)
