"""LED, the Longformer encoder-decoder (Beltagy et al. 2020, Sec. 6), and
PRIMERA (Xiao et al., ACL 2022) on fairseq's BART.

The model is BART with every encoder self-attention replaced by Longformer's
sliding-window + global attention
(:mod:`mdsfair.modules.longformer_attention`), a learned encoder position
table of ``--max-encoder-positions`` rows (16,384 for LED, 4,096 for
PRIMERA), and the decoder of BART, as in Hugging Face's
``LEDForConditionalGeneration`` (``transformers/models/led/modeling_led.py``).

Global attention (``--global-attention``, stored in the checkpoint's model
config so ``fairseq-generate --path`` and the hub decode the way the model
was trained):

* ``first``: the first real token of every source (its ``<s>``), as Hugging
  Face's LED summarization examples set ``global_attention_mask[:, 0] = 1``;
  with fairseq's left-padded sources the first *non-padding* token;
* ``doc-sep``: the first token and every ``<doc-sep>`` (PRIMERA,
  allenai/PRIMER ``script/primer_hf_main.py``: ``global_attention_mask`` at
  ``<s>`` and at the ``<doc-sep>`` ids); the id is the task's
  (:meth:`MultidocSummarizationTask.document_separator`, ``--source-layout
  primera``) or the dictionary's ``<doc-sep>``;
* ``documents``: the first token of every document, from the batch's
  ``src_doc_ids`` (the data-bin's document ids, no string search).

``--attention-window`` takes one even window for every encoder layer or one
per layer (comma list); a window ``w`` lets each token see ``w / 2`` tokens
on each side (Hugging Face's ``attention_window``).

Parameter names (fairseq BART's, so the Hugging Face importer maps one to one
and a BART checkpoint restores with only the global projections new)::

    fairseq (this model)                            Hugging Face LED
    encoder.embed_tokens.weight                     led.shared.weight (tied)
    encoder.embed_positions.weight [P + 2, d]       led.encoder.embed_positions.weight [P, d]
                                                    (fairseq rows 2: = HF rows; rows 0-1 unused)
    encoder.layernorm_embedding.*                   led.encoder.layernorm_embedding.*
    encoder.layers.i.self_attn.q_proj.*             led.encoder.layers.i.self_attn.longformer_self_attn.query.*
    encoder.layers.i.self_attn.k_proj.*             ... .longformer_self_attn.key.*
    encoder.layers.i.self_attn.v_proj.*             ... .longformer_self_attn.value.*
    encoder.layers.i.self_attn.q_global_proj.*      ... .longformer_self_attn.query_global.*
    encoder.layers.i.self_attn.k_global_proj.*      ... .longformer_self_attn.key_global.*
    encoder.layers.i.self_attn.v_global_proj.*      ... .longformer_self_attn.value_global.*
    encoder.layers.i.self_attn.out_proj.*           led.encoder.layers.i.self_attn.output.*
    encoder.layers.i.{self_attn_layer_norm,fc1,fc2,final_layer_norm}.*   the same names under led.
    decoder.*                                       led.decoder.* (BART's names; positions offset as above)
    decoder.output_projection.weight                lm_head.weight (tied to led.shared)
    (none: fairseq has no output bias)              final_logits_bias (must be zero)

:func:`led_state_dict_from_hf` does this mapping.

Positions: Hugging Face numbers every position 0, 1, ... including padding;
fairseq's learned positions skip padding (``make_positions``), so a token's
position is the same for right-padded sources, and for left-padded ones it is
that of the unpadded source.
"""
import logging
from typing import Dict, List, Optional

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hierencdec_bart import wrap_layer
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.longformer_attention import IMPLEMENTATIONS, LongformerSelfAttention

logger = logging.getLogger(__name__)

GLOBAL_ATTENTION = ("first", "doc-sep", "documents")
DOCUMENT_SEPARATOR = "<doc-sep>"

#: The one source of the led model's defaults (``mdsfair.models.flag_defaults``):
#: allenai/led-*-16384's; the architectures override positions, window and
#: global attention for PRIMERA.
DEFAULTS = FlagDefaults({
    "max_encoder_positions": 16384,
    "attention_window": "1024",  # a string, as --attention-window (type=str) stores it
    "global_attention": "first",
    "longformer_attention": "fused",
})


