"""The encoder self-attentions of Huang et al. (2021) Table 2 settings: ``lsh``
(:mod:`mdsfair.modules.lsh_attention`) and ``sinkhorn``
(:mod:`mdsfair.modules.sinkhorn_attention`).

Each module is checked against a naive oracle in float64 (one query, one
round, one block at a time, written from the equations of the module
docstrings), for padding (padding keys receive no weight), and against the
authors' modules (``luyang-huang96/LongDocSum``,
``Model/longbart/utils/{lsh_attention,sinkhorn}.py``) on identical weights and
identical random draws. The authors' modules import and run on the current
torch and fairseq when built with keywords, as their encoder layers build
them; their repository states no licence, so the test reads them from a local
snapshot of that repository (``LONGDOCSUM_REPO``, a git directory; by default
the one ``fetch github:luyang-huang96/LongDocSum`` leaves in ``/work/.mirror``)
and is skipped where there is none.
"""

import argparse
import importlib.util
import logging
import math
import os

import pytest
import torch

from mdsfair.modules.efficient_encoder_components import evaluation_generator
from mdsfair.modules.longformer_attention import LongformerSelfAttention
from mdsfair.modules.lsh_attention import LSHSelfAttention, default_bucket_count, lsh_attention
from mdsfair.modules.sinkhorn_attention import (
    SinkhornSelfAttention,
    block_scores,
    gumbel_noise,
    sinkhorn_attention,
    sinkhorn_sorting,
)
from tests.utils import USER_DIR, authors_source, model_on_dictionary, toy_dictionary

LONGDOCSUM_REPO = os.environ.get("LONGDOCSUM_REPO", "/work/.mirror/luyang-huang96+LongDocSum/repo")
F64 = torch.float64
TOLERANCE = 1e-10  # float64 sums of a few hundred terms of magnitude ~1


def naive_lsh(shared_qk, values, rotations, chunk_length, padding_mask):
    """Per head, round and query: the buckets, the sorted slots, the window of
    the query's chunk and the chunk before it, the masked softmax, then the
    rounds weighted by the softmax of their log-normalisers."""
    batch, heads, length, head_dim = shared_qk.shape
    hashes, half = rotations.shape[2], rotations.shape[3]
    out = torch.zeros_like(values)
    for b in range(batch):
        for h in range(heads):
            u = shared_qk[b, h]
            keys = u / torch.sqrt((u * u).mean(dim=-1, keepdim=True) + 1e-6) / math.sqrt(head_dim)
            slots = []  # the position in every slot, rounds end to end
            for r in range(hashes):
                projected = u @ rotations[h, :, r, :]
                buckets = [
                    2 * half if padding_mask[b, t] else int(torch.cat([projected[t], -projected[t]]).argmax())
                    for t in range(length)
                ]
                slots += sorted(range(length), key=lambda t: (buckets[t], t))
            chunks = len(slots) // chunk_length
            per_round = {}  # position -> [(log normaliser, output)] one per round
            for slot, t in enumerate(slots):
                chunk = slot // chunk_length
                previous = (chunk - 1) % chunks
                window = slots[previous * chunk_length : (previous + 1) * chunk_length]
                window += slots[chunk * chunk_length : (chunk + 1) * chunk_length]
                logits = []
                for s in window:
                    if s == t:
                        logits.append(-1e5)
                    elif padding_mask[b, s]:
                        logits.append(-1e9)
                    else:
                        logits.append(float(u[t] @ keys[s]))
                logits = torch.tensor(logits, dtype=F64)
                normaliser = torch.logsumexp(logits, dim=0)
                weights = torch.exp(logits - normaliser)
                output = sum(w * values[b, h, s] for w, s in zip(weights, window))
                per_round.setdefault(t, []).append((normaliser, output))
            for t, rounds in per_round.items():
                normalisers = torch.stack([n for n, _ in rounds])
                round_weights = torch.softmax(normalisers, dim=0)
                out[b, h, t] = sum(w * o for w, (_, o) in zip(round_weights, rounds))
    return out


