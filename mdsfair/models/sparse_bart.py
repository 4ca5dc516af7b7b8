"""BART with sparse encoder-decoder attention over the top-r sentences.

Manakul & Gales, "Sparsity and Sentence Structure in Encoder-Decoder
Attention of Summarization Systems" (EMNLP 2021). In every decoder layer the
cross-attention first ranks the source sentences with a sentence-level
attention (the approximator, Eq. 7-10, or the model-free Eq. 19), keeps the
top-r (Eq. 6) and attends to their tokens only (Eq. 3), so a generation step
costs O(N1 + r * N2) instead of O(N1 * N2). The approximator is trained with
a KL loss to the exact sentence saliency (Eq. 4, 11); see
``mdsfair/criterions/sparse_kl.py`` and ``mdsfair/tasks/sparse_training.py``.

Generation keeps everything the encoder produced once per source example:
the encoder output is never expanded to the beam; only the per-row vector
``hypothesis_source_index`` (which source every hypothesis reads) is
reordered with fairseq's ``new_order``, so batch compaction of finished
sources is tracked exactly, and the cross-attention's key/value cache stays
``[B, H, N, d_h]`` (see ``mdsfair/modules/hypothesis_rows.py``).

Sentences come from ``src_sent_ids`` of mdsfair's data contract (the start-
of-document ``<s>`` belongs to the following sentence and the closing
``</s>`` to the last one).

Parameters beyond BART (the approximator theta~ of Eq. 13-14):
``encoder.sentence_encoder.*`` (the BiGRU of Eq. 10, or with
``--sentence-encoder attention-pooling`` the pooling of Sec. 4.5; shared by all layers)
and ``decoder.layers.*.encoder_attn.sentence_attention.*`` (W^Q, W^K of
Eq. 8-9, per layer). When a plain BART checkpoint is restored they are
created: W^Q/W^K copied from the layer's cross-attention ``q_proj``/``k_proj``
(weights and biases), the sentence encoder freshly initialized.
"""
import logging
from typing import Dict, List, Optional

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor, nn

from mdsfair.modules.activation_checkpointing import (
    activation_checkpointing,
    checkpoint_layer,
    checkpoint_structured_layer,
)
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.sentence_approximator import (
    SENTENCE_ENCODERS,
    PoolingSentenceEncoder,
    SentenceEncoder,
    approximator_parameter_names,
)
from mdsfair.modules.sentence_saliency import SentenceLayout, sentence_layout
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sparse_cross_attention import (
    APPROXIMATORS,
    GENERATION_PATHS,
    SENTENCE_SELECTIONS,
    SentenceAttention,
    SentenceContext,
    SparseCrossAttention,
    kept_token_bounds,
)

logger = logging.getLogger(__name__)

#: The one source of the sparse_bart model's defaults
#: (``mdsfair.models.flag_defaults``): Manakul & Gales 2021, r = 5 (their
#: CNN/DailyMail setting, Table 3) and the 2-layer BiGRU of the model-based approximator with
#: the model's width (App. A.1). Two flags have no fixed value and stay out
#: of the table: ``--sentence-encoder-hidden-dim`` (unset: the model's
#: ``--encoder-embed-dim``) and ``--mix-decay-updates`` (the updates of one
#: epoch; ``--sentence-selection mix`` requires it).
DEFAULTS = FlagDefaults({
    "top_r": 5,
    "sentence_selection": "approx",
    "approximator": "model-based",
    "sentence_encoder": "bigru",
    "sentence_encoder_layers": 2,
    "share_selection_across_beams": False,
    "sparse_generation_path": "auto",
})

#: Sentences per recomputed chunk of the BiGRU sentence encoder under
#: --checkpoint-activations.
SENTENCE_ENCODER_CHECKPOINT_CHUNK = 32


