"""The inputs of ``mdsfair-import hiersumm``'s tests, in the hiersumm code's
layout (nlpyang/hiersumm): a tiny SentencePiece model with their special
pieces, their Summarizer's parameter names and shapes with random values,
and the training options their checkpoints pickle under ``opt``."""

import argparse

import sentencepiece
import torch

from tests.hiersumm_reference import hiersumm_positions

TEXT = [
    "the lake ferry leaves the harbour at noon and returns in the evening .",
    "it carries cars , bikes and about two hundred passengers across the lake .",
    "tickets cost ten dollars for adults and five dollars for children .",
    "the island airport opened in 1939 and serves regional flights .",
    "the ferry service was started by the city in 1833 .",
    "passengers can buy tickets at the terminal or online .",
    "in winter the ferry runs every hour because of the ice .",
    "the harbour front has parks , restaurants and a music hall .",
] * 4

DIM, HEADS, FFN, ENC_LAYERS, INTER, DEC_LAYERS = 16, 4, 24, 3, [2], 2
TABLE = 64  # their buffers are 5,000 long; a shorter table keeps the file small


def train_spm(path_prefix, control_roles):
    """Their specials as user-defined pieces (``control_roles=False``), or
    <PAD>/<S>/</S> as SentencePiece's own pad/bos/eos pieces (True)."""
    if control_roles:
        extra = dict(
            pad_id=0,
            pad_piece="<PAD>",
            bos_id=1,
            bos_piece="<S>",
            eos_id=2,
            eos_piece="</S>",
            unk_id=3,
            unk_piece="<UNK>",
            user_defined_symbols=["<T>", "<P>", "<Q>"],
        )
    else:
        extra = dict(
            pad_id=-1,
            bos_id=-1,
            eos_id=-1,
            unk_id=0,
            user_defined_symbols=["<PAD>", "<S>", "</S>", "<T>", "<P>", "<Q>"],
        )
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT),
        model_prefix=path_prefix,
        vocab_size=90,
        hard_vocab_limit=False,
        model_type="unigram",
        minloglevel=2,
        **extra,
    )
    return path_prefix + ".model"


def their_state_dict(vocab_size, seed=0, old_layer_norm_names=False):
    """The parameter names and shapes of their Summarizer (hier=True), random values."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=generator) * 0.3

    sd = {}

    def linear(name, out_features, in_features):
        sd[name + ".weight"] = rand(out_features, in_features)
        sd[name + ".bias"] = rand(out_features)

    def layer_norm(name, dim):
        weight, bias = ("a_2", "b_2") if old_layer_norm_names else ("weight", "bias")
        sd[f"{name}.{weight}"] = 1 + rand(dim)
        sd[f"{name}.{bias}"] = rand(dim)

    def attention(name, dim, final=True):
        for part in ("linear_keys", "linear_values", "linear_query"):
            linear(f"{name}.{part}", dim, dim)
        if final:
            linear(name + ".final_linear", dim, dim)

    def feed_forward(name):
        linear(name + ".w_1", FFN, DIM)
        linear(name + ".w_2", DIM, FFN)
        layer_norm(name + ".layer_norm", DIM)

    embeddings = rand(vocab_size, DIM)
    sd["encoder.embeddings.weight"] = embeddings
    sd["encoder.pos_emb.pe"] = hiersumm_positions(TABLE, DIM // 2).unsqueeze(0)
    for i in range(ENC_LAYERS):
        p = f"encoder.transformer_layers.{i}"
        if i in INTER:
            layer_norm(p + ".layer_norm1", DIM)
            linear(p + ".pooling.linear_keys", HEADS, DIM)
            linear(p + ".pooling.linear_values", DIM, DIM)
            layer_norm(p + ".layer_norm2", DIM // HEADS)
            attention(p + ".inter_att", DIM // HEADS, final=False)
            linear(p + ".linear", DIM, DIM)
        else:
            attention(p + ".self_attn", DIM)
            layer_norm(p + ".layer_norm", DIM)
        feed_forward(p + ".feed_forward")
    layer_norm("encoder.layer_norm", DIM)
    sd["decoder.embeddings.weight"] = embeddings
    sd["decoder.pos_emb.pe"] = hiersumm_positions(TABLE, DIM).unsqueeze(0)
    for i in range(DEC_LAYERS):
        p = f"decoder.transformer_layers.{i}"
        attention(p + ".self_attn", DIM)
        attention(p + ".context_attn", DIM)
        feed_forward(p + ".feed_forward")
        layer_norm(p + ".layer_norm_1", DIM)
        layer_norm(p + ".layer_norm_2", DIM)
        sd[p + ".mask"] = torch.triu(torch.ones(1, TABLE, TABLE, dtype=torch.uint8), diagonal=1)
    layer_norm("decoder.layer_norm", DIM)
    sd["generator.0.weight"] = embeddings
    sd["generator.0.bias"] = rand(vocab_size)
    return sd


def their_opt():
    """The training options their checkpoints pickle under 'opt' (the README's command, tiny sizes)."""
    return argparse.Namespace(
        emb_size=DIM,
        enc_hidden_size=DIM,
        dec_hidden_size=DIM,
        enc_layers=ENC_LAYERS,
        dec_layers=DEC_LAYERS,
        heads=HEADS,
        ff_size=FFN,
        hier=True,
        inter_layers=list(INTER),
        inter_heads=HEADS,
        enc_dropout=0.1,
        dec_dropout=0.1,
        share_embeddings=True,
        share_decoder_embeddings=True,
        label_smoothing=0.1,
        lr=3,
        warmup_steps=8000,
        vocab_path="spm9998_3.model",
        block_size=None,
    )