def lsh_inputs(length=24, heads=2, head_dim=4, padded=(0, 5), seed=0):
    generator = torch.Generator().manual_seed(seed)
    shared_qk = torch.randn(len(padded), heads, length, head_dim, generator=generator, dtype=F64)
    values = torch.randn(len(padded), heads, length, head_dim, generator=generator, dtype=F64)
    padding_mask = torch.zeros(len(padded), length, dtype=torch.bool)
    for row, count in enumerate(padded):
        if count:
            padding_mask[row, -count:] = True
    return shared_qk, values, padding_mask, generator


@pytest.mark.parametrize("hashes", [1, 3])
def test_lsh_equals_naive_oracle(hashes):
    shared_qk, values, padding_mask, generator = lsh_inputs()
    rotations = torch.randn(2, 4, hashes, 4, generator=generator, dtype=F64)  # 8 buckets
    expected = naive_lsh(shared_qk, values, rotations, 4, padding_mask)
    got = lsh_attention(shared_qk, values, rotations, 4, padding_mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)


def test_lsh_short_source_is_full_attention_without_self():
    """No longer than a chunk: full attention, a token's own key masked unless alone."""
    shared_qk, values, padding_mask, _ = lsh_inputs(length=6, padded=(0, 2))
    got = lsh_attention(shared_qk, values, None, 8, padding_mask)
    keys = shared_qk / torch.sqrt(shared_qk.pow(2).mean(-1, keepdim=True) + 1e-6) / 2.0
    logits = shared_qk @ keys.transpose(-1, -2)
    logits = logits.masked_fill(padding_mask[:, None, None, :], -1e9)
    logits = logits.masked_fill(torch.eye(6, dtype=torch.bool), -1e5)
    expected = logits.softmax(-1) @ values
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)


def test_lsh_padding_keys_receive_no_weight():
    """The contents of padding tokens do not reach a real token's output."""
    torch.manual_seed(0)
    attention = LSHSelfAttention(8, 2, chunk_length=4, num_hashes=2, num_buckets=4).double().eval()
    x = torch.randn(20, 2, 8, dtype=F64)
    padding_mask = torch.zeros(2, 20, dtype=torch.bool)
    padding_mask[1, 13:] = True
    changed = x.clone()
    changed[13:, 1] = 100 * torch.randn(7, 8, dtype=F64)
    first = attention.forward_lsh(x, padding_mask, generator=torch.Generator().manual_seed(3))
    second = attention.forward_lsh(changed, padding_mask, generator=torch.Generator().manual_seed(3))
    real = ~padding_mask.t()
    torch.testing.assert_close(first[real], second[real], rtol=0, atol=TOLERANCE)


def test_lsh_output_depends_on_how_much_padding_follows():
    """The hashing rounds are laid end to end before the chunking (Reformer Sec. 3,
    the authors' layout), so padding added after a source moves the chunk boundaries
    of its later rounds: the same real tokens attend over other windows. The hub check
    of tests/test_model_contract.py (PADDING_DEPENDENT) therefore batches LSH models as
    the task does. Checked with three rounds: the same source alone and followed by
    eight padding tokens."""
    torch.manual_seed(0)
    attention = LSHSelfAttention(8, 2, chunk_length=4, num_hashes=3, num_buckets=4).double().eval()
    x = torch.randn(14, 1, 8, dtype=F64)
    longer = torch.cat([x, torch.zeros(8, 1, 8, dtype=F64)])
    padding = torch.zeros(1, 22, dtype=torch.bool)
    padding[0, 14:] = True
    rotations = attention.random_rotations(F64, "cpu", torch.Generator().manual_seed(3))
    alone = attention.forward_lsh(x, None, rotations=rotations)
    padded = attention.forward_lsh(longer, padding, rotations=rotations)[:14]
    assert (alone - padded).abs().max() > 1e-6


def test_default_bucket_count_is_the_authors():
    """``2 ** (bit_length(2 * (P // c)) - 1)``: 256 for chunks of 64 over 8,192 positions (their script's
    --max-source-positions), 32 over 1,024 (the default of their module)."""
    assert default_bucket_count(8192, 64) == 256
    assert default_bucket_count(1024, 64) == 32
    assert default_bucket_count(1000, 64) == 16