def build_sentence_encoder(args) -> nn.Module:
    """The sentence encoder of the model-based approximator: the BiGRU of
    Eq. 10 (App. A.1) or the attention pooling proposed in Sec. 4.5."""
    kind = args.sentence_encoder
    if kind == "bigru":
        return SentenceEncoder(
            args.encoder_embed_dim,
            # unset (absent or None, as checkpoints store it): the model's width
            getattr(args, "sentence_encoder_hidden_dim", None) or args.encoder_embed_dim,
            num_layers=args.sentence_encoder_layers,
            dropout=args.dropout,
        )
    if kind == "attention-pooling":
        return PoolingSentenceEncoder(
            args.encoder_embed_dim, args.encoder_attention_heads, dropout=args.attention_dropout
        )
    raise ValueError(f"--sentence-encoder must be one of {SENTENCE_ENCODERS}, got {kind!r}")


class SparseBARTEncoder(TransformerEncoder):
    """BART's encoder; its output also carries the sentence structure and,
    for the model-based approximator, the sentence vectors of Eq. 10
    (computed once per source, reused by every decoder layer and step).

    Every tensor of the output stays per source (``[B, ...]``, or
    ``[N, B, C]``) through beam search; ``hypothesis_source_index`` (empty
    until the first reordering: rows are the sources) maps decoder rows to
    sources.
    """

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        self.sentence_encoder = build_sentence_encoder(args) if args.approximator == "model-based" else None
        if isinstance(self.sentence_encoder, SentenceEncoder) and activation_checkpointing(args):
            # --checkpoint-activations: the BiGRU's working set over every
            # sentence of the batch is the largest of the model, so it is
            # recomputed a chunk of sentences at a time (--offload-activations
            # is fairseq's flag, which BART's architectures leave unset)
            self.sentence_encoder.checkpoint_activations(
                SENTENCE_ENCODER_CHECKPOINT_CHUNK, offload_to_cpu=bool(getattr(args, "offload_activations", False))
            )
        elif self.sentence_encoder is not None:
            # the pooling encoder reads the encoder states and a layout of index
            # tensors; while the approximator trains on the frozen BART encoder
            # none of its inputs requires grad, and checkpoint_layer still
            # gives its own parameters their gradients
            self.sentence_encoder = checkpoint_layer(self.sentence_encoder, args)

    def forward(
        self,
        src_tokens,
        src_lengths: Optional[Tensor] = None,
        src_sent_ids: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        if src_sent_ids is None:
            raise ValueError(
                "sparse_bart needs src_sent_ids (the sentence of every source token); train and generate it with "
                "--task multidoc_summarization or multidoc_summarization_sparse"
            )
        if src_sent_ids.shape != src_tokens.shape:
            raise ValueError(
                f"src_sent_ids {tuple(src_sent_ids.shape)} must have the shape of src_tokens {tuple(src_tokens.shape)}"
            )
        encoder_out = super().forward(
            src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
            token_embeddings=token_embeddings,
        )
        layout = sentence_layout(src_sent_ids)
        sentence_states: List[Tensor] = []
        if self.sentence_encoder is not None:
            states = encoder_out["encoder_out"][0].transpose(0, 1)
            sentence_states = [self.sentence_encoder(states, layout)]
        encoder_out.update(
            src_sent_ids=[src_sent_ids],
            sentence_token_index=[layout.token_index],
            sentence_token_mask=[layout.token_mask],
            sentence_lengths=[layout.lengths],
            sentence_states=sentence_states,
            hypothesis_source_index=[],
            # on a GPU in evaluation: sizes generation's kept-token layouts without a synchronization per step
            kept_token_bounds=[kept_token_bounds(layout.lengths)] if layout.lengths.is_cuda and not self.training
            else [],
        )
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        """Reorder the decoder rows, not the encoder output: row ``i`` now
        reads the source that row ``new_order[i]`` read (``new_order`` may
        expand to the beam, permute hypotheses, or drop finished sources)."""
        rows = encoder_out["hypothesis_source_index"]
        source_index = rows[0].index_select(0, new_order) if len(rows) > 0 else new_order
        reordered = dict(encoder_out)
        reordered["hypothesis_source_index"] = [source_index]
        return reordered


def sentence_context_from_encoder_out(encoder_out: Dict[str, List[Tensor]]) -> SentenceContext:
    src_sent_ids = encoder_out["src_sent_ids"][0]
    lengths = encoder_out["sentence_lengths"][0]
    layout = SentenceLayout(
        encoder_out["sentence_token_index"][0], encoder_out["sentence_token_mask"][0], lengths, lengths.gt(0)
    )
    states = encoder_out["sentence_states"][0] if len(encoder_out["sentence_states"]) > 0 else None
    bounds = encoder_out.get("kept_token_bounds", [])
    if len(encoder_out["hypothesis_source_index"]) > 0:
        rows = HypothesisRows.from_source_index(encoder_out["hypothesis_source_index"][0], src_sent_ids.size(0))
    else:
        rows = HypothesisRows.identity(src_sent_ids.size(0), src_sent_ids.device)
    return SentenceContext(src_sent_ids, layout, states, rows, bounds[0] if len(bounds) > 0 else None)


class SparseDecoderLayer(TransformerDecoderLayerBase):
    """A BART decoder layer whose cross-attention is :class:`SparseCrossAttention`."""

    def __init__(self, cfg, sparse_args):
        self.sparse_args = sparse_args
        super().__init__(cfg)

    def build_encoder_attention(self, embed_dim, cfg):
        args = self.sparse_args
        return SparseCrossAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            top_r=args.top_r,
            selection=args.sentence_selection,
            approximator=args.approximator,
            sentence_dim=cfg.encoder.embed_dim,
            share_selection_across_beams=args.share_selection_across_beams,
            # no default (--sentence-selection mix requires it); absent from checkpoints saved before the flag
            mix_decay_updates=getattr(args, "mix_decay_updates", None),
            generation_path=args.sparse_generation_path,
        )

    def forward(
        self,
        x: Tensor,
        encoder_out: Tensor,
        encoder_padding_mask: Optional[Tensor],
        sentence_context: SentenceContext,
        incremental_state=None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        compute_saliency: bool = False,
        need_attn: bool = False,
        attention_heads: Optional[int] = None,
        mix_draw: Optional[float] = None,
    ):
        """Self-attention, sparse cross-attention, feed-forward (pre- or
        post-norm as configured). Returns ``(x, SentenceAttention)``; with
        ``need_attn`` its ``token_attention`` holds the cross-attention
        weights averaged over the first ``attention_heads`` heads;
        ``mix_draw`` is the forward pass's draw for ``mix`` selection."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(
            query=x, key=x, value=x, key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state, need_weights=False, attn_mask=self_attn_mask,
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x, sentence_attention = self.encoder_attn(
            x, encoder_out, encoder_padding_mask, sentence_context,
            incremental_state=incremental_state, compute_saliency=compute_saliency,
            need_weights=need_attn, weight_heads=attention_heads, mix_draw=mix_draw,
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.encoder_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        x = self.dropout_module(self.fc2(x))
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, sentence_attention


class SparseBARTDecoder(TransformerDecoder):
    """BART's decoder with sparse cross-attention in every layer. The extra
    output ``sentence_attention`` lists, per layer, the exact and
    approximate sentence saliencies for the losses (teacher forcing);
    ``attn`` is the ``alignment_layer``'s (default: last) word-level
    cross-attention actually used, averaged over ``alignment_heads``, as in
    fairseq's TransformerDecoder."""

    def mix_draw(self) -> Optional[float]:
        """Sec. 4.3's scheduled mix: one uniform draw per training forward
        pass, shared by every layer (each layer ranks by the exact saliency
        when it is below that update's probability); None in evaluation or
        when no layer mixes."""
        if not self.training or not any(layer.encoder_attn.selection == "mix" for layer in self.layers):
            return None
        return torch.rand(()).item()

    def build_decoder_layer(self, args, no_encoder_attn=False):
        if no_encoder_attn:
            raise ValueError("sparse_bart needs encoder-decoder attention")
        # --checkpoint-activations: the layer reads the trainable sentence
        # vectors inside its SentenceContext and returns the saliencies the KL
        # loss trains on inside a SentenceAttention, so both are flattened
        # into tensors around fairseq's checkpoint function.
        return checkpoint_structured_layer(SparseDecoderLayer(TransformerConfig.from_namespace(args), args), args)

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state=None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if encoder_out is None or "src_sent_ids" not in encoder_out:
            raise ValueError("SparseBARTDecoder needs the output of SparseBARTEncoder")
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        encoder_states = encoder_out["encoder_out"][0]
        padding_mask = encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) else None
        sentence_context = sentence_context_from_encoder_out(encoder_out)
        compute_saliency = incremental_state is None
        mix_draw = self.mix_draw()

        positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state) \
            if self.embed_positions is not None else None
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        x = self.embed_scale * self.embed_tokens(prev_output_tokens.contiguous())
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x = x + positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x).transpose(0, 1)

        self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
        if not self_attn_padding_mask.any():
            self_attn_padding_mask = None
        self_attn_mask = self.buffered_future_mask(x) if incremental_state is None else None

        inner_states: List[Optional[Tensor]] = [x]
        sentence_attention: List[SentenceAttention] = []
        attn: Optional[Tensor] = None
        for index, layer in enumerate(self.layers):
            x, layer_sentence_attention = layer(
                x, encoder_states, padding_mask, sentence_context,
                incremental_state=incremental_state, self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask, compute_saliency=compute_saliency,
                need_attn=index == alignment_layer, attention_heads=alignment_heads, mix_draw=mix_draw,
            )
            inner_states.append(x)
            sentence_attention.append(layer_sentence_attention)
            if index == alignment_layer:
                attn = layer_sentence_attention.token_attention.type_as(x)

        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [attn], "inner_states": inner_states, "sentence_attention": sentence_attention}


