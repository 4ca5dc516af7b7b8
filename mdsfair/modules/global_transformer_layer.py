"""The global transformer layer of the Hierarchical Transformer (Liu & Lapata
2019, Eq. 13-23, Figure 2): multi-head pooling of every paragraph, attention
across the paragraphs per head, and their fused context added to every token
of the paragraph, then a feed-forward network."""

from typing import Optional

from fairseq import utils
from fairseq.modules import FairseqDropout, LayerNorm
from torch import Tensor, nn

from mdsfair.modules.inter_paragraph_attention import InterParagraphAttention
from mdsfair.modules.multi_head_pooling import MultiHeadPooling
from mdsfair.modules.paragraph_blocks import ParagraphBlocks


class GlobalTransformerLayer(nn.Module):
    """A global transformer layer (Eq. 13-23, Figure 2).

    Post-LN (the paper, default)::

        head^z_i  = MultiHeadPooling(x^{l-1})_i                    (Eq. 13-16)
        context^z = InterParagraphAttention(head^z)                (Eq. 17-20, 24)
        c_i       = W_c [context^1_i ; ... ; context^H_i]          (Eq. 21)
        g_ij      = W_o2 ReLU(W_o1 (x^{l-1}_ij + c_i))             (Eq. 22)
        x^l_ij    = LayerNorm(g_ij + x^{l-1}_ij)                   (Eq. 23)

    Pre-LN (``--encoder-normalize-before``, the hiersumm code): pooling reads
    ``LayerNorm(x)``, and ``y = x + c_i; x^l = y + FFN(LayerNorm(y))``, so the
    residual carries ``c_i`` and there is no layer norm after it.

    Built from the hiertransformer model's flags, as fairseq's
    ``TransformerEncoderLayer`` is: ``--encoder-embed-dim``, ``--global-heads``,
    ``--encoder-ffn-embed-dim``, ``--encoder-normalize-before``, ``--graph`` and
    ``--graph-heads`` (Eq. 24), ``--shared-inter-paragraph-attention``,
    ``--no-pooling-head-projection``, ``--activation-fn`` and the dropouts.
    """

    def __init__(self, args):
        super().__init__()
        embed_dim = args.encoder_embed_dim
        num_heads = args.global_heads
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.normalize_before = args.encoder_normalize_before
        self.graph_heads = args.graph_heads if args.graph != "none" else 0
        self.pooling = MultiHeadPooling(
            embed_dim, num_heads, dropout=args.attention_dropout, head_projection=not args.no_pooling_head_projection
        )
        self.inter_paragraph_attention = InterParagraphAttention(
            num_heads,
            embed_dim // num_heads,
            dropout=args.attention_dropout,
            shared_across_heads=args.shared_inter_paragraph_attention,
        )
        self.context_proj = nn.Linear(embed_dim, embed_dim)  # W_c, Eq. 21
        self.pooling_layer_norm = LayerNorm(embed_dim) if self.normalize_before else None
        self.fc1 = nn.Linear(embed_dim, args.encoder_ffn_embed_dim)  # W_o1
        self.fc2 = nn.Linear(args.encoder_ffn_embed_dim, embed_dim)  # W_o2
        self.final_layer_norm = LayerNorm(embed_dim)
        self.activation_fn = utils.get_activation_fn(args.activation_fn)
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(args.activation_dropout, module_name=self.__class__.__name__)
        for linear in (self.context_proj, self.fc1, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def paragraph_context(
        self, x: Tensor, block_padding_mask: Tensor, blocks: ParagraphBlocks, graph: Optional[Tensor]
    ) -> Tensor:
        """``c_i`` of Eq. 21 for every block: ``[N, d]``."""
        heads = self.pooling(x, block_padding_mask)  # [N, H, d_head]
        context, _ = self.inter_paragraph_attention(
            blocks.blocks_to_paragraphs(heads), blocks.paragraph_mask(), graph=graph, graph_heads=self.graph_heads
        )
        context = blocks.paragraphs_to_blocks(context).reshape(-1, self.embed_dim)
        return self.dropout_module(self.context_proj(context))

    def feed_forward(self, x: Tensor) -> Tensor:
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        return self.dropout_module(self.fc2(x))

    def forward(
        self, x: Tensor, block_padding_mask: Tensor, blocks: ParagraphBlocks, graph: Optional[Tensor] = None
    ) -> Tensor:
        """``x``: ``[N, L, d]`` blocks; returns the same shape."""
        if self.normalize_before:
            context = self.paragraph_context(self.pooling_layer_norm(x), block_padding_mask, blocks, graph)
            x = x + context.unsqueeze(1)
            return x + self.feed_forward(self.final_layer_norm(x))
        context = self.paragraph_context(x, block_padding_mask, blocks, graph)
        return self.final_layer_norm(x + self.feed_forward(x + context.unsqueeze(1)))
