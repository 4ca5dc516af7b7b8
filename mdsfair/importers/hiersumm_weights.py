"""The parameters of a hiersumm checkpoint under ``hiertransformer_hiersumm``'s
names (:mod:`mdsfair.importers.hiersumm`), their ``Summarizer``'s modules mapped
one to one.

Parameter names, old and new (``their`` -> ``ours``)::

    encoder.embeddings.weight [rows permuted]   -> encoder.embed_tokens.weight (= decoder's, tied)
    encoder.transformer_layers.{i} (local)      -> encoder.local_layers.{i}
        layer_norm / self_attn.linear_{query,keys,values} / final_linear / feed_forward.{layer_norm,w_1,w_2}
        -> self_attn_layer_norm / self_attn.{q,k,v}_proj / out_proj / final_layer_norm, fc1, fc2
    encoder.transformer_layers.{n_local + j}    -> encoder.global_layers.{j}
        layer_norm1 / pooling.linear_keys / pooling.linear_values / layer_norm2
        -> pooling_layer_norm / pooling.score_proj / pooling.value_proj / pooling.head_layer_norm
        inter_att.linear_{query,keys,values} (W [out, in]) -> inter_paragraph_attention.{query,key,value}_proj (W^T [1, in, out])
        linear / feed_forward.* -> context_proj / final_layer_norm, fc1, fc2
    encoder.layer_norm                          -> encoder.layer_norm
    decoder.transformer_layers.{i}              -> decoder.layers.{i}
        layer_norm_1 / self_attn.* / layer_norm_2 / context_attn.* / feed_forward.*
        -> self_attn_layer_norm / self_attn.* / encoder_attn_layer_norm / encoder_attn.* / final_layer_norm, fc1, fc2
    decoder.layer_norm                          -> decoder.layer_norm
    generator.0.bias [permuted]                 -> decoder.output_projection.bias

The buffers ``*.pos_emb.pe`` (checked against Eq. 7-8) and the decoder's
causal ``mask`` are not parameters and are dropped. Untied embeddings and an
embedding table whose rows are not the SentencePiece model's pieces are
refused with the reason and the file.
"""

from types import SimpleNamespace
from typing import Dict, List, Sequence, Tuple

import torch

from mdsfair.importers.hiersumm_checkpoint import HiersummImportError

#: Buffers of their modules, not parameters.
IGNORED_SUFFIXES = (".pos_emb.pe", ".mask")


def layer_names(options: SimpleNamespace) -> List[Tuple[str, str]]:
    """``(theirs, ours)`` module-name pairs for every Linear / LayerNorm except
    the inter-paragraph attention (transposed) and the embeddings (permuted)."""
    pairs = []

    def attention(their: str, our: str):
        for a, b in (
            ("linear_query", "q_proj"),
            ("linear_keys", "k_proj"),
            ("linear_values", "v_proj"),
            ("final_linear", "out_proj"),
        ):
            pairs.append((f"{their}.{a}", f"{our}.{b}"))

    def feed_forward(their: str, our: str):
        pairs.extend(
            [
                (f"{their}.feed_forward.layer_norm", f"{our}.final_layer_norm"),
                (f"{their}.feed_forward.w_1", f"{our}.fc1"),
                (f"{their}.feed_forward.w_2", f"{our}.fc2"),
            ]
        )

    for i in range(options.num_local):
        their, our = f"encoder.transformer_layers.{i}", f"encoder.local_layers.{i}"
        attention(their + ".self_attn", our + ".self_attn")
        pairs.append((their + ".layer_norm", our + ".self_attn_layer_norm"))
        feed_forward(their, our)
    for j in range(options.num_global):
        their, our = f"encoder.transformer_layers.{options.num_local + j}", f"encoder.global_layers.{j}"
        pairs.extend(
            [
                (their + ".layer_norm1", our + ".pooling_layer_norm"),
                (their + ".pooling.linear_keys", our + ".pooling.score_proj"),
                (their + ".pooling.linear_values", our + ".pooling.value_proj"),
                (their + ".layer_norm2", our + ".pooling.head_layer_norm"),
                (their + ".linear", our + ".context_proj"),
            ]
        )
        feed_forward(their, our)
    pairs.append(("encoder.layer_norm", "encoder.layer_norm"))
    for i in range(options.decoder_layers):
        their, our = f"decoder.transformer_layers.{i}", f"decoder.layers.{i}"
        attention(their + ".self_attn", our + ".self_attn")
        attention(their + ".context_attn", our + ".encoder_attn")
        pairs.extend(
            [
                (their + ".layer_norm_1", our + ".self_attn_layer_norm"),
                (their + ".layer_norm_2", our + ".encoder_attn_layer_norm"),
            ]
        )
        feed_forward(their, our)
    pairs.append(("decoder.layer_norm", "decoder.layer_norm"))
    return pairs


