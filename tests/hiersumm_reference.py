"""A reimplementation of the authors' Summarizer (nlpyang/hiersumm,
src/abstractive/{neural,attn,transformer_encoder,transformer_decoder,
model_builder}.py) written from their equations, reading a state dict with
their parameter names. It is the reference for the hiertransformer_hiersumm
arch (tests/test_hiertransformer.py) and for ``mdsfair-import hiersumm``
(tests/test_import_hiersumm.py)."""

import math

import torch
import torch.nn.functional as F


def hiersumm_positions(length, dim):
    """Their PositionalEncoding table (float32): pe[p, 2i] = sin(p * exp(2i * -ln(10^4)/dim)),
    pe[p, 2i+1] = cos(...), positions from 0."""
    position = torch.arange(length, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim))
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def ref_layer_norm(x, sd, prefix):
    return F.layer_norm(x, x.shape[-1:], sd[prefix + ".weight"], sd[prefix + ".bias"], eps=1e-6)


def ref_linear(x, sd, prefix):
    return x @ sd[prefix + ".weight"].T + sd[prefix + ".bias"]


def ref_attention(key, value, query, sd, prefix, heads, blocked, final_linear=True):
    """MultiHeadedAttention: ``[B, L, d]`` inputs; ``blocked [B, Lq or 1, Lk]`` True where masked."""
    batch, dim = key.size(0), key.size(-1)
    head_dim = dim // heads

    def split(x):
        return x.view(batch, -1, heads, head_dim).transpose(1, 2)

    k = split(ref_linear(key, sd, prefix + ".linear_keys"))
    v = split(ref_linear(value, sd, prefix + ".linear_values"))
    q = split(ref_linear(query, sd, prefix + ".linear_query")) / math.sqrt(head_dim)
    scores = (q @ k.transpose(2, 3)).masked_fill(blocked.unsqueeze(1), -1e18)
    context = torch.softmax(scores, dim=-1) @ v
    if not final_linear:
        return context
    return ref_linear(context.transpose(1, 2).reshape(batch, -1, dim), sd, prefix + ".final_linear")


def ref_feed_forward(x, sd, prefix):
    inner = torch.relu(ref_linear(ref_layer_norm(x, sd, prefix + ".layer_norm"), sd, prefix + ".w_1"))
    return ref_linear(inner, sd, prefix + ".w_2") + x


