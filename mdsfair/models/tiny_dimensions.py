"""The tiny encoder-decoder dimensions every ``*_tiny`` test architecture uses.

Every mdsfair model registers a ``<model>_tiny`` architecture. The
model-contract suite (``tests/test_model_contract.py``) runs *every*
architecture of the model at the sizes that architecture sets (its
``*_embed_dim``, ``*_hidden_dim``, ``*_layers`` and ``*_heads`` arguments,
given on top of the architecture's own settings), and fails for a model
that has none.
"""

TINY_DIMENSIONS = {
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_embed_dim": 32,
    "decoder_embed_dim": 32,
    "encoder_ffn_embed_dim": 64,
    "decoder_ffn_embed_dim": 64,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
}


def set_tiny_dimensions(args) -> None:
    """2 + 2 layers, d 32, 4 heads, feed-forward 64 (the shape of
    ``tests.utils.TINY_BART_ARGS``, so tiny BART checkpoints restore into the
    BART-derived tiny architectures); values already given are kept."""
    for name, value in TINY_DIMENSIONS.items():
        setattr(args, name, getattr(args, name, value))
