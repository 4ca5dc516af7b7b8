"""Pointer-generator network with coverage (See, Liu & Manning, ACL 2017,
"Get To The Point: Summarization with Pointer-Generator Networks"):
``--arch pointer_generator_see2017``.

The model reads the flat source of the ``multidoc_summarization`` task (the
documents of a cluster one after another, each opened by ``<s>``, as fairseq's
``transformer`` and ``lstm`` read it) and generates the summary:

* encoder (Sec. 2.1): the word embeddings of the source tokens read by one
  bidirectional LSTM layer, giving the encoder states ``h_i``; the decoder's
  initial state is a ReLU projection of the two directions' final states (the
  reduction the paper leaves unspecified);
* decoder (Sec. 2.1): one unidirectional LSTM layer over the embeddings of the
  previous summary tokens ``x_t`` (the embedding is shared with the encoder:
  one vocabulary for source and target, Sec. 4), giving the decoder state
  ``s_t``; Bahdanau attention with coverage ``a^t`` and the context ``h*_t``
  (Eq. 1-3, 10-11, :class:`~mdsfair.modules.pointer_attention.CoverageAttention`);
* output (Sec. 2.1-2.2)::

      P_vocab = softmax(V' (V [s_t ; h*_t] + b) + b')                 (Eq. 4)
      p_gen   = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)   (Eq. 8)
      P(w)    = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a^t_i  (Eq. 9)

  (:func:`~mdsfair.modules.pointer_attention.copy_mixture`). The decoder's
  output is the probability table ``P(w)``; ``get_normalized_probs`` takes its
  logarithm.
* coverage (Sec. 2.3): ``c^t``, the sum of the previous steps' attentions,
  enters every attention score (Eq. 11), and the decoder reports
  ``covloss_t = sum_i min(a^t_i, c^t_i)`` (Eq. 12) per step as
  ``extra["coverage_loss"]``, which the criterion ``pointer_generator_coverage``
  adds to the negative log-likelihood with weight lambda (Eq. 13).
  ``--no-coverage`` gives the pointer-generator without coverage (Eq. 1, no
  ``w_c``).

Copying is over the ids of the task's dictionary: a source token is copied as
the dictionary entry it was binarized to. mdsfair's data-bins are subword
encoded (SentencePiece or GPT-2 BPE), so no source word lies outside the
vocabulary and the paper's extended vocabulary of per-article OOV words (Sec.
2.2) has nothing to hold.
"""

import logging
from typing import Dict, List, Optional

import torch
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.modules import FairseqDropout
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from mdsfair.argument_types import at_least, number_between
from mdsfair.models.flag_defaults import FlagDefaults, derived
from mdsfair.modules.activation_checkpointing import add_activation_checkpointing_args, checkpoint_layer
from mdsfair.modules.pointer_attention import CoverageAttention, at_least_float32, copy_mixture, coverage_loss_terms

logger = logging.getLogger(__name__)

#: The one source of the pointer_generator model's defaults
#: (:mod:`mdsfair.models.flag_defaults`): See et al. 2017, Sec. 4 (256-dimensional
#: hidden states, 128-dimensional word embeddings, no dropout, coverage on for
#: the final model). The attention size (the rows of ``W_h``), which the paper
#: does not give, is the size of the encoder states ``h_i`` (both directions).
DEFAULTS = FlagDefaults(
    {
        "word_embed_dim": 128,
        "lstm_hidden_dim": 256,
        "attention_hidden_dim": derived("2 x --lstm-hidden-dim", lambda args: 2 * args.lstm_hidden_dim),
        "no_coverage": False,
        "dropout": 0.0,
    }
)


class BidirectionalLSTMLayer(nn.Module):
    """One bidirectional LSTM layer over a right-padded batch, packed so that
    padding changes neither the states nor the final states."""

    def __init__(self, input_dim: int, hidden_dim: int):
        super().__init__()
        self.lstm = nn.LSTM(input_dim, hidden_dim, batch_first=True, bidirectional=True)

    def forward(self, embedded: Tensor, lengths: Tensor):
        """``[B, S, 2H]`` states (zero at padding) and the final hidden and
        cell states ``[B, 2H]`` (forward direction, then backward)."""
        batch_size, source_length, _ = embedded.shape
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, (final_hidden, final_cell) = self.lstm(packed)
        states, _ = pad_packed_sequence(outputs, batch_first=True, total_length=source_length)
        return (
            states,
            final_hidden.transpose(0, 1).reshape(batch_size, -1),
            final_cell.transpose(0, 1).reshape(batch_size, -1),
        )