@register_model("sparse_bart")
class SparseBARTModel(MultiDocHubModel, BARTModel):
    """BART whose decoder attends to the top-r sentences (Manakul & Gales 2021)."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "BART with sparse encoder-decoder attention over the top-r sentences (Manakul & Gales 2021); "
        "load with top_r=R to change r (0: full attention)"
    )

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument("--top-r", type=int, metavar="R",
                            help=("sentences kept by every cross-attention query (Eq. 6; the "
                                  "paper's r on CNN/DailyMail); 0 keeps all (full attention)"))
        parser.add_argument("--sentence-selection", choices=SENTENCE_SELECTIONS,
                            help=("saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, "
                                  "Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling "
                                  "ideal->approx in training, one draw per forward pass shared by all layers; approx "
                                  "in evaluation and generation)"))
        parser.add_argument("--approximator", choices=APPROXIMATORS,
                            help=("model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free "
                                  "(App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m "
                                  "dropped, averaged over heads before top-r, as App. D and the authors' decoding)"))
        parser.add_argument("--sentence-encoder", choices=SENTENCE_ENCODERS,
                            help=("sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the "
                                  "bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper "
                                  "hierarchical attention over each sentence's tokens that Sec. 4.5 proposes "
                                  "(multi-head pooling, no recurrence)"))
        parser.add_argument("--sentence-encoder-layers", type=int, metavar="N",
                            help="layers of the bidirectional GRU sentence encoder (App. A.1)")
        parser.add_argument("--sentence-encoder-hidden-dim", type=int, metavar="D",
                            help="hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for "
                                 "BART-large) (default: --encoder-embed-dim)")
        parser.add_argument("--share-selection-across-beams", action="store_true",
                            help=("average the sentence scores over the beam hypotheses of a source before top-r "
                                  "(the authors' decoding); off: every hypothesis selects its own sentences"))
        parser.add_argument("--sparse-generation-path", choices=GENERATION_PATHS,
                            help=("how incremental generation reads the top-r sentences: gather their encoder states "
                                  "per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention "
                                  "(cost ~ N, same output), or auto: gather at a step when the most tokens a "
                                  "hypothesis keeps * heads <= 2 * N"))
        parser.add_argument("--mix-decay-updates", type=int, metavar="N",
                            help="for --sentence-selection mix: use the exact saliency with probability "
                                 "max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, "
                                 "so N = the updates of one epoch)")

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SparseBARTEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return SparseBARTDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=False)

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        # BART's init_bert_params just re-initialized every Linear; restore the
        # approximator's own initialization (App. A.1).
        if self.encoder.sentence_encoder is not None:
            self.encoder.sentence_encoder.reset_parameters()
        for layer in self.decoder.layers:
            layer.encoder_attn.initialize_approximator_from_cross_attention()

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        src_sent_ids: Optional[Tensor] = None,
        features_only: bool = False,
        classification_head_name: Optional[str] = None,
        token_embeddings: Optional[Tensor] = None,
        return_all_hiddens: bool = True,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if classification_head_name is not None:
            raise ValueError("sparse_bart is a summarization model; classification heads are not supported")
        encoder_out = self.encoder(
            src_tokens, src_lengths=src_lengths, src_sent_ids=src_sent_ids,
            token_embeddings=token_embeddings, return_all_hiddens=return_all_hiddens,
        )
        return self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
        )

    def set_beam_size(self, beam):
        """No-op: BART's "beamable" shortcut (which replaces
        ``reorder_encoder_out`` and assumes ``new_order // beam``) is not
        needed; the encoder output and the cross-attention cache already stay
        per source and :meth:`SparseBARTEncoder.reorder_encoder_out` tracks
        the source of every hypothesis."""

    def approximator_parameter_names(self):
        """Names of theta~ (Eq. 13-14): sentence encoder and W^Q/W^K."""
        return approximator_parameter_names(self.named_parameters())

    def upgrade_state_dict_named(self, state_dict, name):
        """Restoring a BART checkpoint: create the approximator (App. A.1),
        W^Q/W^K copied from the checkpoint's cross-attention q_proj/k_proj
        (weights and biases), the sentence encoder freshly initialized."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        created = 0
        for key, value in self.state_dict().items():
            full_key = prefix + key
            if full_key in state_dict:
                continue
            if ".encoder_attn.sentence_attention.sentence_query_proj." in key:
                source = full_key.replace("sentence_attention.sentence_query_proj.", "q_proj.")
            elif ".encoder_attn.sentence_attention.sentence_key_proj." in key:
                source = full_key.replace("sentence_attention.sentence_key_proj.", "k_proj.")
            elif key.startswith("encoder.sentence_encoder."):
                source = None
            else:
                continue
            state_dict[full_key] = state_dict[source].clone() if source in state_dict else value.clone()
            created += 1
        if created:
            logger.info("sparse_bart: created %d approximator tensors absent from the checkpoint "
                        "(W^Q/W^K copied from the cross-attention projections)", created)


@register_model_architecture("sparse_bart", "sparse_bart_large")
def sparse_bart_large_architecture(args):
    """BART-large dimensions, the paper's."""
    DEFAULTS.fill(args)
    bart_large_architecture(args)


@register_model_architecture("sparse_bart", "sparse_bart_base")
def sparse_bart_base_architecture(args):
    DEFAULTS.fill(args)
    bart_base_architecture(args)


@register_model_architecture("sparse_bart", "sparse_bart_tiny")
def sparse_bart_tiny_architecture(args):
    """The dimensions of ``tests.utils.TINY_BART_ARGS`` (2+2 layers, d 32,
    4 heads, FFN 64), so tiny BART checkpoints restore into it."""
    set_tiny_dimensions(args)
    sparse_bart_base_architecture(args)
