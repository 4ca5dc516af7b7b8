"""HEPOS cross-attention (Huang et al. 2021, Sec. 3): the module against a
per-head masked full attention (the equations), incremental decoding against
the full pass, padding, the authors' indexing (``luyang-huang96/LongDocSum``,
``Model/longbart/decoder/AdaptiveCrossAttn.py``), and the model through the
task: a few training steps and generation."""

import importlib.util
import os

import pytest
import torch

from mdsfair.modules.hepos_attention import HeposCrossAttention, strided_source_index
from tests.utils import (
    generate_in_process,
    generation_command,
    make_tiny_data_bin,
    model_on_dictionary,
    short_training,
    toy_dictionary,
)

EMBED_DIM = 16


def hepos_module(heads=4, stride=2, seed=0):
    torch.manual_seed(seed)
    module = HeposCrossAttention(
        EMBED_DIM, heads, stride=stride, kdim=EMBED_DIM, vdim=EMBED_DIM, encoder_decoder_attention=True
    )
    # fairseq's init leaves the biases zero; nonzero ones are part of the equations
    for projection in (module.q_proj, module.k_proj, module.v_proj, module.out_proj):
        torch.nn.init.normal_(projection.bias, std=0.5)
    return module.double().eval()


def source_positions(padding_mask):
    """Each column's position within its source (real tokens counted from 0)."""
    return (~padding_mask).long().cumsum(dim=1) - 1