def parse_attention_window(value, num_layers: int) -> List[int]:
    """``--attention-window``: one even window for all layers or one per layer."""
    text = str(value)
    try:
        windows = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--attention-window {text!r}: expected an even integer or a comma list of them") from None
    if len(windows) == 1:
        windows = windows * num_layers
    if len(windows) != num_layers:
        raise ValueError(f"--attention-window {text!r} gives {len(windows)} windows for {num_layers} encoder layers")
    bad = [w for w in windows if w <= 0 or w % 2]
    if bad:
        raise ValueError(f"--attention-window {text!r}: every window must be a positive even number, got {bad}")
    return windows


def global_attention_mask(
    src_tokens: Tensor,
    padding_idx: int,
    mode: str,
    document_separator: Optional[int] = None,
    src_doc_ids: Optional[Tensor] = None,
) -> Tensor:
    """``[B, T]`` bool, True at the tokens with global attention (see the
    module docstring); padding (left or right) is never global."""
    real = src_tokens.ne(padding_idx)
    first = real & real.long().cumsum(dim=1).eq(1)
    if mode == "first":
        return first
    if mode == "doc-sep":
        if document_separator is None:
            raise ValueError("--global-attention doc-sep needs the <doc-sep> id (task --source-layout primera)")
        return first | (real & src_tokens.eq(document_separator))
    if mode == "documents":
        if src_doc_ids is None:
            raise ValueError(
                "--global-attention documents needs the batch's src_doc_ids (the multidoc_summarization task "
                "gives them)"
            )
        if src_doc_ids.shape != src_tokens.shape:
            raise ValueError(f"src_doc_ids {tuple(src_doc_ids.shape)} must match src_tokens {tuple(src_tokens.shape)}")
        ids = src_doc_ids.masked_fill(~real, -1)
        previous = torch.cat([ids.new_full((ids.size(0), 1), -1), ids[:, :-1]], dim=1)
        return first | (real & ids.ne(previous))
    raise ValueError(f"--global-attention must be one of {GLOBAL_ATTENTION}, got {mode!r}")


