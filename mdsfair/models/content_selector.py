"""LoBART's multitask content selection (MCS) model (Manakul & Gales 2021,
ACL, "Long-Span Summarization via Local Attention and Content Selection",
Sec. 4): ``--arch lobart_mcs``.

A hierarchical RNN encoder-decoder that reads a long input as sentences of
words and is trained on two tasks at once (the authors' code:
potsawee/longsum0 ``models/hiermodel.py``, ``train/train_hiermodel.py``):

* encoder: a bidirectional GRU over the words of each sentence; the state
  at a sentence's last word is its vector ``u_i``, and a bidirectional GRU
  over these vectors gives the sentence states ``h_i``;
* decoder (the sequence-to-sequence task): a GRU over the previous summary
  words, started from the last sentence's state, with a two-level attention
  at every step ``t``: over the sentences and, within each sentence, over
  its words (``s_t`` the decoder state, ``w_ij`` the word states)::

      beta_ti      = softmax_i( s_t . W_u h_i )                 sentence attention
      gamma_tij    = softmax_{j in i}( s_t . W_w w_ij )         word attention within sentence i
      c_t          = sum_ij beta_ti gamma_tij w_ij
      P(y_t | ...) = softmax( W_o [c_t ; s_t] )

* extractive labeller (the extractive task): ``p_i = sigmoid(w . h_i + b)``,
  the probability that sentence ``i`` is in the ROUGE oracle
  (:func:`mdsfair.preprocess.content_selection.extractive_labels`).

Trained with ``L = (1 - gamma) L_seq2seq + gamma L_ext`` (criterion
``content_selection``; gamma 0.2 in the authors' ``conf/hiermodel_v1.txt``).
At selection time (``mdsfair-rank --method mcs``) the model decodes a
summary without a reference (beam search, :meth:`ContentSelectorModel.decoded_attention`);
the sentence attention ``beta_ti`` summed over the decoding steps and
normalised is ``f_attn``, the labeller's ``p_i`` is ``f_ext``, and the two
combine into ``f_MCS`` (:func:`mdsfair.preprocess.content_selection.mcs_scores`).

The authors run their GRUs over padded sentences; here every GRU is packed,
so padding reaches no state and a cluster's outputs do not depend on the
batch it is in. Words are the ROUGE tokens of the ``content_selection``
task's word dictionary (the authors use BERT's WordPiece vocabulary).
"""

from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.modules import FairseqDropout
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from mdsfair.argument_types import at_least, number_between
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.modules.activation_checkpointing import add_activation_checkpointing_args, checkpoint_layer
from mdsfair.modules.pointer_attention import at_least_float32

#: The one source of the lobart_mcs model's defaults
#: (:mod:`mdsfair.models.flag_defaults`): the authors' ``conf/hiermodel_v1.txt``
#: (word embeddings 256, RNN states 512, 2 encoder layers at each level, 1
#: decoder layer, dropout 0.1).
DEFAULTS = FlagDefaults(
    {
        "selector_embed_dim": 256,
        "selector_hidden_dim": 512,
        "selector_encoder_layers": 2,
        "selector_decoder_layers": 1,
        "dropout": 0.1,
        "checkpoint_activations": False,
        "offload_activations": False,
    }
)


class PackedBidirectionalGRU(nn.Module):
    """A bidirectional GRU over right-padded sequences, packed so that the
    states of real positions never see padding; each direction has half of
    ``hidden_dim``. Padding positions come out as zeros."""

    def __init__(self, input_dim: int, hidden_dim: int, num_layers: int, dropout: float):
        super().__init__()
        if hidden_dim % 2:
            raise ValueError(f"--selector-hidden-dim {hidden_dim}: must be even (two directions of half of it)")
        self.gru = nn.GRU(
            input_dim,
            hidden_dim // 2,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
            bidirectional=True,
        )

    def forward(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        """``[N, T, d]`` inputs, ``[N]`` lengths (each at least 1) -> ``[N, T, hidden]``."""
        packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True, total_length=inputs.size(1))
        return states