class LSTMLayer(nn.Module):
    """One unidirectional LSTM layer from a given initial state."""

    def __init__(self, input_dim: int, hidden_dim: int):
        super().__init__()
        self.lstm = nn.LSTM(input_dim, hidden_dim, batch_first=True)

    def forward(self, inputs: Tensor, hidden: Tensor, cell: Tensor):
        """``[B, T, H]`` states and the last hidden and cell states ``[B, H]``."""
        outputs, (last_hidden, last_cell) = self.lstm(inputs, (hidden[None].contiguous(), cell[None].contiguous()))
        return outputs, last_hidden[0], last_cell[0]


class PointerGeneratorEncoder(FairseqEncoder):
    """Bidirectional LSTM encoder (Sec. 2.1) and the decoder's initial state."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = embed_tokens
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        hidden = args.lstm_hidden_dim
        self.lstm = checkpoint_layer(BidirectionalLSTMLayer(args.word_embed_dim, hidden), args)
        self.reduce_hidden = nn.Linear(2 * hidden, hidden)
        self.reduce_cell = nn.Linear(2 * hidden, hidden)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None) -> Dict[str, List[Tensor]]:
        padding_mask = src_tokens.eq(self.padding_idx)
        lengths = (~padding_mask).sum(dim=1)
        embedded = self.dropout_module(self.embed_tokens(src_tokens))
        states, final_hidden, final_cell = self.lstm(embedded, lengths)
        return {
            "encoder_out": [self.dropout_module(states)],  # h_i, [B, S, 2H]
            "encoder_padding_mask": [padding_mask],
            "src_tokens": [src_tokens],
            "initial_hidden": [torch.relu(self.reduce_hidden(final_hidden))],
            "initial_cell": [torch.relu(self.reduce_cell(final_cell))],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return {name: [value.index_select(0, new_order) for value in values] for name, values in encoder_out.items()}

    def max_positions(self):
        return int(1e6)  # an LSTM has no position table; the task's --max-source-positions truncates


class PointerGeneratorDecoder(FairseqIncrementalDecoder):
    """LSTM decoder with coverage attention and the copy mixture of Eq. 9."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        hidden = args.lstm_hidden_dim
        embed_dim = args.word_embed_dim
        self.embed_tokens = embed_tokens
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        self.lstm = checkpoint_layer(LSTMLayer(embed_dim, hidden), args)
        self.attention = CoverageAttention(2 * hidden, hidden, args.attention_hidden_dim, coverage=not args.no_coverage)
        self.output_hidden = nn.Linear(3 * hidden, hidden)  # V, b (Eq. 4)
        self.output_projection = nn.Linear(hidden, len(dictionary))  # V', b' (Eq. 4)
        self.generation_switch = nn.Linear(2 * hidden + hidden + embed_dim, 1)  # w_h*, w_s, w_x, b_ptr (Eq. 8)

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Dict[str, List[Tensor]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        **unused,
    ):
        """``(P(w) [B, T, V], {"attn": [a [B, T, S]], "coverage_loss": [covloss [B, T]]})``;
        with ``incremental_state``, the last token's step only."""
        encoder_states = encoder_out["encoder_out"][0]
        padding_mask = encoder_out["encoder_padding_mask"][0]
        cached = self.get_incremental_state(incremental_state, "state") if incremental_state is not None else None
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        if cached is None:
            hidden, cell = encoder_out["initial_hidden"][0], encoder_out["initial_cell"][0]
            coverage = at_least_float32(encoder_states.new_zeros(padding_mask.shape))
        else:
            hidden, cell, coverage = cached["hidden"], cached["cell"], cached["coverage"]

        inputs = self.dropout_module(self.embed_tokens(prev_output_tokens))  # x_t
        states, hidden, cell = self.lstm(inputs, hidden, cell)  # s_t
        encoder_features = self.attention.encoder_features(encoder_states)
        attentions, contexts, coverages = [], [], []
        for step in range(states.size(1)):
            attention, context = self.attention(
                states[:, step], encoder_states, encoder_features, padding_mask, coverage
            )
            coverages.append(coverage)
            coverage = coverage + attention  # c^{t+1} (Eq. 10)
            attentions.append(attention)
            contexts.append(context)
        attention = torch.stack(attentions, dim=1)
        coverage_before = torch.stack(coverages, dim=1)
        if incremental_state is not None:
            self.set_incremental_state(
                incremental_state, "state", {"hidden": hidden, "cell": cell, "coverage": coverage}
            )
        states = self.dropout_module(states)
        context = torch.stack(contexts, dim=1)  # h*_t
        features = torch.cat([states, context], dim=-1)
        extra = {"attn": [attention], "coverage_loss": [coverage_loss_terms(attention, coverage_before)]}
        if features_only:
            return features, extra
        logits = self.output_projection(self.output_hidden(features))
        p_gen = torch.sigmoid(at_least_float32(self.generation_switch(torch.cat([context, states, inputs], dim=-1))))
        vocabulary_probabilities = torch.softmax(at_least_float32(logits), dim=-1)
        src_tokens = encoder_out["src_tokens"][0]
        return copy_mixture(vocabulary_probabilities, attention, src_tokens, p_gen), extra

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        """The decoder's output is ``P(w)`` already (Eq. 9); its logarithm
        takes 0 as the smallest positive number of its dtype."""
        probabilities = net_output[0]
        if not log_probs:
            return probabilities
        return probabilities.clamp(min=torch.finfo(probabilities.dtype).tiny).log()

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        cached = self.get_incremental_state(incremental_state, "state")
        if cached is None:
            return
        reordered = {name: value.index_select(0, new_order) for name, value in cached.items()}
        self.set_incremental_state(incremental_state, "state", reordered)

    def max_positions(self):
        return int(1e6)  # an LSTM has no position table; the task's --max-target-positions truncates