def test_sinkhorn_sorting_is_doubly_stochastic():
    """Columns sum to one after every iteration (the last step), rows converge to one."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.rand(3, 5, 5, generator=generator, dtype=F64)
    noise = torch.randn(3, 5, 5, generator=generator, dtype=F64)
    deviations = []
    for iterations in (1, 7, 200):
        sorting = sinkhorn_sorting(scores, noise, iterations, 0.7)
        torch.testing.assert_close(sorting.sum(dim=1), torch.ones(3, 5, dtype=F64), rtol=0, atol=TOLERANCE)
        deviations.append(float((sorting.sum(dim=2) - 1).abs().max()))
    assert deviations[0] > deviations[1] > deviations[2]
    assert deviations[2] < 1e-9


def naive_sinkhorn(queries, keys, values, sorting, block_size, padding_mask, heads):
    """Per row (batch x head) and block: the block's sorted keys and values
    (``sum_v P_uv k_v``), its own, the masked softmax."""
    count, length, head_dim = queries.shape
    blocks = length // block_size
    out = torch.zeros_like(queries)
    for n in range(count):
        real = ~padding_mask[n // heads]
        for u in range(blocks):
            own = slice(u * block_size, (u + 1) * block_size)
            sorted_keys = sum(sorting[n, u, v] * keys[n, v * block_size : (v + 1) * block_size] for v in range(blocks))
            sorted_values = sum(
                sorting[n, u, v] * values[n, v * block_size : (v + 1) * block_size] for v in range(blocks)
            )
            chosen = int(sorting[n, u].abs().argmax())
            key_real = torch.cat([real[chosen * block_size : (chosen + 1) * block_size], real[own]])
            all_keys = torch.cat([sorted_keys, keys[n, own]])
            all_values = torch.cat([sorted_values, values[n, own]])
            for i, t in enumerate(range(u * block_size, (u + 1) * block_size)):
                logits = all_keys @ queries[n, t] / math.sqrt(head_dim)
                logits = torch.where(key_real & real[t], logits, torch.full_like(logits, -10000.0))
                weights = torch.softmax(logits, dim=0)
                if real[t]:
                    assert float(weights[~key_real].sum()) == 0.0  # padding keys receive no weight
                out[n, t] = weights @ all_values
    return out


def test_sinkhorn_equals_naive_oracle():
    generator = torch.Generator().manual_seed(1)
    heads, block_size = 2, 4
    queries, keys, values = (torch.randn(4, 16, 3, generator=generator, dtype=F64) for _ in range(3))
    padding_mask = torch.zeros(2, 16, dtype=torch.bool)
    padding_mask[1, 10:] = True
    scores = block_scores(queries, keys, block_size)
    noise = torch.randn(4, 4, 4, generator=generator, dtype=F64)
    sorting = sinkhorn_sorting(scores, noise, 7, 0.7)
    expected = naive_sinkhorn(queries, keys, values, sorting, block_size, padding_mask, heads)
    got = sinkhorn_attention(queries, keys, values, sorting, block_size, padding_mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)


def test_block_scores_are_relu_of_mean_dot_products():
    generator = torch.Generator().manual_seed(2)
    queries, keys = (torch.randn(1, 8, 4, generator=generator, dtype=F64) for _ in range(2))
    scores = block_scores(queries, keys, 4)
    for u in range(2):
        for v in range(2):
            dot = float(queries[0, 4 * u : 4 * u + 4].mean(0) @ keys[0, 4 * v : 4 * v + 4].mean(0)) / 2.0
            assert float(scores[0, u, v]) == pytest.approx(max(dot, 0.0), abs=TOLERANCE)


def test_evaluation_draws_are_seeded_per_forward():
    """In evaluation two forwards draw the same rotations; in training the global generator."""

    class Encoder(torch.nn.Module):
        pass

    encoder = Encoder().eval()
    attention = LSHSelfAttention(8, 2, chunk_length=4, num_hashes=2, num_buckets=4).double().eval()
    x = torch.randn(12, 1, 8, dtype=F64)
    first = attention.forward_lsh(x, None, generator=evaluation_generator(encoder, x.device, 5))
    torch.randn(3)  # the global generator moves on
    second = attention.forward_lsh(x, None, generator=evaluation_generator(encoder, x.device, 5))
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    assert evaluation_generator(encoder.train(), x.device, 5) is None


def longdocsum_source(name):
    """The text of the authors' ``Model/longbart/NAME`` in the local snapshot."""
    return authors_source("luyang-huang96/LongDocSum", f"Model/longbart/{name}", LONGDOCSUM_REPO)


