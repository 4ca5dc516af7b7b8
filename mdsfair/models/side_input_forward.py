"""BART's ``forward`` for mdsfair's encoder-decoders whose encoders read side
inputs (the component model, PageSum, DAPE): :class:`SideInputForward`."""

from typing import Optional

from torch import Tensor


class SideInputForward:
    """BART's ``forward``, written once for mdsfair's encoder-decoders (the
    component model, PageSum, DAPE; the first base before fairseq's model):
    the encoder on the source and the side inputs its model declares
    (``side_inputs()``, keywords), the decoder on its output, and BART's
    sentence classification head (the last ``</s>``'s features) when one is
    named. Returns ``(x, extra)``."""

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor],
        prev_output_tokens: Tensor,
        features_only: bool = False,
        classification_head_name: Optional[str] = None,
        token_embeddings: Optional[Tensor] = None,
        return_all_hiddens: bool = True,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        **side_inputs: Optional[Tensor],
    ):
        if classification_head_name is not None:
            heads = getattr(self, "classification_heads", None)
            if heads is None or classification_head_name not in heads:
                raise ValueError(f"{type(self).__name__} has no classification head {classification_head_name!r}")
            features_only = True
        encoder_inputs = dict(side_inputs)
        if token_embeddings is not None:
            encoder_inputs["token_embeddings"] = token_embeddings
        encoder_out = self.encoder(
            src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens, **encoder_inputs
        )
        x, extra = self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )
        if classification_head_name is not None:
            sentence_representation = x[src_tokens.eq(self.eos), :].view(x.size(0), -1, x.size(-1))[:, -1, :]
            x = self.classification_heads[classification_head_name](sentence_representation)
        return x, extra