def ref_encoder(src, sd, heads, inter_layers, inter_heads, num_layers, pad):
    """TransformerInterEncoder: ``src [B, n_blocks, n_tokens]`` -> memory ``[B, S, d]`` of the
    non-pad tokens in order, and its padding mask ``[B, S]``."""
    batch, blocks, tokens = src.shape
    embeddings = sd["encoder.embeddings.weight"]
    dim = embeddings.size(1)
    pe = hiersumm_positions(max(blocks, tokens), dim // 2).to(embeddings.dtype)
    position = torch.cat(
        [
            pe[:tokens].expand(batch, blocks, tokens, dim // 2),
            pe[:blocks].unsqueeze(1).expand(batch, blocks, tokens, dim // 2),
        ],
        -1,
    )
    x = (embeddings[src] * math.sqrt(dim) + position).view(batch * blocks, tokens, dim)
    pad_mask = src.eq(pad).view(batch * blocks, tokens)
    block_missing = pad_mask.view(batch, blocks, tokens).all(-1)
    head_dim = dim // inter_heads
    for i in range(num_layers):
        p = f"encoder.transformer_layers.{i}"
        if i in inter_layers:
            h = ref_layer_norm(x, sd, p + ".layer_norm1")
            scores = ref_linear(h, sd, p + ".pooling.linear_keys").masked_fill(pad_mask.unsqueeze(-1), -1e18)
            weights = torch.softmax(scores, dim=1)  # over the tokens of a block, per head
            values = ref_linear(h, sd, p + ".pooling.linear_values").view(batch * blocks, tokens, inter_heads, head_dim)
            block = (weights.unsqueeze(-1) * values).sum(1)  # [B*n, heads, d_head]
            block = ref_layer_norm(block, sd, p + ".layer_norm2")
            block = (
                block.view(batch, blocks, inter_heads, head_dim)
                .transpose(1, 2)
                .reshape(batch * inter_heads, blocks, head_dim)
            )
            blocked = (
                block_missing.unsqueeze(1).expand(batch, inter_heads, blocks).reshape(batch * inter_heads, 1, blocks)
            )
            block = ref_attention(block, block, block, sd, p + ".inter_att", 1, blocked, final_linear=False)
            block = block.view(batch, inter_heads, blocks, head_dim).transpose(1, 2).reshape(batch * blocks, dim)
            block = ref_linear(block, sd, p + ".linear")
            x = ref_feed_forward(x + block.unsqueeze(1), sd, p + ".feed_forward")
        else:
            h = ref_layer_norm(x, sd, p + ".layer_norm")
            x = ref_attention(h, h, h, sd, p + ".self_attn", heads, pad_mask.unsqueeze(1)) + x
            x = ref_feed_forward(x, sd, p + ".feed_forward")
    x = ref_layer_norm(x, sd, "encoder.layer_norm") * (~pad_mask).unsqueeze(-1)
    x = x.view(batch, blocks * tokens, dim)
    keep = (~pad_mask).view(batch, blocks * tokens)
    unpadded = [x[b][keep[b]] for b in range(batch)]
    length = max(u.size(0) for u in unpadded)
    memory = torch.stack([torch.cat([u, u.new_zeros(length - u.size(0), dim)]) for u in unpadded])
    memory_pad = torch.arange(length).unsqueeze(0) >= torch.tensor([u.size(0) for u in unpadded]).unsqueeze(1)
    return memory, memory_pad


def ref_decoder(tgt, memory, memory_pad, sd, heads, num_layers, pad):
    """TransformerDecoder + generator under teacher forcing: ``tgt [B, T]`` starting with <S>;
    returns log-probabilities ``[B, T, V]``."""
    embeddings = sd["decoder.embeddings.weight"]
    dim = embeddings.size(1)
    length = tgt.size(1)
    x = embeddings[tgt] * math.sqrt(dim) + hiersumm_positions(length, dim).to(embeddings.dtype)
    future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
    self_blocked = tgt.eq(pad).unsqueeze(1) | future.unsqueeze(0)
    for i in range(num_layers):
        p = f"decoder.transformer_layers.{i}"
        h = ref_layer_norm(x, sd, p + ".layer_norm_1")
        query = ref_attention(h, h, h, sd, p + ".self_attn", heads, self_blocked) + x
        mid = ref_attention(
            memory,
            memory,
            ref_layer_norm(query, sd, p + ".layer_norm_2"),
            sd,
            p + ".context_attn",
            heads,
            memory_pad.unsqueeze(1),
        )
        x = ref_feed_forward(mid + query, sd, p + ".feed_forward")
    x = ref_layer_norm(x, sd, "decoder.layer_norm")
    return torch.log_softmax(x @ sd["generator.0.weight"].T + sd["generator.0.bias"], dim=-1)


def ref_log_probs(src, tgt, sd, opt, pad):
    """The authors' Summarizer.forward followed by its generator."""
    memory, memory_pad = ref_encoder(src, sd, opt.heads, opt.inter_layers, opt.inter_heads, opt.enc_layers, pad)
    return ref_decoder(tgt, memory, memory_pad, sd, opt.heads, opt.dec_layers, pad)


def export_to_hiersumm_layout(model):
    """Our hiertransformer_hiersumm parameters under the hiersumm code's names
    (the inverse of the importer's mapping, written independently here)."""
    ours = {k: v.detach() for k, v in model.state_dict().items()}
    sd = {
        "encoder.embeddings.weight": ours["encoder.embed_tokens.weight"],
        "decoder.embeddings.weight": ours["decoder.embed_tokens.weight"],
        "generator.0.weight": ours["decoder.output_projection.weight"],
        "generator.0.bias": ours["decoder.output_projection.bias"],
    }

    def copy(their, our):
        sd[their + ".weight"] = ours[our + ".weight"]
        sd[their + ".bias"] = ours[our + ".bias"]

    def attention(their, our):
        for a, b in (
            ("linear_query", "q_proj"),
            ("linear_keys", "k_proj"),
            ("linear_values", "v_proj"),
            ("final_linear", "out_proj"),
        ):
            copy(f"{their}.{a}", f"{our}.{b}")

    local_layers = len(model.encoder.local_layers)
    for i in range(local_layers):
        their, our = f"encoder.transformer_layers.{i}", f"encoder.local_layers.{i}"
        attention(their + ".self_attn", our + ".self_attn")
        copy(their + ".layer_norm", our + ".self_attn_layer_norm")
        copy(their + ".feed_forward.layer_norm", our + ".final_layer_norm")
        copy(their + ".feed_forward.w_1", our + ".fc1")
        copy(their + ".feed_forward.w_2", our + ".fc2")
    for j in range(len(model.encoder.global_layers)):
        their, our = f"encoder.transformer_layers.{local_layers + j}", f"encoder.global_layers.{j}"
        copy(their + ".layer_norm1", our + ".pooling_layer_norm")
        copy(their + ".pooling.linear_keys", our + ".pooling.score_proj")
        copy(their + ".pooling.linear_values", our + ".pooling.value_proj")
        copy(their + ".layer_norm2", our + ".pooling.head_layer_norm")
        for a, b in (("linear_query", "query_proj"), ("linear_keys", "key_proj"), ("linear_values", "value_proj")):
            sd[f"{their}.inter_att.{a}.weight"] = ours[f"{our}.inter_paragraph_attention.{b}.weight"][0].T
            sd[f"{their}.inter_att.{a}.bias"] = ours[f"{our}.inter_paragraph_attention.{b}.bias"][0]
        copy(their + ".linear", our + ".context_proj")
        copy(their + ".feed_forward.layer_norm", our + ".final_layer_norm")
        copy(their + ".feed_forward.w_1", our + ".fc1")
        copy(their + ".feed_forward.w_2", our + ".fc2")
    copy("encoder.layer_norm", "encoder.layer_norm")
    for i in range(len(model.decoder.layers)):
        their, our = f"decoder.transformer_layers.{i}", f"decoder.layers.{i}"
        attention(their + ".self_attn", our + ".self_attn")
        attention(their + ".context_attn", our + ".encoder_attn")
        copy(their + ".layer_norm_1", our + ".self_attn_layer_norm")
        copy(their + ".layer_norm_2", our + ".encoder_attn_layer_norm")
        copy(their + ".feed_forward.layer_norm", our + ".final_layer_norm")
        copy(their + ".feed_forward.w_1", our + ".fc1")
        copy(their + ".feed_forward.w_2", our + ".fc2")
    copy("decoder.layer_norm", "decoder.layer_norm")
    return sd
