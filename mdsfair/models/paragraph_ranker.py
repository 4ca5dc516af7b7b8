"""Paragraph ranker of the Hierarchical Transformer pipeline (Liu & Lapata
2019, Section 3.1, Eq. 1-6): ``--arch paragraph_ranker``.

A logistic-regression score per paragraph from a title LSTM and a
paragraph LSTM::

    u^t = LSTM_t(title),  û^t = maxpool(u^t)          (Eq. 1, 3)
    u^p = LSTM_p(paragraph)                            (Eq. 2)
    p_j = tanh(W_1 [u^p_j ; û^t])                      (Eq. 4)
    p̂  = maxpool_j(p_j)                                (Eq. 5)
    s   = sigmoid(W_2 p̂)                               (Eq. 6)

Trained by task ``paragraph_ranking`` with criterion ``paragraph_ranking``
(cross-entropy against ROUGE-2 recall targets). Dropout 0.2 is applied
before every linear layer, as in the paper. The LSTMs are unidirectional, so
right padding never reaches a real token's state.
"""

import torch
import torch.nn.functional as F
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.modules import FairseqDropout
from torch import Tensor, nn

from mdsfair.argument_types import at_least, number_between
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.modules.activation_checkpointing import checkpoint_layer

#: The one source of the paragraph_ranker model's defaults
#: (:mod:`mdsfair.models.flag_defaults`): Liu & Lapata 2019, Section 4 (LSTM
#: hidden size 256, dropout 0.2 before all linear layers); the paper does not
#: give the word embedding size, which we set to the hidden size.
DEFAULTS = FlagDefaults(
    {
        "ranker_embed_dim": 256,
        "ranker_hidden_dim": 256,
        "dropout": 0.2,
        "checkpoint_activations": False,
        "offload_activations": False,
    }
)


def masked_max_pool(states: Tensor, padding_mask: Tensor) -> Tensor:
    """Max over the time dimension 1 of ``[N, T, d]``, ignoring padding
    (``[N, T]`` True at pad); a row with no token pools to zeros."""
    filled = states.masked_fill(padding_mask.unsqueeze(-1), torch.finfo(states.dtype).min)
    pooled = filled.max(dim=1).values
    empty = padding_mask.all(dim=1, keepdim=True)
    return pooled.masked_fill(empty, 0.0)


@register_model("paragraph_ranker")
class ParagraphRankerModel(BaseFairseqModel):
    """Scores paragraphs for their relevance to a title (Eq. 1-6)."""

    def __init__(self, args, dictionary):
        super().__init__()
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), args.ranker_embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=args.ranker_embed_dim**-0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        # --checkpoint-activations: the LSTMs, whose per-step states are the
        # bulk of the ranker's activations, are recomputed in the backward pass.
        self.title_lstm = checkpoint_layer(
            nn.LSTM(args.ranker_embed_dim, args.ranker_hidden_dim, batch_first=True), args
        )
        self.paragraph_lstm = checkpoint_layer(
            nn.LSTM(args.ranker_embed_dim, args.ranker_hidden_dim, batch_first=True), args
        )
        self.match_proj = nn.Linear(2 * args.ranker_hidden_dim, args.ranker_hidden_dim)  # W_1
        self.score_proj = nn.Linear(args.ranker_hidden_dim, 1)  # W_2
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        parser.add_argument("--ranker-embed-dim", type=at_least(1), metavar="N", help="word embedding dimension")
        parser.add_argument(
            "--ranker-hidden-dim",
            type=at_least(1),
            metavar="N",
            help=("hidden size of the title and paragraph LSTMs (Section 4)"),
        )
        parser.add_argument(
            "--dropout",
            type=number_between(0, 1, high_inclusive=False),
            metavar="D",
            help="dropout before every linear layer (Section 4)",
        )
        parser.add_argument(
            "--checkpoint-activations",
            action="store_true",
            help=("recompute the LSTM states in the backward pass instead of storing them (less memory, more compute)"),
        )
        parser.add_argument(
            "--offload-activations",
            action="store_true",
            help=(
                "--checkpoint-activations, keeping the saved LSTM inputs in CPU memory; sets --checkpoint-activations"
            ),
        )

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        return cls(args, task.source_dictionary)

    def encode_titles(self, title_tokens: Tensor) -> Tensor:
        """Eq. 1, 3: ``[B, T_t]`` -> ``û^t`` ``[B, hidden]``."""
        states, _ = self.title_lstm(self.embed_tokens(title_tokens))
        return masked_max_pool(states, title_tokens.eq(self.padding_idx))

    def forward(self, title_tokens: Tensor, paragraph_tokens: Tensor, paragraph_cluster: Tensor) -> Tensor:
        """
        Args:
            title_tokens: ``[B, T_t]`` one title per cluster, right-padded.
            paragraph_tokens: ``[N, T_p]`` every paragraph of the batch.
            paragraph_cluster: ``[N]`` the cluster (row of ``title_tokens``)
                of each paragraph.

        Returns:
            logits ``[N]``; the score of Eq. 6 is ``sigmoid(logits)``.
        """
        title = self.encode_titles(title_tokens)[paragraph_cluster]  # [N, h]
        states, _ = self.paragraph_lstm(self.embed_tokens(paragraph_tokens))  # Eq. 2, [N, T_p, h]
        features = torch.cat([states, title.unsqueeze(1).expand_as(states)], dim=-1)
        matched = torch.tanh(self.match_proj(self.dropout_module(features)))  # Eq. 4
        pooled = masked_max_pool(matched, paragraph_tokens.eq(self.padding_idx))  # Eq. 5
        return self.score_proj(self.dropout_module(pooled)).squeeze(-1)  # Eq. 6 before the sigmoid

    def score(self, title_tokens: Tensor, paragraph_tokens: Tensor, paragraph_cluster: Tensor) -> Tensor:
        """``s`` of Eq. 6, in (0, 1)."""
        return torch.sigmoid(self.forward(title_tokens, paragraph_tokens, paragraph_cluster))

    def max_positions(self):
        return None

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return F.logsigmoid(net_output) if log_probs else torch.sigmoid(net_output)


@register_model_architecture("paragraph_ranker", "paragraph_ranker")
def base_architecture(args):
    """Section 4: LSTM hidden size 256, dropout 0.2 (:data:`DEFAULTS`; the
    paper trains it with Adagrad, lr 0.15)."""
    DEFAULTS.fill(args)
    # not a default: --offload-activations implies --checkpoint-activations, as in fairseq's transformer
    args.checkpoint_activations = args.checkpoint_activations or args.offload_activations


@register_model_architecture("paragraph_ranker", "paragraph_ranker_tiny")
def tiny_architecture(args):
    """For tests: embedding and hidden size 16."""
    DEFAULTS.fill(args, ranker_embed_dim=16, ranker_hidden_dim=16)
    base_architecture(args)