def authors_module_source(name):
    """The text of the authors' ``Model/longbart/utils/NAME.py`` in the local snapshot."""
    return longdocsum_source(f"utils/{name}.py")


def authors_module(tmp_path, name):
    """The authors' ``Model/longbart/utils/NAME.py`` from the local snapshot, imported from ``tmp_path``."""
    path = tmp_path / f"longdocsum_{name}.py"
    path.write_text(authors_module_source(name))
    spec = importlib.util.spec_from_file_location(f"longdocsum_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def padded_batch(length, batch, embed_dim, padding):
    x = torch.randn(length, batch, embed_dim, dtype=F64)
    padding_mask = torch.zeros(batch, length, dtype=torch.bool)
    padding_mask[1, -padding:] = True
    return x, padding_mask


@pytest.mark.filterwarnings("ignore:where received a uint8")
@pytest.mark.parametrize("chunk_length, hashes, length, padding", [(4, 3, 32, 5), (8, 2, 8, 3)])
def test_lsh_equals_the_authors_module(tmp_path, chunk_length, hashes, length, padding):
    """Same weights and the same rotations (their ``hash_seed`` seeds the global generator, ours a
    generator with the same seed: the same normal draws on the CPU). A source no longer than a chunk
    (8 of 8) takes their ``do_standard_self_attention``: full attention with the shared-QK keys,
    normalisation and masks, no hashing."""
    authors = authors_module(tmp_path, "lsh_attention")
    torch.manual_seed(0)
    theirs = authors.LSHSelfAttention(
        16, 2, dropout=0.0, self_attention=True, lsh_attn_chunk_length=chunk_length, num_hashes=hashes,
        max_position_embeddings=34,
    )  # fmt: skip
    theirs = theirs.double().eval()
    ours = LSHSelfAttention(16, 2, chunk_length=chunk_length, num_hashes=hashes, num_buckets=theirs.num_buckets)
    ours = ours.double().eval()
    assert ours.num_buckets == default_bucket_count(32, chunk_length)
    loaded = ours.load_state_dict(theirs.state_dict(), strict=False)  # their mask-value buffers: constants here
    assert not loaded.missing_keys
    x, padding_mask = padded_batch(length, 2, 16, padding)
    theirs.hash_seed = 7
    expected = theirs(x, x, x, key_padding_mask=padding_mask)[0]
    got = ours.forward_lsh(x, padding_mask, generator=torch.Generator().manual_seed(7))
    real = ~padding_mask.t()
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=TOLERANCE)