def convert_state_dict(
    theirs: Dict[str, torch.Tensor], options: SimpleNamespace, order: Sequence[int], path: str
) -> Dict[str, torch.Tensor]:
    """Their parameters under our names (see the module docstring); every
    parameter of theirs is used exactly once, or the import fails naming the
    ones left over or missing."""
    used = set()

    def take(key: str) -> torch.Tensor:
        if key not in theirs:
            raise HiersummImportError(f"{path}: parameter {key!r} is missing from 'model'")
        used.add(key)
        return theirs[key]

    ours = {}
    for their, our in layer_names(options):
        ours[our + ".weight"] = take(their + ".weight")
        ours[our + ".bias"] = take(their + ".bias")
    for j in range(options.num_global):
        their = f"encoder.transformer_layers.{options.num_local + j}.inter_att"
        our = f"encoder.global_layers.{j}.inter_paragraph_attention"
        for a, b in (("linear_query", "query_proj"), ("linear_keys", "key_proj"), ("linear_values", "value_proj")):
            ours[f"{our}.{b}.weight"] = take(f"{their}.{a}.weight").t().unsqueeze(0)
            ours[f"{our}.{b}.bias"] = take(f"{their}.{a}.bias").unsqueeze(0)

    index = torch.as_tensor(order, dtype=torch.long)
    source_embeddings = take("encoder.embeddings.weight")
    target_embeddings = take("decoder.embeddings.weight")
    generator_weight = take("generator.0.weight") if "generator.0.weight" in theirs else target_embeddings
    if not torch.equal(source_embeddings, target_embeddings):
        raise HiersummImportError(
            f"{path}: source and target embeddings differ (trained without -share_embeddings); "
            "hiertransformer shares one embedding table"
        )
    if not torch.equal(generator_weight, target_embeddings):
        raise HiersummImportError(
            f"{path}: the generator weight is not tied to the decoder embeddings (trained without "
            "-share_decoder_embeddings); hiertransformer_hiersumm ties them"
        )
    if source_embeddings.size(0) != len(order):
        raise HiersummImportError(
            f"{path}: {source_embeddings.size(0)} embedding rows, but the SentencePiece model has {len(order)} pieces"
        )
    embeddings = source_embeddings[index].clone()
    ours["encoder.embed_tokens.weight"] = embeddings
    ours["decoder.embed_tokens.weight"] = embeddings
    ours["decoder.output_projection.weight"] = embeddings
    ours["decoder.output_projection.bias"] = take("generator.0.bias")[index].clone()

    check_position_tables(theirs, options.embed_dim, path)
    left = sorted(k for k in theirs if k not in used and not k.endswith(IGNORED_SUFFIXES))
    if left:
        raise HiersummImportError(
            f"{path}: parameters that hiertransformer_hiersumm has no place for: {left[:8]}"
            + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        )
    return ours


def check_position_tables(theirs: Dict[str, torch.Tensor], embed_dim: int, path: str) -> None:
    """Their stored sinusoid tables must be Eq. 7-8 (what this arch computes)."""
    from mdsfair.modules.sinusoidal import sinusoidal_encoding

    for key, dim in (("encoder.pos_emb.pe", embed_dim // 2), ("decoder.pos_emb.pe", embed_dim)):
        if key not in theirs:
            continue
        table = theirs[key].reshape(-1, theirs[key].size(-1))
        rows = min(table.size(0), 512)
        expected = sinusoidal_encoding(torch.arange(rows), dim)
        if table.size(-1) != dim or not torch.allclose(table[:rows].float(), expected, atol=1e-5):
            raise HiersummImportError(f"{path}: {key} is not the sinusoid table of Eq. 7-8 with dimension {dim}")