class LEDEncoderLayer(TransformerEncoderLayerBase):
    """BART's post-LN encoder layer around :class:`LongformerSelfAttention`."""

    def __init__(self, cfg, attention_window: int, implementation: str = "fused"):
        self.attention_window = attention_window
        self.implementation = implementation
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        return LongformerSelfAttention(
            embed_dim, cfg.encoder.attention_heads, self.attention_window, dropout=cfg.attention_dropout,
            implementation=self.implementation,
        )

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor], global_mask: Optional[Tensor] = None):
        """``x [T, B, C]``; ``encoder_padding_mask`` and ``global_mask`` ``[B, T]``."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = self.self_attn(x, encoder_padding_mask, global_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class LEDEncoder(TransformerEncoderBase):
    """BART's encoder with Longformer self-attention and the global tokens of
    ``--global-attention``."""

    def __init__(self, args, dictionary, embed_tokens):
        self.attention_windows = parse_attention_window(args.attention_window, args.encoder_layers)
        self.global_attention = args.global_attention
        self.implementation = args.longformer_attention
        self.document_separator: Optional[int] = None
        self._layers_built = 0
        cfg = TransformerConfig.from_namespace(args)
        cfg.max_source_positions = args.max_encoder_positions
        super().__init__(cfg, dictionary, embed_tokens)

    def build_encoder_layer(self, cfg):
        window = self.attention_windows[self._layers_built]
        self._layers_built += 1
        return wrap_layer(LEDEncoderLayer(cfg, window, self.implementation), cfg)

    def global_mask(self, src_tokens: Tensor, src_doc_ids: Optional[Tensor]) -> Tensor:
        return global_attention_mask(
            src_tokens, self.padding_idx, self.global_attention, self.document_separator, src_doc_ids
        )

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        src_doc_ids: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        """fairseq's encoder output dictionary (``encoder_out [T, B, C]``);
        ``src_doc_ids`` (data contract) is read by ``--global-attention documents``."""
        if src_tokens.size(1) > self.max_source_positions:
            raise ValueError(
                f"source of {src_tokens.size(1)} tokens exceeds the encoder's {self.max_source_positions} positions "
                "(--max-encoder-positions)"
            )
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        global_mask = self.global_mask(src_tokens, src_doc_ids)
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)
        encoder_states = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, encoder_padding_mask, global_mask)
            if return_all_hiddens:
                encoder_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }


@register_model("led")
class LEDModel(MultiDocHubModel, BARTModel):
    """LED / PRIMERA: see the module docstring."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "LED / PRIMERA (Beltagy et al. 2020; Xiao et al. 2022): BART with Longformer sliding-window + global "
        "encoder attention"
    )

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument(
            "--attention-window", type=str,
            help=("Longformer window per encoder layer: one even number for all layers or a comma list with one "
                  "per layer; window w lets each token see w/2 tokens on each side (Hugging Face's "
                  "attention_window; 512 under the primera architecture, as the released checkpoints)"),
        )
        parser.add_argument(
            "--global-attention", choices=GLOBAL_ATTENTION,
            help=("tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the "
                  "first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = "
                  "the first token of every document (from the data-bin's document ids)"),
        )
        parser.add_argument(
            "--longformer-attention", choices=IMPLEMENTATIONS,
            help=("computation of the encoder attention (same numbers): 'fused' = every window through "
                  "torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = "
                  "explicit banded score tensors (the portable reference, as Hugging Face computes them)"),
        )
        parser.add_argument(
            "--max-encoder-positions", type=int,
            help=("rows of the encoder's learned position table (4096 under the primera architecture, as the "
                  "released models); the task's --max-source-positions may not exceed it"),
        )

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return LEDEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_model(cls, args, task):
        """BART's ``build_model`` after two checks: the task's source budget
        fits the encoder's position table, and a ``--global-attention
        doc-sep`` model (PRIMERA) meets PRIMERA's layout. fairseq-generate
        builds its task from its own command line, not the checkpoint's, so
        without the second check a PRIMERA checkpoint on a data-bin that
        records no PRIMERA layout would decode without a single ``<doc-sep>``
        (only the first token global) and without an error. A
        ``--source-layout`` given on the command line is taken as meant."""
        layout = getattr(task, "source_layout", None)
        if (
            args.global_attention == "doc-sep" and layout is not None and layout != "primera"
            and not getattr(task, "source_layout_explicit", True)
        ):
            data_dir = getattr(task, "data_dir", "the data-bin")
            raise ValueError(
                f"--arch {getattr(args, 'arch', 'led')} uses --global-attention doc-sep (PRIMERA: global attention on "
                f"<s> and every <doc-sep>), but the task's source layout is {layout!r}: {data_dir} records no PRIMERA "
                f"layout, so the documents would be joined without <doc-sep>. Add --source-layout primera "
                f"--per-document-budget to this command, or preprocess the data-bin with mdsfair-preprocess "
                f"--source-layout primera (--dict of the imported model); --source-layout documents decodes "
                f"without <doc-sep> on purpose"
            )
        budget = getattr(args, "max_source_positions", None)
        if budget is not None and budget > args.max_encoder_positions:
            raise ValueError(
                f"--max-source-positions {budget} exceeds the LED encoder's position table "
                f"(--max-encoder-positions {args.max_encoder_positions})"
            )
        model = super().build_model(args, task)
        if args.global_attention == "doc-sep":
            model.encoder.document_separator = document_separator_index(task)
        return model

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        src_doc_ids: Optional[Tensor] = None,
        features_only: bool = False,
        classification_head_name: Optional[str] = None,
        token_embeddings: Optional[Tensor] = None,
        return_all_hiddens: bool = True,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        """BART's forward; ``src_doc_ids`` (data contract) for ``--global-attention documents``."""
        if classification_head_name is not None:
            raise ValueError("LED is a summarizer here; BART classification heads are not supported")
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            src_doc_ids=src_doc_ids,
            token_embeddings=token_embeddings,
            return_all_hiddens=return_all_hiddens,
        )
        return self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())

    def set_beam_size(self, beam):
        """BART's "beamable" cross-attention (one encoder row shared by an
        example's beams) stays off: it is a speed-up only, and once set it
        stays on the model, so a later forward pass whose batch is not
        ``examples x beam`` (scoring one example after beam search) fails."""


def document_separator_index(task) -> int:
    """The ``<doc-sep>`` id: the task's (``--source-layout primera``), else the
    dictionary's; an error when the dictionary has none."""
    separator = task.document_separator() if hasattr(task, "document_separator") else None
    if separator is not None:
        return separator
    dictionary = task.source_dictionary
    index = dictionary.index(DOCUMENT_SEPARATOR)
    if index == dictionary.unk():
        raise ValueError(
            f"--global-attention doc-sep: the dictionary has no {DOCUMENT_SEPARATOR} symbol; use a data-bin "
            f"whose dictionary has it with --source-layout primera, or --global-attention first/documents"
        )
    return index


# ------------------------------------------------------------- Hugging Face