@register_model("pointer_generator")
class PointerGeneratorModel(FairseqEncoderDecoderModel):
    """Pointer-generator network with coverage (See et al. 2017). Train on
    ``--task multidoc_summarization`` with ``--criterion
    pointer_generator_coverage`` (Eq. 13)."""

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        parser.add_argument(
            "--word-embed-dim", type=at_least(1), metavar="N", help="size of the word embeddings (Sec. 4)"
        )
        parser.add_argument(
            "--lstm-hidden-dim",
            type=at_least(1),
            metavar="N",
            help="size of the decoder LSTM state and of each direction of the encoder LSTM (Sec. 4)",
        )
        parser.add_argument(
            "--attention-hidden-dim",
            type=at_least(1),
            metavar="N",
            help="size of W_h h_i + W_s s_t + w_c c_i in the attention score (Eq. 1, 11)",
        )
        parser.add_argument(
            "--no-coverage",
            action="store_true",
            help="the pointer-generator without coverage: no w_c c_i term in the attention (Eq. 1 instead of 11)",
        )
        parser.add_argument(
            "--dropout",
            type=number_between(0, 1, high_inclusive=False),
            metavar="P",
            help="dropout on the word embeddings and the LSTM states (the paper uses none)",
        )
        add_activation_checkpointing_args(parser, layer="LSTM layer")

    @classmethod
    def build_model(cls, args, task):
        pointer_generator_architecture(args)
        source, target = task.source_dictionary, task.target_dictionary
        if source is not target and list(source.symbols) != list(target.symbols):
            raise ValueError(
                "pointer_generator copies source token ids into the summary: the source and target "
                f"dictionaries must be one ({len(source)} and {len(target)} symbols given)"
            )
        embed_tokens = nn.Embedding(len(source), args.word_embed_dim, padding_idx=source.pad())
        nn.init.normal_(embed_tokens.weight, mean=0.0, std=args.word_embed_dim**-0.5)
        nn.init.zeros_(embed_tokens.weight[source.pad()])
        encoder = PointerGeneratorEncoder(args, source, embed_tokens)
        decoder = PointerGeneratorDecoder(args, target, embed_tokens)
        return cls(encoder, decoder)


@register_model_architecture("pointer_generator", "pointer_generator_see2017")
def pointer_generator_architecture(args):
    """See et al. 2017's final model (Sec. 4): 128-dimensional embeddings,
    256-dimensional LSTM states, coverage on, no dropout. The paper's other
    settings are the task's and the trainer's (docs/recipes/pointer_generator.md)."""
    DEFAULTS.fill(args)


@register_model_architecture("pointer_generator", "pointer_generator_tiny")
def pointer_generator_tiny_architecture(args):
    """Tiny dimensions for tests: embeddings 16, LSTM states 32, attention 64."""
    DEFAULTS.fill(args, word_embed_dim=16, lstm_hidden_dim=32)