def test_sinkhorn_equals_the_authors_module(tmp_path, monkeypatch):
    """Same weights and the same Gumbel noise (their ``sample_gumbel`` replaced by the draw given to ours),
    on sources without padding: with padding the two differ on purpose (their block means and sorted blocks
    include padding, :mod:`mdsfair.modules.sinkhorn_attention`; tested in
    :func:`test_sinkhorn_padding_reaches_no_real_token`)."""
    authors = authors_module(tmp_path, "sinkhorn")
    torch.manual_seed(0)
    theirs = authors.SinkhornSelfAttention(16, 2, dropout=0.0, self_attention=True, bucket_size=4).double().eval()
    ours = SinkhornSelfAttention(16, 2, block_size=4, iterations=7, temperature=0.7).double().eval()
    assert not ours.load_state_dict(theirs.state_dict(), strict=False).missing_keys
    x = torch.randn(32, 2, 16, dtype=F64)
    noise = torch.randn(4, 8, 8, dtype=F64)
    monkeypatch.setattr(authors, "sample_gumbel", lambda shape, device, dtype, eps=1e-6: noise)
    no_padding = torch.zeros(2, 32, dtype=torch.bool)
    expected = theirs(x, x, x, key_padding_mask=no_padding)[0]
    torch.testing.assert_close(ours.forward_sinkhorn(x, None, noise=noise), expected, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(ours.forward_sinkhorn(x, no_padding, noise=noise), expected, rtol=0, atol=TOLERANCE)


def test_the_authors_draw_from_the_global_generator(tmp_path):
    """Their LSH rotations are ``torch.randn`` with no generator, seeded only when ``hash_seed`` is set
    (None from their constructor), and their Gumbel noise is ``sample_gumbel``'s
    ``-log(-log(u + 1e-6) + 1e-6)`` of a uniform draw from the global generator: the same numbers as
    :func:`gumbel_noise` without a generator (training) and with one of the same seed (evaluation)."""
    lsh = " ".join(authors_module_source("lsh_attention").split())
    assert (
        "self.hash_seed = None" in lsh
        and "if self.hash_seed is not None: # for determinism torch.manual_seed(self.hash_seed)" in lsh
    )
    assert "random_rotations = torch.randn(rotations_shape, device=vectors.device, dtype=vectors.dtype)" in lsh
    authors = authors_module(tmp_path, "sinkhorn")
    shape = (4, 8, 8)
    torch.manual_seed(11)
    theirs = authors.sample_gumbel(shape, "cpu", F64)
    torch.manual_seed(11)
    torch.testing.assert_close(gumbel_noise(shape, F64, "cpu", None), theirs, rtol=0, atol=0)
    generator = torch.Generator().manual_seed(11)
    torch.testing.assert_close(gumbel_noise(shape, F64, "cpu", generator), theirs, rtol=0, atol=0)


def test_the_authors_mask_a_sorted_key_slot_by_the_block_of_largest_weight():
    """Their padding mask of a sorted key slot is the slot's in the block ``argmax_v |P_uv|``, and masked
    logits take -10000 (:mod:`mdsfair.modules.sinkhorn_attention`, step 3)."""
    sinkhorn = " ".join(authors_module_source("sinkhorn").split())
    assert "mk_r = batched_index_select(mk, R.abs().argmax(dim=-1))" in sinkhorn
    assert "mask_value = -10000" in sinkhorn and "dots.masked_fill_(~mask, mask_value)" in sinkhorn


def test_the_authors_sinkhorn_lets_padding_into_real_tokens(tmp_path, monkeypatch):
    """Where this module departs from theirs (:mod:`mdsfair.modules.sinkhorn_attention`, "Padding"): in
    their module, the contents of a source's padding change its real tokens' outputs (their block means
    and sorted blocks include it); :func:`test_sinkhorn_padding_reaches_no_real_token` shows ours do not."""
    authors = authors_module(tmp_path, "sinkhorn")
    torch.manual_seed(0)
    theirs = authors.SinkhornSelfAttention(16, 2, dropout=0.0, self_attention=True, bucket_size=4).double().eval()
    noise = torch.randn(4, 8, 8, dtype=F64)
    monkeypatch.setattr(authors, "sample_gumbel", lambda shape, device, dtype, eps=1e-6: noise)
    x, padding_mask = padded_batch(32, 2, 16, 5)
    changed = x.clone()
    changed[-5:, 1] = 100 * torch.randn(5, 16, dtype=F64)
    first, second = (theirs(inputs, inputs, inputs, key_padding_mask=padding_mask)[0] for inputs in (x, changed))
    real = ~padding_mask.t()
    assert (first[real] - second[real]).abs().max() > 1e-3


def test_sinkhorn_padding_reaches_no_real_token():
    """Padding contents change no real output, and a source alone gives what it gives padded in a batch
    (within the same number of blocks; the evaluation noise is one draw per head for every source)."""
    torch.manual_seed(0)
    attention = SinkhornSelfAttention(8, 2, block_size=4, iterations=7, temperature=0.7).double().eval()
    x = torch.randn(11, 2, 8, dtype=F64)
    padding_mask = torch.zeros(2, 11, dtype=torch.bool)
    padding_mask[1, 9:] = True
    changed = x.clone()
    changed[9:, 1] = 100 * torch.randn(2, 8, dtype=F64)

    def run(inputs, mask):
        return attention.forward_sinkhorn(inputs, mask, generator=torch.Generator().manual_seed(3))

    batched, perturbed = run(x, padding_mask), run(changed, padding_mask)
    real = ~padding_mask.t()
    torch.testing.assert_close(batched[real], perturbed[real], rtol=0, atol=TOLERANCE)
    alone = run(x[:9, 1:], None)  # 9 and 11 tokens: 3 blocks of 4 each
    torch.testing.assert_close(alone[:, 0], batched[:9, 1], rtol=0, atol=TOLERANCE)


def test_block_scores_of_padded_blocks_average_real_tokens():
    generator = torch.Generator().manual_seed(4)
    queries, keys = (torch.randn(1, 8, 4, generator=generator, dtype=F64) for _ in range(2))
    real = torch.tensor([[True] * 6 + [False] * 2])
    scores = block_scores(queries, keys, 4, real)
    second_query, second_key = queries[0, 4:6].mean(0), keys[0, 4:6].mean(0)
    assert float(scores[0, 1, 1]) == pytest.approx(max(float(second_query @ second_key) / 2.0, 0.0), abs=TOLERANCE)


# ------------------------------------------------------------ the authors' layer pattern and defaults

#: The authors' encoder, ``SparseTransformerEncoder`` in LongDocSum's ``Model/longbart/longbartmodel.py``
#: (unless ``--encoder_not_hybrid``): layer ``i`` is ``build_sparse_encoder_layer(args, self._window[i],
#: ...)`` if ``i % 2 == 0``, else ``build_lsh_encoder_layer`` (``build_sinkhorn_layer`` under
#: ``--sinkhorn``). BART-large's 12 encoder layers: the sliding-window ones are these.
AUTHORS_SLIDING_WINDOW_LAYERS = [0, 2, 4, 6, 8, 10]
AUTHORS_WINDOW_EACH_SIDE = 128  # their --window default ['128'], Longformer's one-sided w
AUTHORS_BUCKET_SIZE = 64  # their --bucket_size default: the LSH chunk and the Sinkhorn block
AUTHORS_HASHES = 4  # LSHSelfAttention(..., num_hashes=4) in build_lsh_self_attention
AUTHORS_SINKHORN = (7, 0.7)  # SinkhornSelfAttention's sinkhorn_iter=7, temperature=0.7


def test_the_numbers_of_this_file_are_the_authors():
    """The pattern and defaults above, read in the authors' ``longbartmodel.py`` and ``utils/sinkhorn.py``."""
    encoder = " ".join(longdocsum_source("longbartmodel.py").split())
    for attention in (
        "build_lsh_encoder_layer(args, self.padding_idx)",
        "build_sinkhorn_layer(args, self.padding_idx)",
    ):
        assert (
            "[self.build_sparse_encoder_layer(args, self._window[i], self.padding_idx) if i % 2 == 0 else self."
            + attention
        ) in encoder
    assert "if args.encoder_not_hybrid:" in encoder
    assert "parser.add_argument('--window', default=['128']" in encoder
    assert "parser.add_argument('--bucket_size', action='store', default=64" in encoder
    assert "lsh_attn_chunk_length=args.bucket_size, num_hashes=4," in encoder
    assert (
        "attention_window = window_size" in encoder
        and "sliding_chunks_matmul_qk(q, k, self.attention_window" in encoder
    )
    sinkhorn = " ".join(authors_module_source("sinkhorn").split())
    assert "sinkhorn_iter=7, bucket_size=256, temperature=0.7" in sinkhorn


@pytest.mark.parametrize("arch", ["lsh_bart_large", "sinkhorn_bart_large"])
def test_the_presets_take_the_authors_defaults(arch):
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    import mdsfair

    mdsfair.register()
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    args = parser.parse_args([])
    ARCH_CONFIG_REGISTRY[arch](args)
    assert args.encoder_layers == 12 and args.efficient_attention_layers == "hybrid"
    assert args.hybrid_sliding_window == 2 * AUTHORS_WINDOW_EACH_SIDE
    if arch == "lsh_bart_large":
        assert (args.lsh_chunk_length, args.lsh_hashes) == (AUTHORS_BUCKET_SIZE, AUTHORS_HASHES)
    else:
        assert args.sinkhorn_block_size == AUTHORS_BUCKET_SIZE
        assert (args.sinkhorn_iterations, args.sinkhorn_temperature) == AUTHORS_SINKHORN


@pytest.mark.parametrize(
    "arch, efficient", [("lsh_bart_tiny", LSHSelfAttention), ("sinkhorn_bart_tiny", SinkhornSelfAttention)]
)
def test_the_encoder_layers_follow_the_authors_hybrid_pattern(arch, efficient):
    """Twelve encoder layers under ``--efficient-attention-layers hybrid`` (the default): the authors'
    sliding-window layers (window 128 on each side, no global token) where they put them, the efficient
    attention in the others; ``all`` (their ``--encoder_not_hybrid``) puts it in every layer."""
    dictionary = toy_dictionary()
    hybrid = model_on_dictionary(arch, dictionary, encoder_layers=12, hybrid_sliding_window=256)
    attentions = [layer.self_attn for layer in hybrid.encoder.layers]
    sliding = [index for index, attention in enumerate(attentions) if isinstance(attention, LongformerSelfAttention)]
    assert sliding == AUTHORS_SLIDING_WINDOW_LAYERS
    assert all(isinstance(attentions[index], efficient) for index in range(12) if index not in sliding)
    assert all(attentions[index].one_sided_window == AUTHORS_WINDOW_EACH_SIDE for index in sliding)
    assert all(attentions[index].q_global_proj is None for index in sliding)
    every = model_on_dictionary(arch, dictionary, encoder_layers=12, efficient_attention_layers="all")
    assert all(isinstance(layer.self_attn, efficient) for layer in every.encoder.layers)


def test_the_sliding_window_layers_attend_within_the_window():
    """A hybrid encoder's first layer (sliding window) ignores a token further than the one-sided
    window: changing the last token of a source changes no first-layer output more than 8 tokens
    before it (``lsh_bart_tiny``: window 16)."""
    dictionary = toy_dictionary()
    model = model_on_dictionary("lsh_bart_tiny", dictionary)
    layer = model.encoder.layers[0]
    assert isinstance(layer.self_attn, LongformerSelfAttention) and layer.self_attn.one_sided_window == 8
    x = torch.randn(40, 1, model.encoder.embed_tokens.embedding_dim, dtype=F64)
    changed = x.clone()
    changed[-1] += 1.0
    with torch.no_grad():
        first, second = (layer.self_attn(inputs, None) for inputs in (x, changed))
    torch.testing.assert_close(first[: 40 - 1 - 8], second[: 40 - 1 - 8], rtol=0, atol=0)
    assert not torch.allclose(first[40 - 1 - 8 :], second[40 - 1 - 8 :])


# ------------------------------------------------ checkpoints saved before --efficient-attention-layers existed

UPGRADE_LOGGER = "mdsfair.modules.efficient_encoder_components"


def efficient_encoder_setup(data_bin, arch, *flags):
    """fairseq-train's parsed arguments, the task and the model (seeded) of
    ``arch`` with ``flags`` on ``data_bin``."""
    from fairseq import options, tasks

    argv = [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization", "--arch", arch, "--cpu", *flags]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return args, task, task.build_model(args)


def save_checkpoint(path, args, model, layout):
    """``model``'s weights and the configuration ``args`` in a checkpoint of
    fairseq 0.9-0.10's layout (``args``) or of 0.12's (``cfg``, as
    fairseq-train writes it)."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    if layout == "args":
        configuration = {"args": args}
    else:
        configuration = {"args": None, "cfg": convert_namespace_to_omegaconf(args)}
    training_state = {
        "extra_state": {},
        "optimizer_history": [
            {"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam", "lr_scheduler_state": {}}
        ],
    }
    checkpoint_utils.torch_persistent_save({**configuration, "model": model.state_dict(), **training_state}, path)
    return configuration


def collated_test_clusters(task, model):
    """Two test clusters collated, with the inputs the task hands ``model``."""
    from mdsfair.tasks.model_inputs import net_input_for

    task.load_dataset("test")
    dataset = task.datasets["test"]
    return net_input_for(model, dataset.collater([dataset[i] for i in range(2)])["net_input"])


def float64_logits(model, net_input):
    model.double().eval()
    with torch.no_grad():
        return model(**net_input)[0]


def upgrade_messages(caplog):
    return [record.getMessage() for record in caplog.records if record.name == UPGRADE_LOGGER]


@pytest.mark.parametrize("layout", ["args", "cfg"])
@pytest.mark.parametrize("arch", ["lsh_bart_tiny", "sinkhorn_bart_tiny"])
def test_a_checkpoint_saved_before_the_layer_pattern_loads_with_every_layer(tiny_data, tmp_path, caplog, arch, layout):
    """A checkpoint whose saved configuration lacks ``efficient_attention_layers`` (the code before the
    flag: LSH or Sinkhorn attention in every encoder layer) loads as ``all`` through fairseq's
    ``load_model_ensemble`` and the hub, with one INFO line, and gives the logits of the model built with
    ``--efficient-attention-layers all`` on its weights; the hybrid encoder on the same weights does not."""
    from fairseq import checkpoint_utils

    from mdsfair.models.multidoc_bart import MultiDocBARTModel

    data_bin = tiny_data["data-bin"]
    args, task, every_layer = efficient_encoder_setup(data_bin, arch, "--efficient-attention-layers", "all")
    old_args = argparse.Namespace(**vars(args))
    del old_args.efficient_attention_layers, old_args.hybrid_sliding_window
    path = str(tmp_path / "checkpoint_old.pt")
    saved = save_checkpoint(path, old_args, every_layer, layout)
    saved_model_config = old_args if layout == "args" else saved["cfg"].model
    assert not hasattr(saved_model_config, "efficient_attention_layers")
    net_input = collated_test_clusters(task, every_layer)
    weights = {name: tensor.clone() for name, tensor in every_layer.state_dict().items()}
    expected = float64_logits(every_layer, net_input)
    _, _, hybrid = efficient_encoder_setup(data_bin, arch)
    hybrid.load_state_dict(weights)
    assert not torch.allclose(float64_logits(hybrid, net_input), expected)

    caplog.set_level(logging.INFO, logger=UPGRADE_LOGGER)
    models, cfg = checkpoint_utils.load_model_ensemble([path])
    messages = upgrade_messages(caplog)
    assert len(messages) == 1 and path in messages[0] and "--efficient-attention-layers all" in messages[0]
    assert cfg.model.efficient_attention_layers == "all"
    assert not any(isinstance(layer.self_attn, LongformerSelfAttention) for layer in models[0].encoder.layers)
    torch.testing.assert_close(float64_logits(models[0], net_input), expected, rtol=0, atol=0)

    caplog.clear()
    hub = MultiDocBARTModel.from_pretrained(
        str(tmp_path), checkpoint_file="checkpoint_old.pt", data_name_or_path=data_bin
    )
    assert len(upgrade_messages(caplog)) == 1
    assert hub.cfg.model.efficient_attention_layers == "all"
    torch.testing.assert_close(float64_logits(hub.models[0], net_input), expected, rtol=0, atol=0)

    caplog.clear()
    _, cfg = checkpoint_utils.load_model_ensemble([path], arg_overrides={"efficient_attention_layers": "hybrid"})
    assert cfg.model.efficient_attention_layers == "hybrid" and not upgrade_messages(caplog)


@pytest.mark.parametrize("pattern", ["hybrid", "all"])
def test_a_checkpoint_that_saved_the_layer_pattern_keeps_it(tiny_data, tmp_path, caplog, pattern):
    from fairseq import checkpoint_utils

    args, task, model = efficient_encoder_setup(
        tiny_data["data-bin"], "lsh_bart_tiny", "--efficient-attention-layers", pattern
    )
    path = str(tmp_path / "checkpoint.pt")
    save_checkpoint(path, args, model, "cfg")
    net_input = collated_test_clusters(task, model)
    expected = float64_logits(model, net_input)
    caplog.set_level(logging.INFO, logger=UPGRADE_LOGGER)
    models, cfg = checkpoint_utils.load_model_ensemble([path])
    assert cfg.model.efficient_attention_layers == pattern and not upgrade_messages(caplog)
    torch.testing.assert_close(float64_logits(models[0], net_input), expected, rtol=0, atol=0)