def led_state_dict_from_hf(hf_state: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """The state dict of :class:`LEDModel` from that of Hugging Face's
    ``LEDForConditionalGeneration`` (or ``LEDModel``, keys without ``led.``),
    by the table of the module docstring. Position tables gain fairseq's two
    unused leading rows (zeros). The output projection is ``lm_head`` (or the
    shared embedding when absent); a nonzero ``final_logits_bias`` is refused
    (fairseq's projection has no bias). Unknown keys are refused by name."""
    state = dict(hf_state)
    prefix = "led." if any(k.startswith("led.") for k in state) else ""
    out: Dict[str, Tensor] = {}
    bias = state.pop("final_logits_bias", None)
    if bias is not None and bias.abs().max().item() != 0:
        raise ValueError("final_logits_bias is nonzero; fairseq's output projection has no bias")
    shared = state.pop(f"{prefix}shared.weight")
    lm_head = state.pop("lm_head.weight", shared)
    out["encoder.embed_tokens.weight"] = state.pop(f"{prefix}encoder.embed_tokens.weight", shared)
    out["decoder.embed_tokens.weight"] = state.pop(f"{prefix}decoder.embed_tokens.weight", shared)
    out["decoder.output_projection.weight"] = lm_head
    renames = {
        ".self_attn.longformer_self_attn.query.": ".self_attn.q_proj.",
        ".self_attn.longformer_self_attn.key.": ".self_attn.k_proj.",
        ".self_attn.longformer_self_attn.value.": ".self_attn.v_proj.",
        ".self_attn.longformer_self_attn.query_global.": ".self_attn.q_global_proj.",
        ".self_attn.longformer_self_attn.key_global.": ".self_attn.k_global_proj.",
        ".self_attn.longformer_self_attn.value_global.": ".self_attn.v_global_proj.",
        ".self_attn.output.": ".self_attn.out_proj.",
    }
    for key, tensor in state.items():
        if not key.startswith(prefix + "encoder.") and not key.startswith(prefix + "decoder."):
            raise ValueError(f"unexpected Hugging Face LED weight {key!r}")
        name = key[len(prefix):]
        if name.endswith("embed_positions.weight"):
            tensor = torch.cat([tensor.new_zeros(2, tensor.size(1)), tensor], dim=0)
        for old, new in renames.items():
            if old in name and name.startswith("encoder."):
                name = name.replace(old, new)
                break
        out[name] = tensor
    return out


# ------------------------------------------------------------ architectures


@register_model_architecture("led", "led_base")
def led_base_architecture(args):
    """allenai/led-base-16384: BART-base (6 + 6 layers, d 768), 16,384 source
    positions, window 1,024."""
    DEFAULTS.fill(args)
    bart_base_architecture(args)


@register_model_architecture("led", "led_large")
def led_large_architecture(args):
    """allenai/led-large-16384: BART-large (12 + 12 layers, d 1,024), 16,384
    source positions, window 1,024."""
    DEFAULTS.fill(args)
    bart_large_architecture(args)


@register_model_architecture("led", "primera")
def primera_architecture(args):
    """allenai/PRIMERA: led_large dimensions, 4,096 source positions, window
    512, ``--global-attention doc-sep`` and the task's ``--source-layout
    primera`` (documents joined by ``<doc-sep>``, PRIMERA's per-document
    truncation). With no ``--source-layout`` given (the task's default is
    the data-bin's recorded layout), the architecture sets ``primera``; an
    explicit other layout is replaced, with a log line saying so; use
    ``led_large`` with ``--max-encoder-positions 4096 --attention-window
    512`` for PRIMERA's dimensions on another layout."""
    DEFAULTS.fill(args, max_encoder_positions=4096, attention_window="512", global_attention="doc-sep")
    if hasattr(args, "source_layout") and args.source_layout != "primera":
        if args.source_layout is not None:
            logger.info(
                "architecture primera: task --source-layout %s replaced by primera (documents joined by <doc-sep>); "
                "for PRIMERA's dimensions on another layout use --arch led_large --max-encoder-positions 4096 "
                "--attention-window 512", args.source_layout,
            )
        args.source_layout = "primera"
    led_large_architecture(args)


@register_model_architecture("led", "led_tiny")
def led_tiny_architecture(args):
    """Tiny dims for tests (``mdsfair.models.tiny_dimensions``), 1,024
    encoder positions, window 8 (several windows per test source)."""
    set_tiny_dimensions(args)
    DEFAULTS.fill(args, max_encoder_positions=1024, attention_window="8")
    led_base_architecture(args)