class DecoderGRU(nn.Module):
    """The decoder's unidirectional GRU from a given initial state."""

    def __init__(self, input_dim: int, hidden_dim: int, num_layers: int, dropout: float):
        super().__init__()
        self.gru = nn.GRU(
            input_dim, hidden_dim, num_layers=num_layers, batch_first=True, dropout=dropout if num_layers > 1 else 0.0
        )

    def forward(self, inputs: Tensor, hidden: Tensor) -> Tuple[Tensor, Tensor]:
        """``[B, T, d]`` inputs, ``[layers, B, hidden]`` state -> the
        ``[B, T, hidden]`` states and the last state."""
        return self.gru(inputs, hidden.contiguous())


@register_model("lobart_mcs")
class ContentSelectorModel(BaseFairseqModel):
    """The hierarchical encoder-decoder and extractive labeller of MCS (Sec. 4)."""

    def __init__(self, args, dictionary):
        super().__init__()
        self.padding_idx = dictionary.pad()
        embed_dim, hidden_dim = args.selector_embed_dim, args.selector_hidden_dim
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        self.decoder_embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        layers, dropout = args.selector_encoder_layers, args.dropout
        # --checkpoint-activations: the three GRUs, whose per-step states are
        # the bulk of the activations, are recomputed in the backward pass.
        self.word_rnn = checkpoint_layer(PackedBidirectionalGRU(embed_dim, hidden_dim, layers, dropout), args)
        self.sentence_rnn = checkpoint_layer(PackedBidirectionalGRU(hidden_dim, hidden_dim, layers, dropout), args)
        self.decoder_rnn = checkpoint_layer(
            DecoderGRU(embed_dim, hidden_dim, args.selector_decoder_layers, dropout), args
        )
        self.decoder_layers = args.selector_decoder_layers
        self.sentence_attention_proj = nn.Linear(hidden_dim, hidden_dim)  # W_u
        self.word_attention_proj = nn.Linear(hidden_dim, hidden_dim)  # W_w
        self.output_proj = nn.Linear(2 * hidden_dim, len(dictionary))  # W_o
        self.extraction_proj = nn.Linear(hidden_dim, 1)  # the labeller's w, b
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        self.reset_parameters()

    def reset_parameters(self):
        """As the authors' ``param_init``: Xavier-normal matrices, zero biases
        (and, here, zero padding embeddings)."""
        for name, parameter in self.named_parameters():
            if parameter.dim() > 1:
                nn.init.xavier_normal_(parameter)
            elif "bias" in name:
                nn.init.zeros_(parameter)
        with torch.no_grad():
            self.embed_tokens.weight[self.padding_idx].zero_()
            self.decoder_embed_tokens.weight[self.padding_idx].zero_()

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        parser.add_argument(
            "--selector-embed-dim", type=at_least(1), metavar="N", help="word embedding dimension (encoder and decoder)"
        )
        parser.add_argument(
            "--selector-hidden-dim",
            type=at_least(2),
            metavar="N",
            help="size of the sentence, word and decoder states (each bidirectional GRU direction has half)",
        )
        parser.add_argument(
            "--selector-encoder-layers",
            type=at_least(1),
            metavar="N",
            help="layers of the word-level GRU and of the sentence-level GRU",
        )
        parser.add_argument(
            "--selector-decoder-layers", type=at_least(1), metavar="N", help="layers of the decoder GRU"
        )
        parser.add_argument(
            "--dropout",
            type=number_between(0, 1, high_inclusive=False),
            metavar="D",
            help="dropout between the layers of each GRU and before the labeller (the authors' places)",
        )
        add_activation_checkpointing_args(parser, layer="GRU")

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        return cls(args, task.source_dictionary)

    # ------------------------------------------------------------- encoder

    def encode(self, sentence_tokens: Tensor) -> Dict[str, Tensor]:
        """``[B, S, W]`` words of each sentence (right-padded; a cluster's
        sentences first, padding sentences after) -> the word states
        ``w_ij`` ``[B, S, W, h]``, the sentence states ``h_i`` ``[B, S, h]``,
        their padding masks (True at padding), and the attention keys
        ``W_w w_ij`` and ``W_u h_i`` (computed once for every decoding step)."""
        word_mask = sentence_tokens.eq(self.padding_idx)
        word_lengths = (~word_mask).sum(dim=-1)  # [B, S]
        sentence_mask = word_lengths.eq(0)
        real = ~sentence_mask
        lengths = word_lengths[real]  # [N]
        words = self.embed_tokens(sentence_tokens[real])  # [N, W, d]
        word_states = self.word_rnn(words, lengths)  # [N, W, h]
        sentence_vectors = word_states[torch.arange(len(lengths), device=lengths.device), lengths - 1]  # u_i
        batch_size, num_sentences, num_words = sentence_tokens.shape
        hidden_dim = word_states.size(-1)
        sentence_inputs = word_states.new_zeros(batch_size, num_sentences, hidden_dim)
        sentence_inputs[real] = sentence_vectors
        sentence_states = self.sentence_rnn(sentence_inputs, real.sum(dim=-1))  # h_i
        all_word_states = word_states.new_zeros(batch_size, num_sentences, num_words, hidden_dim)
        all_word_states[real] = word_states
        return {
            "word_states": all_word_states,
            "word_mask": word_mask,
            "word_keys": self.word_attention_proj(all_word_states),
            "sentence_states": sentence_states,
            "sentence_mask": sentence_mask,
            "sentence_keys": self.sentence_attention_proj(sentence_states),
        }

    def extraction_logits(self, encoder_out: Dict[str, Tensor]) -> Tensor:
        """The labeller before its sigmoid: ``[B, S]``."""
        return self.extraction_proj(self.dropout_module(encoder_out["sentence_states"])).squeeze(-1)

    # ------------------------------------------------------------- decoder

    def initial_state(self, encoder_out: Dict[str, Tensor]) -> Tensor:
        """The last sentence's state ``h_S`` for every decoder layer: ``[layers, B, h]``."""
        last = (~encoder_out["sentence_mask"]).sum(dim=-1) - 1
        states = encoder_out["sentence_states"]
        final = states[torch.arange(states.size(0), device=states.device), last]
        return final.unsqueeze(0).expand(self.decoder_layers, -1, -1)

    def decode(
        self, prev_output_tokens: Tensor, encoder_out: Dict[str, Tensor], state: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """The decoder from ``state`` over ``[B, T]`` previous words: logits
        ``[B, T, V]``, the sentence attention ``beta`` ``[B, T, S]`` and the
        last state."""
        decoder_states, last_state = self.decoder_rnn(self.decoder_embed_tokens(prev_output_tokens), state)
        sentence_mask = encoder_out["sentence_mask"]
        sentence_logits = at_least_float32(torch.einsum("bth,bsh->bts", decoder_states, encoder_out["sentence_keys"]))
        log_beta = F.log_softmax(sentence_logits.masked_fill(sentence_mask.unsqueeze(1), float("-inf")), dim=-1)
        word_logits = at_least_float32(torch.einsum("bth,bswh->btsw", decoder_states, encoder_out["word_keys"]))
        # padding words of real sentences are masked; a padding sentence keeps
        # finite word scores, its beta of 0 removes it
        word_padding = encoder_out["word_mask"] & ~sentence_mask.unsqueeze(-1)
        log_gamma = F.log_softmax(word_logits.masked_fill(word_padding.unsqueeze(1), float("-inf")), dim=-1)
        alpha = torch.exp(log_beta.unsqueeze(-1) + log_gamma).to(decoder_states.dtype)  # beta_ti gamma_tij
        context = torch.einsum("btsw,bswh->bth", alpha, encoder_out["word_states"])
        logits = self.output_proj(torch.cat([context, decoder_states], dim=-1))
        return logits, log_beta.exp().to(decoder_states.dtype), last_state

    def forward(self, sentence_tokens: Tensor, prev_output_tokens: Tensor):
        """Both tasks on a batch: the summary logits ``[B, T, V]`` (teacher
        forced) and ``{"sentence_attention": [B, T, S], "extraction_logits":
        [B, S]}``."""
        encoder_out = self.encode(sentence_tokens)
        logits, sentence_attention, _ = self.decode(prev_output_tokens, encoder_out, self.initial_state(encoder_out))
        return logits, {
            "sentence_attention": sentence_attention,
            "extraction_logits": self.extraction_logits(encoder_out),
        }

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = at_least_float32(net_output[0])
        return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)

    def max_positions(self):
        return None

    # ------------------------------------------------------------ selection

    @torch.no_grad()
    def decoded_attention(
        self, encoder_out: Dict[str, Tensor], bos: int, eos: int, beam: int, max_steps: int, length_penalty: float
    ) -> Tensor:
        """``f_attn`` of one cluster (batch of 1): the summary is decoded
        without a reference by beam search (``beam`` hypotheses, at most
        ``max_steps`` words, a finished hypothesis scored by its
        log-probability over its length (words with ``</s>``) to the power
        ``length_penalty``), and the sentence attention ``beta_ti`` of the
        best hypothesis, summed over its steps, is normalised to sum to 1:
        ``[S]``."""
        if encoder_out["sentence_states"].size(0) != 1:
            raise ValueError("decoded_attention scores one cluster at a time")
        device = encoder_out["sentence_states"].device
        # every hypothesis reads the one cluster's encoder outputs (views, not copies)
        encoder_rows = {name: value.expand(beam, *value.shape[1:]) for name, value in encoder_out.items()}
        state = self.initial_state(encoder_rows)
        last_words = torch.full((beam, 1), bos, dtype=torch.long, device=device)
        scores = torch.full((beam,), float("-inf"), device=device)
        scores[0] = 0.0  # one hypothesis to start from
        attention_sums = torch.zeros(beam, encoder_out["sentence_mask"].size(1), device=device)
        finished = []
        for step in range(max_steps):
            logits, beta, state = self.decode(last_words, encoder_rows, state)
            attention_sums = attention_sums + beta[:, 0].float()
            lprobs = F.log_softmax(logits[:, 0].float(), dim=-1)
            lprobs[:, self.padding_idx] = float("-inf")
            vocabulary = lprobs.size(-1)
            candidates = (scores.unsqueeze(1) + lprobs).view(-1)
            top_scores, top = candidates.topk(min(2 * beam, candidates.numel()))
            continuing = []
            for score, index in zip(top_scores.tolist(), top.tolist()):
                if score == float("-inf"):
                    break
                row, word = divmod(index, vocabulary)
                if word == eos:
                    finished.append((score / (step + 1) ** length_penalty, attention_sums[row]))
                else:
                    continuing.append((score, row, word))
                if len(continuing) == beam:
                    break
            if len(finished) >= beam or not continuing:
                break
            continuing += [(float("-inf"), continuing[0][1], continuing[0][2])] * (beam - len(continuing))
            order = torch.tensor([row for _, row, _ in continuing], device=device)
            state = state.index_select(1, order)
            attention_sums = attention_sums.index_select(0, order)
            last_words = torch.tensor([[word] for _, _, word in continuing], device=device)
            scores = torch.tensor([score for score, _, _ in continuing], device=device)
        else:  # no early stop: the hypotheses still open end here, max_steps words long
            finished += [
                (score / max_steps**length_penalty, attention_sums[row])
                for row, score in enumerate(scores.tolist())
                if score > float("-inf")
            ]
        best = max(finished, key=lambda hypothesis: hypothesis[0])[1]
        return best / best.sum()


@register_model_architecture("lobart_mcs", "lobart_mcs")
def base_architecture(args):
    """The authors' ``conf/hiermodel_v1.txt`` (:data:`DEFAULTS`)."""
    DEFAULTS.fill(args)
    # not a default: --offload-activations implies --checkpoint-activations, as in fairseq's transformer
    args.checkpoint_activations = args.checkpoint_activations or args.offload_activations


@register_model_architecture("lobart_mcs", "lobart_mcs_tiny")
def tiny_architecture(args):
    """For tests: embeddings and states of 16, one layer per GRU level."""
    DEFAULTS.fill(args, selector_embed_dim=16, selector_hidden_dim=16, selector_encoder_layers=1)
    base_architecture(args)