def oracle(module, query, states, padding_mask):
    """Huang et al. 2021, Sec. 3 as a full attention per head, float64: head h
    of query i reads the source tokens at positions j with j mod s = h mod s
    (every other one masked), softmax(q K^T / sqrt(d)) V, heads concatenated
    and projected by W_O. Returns the output [T, B, C] and the weights [H, B, T, S]."""
    target_length, batch, _ = query.shape
    length = states.size(0)
    heads, head_dim, stride = module.num_heads, module.head_dim, module.stride
    q = module.q_proj(query).view(target_length, batch, heads, head_dim) / head_dim**0.5
    k = module.k_proj(states).view(length, batch, heads, head_dim)
    v = module.v_proj(states).view(length, batch, heads, head_dim)
    positions = source_positions(padding_mask)
    outputs, all_weights = [], []
    for head in range(heads):
        reads = (positions % stride == head % stride) & ~padding_mask  # [B, S]
        scores = torch.einsum("tbd,sbd->bts", q[:, :, head], k[:, :, head])
        scores = scores.masked_fill(~reads[:, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        # a head whose residue holds no real token reads nothing
        weights = torch.where(reads.any(dim=1)[:, None, None], weights, torch.zeros_like(weights))
        outputs.append(torch.einsum("bts,sbd->tbd", weights, v[:, :, head]))
        all_weights.append(weights)
    return module.out_proj(torch.cat(outputs, dim=-1)), torch.stack(all_weights)


def random_batch(target_length=5, batch=4, length=11, seed=1):
    """Queries, encoder states, and a padding mask with a left-padded row, a
    right-padded one, one shorter than the stride and one unpadded."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(target_length, batch, EMBED_DIM, generator=generator, dtype=torch.float64)
    states = torch.randn(length, batch, EMBED_DIM, generator=generator, dtype=torch.float64)
    padding_mask = torch.zeros(batch, length, dtype=torch.bool)
    padding_mask[1, :3] = True  # left padding
    padding_mask[2, 7:] = True  # right padding
    padding_mask[3, : length - 1] = True  # one real token: heads of the other residues read nothing
    return query, states, padding_mask


@pytest.mark.parametrize("heads,stride", [(4, 2), (4, 4), (8, 4), (4, 1), (8, 8)])
def test_module_equals_per_head_masked_full_attention(heads, stride):
    module = hepos_module(heads, stride)
    query, states, padding_mask = random_batch()
    output, weights = module(query, states, states, padding_mask, static_kv=True, need_head_weights=True)
    expected_output, expected_weights = oracle(module, query, states, padding_mask)
    torch.testing.assert_close(output, expected_output, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)


def test_each_head_reads_one_residue_and_the_heads_cover_the_source():
    """Sec. 3: head h sees 1/s of the tokens, the s residues together all of them."""
    module = hepos_module(heads=8, stride=4)
    query, states, padding_mask = random_batch(length=12)
    padding_mask[:] = False
    _, weights = module(query, states, states, padding_mask, static_kv=True, need_head_weights=True)
    read = weights.gt(0).any(dim=2)  # [H, B, S]
    for head in range(8):
        assert read[head].nonzero()[:, 1].remainder(4).eq(head % 4).all()
        assert int(read[head, 0].sum()) == 12 // 4
    assert read.any(dim=0).all()


def test_incremental_decoding_equals_the_full_pass_and_caches_n_over_s_keys():
    module = hepos_module(heads=4, stride=2)
    query, states, padding_mask = random_batch(target_length=4)
    full, _ = module(query, states, states, padding_mask, static_kv=True, need_weights=False)
    incremental_state = {}
    steps = [
        module(query[t : t + 1], states, states, padding_mask, incremental_state, static_kv=True, need_weights=False)[0]
        for t in range(query.size(0))
    ]
    torch.testing.assert_close(torch.cat(steps), full, rtol=0, atol=1e-12)
    cache = module._get_input_buffer(incremental_state)
    # [B, H, ceil(S / s), d]: every head's strided keys, projected once at the first step
    assert cache["prev_key"].shape == (4, 4, (11 + 1) // 2, EMBED_DIM // 4)


def test_reordered_cache_follows_the_hypotheses():
    """fairseq's reorder_incremental_state moves every cached entry with its row."""
    module = hepos_module(heads=4, stride=2)
    query, states, padding_mask = random_batch(target_length=2)
    incremental_state = {}
    module(query[:1], states, states, padding_mask, incremental_state, static_kv=True, need_weights=False)
    order = torch.tensor([2, 2, 0, 1, 3, 1])
    module.reorder_incremental_state(incremental_state, order)
    step, _ = module(
        query[1:2, order],
        states[:, order],
        states[:, order],
        padding_mask[order],
        incremental_state,
        static_kv=True,
        need_weights=False,
    )
    expected, _ = module(query[1:2, order], states[:, order], states[:, order], padding_mask[order], static_kv=True)
    torch.testing.assert_close(step, expected, rtol=0, atol=1e-12)


def test_left_and_right_padding_read_the_same_tokens():
    """Positions are counted within the source, so fairseq's left padding and
    the authors' right padding give one source the same output, alone or padded."""
    module = hepos_module(heads=4, stride=4)
    query, states, _ = random_batch(length=9)
    real = states[:6, :1]
    alone, _ = module(query[:, :1], real, real, torch.zeros(1, 6, dtype=torch.bool), static_kv=True)
    filler = torch.full((3, 1, EMBED_DIM), 7.0, dtype=torch.float64)
    for padded, mask in (
        (torch.cat([filler, real]), torch.arange(9).lt(3)[None]),
        (torch.cat([real, filler]), torch.arange(9).ge(6)[None]),
    ):
        output, _ = module(query[:, :1], padded, padded, mask, static_kv=True)
        torch.testing.assert_close(output, alone, rtol=0, atol=1e-12)


def test_strided_source_index_of_a_left_padded_row():
    mask = torch.tensor([[True, True, False, False, False, False, False]])
    index, masked = strided_source_index(mask, 2)
    # real positions 0, 2, 4 (columns 2, 4, 6) and 1, 3 (columns 3, 5; the third past the end)
    assert index.tolist() == [[[2, 4, 6, 6], [3, 5, 6, 6]]]
    assert masked.tolist() == [[[False, False, False, True], [False, False, True, True]]]


def test_a_stride_that_does_not_divide_the_heads_is_refused():
    with pytest.raises(ValueError, match="--hepos-stride 3 must divide the 4 decoder attention heads"):
        HeposCrossAttention(EMBED_DIM, 4, stride=3, kdim=EMBED_DIM, vdim=EMBED_DIM, encoder_decoder_attention=True)


# ------------------------------------------------------------- the authors' code


def authors_stride_attention(module, query, states, padding_mask):
    """The ``divide_type='stride'`` branch of the authors' DivideMultiheadAttention
    (dropout off), on the weights of ``module``: ``s - N mod s`` zero states
    appended to every source and left unmasked (their test ``N // s != 0``),
    ``indexes = arange(N).reshape(N / s, s).repeat(1, H / s)`` and head ``i``
    reading the padded positions ``indexes[:, i]``."""
    length, batch, _ = states.shape
    stride, heads, head_dim = module.stride, module.num_heads, module.head_dim
    if length // stride != 0:
        extra = (length // stride + 1) * stride - length
        states = torch.cat([states, states.new_zeros(extra, batch, states.size(-1))])
        padding_mask = torch.cat([padding_mask, padding_mask.new_zeros(batch, extra)], dim=1)
    length = states.size(0)
    indexes = torch.arange(length).reshape(length // stride, stride).repeat(1, heads // stride)
    q = module.q_proj(query) * module.scaling
    q = q.view(query.size(0), batch * heads, head_dim).transpose(0, 1)
    k = module.k_proj(states).view(length, batch, heads, head_dim)
    v = module.v_proj(states).view(length, batch, heads, head_dim)
    k = torch.cat([k[indexes[:, i], :, i, :].unsqueeze(2) for i in range(heads)], dim=2)
    v = torch.cat([v[indexes[:, i], :, i, :].unsqueeze(2) for i in range(heads)], dim=2)
    k = k.view(-1, batch * heads, head_dim).transpose(0, 1)
    v = v.view(-1, batch * heads, head_dim).transpose(0, 1)
    mask = torch.cat([padding_mask[:, indexes[:, i]].unsqueeze(2) for i in range(heads)], dim=2)
    scores = torch.bmm(q, k.transpose(1, 2)).view(batch, heads, query.size(0), -1)
    scores = scores.masked_fill(mask.transpose(1, 2).unsqueeze(2), float("-inf"))
    weights = torch.softmax(scores.view(batch * heads, query.size(0), -1), dim=-1)
    output = torch.bmm(weights, v).transpose(0, 1).reshape(query.size(0), batch, -1)
    return module.out_proj(output)


def authors_padded_input(states, padding_mask, stride):
    """The authors' appended zero states, as unmasked source positions of mdsfair's module."""
    length, batch, _ = states.shape
    extra = (length // stride + 1) * stride - length if length // stride != 0 else 0
    states = torch.cat([states, states.new_zeros(extra, batch, states.size(-1))])
    return states, torch.cat([padding_mask, padding_mask.new_zeros(batch, extra)], dim=1)


@pytest.mark.parametrize("length", [8, 11])
def test_authors_stride_indexing_on_identical_weights(length):
    """Right-padded batches (the authors' --left-pad-source False): their head
    i reads the positions i mod s of the source plus their appended zeros;
    mdsfair's module given the same zeros as real positions gives their output."""
    module = hepos_module(heads=8, stride=4)
    query, states, padding_mask = random_batch(length=length)
    padding_mask[:] = False
    padding_mask[2, length - 3 :] = True
    expected = authors_stride_attention(module, query, states, padding_mask)
    padded_states, padded_mask = authors_padded_input(states, padding_mask, 4)
    output, _ = module(query, padded_states, padded_states, padded_mask, static_kv=True)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)


AUTHORS_CHECKOUT = os.environ.get("MDSFAIR_LONGDOCSUM")


@pytest.mark.skipif(
    not AUTHORS_CHECKOUT,
    reason="set MDSFAIR_LONGDOCSUM to a checkout of luyang-huang96/LongDocSum (the repository has no license, "
    "so its code is not copied here)",
)
def test_authors_module_on_identical_weights():
    """Their DivideMultiheadAttention itself (fairseq 0.10's MultiheadAttention
    subclass; on fairseq 0.12 it lacks only the ``tpu`` attribute, set False),
    full pass and incremental steps, against mdsfair's module on their padded input."""
    path = os.path.join(AUTHORS_CHECKOUT, "Model", "longbart", "decoder", "AdaptiveCrossAttn.py")
    spec = importlib.util.spec_from_file_location("longdocsum_adaptive_cross_attn", path)
    authors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(authors)
    module = hepos_module(heads=8, stride=4)
    theirs = authors.DivideMultiheadAttention(
        EMBED_DIM,
        8,
        EMBED_DIM,
        EMBED_DIM,
        0.0,
        encoder_decoder_attention=True,
        divide_type="stride",
        divide_ratio=4,
    ).double()
    theirs.load_state_dict(module.state_dict())
    theirs.tpu = False
    theirs.eval()
    query, states, padding_mask = random_batch(length=11)
    padding_mask[:] = False
    padding_mask[2, 8:] = True
    padded_states, padded_mask = authors_padded_input(states, padding_mask, 4)
    ours, _ = module(query, padded_states, padded_states, padded_mask, static_kv=True)
    full, _, _ = theirs(query, states, states, padding_mask, static_kv=True, need_weights=False)
    # their softmax is fairseq's utils.softmax, in float32 even for float64 inputs
    float32_softmax = {"rtol": 0, "atol": 16 * torch.finfo(torch.float32).eps}
    torch.testing.assert_close(ours, full, **float32_softmax)
    incremental_state = {}
    steps = [
        theirs(query[t : t + 1], states, states, padding_mask, incremental_state, static_kv=True)[0]
        for t in range(query.size(0))
    ]
    torch.testing.assert_close(torch.cat(steps), ours, **float32_softmax)


# ------------------------------------------------------------- the model


def test_hepos_bart_tiny_builds_hepos_cross_attention_everywhere():
    model = model_on_dictionary("hepos_bart_tiny", toy_dictionary())
    attentions = [layer.encoder_attn for layer in model.decoder.layers]
    assert all(type(attention) is HeposCrossAttention and attention.stride == 2 for attention in attentions)
    assert model.args.max_encoder_positions == 1024


def test_hepos_bart_large_is_bart_large_with_stride_4_over_7168_positions():
    from argparse import Namespace

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import mdsfair

    mdsfair.register()
    args = Namespace()
    ARCH_CONFIG_REGISTRY["hepos_bart_large"](args)
    assert (args.cross_attention, args.hepos_stride, args.max_encoder_positions) == ("hepos", 4, 7168)
    assert (args.decoder_layers, args.decoder_embed_dim, args.decoder_attention_heads) == (12, 1024, 16)


def test_training_steps_and_generation_through_the_task(tmp_path):
    """mdsfair-train for a few updates on a tiny data-bin, then generation
    from the checkpoint: the loss is finite and every test cluster gets a summary."""
    from mdsfair import cli

    data_bin = make_tiny_data_bin(str(tmp_path / "data"), train=8, valid=4, test=4, vocab_size=300)
    save_dir = str(tmp_path / "checkpoints")
    cli.train_main(
        [
            data_bin,
            "--task",
            "multidoc_summarization",
            "--arch",
            "hepos_bart_tiny",
            *short_training(save_dir, updates=3),
        ]
    )
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    output = generate_in_process(generation_command(data_bin, checkpoint, beam=2), str(tmp_path / "results"))
    hypotheses = [line for line in output.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 4


# ------------------------------------------------------------- the benchmark


def test_the_benchmark_measures_both_systems_and_records_the_ratios(tmp_path, capsys):
    """benchmarks/hepos.py at toy size: a row per system and length and one
    of hepos / full ratios, the device named, a results file of its command."""
    import json

    from benchmarks import hepos, results

    out = tmp_path / "hepos.json"
    hepos.main(["--lengths", "64", "--target-tokens", "8", "--steps", "1", "--vocab-size", "100", "--json", str(out)])
    record = json.loads(out.read_text())
    assert results.problems(record) == [] and record["device"]
    assert [row["system"] for row in record["rows"]] == ["hepos", "full", "hepos / full"]
    ratios = record["rows"][2]
    assert ratios["memory_ratio"] == pytest.approx(record["rows"][0]["peak_mib"] / record["rows"][1]["peak_mib"])
    printed = capsys.readouterr().out
    assert printed.startswith("device: ") and "stride 4" in printed


# ------------------------------------------------------------- the papers


def test_the_recipe_rows_are_pagesums_table():
    """The recipe's arXiv scores and input lengths are the HEPOS rows of
    PageSum's Table 2 (Liu et al. 2022), which cites Huang et al. 2021."""
    from tests.utils import REPO_ROOT, paper_text

    text = paper_text("pagesum-liu2022.txt")
    assert "HEPOS* (7168) 48.24 20.26 41.78" in text
    assert "HEPOS* (10240) 47.87 20.00 41.50" in text
    with open(os.path.join(REPO_ROOT, "examples", "hepos", "README.md"), encoding="utf-8") as handle:
        recipe = handle.read()
    assert "48.24/20.26/41.78 at 7,168 tokens and 47.87/20.00/41.50 at 10,240" in recipe
