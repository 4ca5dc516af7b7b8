"""Tests of the sparse encoder-decoder attention (Manakul & Gales 2021):
``sparse_bart``, its modules, the ``sparse_kl`` criterion and the training
stages of ``multidoc_summarization_sparse``."""

import copy
import dataclasses

import pytest
import torch

from mdsfair.generation.fast import make_generation_fast_, sparse_generation_step
from mdsfair.generation.fast.sparse_generation_step import RowTables, SparseGenerationStep
from mdsfair.generation.fast.static_beam_search import StaticBeamSearch, following_static_beam_search
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sentence_approximator import (
    PoolingSentenceEncoder,
    SentenceEncoder,
    model_free_sentence_keys,
    pack_sentences,
    sentence_token_states,
    sentences_longest_first,
)
from mdsfair.modules.sentence_saliency import SentenceLayout, sentence_layout, sentence_saliency
from mdsfair.modules.sentence_selection import kept_token_bounds, kept_token_layout, select_top_r_sentences
from mdsfair.modules.sparse_cross_attention import SentenceContext, SparseCrossAttention
from tests.sparse_fixtures import (
    MAX_SOURCE,
    ROW_SOURCES,
    batch,
    build,
    model_free_sentence_log_scores,
    random_sentence_ids,
)
from tests.tolerances import FLOAT32_SOFTMAX_ROUND_OFF
from tests.utils import make_tiny_bart_checkpoint, make_tiny_data_bin

# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("sparse")), train=8, valid=4, test=4, vocab_size=300)


@pytest.fixture(scope="module")
def built(data_bin):
    return build(data_bin)


# ------------------------------------------------------- module-level numerics


def test_sentence_saliency_and_layout_match_loops():
    ids = random_sentence_ids()
    num_slots = int(ids.max()) + 1
    attention = torch.rand(3, 2, 5, ids.size(1)).softmax(-1)
    saliency = sentence_saliency(attention, ids, num_slots)
    layout = sentence_layout(ids)
    for b in range(3):
        for s in range(num_slots):
            positions = [n for n in range(ids.size(1)) if ids[b, n] == s]
            expected = attention[b, :, :, positions].sum(-1) if positions else torch.zeros(2, 5)
            torch.testing.assert_close(saliency[b, :, :, s], expected)
            assert int(layout.lengths[b, s]) == len(positions)
            assert layout.token_index[b, s][layout.token_mask[b, s]].tolist() == positions
    # padding carries no mass; real tokens carry all of it
    torch.testing.assert_close(saliency.sum(-1), attention.masked_fill(ids.lt(0)[:, None, None], 0).sum(-1))


def test_sentence_encoder_packs_sentences_like_one_by_one():
    torch.manual_seed(0)
    ids = random_sentence_ids()
    layout = sentence_layout(ids)
    encoder = SentenceEncoder(8, 6).eval()
    states = torch.randn(3, ids.size(1), 8)
    vectors = encoder(states, layout)
    for b in range(3):
        for s in range(layout.lengths.size(1)):
            positions = (ids[b] == s).nonzero().view(-1)
            if len(positions) == 0:
                assert vectors[b, s].abs().sum() == 0
                continue
            _, final = encoder.gru(states[b, positions].unsqueeze(0))
            expected = encoder.output_proj(torch.cat([final[-2], final[-1]], -1))[0]
            torch.testing.assert_close(vectors[b, s], expected, atol=1e-5, rtol=1e-5)


def test_sentence_encoder_checkpointed_by_chunks_equals_one_pass():
    """--checkpoint-activations recomputes the BiGRU a chunk of sentences at
    a time: same vectors and gradients, also for a frozen input."""
    torch.manual_seed(0)
    ids = random_sentence_ids()
    layout = sentence_layout(ids)
    reference = SentenceEncoder(8, 6)
    chunked = copy.deepcopy(reference)
    chunked.checkpoint_activations(2)
    states = torch.randn(3, ids.size(1), 8)
    for requires_grad in (True, False):
        inputs = [states.clone().requires_grad_(requires_grad) for _ in range(2)]
        outputs = [encoder(x, layout) for encoder, x in zip((reference, chunked), inputs)]
        torch.testing.assert_close(outputs[1], outputs[0], atol=1e-6, rtol=1e-6)
        for encoder, output in zip((reference, chunked), outputs):
            encoder.zero_grad()
            output.pow(2).sum().backward()
        for (name, expected), got in zip(reference.named_parameters(), chunked.parameters()):
            assert got.grad is not None and got.grad.abs().sum() > 0, name
            torch.testing.assert_close(got.grad, expected.grad, atol=1e-6, rtol=1e-5)
        if requires_grad:
            torch.testing.assert_close(inputs[1].grad, inputs[0].grad, atol=1e-6, rtol=1e-5)


def test_pooling_sentence_encoder_matches_per_sentence_loop():
    """Sec. 4.5's attention pooling: each sentence vector depends on that
    sentence's tokens only (not on padding, other sentences or the batch)."""
    torch.manual_seed(0)
    ids = random_sentence_ids()
    layout = sentence_layout(ids)
    encoder = PoolingSentenceEncoder(8, 2).eval()
    for parameter in encoder.parameters():  # off the zero-bias / unit-norm start, so the check sees every term
        torch.nn.init.normal_(parameter, std=0.5)
    states = torch.randn(3, ids.size(1), 8)
    vectors = encoder(states, layout)
    pooling = encoder.pooling
    for b in range(3):
        for s in range(layout.lengths.size(1)):
            positions = (ids[b] == s).nonzero().view(-1)
            if len(positions) == 0:
                assert vectors[b, s].abs().sum() == 0
                continue
            tokens = states[b, positions]  # [J, C]
            weights = pooling.score_proj(tokens).softmax(0)  # [J, H]: Eq. 15 over the sentence's tokens
            values = pooling.value_proj(tokens).view(len(positions), 2, 4)
            heads = pooling.head_layer_norm(pooling.head_proj((weights.unsqueeze(-1) * values).sum(0).unsqueeze(0)))
            torch.testing.assert_close(vectors[b, s], encoder.output_proj(heads.flatten()), atol=1e-5, rtol=1e-5)
    alone = encoder(states[1:2, : int(ids[1].ge(0).sum())], sentence_layout(ids[1:2, : int(ids[1].ge(0).sum())]))
    torch.testing.assert_close(alone[0], vectors[1, : alone.size(1)], atol=1e-5, rtol=1e-5)


def test_model_free_scores_match_eq19_loop():
    torch.manual_seed(0)
    ids = random_sentence_ids()
    layout = sentence_layout(ids)
    keys, queries = torch.randn(3, 2, ids.size(1), 4), torch.randn(3, 2, 5, 4)
    token_major = keys.permute(2, 0, 1, 3).reshape(ids.size(1), 3, 8)  # [N, B, H * d_h], as k_proj gives
    sentence_keys = model_free_sentence_keys(token_major, ids, layout.token_index.size(1), 2)
    log_scores = model_free_sentence_log_scores(queries, sentence_keys, layout.sentence_mask)
    phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    for b in range(3):
        real = [s for s in range(layout.lengths.size(1)) if layout.lengths[b, s] > 0]
        raw = torch.stack(
            [
                (phi(queries[b]) @ phi(keys[b][:, ids[b] == s]).sum(1, keepdim=True).transpose(1, 2))[..., 0]
                for s in real
            ],
            -1,
        )
        torch.testing.assert_close(log_scores[b][..., real], (raw / raw.sum(-1, keepdim=True)).log())


def sparse_attention_inputs(
    top_r,
    selection="approx",
    share=False,
    seed=0,
    approximator="model-based",
    generation_path="gather",
    backbone="bart",
):
    """Two sources (of different lengths) and four decoder rows reading them
    through the per-source cache; the attention on BART's backbone (biased
    projections, scaled queries) or T5's (``backbone="t5"``: no biases,
    ``scaling`` 1 as the decoder layer sets it under ``--attention-scaling none``)."""
    torch.manual_seed(seed)
    ids = random_sentence_ids(bsz=2)
    module = SparseCrossAttention(
        16,
        4,
        top_r=top_r,
        selection=selection,
        approximator=approximator,
        share_selection_across_beams=share,
        generation_path=generation_path,
        bias=backbone == "bart",
    ).eval()
    if backbone == "t5":
        module.scaling = 1.0
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    context = SentenceContext(
        ids,
        sentence_layout(ids),
        torch.randn(2, int(ids.max()) + 1, 16),
        HypothesisRows.from_source_index(ROW_SOURCES, 2),
    )
    return module, torch.randn(5, 4, 16), torch.randn(ids.size(1), 2, 16), ids.lt(0), context


def expanded_per_row(key, padding, context):
    """The same inputs with every source copied to each of its rows (the
    beam-expanded layout of stock fairseq), rows being their own sources."""
    ids = context.src_sent_ids[ROW_SOURCES]
    rows = HypothesisRows.identity(len(ROW_SOURCES), ids.device)
    expanded = SentenceContext(ids, sentence_layout(ids), context.sentence_states[ROW_SOURCES], rows)
    return key[:, ROW_SOURCES], padding[ROW_SOURCES], expanded


def test_hypothesis_rows_group_rows_by_source():
    rows = HypothesisRows.from_source_index(torch.tensor([2, 0, 2, 2, 0]), 4)
    assert rows.rank.tolist() == [0, 0, 1, 2, 1] and rows.rows_per_source == 3
    values = torch.arange(5.0).view(5, 1)
    grouped = rows.to_sources(values)
    assert grouped.shape == (4, 3, 1) and grouped[2, :, 0].tolist() == [0, 2, 3] and grouped[1].abs().sum() == 0
    assert torch.equal(rows.to_rows(grouped), values)
    queries, per_source = torch.randn(5, 2, 3, 4), torch.randn(4, 2, 4, 6)
    expected = torch.stack([queries[i] @ per_source[s] for i, s in enumerate(rows.source_index.tolist())])
    torch.testing.assert_close(rows.matmul(queries, per_source), expected)
    with pytest.raises(ValueError, match="source_index"):
        HypothesisRows.from_source_index(torch.tensor([0, 4]), 4)
    # rows grouped in source order (beam search) take the sort-free path: same ranks
    in_order = HypothesisRows.from_source_index(torch.tensor([0, 0, 2, 2, 2, 3]), 4)
    assert in_order.rank.tolist() == [0, 1, 0, 1, 2, 0] and in_order.rows_per_source == 3


def test_fast_step_follows_an_in_place_change_of_the_projections(monkeypatch):
    """The fast generation step keeps its stacked, scaled and folded weights
    until a parameter changes: after an in-place change of W^Q and of the
    value bias it gives the reference's output again (float64, up to the
    round-off of the word-level softmax, which both compute in float32 as
    fairseq's ``utils.softmax``, over kept-token layouts of different widths:
    the fast step lays out each source's rows to that source's widest)."""
    reference, query, key, padding, context = sparse_attention_inputs(top_r=2)
    rows = HypothesisRows.from_source_index(torch.tensor([0, 0, 1, 1]), 2)
    context = context._replace(rows=rows, kept_token_bounds=kept_token_bounds(context.layout.lengths))
    reference, query, key = reference.double(), query.double(), key.double()
    context = context._replace(sentence_states=context.sentence_states.double())
    fast = make_generation_fast_(copy.deepcopy(reference))
    calls = []
    original = SparseGenerationStep._generation_step
    monkeypatch.setattr(
        SparseGenerationStep, "_generation_step", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    with torch.no_grad(), following_static_beam_search([fast], [StaticBeamSearch(4, 2)]):
        for change in (None, "sentence_query_proj", "v_proj"):
            for module in (reference, fast):
                if change == "sentence_query_proj":
                    module.sentence_attention.sentence_query_proj.weight.mul_(2.0)
                elif change == "v_proj":
                    module.v_proj.bias.add_(1.0)
            expected, expected_report = reference(query[:1], key, padding, context, incremental_state={})
            out, report = fast(query[:1], key, padding, context, incremental_state={})
            atol, rtol = FLOAT32_SOFTMAX_ROUND_OFF
            torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
            assert torch.equal(report.selection, expected_report.selection)
    assert len(calls) == 3


def test_all_sentences_equals_full_attention_exactly():
    from fairseq.modules import MultiheadAttention

    module, query, key, padding, context = sparse_attention_inputs(top_r=100)
    sparse_out, sparse_attention = module(query, key, padding, context)
    module.top_r = 0
    full_out, _ = module(query, key, padding, context)
    assert torch.equal(sparse_out, full_out)
    real_sentences = context.layout.sentence_mask.sum(-1)[ROW_SOURCES]
    assert sparse_attention.selection.sum(-1).eq(real_sentences[:, None]).all()
    reference = MultiheadAttention(16, 4, encoder_decoder_attention=True).eval()
    reference.load_state_dict({k: v for k, v in module.state_dict().items() if "sentence_attention" not in k})
    row_key, row_padding, _ = expanded_per_row(key, padding, context)
    expected, _ = reference(query, row_key, row_key, key_padding_mask=row_padding, static_kv=True, need_weights=False)
    torch.testing.assert_close(full_out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("top_r", [0, 2])
def test_per_source_cache_equals_per_row_expansion(top_r):
    module, query, key, padding, context = sparse_attention_inputs(top_r=top_r)
    row_key, row_padding, row_context = expanded_per_row(key, padding, context)
    per_source_state, per_row_state = {}, {}
    for step in range(query.size(0)):
        step_query = query[step : step + 1]
        out, attention = module(
            step_query, key, padding, context, incremental_state=per_source_state, need_weights=True
        )
        expected, expected_attention = module(
            step_query, row_key, row_padding, row_context, incremental_state=per_row_state, need_weights=True
        )
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(attention.token_attention, expected_attention.token_attention)
        cache = module._get_input_buffer(per_source_state)
        # one entry per source (2), not per row (4); a beam reorder leaves it in place. Full attention keeps
        # keys/values [B, H, N, d_h] (and no sentence keys); the gathered (sparse) path projects nothing of
        # the source: it keeps only the sentence keys and folds W^K/W^V into the query and the output.
        expected_cache = ["sentence_keys"] if top_r else ["prev_key", "prev_value"]
        assert sorted(cache) == expected_cache
        for name in expected_cache:
            assert cache[name].size(0) == 2
        if not top_r:
            assert [cache[name].shape for name in ("prev_key", "prev_value")] == [(2, 4, key.size(0), 4)] * 2
        module.reorder_incremental_state(per_source_state, torch.tensor([3, 2, 1, 0]))
        assert module._get_input_buffer(per_source_state)[expected_cache[0]] is cache[expected_cache[0]]
    weights = attention.token_attention  # [B', 1, N]: sums to one over the kept tokens only
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 1))
    assert weights.masked_select(padding[ROW_SOURCES][:, None]).abs().sum() == 0


@pytest.mark.parametrize(
    "selection,share,approximator,backbone",
    [
        ("approx", False, "model-based", "bart"),
        ("random", False, "model-based", "bart"),
        ("approx", True, "model-based", "bart"),
        ("approx", False, "model-free", "bart"),
        ("approx", False, "model-based", "t5"),
        ("random", False, "model-free", "t5"),
    ],
)
def test_gathered_kv_equals_masked_attention(selection, share, approximator, backbone):
    module, query, key, padding, context = sparse_attention_inputs(
        top_r=2, selection=selection, share=share, approximator=approximator, backbone=backbone
    )
    torch.manual_seed(5)
    masked, masked_attention = module(query, key, padding, context)
    for step in range(query.size(0)):  # one query per call, as in generation
        torch.manual_seed(5)
        state = {}
        gathered, gathered_attention = module(query[step : step + 1], key, padding, context, incremental_state=state)
        if selection == "random":  # the random draw differs per call shape; compare with the mask it chose
            break
        torch.testing.assert_close(gathered, masked[step : step + 1], atol=1e-5, rtol=1e-5)
        assert torch.equal(gathered_attention.selection[:, 0], masked_attention.selection[:, step])
    if selection == "random":
        selected = gathered_attention.selection  # [B', 1, S]
        row_key, row_padding, row_context = expanded_per_row(key, padding, context)
        logits_mask = selected.gather(2, row_context.src_sent_ids.clamp(min=0)[:, None])
        # reference: masked softmax over the randomly chosen sentences' tokens
        q = module._split_heads(module.q_proj(query[:1]) * module.scaling)
        k, v = module._split_heads(module.k_proj(row_key)), module._split_heads(module.v_proj(row_key))
        logits = (q @ k.transpose(-1, -2)).masked_fill(
            ~logits_mask[:, None] | row_padding[:, None, None], float("-inf")
        )
        expected = module.out_proj((logits.softmax(-1) @ v).permute(2, 0, 1, 3).reshape(1, 4, 16))
        torch.testing.assert_close(gathered, expected, atol=1e-5, rtol=1e-5)
    if share:  # hypotheses of one source (rows 1, 2 and rows 0, 3) keep the same sentences
        assert torch.equal(masked_attention.selection[1], masked_attention.selection[2])
        assert torch.equal(masked_attention.selection[0], masked_attention.selection[3])
        assert not torch.equal(masked_attention.selection[0], masked_attention.selection[1])


def test_kept_token_layout_matches_loop():
    """The selected sentences' tokens back to back per row, padded to the
    longest row (not to r times the longest sentence)."""
    module, _, key, _, context = sparse_attention_inputs(top_r=3)
    sentence_mask = context.rows.lookup(context.layout.sentence_mask)
    indices, valid = select_top_r_sentences(torch.rand(4, 1, sentence_mask.size(1)), sentence_mask, 3)
    kept = kept_token_layout(indices, valid, context.rows, context.layout)
    ids = context.src_sent_ids
    expected = [
        [n for j in range(3) if valid[row, 0, j] for n in range(ids.size(1)) if ids[source, n] == indices[row, 0, j]]
        for row, source in enumerate(ROW_SOURCES.tolist())
    ]
    assert kept.positions.shape == (4, 1, max(len(tokens) for tokens in expected))
    assert kept.positions.size(-1) < 3 * context.layout.token_index.size(2)
    for row, tokens in enumerate(expected):
        assert kept.valid[row, 0].sum() == len(tokens) and kept.valid[row, 0, : len(tokens)].all()
        assert kept.positions[row, 0, : len(tokens)].tolist() == tokens
    assert torch.equal(kept.flat_rows, kept.positions * 2 + ROW_SOURCES.view(-1, 1, 1))


def test_kept_token_bounds_size_the_layout_without_reading_the_step_back():
    """On a GPU the encoder stores ``kept_token_bounds`` (the k longest
    sentences of any source, read once per generation) so that no step reads
    its selection back to size the layout: the layout is then the exact one
    plus padding slots, and the gathered attention is unchanged."""
    module, query, key, padding, context = sparse_attention_inputs(top_r=3, generation_path="gather")
    lengths = context.layout.lengths
    bounds = kept_token_bounds(lengths)
    assert bounds.device.type == "cpu" and bounds.numel() == lengths.size(1)
    for k in range(1, lengths.size(1) + 1):
        assert int(bounds[k - 1]) == max(sum(sorted(row.tolist(), reverse=True)[:k]) for row in lengths)
    bounded = context._replace(kept_token_bounds=bounds)
    sentence_mask = context.rows.lookup(context.layout.sentence_mask)
    indices, valid = select_top_r_sentences(torch.rand(4, 1, sentence_mask.size(1)), sentence_mask, 3)
    exact = kept_token_layout(indices, valid, context.rows, context.layout)
    padded = kept_token_layout(indices, valid, context.rows, context.layout, bounds)
    n = exact.positions.size(-1)
    assert padded.positions.size(-1) == int(bounds[2]) >= n
    assert torch.equal(padded.valid[..., :n], exact.valid) and not padded.valid[..., n:].any()
    assert torch.equal(padded.positions[..., :n][exact.valid], exact.positions[exact.valid])
    outputs = [module(query[:1], key, padding, c, incremental_state={})[0] for c in (context, bounded)]
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("backbone", ["bart", "t5"])
@pytest.mark.parametrize("kept_width", ["bound", "step"])
@pytest.mark.parametrize("approximator", ["model-based", "model-free"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_generation_step_equals_general_path(monkeypatch, approximator, dtype, kept_width, backbone):
    """The fast variant's generation step (row tables kept, projections
    transposed, per-head views of one product, value bias folded into the
    output's) gives the reference's gathered path's output, sentence
    choice, approximator report and alignment, for both approximators,
    with two layers sharing one step's row tables and buffers over several
    steps (each layer's gather overwrites the last's), in float64 and in
    bfloat16 (its sentence scores in float32, as the reference's), with its
    kept tokens laid out to the bound known before the generation (as on
    an accelerator) and to each source's widest row in the step, one
    product per source (as on the CPU), on BART's backbone and on T5's (no biases, unscaled word queries, the word-level
    softmax in float64 in a float64 model)."""
    module, query, key, padding, context = sparse_attention_inputs(
        top_r=2, approximator=approximator, backbone=backbone
    )
    other, *_ = sparse_attention_inputs(top_r=2, approximator=approximator, seed=1, backbone=backbone)
    rows = HypothesisRows.from_source_index(torch.tensor([0, 0, 1, 1]), 2)  # grouped by source, as in beam search
    assert rows.blocked
    layers = [module.to(dtype), other.to(dtype)]
    fast_layers = [make_generation_fast_(copy.deepcopy(layer)) for layer in layers]
    assert all(type(layer) is SparseGenerationStep for layer in fast_layers)
    query, key = query.to(dtype), key.to(dtype)
    context = context._replace(
        rows=rows,
        sentence_states=context.sentence_states.to(dtype),
        # a bound above every step's widest row, as sources of unequal sentences give
        kept_token_bounds=kept_token_bounds(context.layout.lengths) + 3,
    )
    calls, widths = [], []
    original = SparseGenerationStep._generation_step
    monkeypatch.setattr(
        SparseGenerationStep, "_generation_step", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    monkeypatch.setattr(SparseGenerationStep, "kept_width", kept_width)
    slots = RowTables.slots
    monkeypatch.setattr(RowTables, "slots", lambda self, n: widths.append(n) or slots(self, n))
    row_groups, rows_in = [], sparse_generation_step.rows_in  # the rows of every per-source product
    monkeypatch.setattr(
        sparse_generation_step,
        "rows_in",
        lambda t, first, count, n: row_groups.append(count) or rows_in(t, first, count, n),
    )
    # both compute the attention softmax in float32 (as fairseq's utils.softmax), over kept-token layouts
    # of different widths: float32 rounding
    atol, rtol = FLOAT32_SOFTMAX_ROUND_OFF
    tolerance = {"atol": atol, "rtol": rtol} if dtype == torch.float64 else {"atol": 4e-2, "rtol": 4e-2}
    # one incremental state per decoder, shared by its layers (as a decoder's is): the fast layers share
    # the row tables and buffers kept there
    reference_state, fast_state = {}, {}
    searches = [StaticBeamSearch(4, 2) for _ in fast_layers]  # four rows, two per source
    with torch.no_grad(), following_static_beam_search(fast_layers, searches):
        for step in range(query.size(0)):
            for layer, fast_layer in zip(layers, fast_layers):
                need_weights = step % 2 == 1
                expected, expected_report = layer(
                    query[step : step + 1],
                    key,
                    padding,
                    context,
                    incremental_state=reference_state,
                    need_weights=need_weights,
                )
                before = len(calls)
                out, report = fast_layer(
                    query[step : step + 1],
                    key,
                    padding,
                    context,
                    incremental_state=fast_state,
                    need_weights=need_weights,
                )
                assert len(calls) == before + 1  # the fast step ran
                torch.testing.assert_close(out, expected, **tolerance)
                assert torch.equal(report.selection, expected_report.selection)
                finite = expected_report.approx_log.isfinite()
                assert torch.equal(report.approx_log.isfinite(), finite)
                torch.testing.assert_close(
                    report.approx_log[finite].float(), expected_report.approx_log[finite].float(), **tolerance
                )
                if need_weights:
                    torch.testing.assert_close(report.token_attention, expected_report.token_attention, **tolerance)
    assert len(calls) == 2 * query.size(0)
    bound = int(context.kept_token_bounds[1])  # the bound of k = 2 sentences
    if kept_width == "bound":
        assert set(widths) == {bound}
        assert set(row_groups) == {4}  # one product over all rows
    else:
        assert max(widths) <= bound and min(widths) < bound
        assert 2 in row_groups  # steps whose sources kept different widths: one product per source


def test_encoder_sets_kept_token_bounds_in_evaluation_only(built):
    """In evaluation the encoder stores the kept-token bounds (one read per
    batch), so that no generation step reads its selection back (issue 35:
    no synchronization per step, on every device); training steps never
    read them."""
    _, task, model, _ = built
    net_input = batch(task, model)["net_input"]
    model.eval()
    try:
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"], net_input["src_sent_ids"])
    finally:
        model.train()
    (source,) = encoder_out["source_context"]
    bounds = source.rows_context().kept_token_bounds
    assert bounds is not None and bounds.device.type == "cpu"
    assert torch.equal(bounds, kept_token_bounds(source.layout.lengths))
    encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"], net_input["src_sent_ids"])
    (source,) = encoder_out["source_context"]
    assert source.kept_token_bounds is None
    assert source.rows_context().kept_token_bounds is None


def test_generation_path_auto_gathers_only_when_it_pays():
    """``auto`` gathers at a step when (most kept tokens of a row) * heads
    <= 2 N, else masks the per-source attention (keys/values [B, H, N, d_h]
    projected once); both give the output of the masked teacher-forcing
    attention."""
    decisions = set()
    for top_r in (1, 4):
        module, query, key, padding, context = sparse_attention_inputs(top_r=top_r, generation_path="auto")
        masked, masked_attention = module(query, key, padding, context)
        for path in ("auto", "gather", "mask"):
            module.generation_path = path
            state = {}
            out, _ = module(query[:1], key, padding, context, incremental_state=state)
            torch.testing.assert_close(out, masked[:1], atol=1e-5, rtol=1e-5)
            selection = masked_attention.selection[:, :1]
            flags, chosen = selection.float().topk(min(top_r, selection.size(-1)), dim=-1)
            # the same sentences, in any order
            kept = kept_token_layout(chosen, flags.bool(), context.rows, context.layout, context.kept_token_bounds)
            gathers = path == "gather" or (path == "auto" and kept.positions.size(-1) * 4 <= 2 * key.size(0))
            cache = sorted(module._get_input_buffer(state))
            assert cache == (["sentence_keys"] if gathers else ["prev_key", "prev_value", "sentence_keys"])
            if path == "auto":
                decisions.add(gathers)
    assert decisions == {True, False}
    with pytest.raises(ValueError, match="generation path"):
        SparseCrossAttention(16, 4, generation_path="sometimes")


# ------------------------------------------------------------ the model


def test_approximator_initialized_from_cross_attention_with_biases(built):
    _, _, model, _ = built
    for layer in model.decoder.layers:
        attention = layer.encoder_attn
        torch.nn.init.normal_(attention.q_proj.bias)
        torch.nn.init.normal_(attention.k_proj.bias)
        attention.initialize_approximator_from_cross_attention()
        sentence = attention.sentence_attention
        assert torch.equal(sentence.sentence_query_proj.weight, attention.q_proj.weight)
        assert torch.equal(sentence.sentence_query_proj.bias, attention.q_proj.bias)
        assert torch.equal(sentence.sentence_key_proj.weight, attention.k_proj.weight)
        assert torch.equal(sentence.sentence_key_proj.bias, attention.k_proj.bias)
        assert sentence.sentence_key_proj.bias.abs().sum() > 0


def decode_incrementally(model, sample):
    net_input = sample["net_input"]
    encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"], net_input["src_sent_ids"])
    state, steps = {}, []
    for t in range(net_input["prev_output_tokens"].size(1)):
        logits, _ = model.decoder(net_input["prev_output_tokens"][:, : t + 1], encoder_out, incremental_state=state)
        steps.append(logits)
    return torch.cat(steps, 1)


@pytest.mark.parametrize("selection,path", [("approx", "gather"), ("approx", "mask"), ("ideal", "auto")])
def test_incremental_decoding_equals_full(built, selection, path):
    """Teacher forcing (masked logits) and incremental decoding give the same
    output, whether generation gathers the kept sentences or masks."""
    _, task, model, _ = built
    model = copy.deepcopy(model).eval()
    for layer in model.decoder.layers:
        layer.encoder_attn.selection = selection
        layer.encoder_attn.generation_path = path
    sample = batch(task, model)
    sample["net_input"]["prev_output_tokens"] = sample["net_input"]["prev_output_tokens"][:, :12]
    with torch.no_grad():
        full, extra = model(**sample["net_input"])
        incremental = decode_incrementally(model, sample)
    selection_sizes = extra["sentence_attention"][0].selection.sum(-1)
    assert selection_sizes.max() == 3  # top-r really restricts (sources have > 3 sentences)
    torch.testing.assert_close(incremental, full, atol=1e-4, rtol=1e-4)


def test_attention_pooling_model_decodes_incrementally_like_teacher_forcing(data_bin):
    _, task, model, _ = build(data_bin, "--sentence-encoder", "attention-pooling")
    model = model.eval()
    sample = batch(task, model)
    sample["net_input"]["prev_output_tokens"] = sample["net_input"]["prev_output_tokens"][:, :8]
    with torch.no_grad():
        full, extra = model(**sample["net_input"])
        incremental = decode_incrementally(model, sample)
    assert extra["sentence_attention"][0].selection.sum(-1).max() == 3
    torch.testing.assert_close(incremental, full, atol=1e-4, rtol=1e-4)


def expand_per_hypothesis(model):
    """Switch ``model`` to the beam-expanded layout of stock fairseq: every
    per-source tensor of the encoder output and every cross-attention cache
    copied to each hypothesis row and reordered at every step."""

    def reorder_encoder_out(encoder_out, new_order):
        reordered = {
            name: [
                tensor.index_select(1 if name in ("encoder_out", "encoder_states") else 0, new_order)
                for tensor in tensors
            ]
            for name, tensors in encoder_out.items()
            if name != "source_context"
        }
        (source,) = encoder_out["source_context"]
        # every row reads its own copy of its source's sentences (no hypothesis rows); the kept-token
        # bounds hold one entry per number of sentences, for the whole batch: kept as they are
        reordered["source_context"] = [
            dataclasses.replace(
                source,
                sentence_ids=source.sentence_ids.index_select(0, new_order),
                sentence_states=None
                if source.sentence_states is None
                else source.sentence_states.index_select(0, new_order),
                layout=SentenceLayout(*(table.index_select(0, new_order) for table in source.layout)),
                hypothesis_source_index=None,
                sentence_context=None,
            )
        ]
        return reordered

    def reorder_cache(attention):
        def reorder_incremental_state(incremental_state, new_order):
            cache = attention._get_input_buffer(incremental_state)
            attention._set_input_buffer(
                incremental_state,
                {  # source_states is [N, B, C]
                    k: v.index_select(1 if k == "source_states" else 0, new_order) for k, v in cache.items()
                },
            )
            return incremental_state

        return reorder_incremental_state

    model.encoder.reorder_encoder_out = reorder_encoder_out
    for layer in model.decoder.layers:
        layer.encoder_attn.reorder_incremental_state = reorder_cache(layer.encoder_attn)


@pytest.mark.parametrize("top_r,path", [(0, "auto"), (3, "gather"), (3, "mask")])
def test_per_source_cache_generation_equals_expanded_path(built, monkeypatch, top_r, path):
    """Beam search with the per-source cache gives the tokens, scores and
    attention of the beam-expanded layout, also after the batch is compacted
    (source 1 is forced to finish at step 2), and its cache is never
    expanded, copied or reordered."""
    from fairseq.sequence_generator import SequenceGenerator

    _, task, model, _ = built
    model = copy.deepcopy(model).eval()
    for layer in model.decoder.layers:
        layer.encoder_attn.top_r = top_r
        layer.encoder_attn.generation_path = path
    dictionary = task.target_dictionary
    prefix = torch.full((3, 3), dictionary.pad())
    prefix[:, :2] = dictionary.nspecial + 6
    prefix[1, 2] = dictionary.eos()
    sample = batch(task, model, (0, 1, 2))
    generator = SequenceGenerator([model], dictionary, beam_size=4, max_len_b=10, len_penalty=2.0)

    caches, row_counts = [], []
    cached = SparseCrossAttention._cached
    forward = SparseCrossAttention.forward

    def recording_cache(self, incremental_state, name, compute):
        tensor = cached(self, incremental_state, name, compute)
        # the generation step's [B * H, d_h, S] view of the sentence keys: B sources of H heads
        sources = tensor.size(0) // (self.num_heads if name == "sentence_keys_by_head" else 1)
        caches.append((id(self), name, sources, tensor.data_ptr()))
        return tensor

    def recording_rows(self, query, *args, **kwargs):
        row_counts.append(query.size(1))
        return forward(self, query, *args, **kwargs)

    monkeypatch.setattr(SparseCrossAttention, "_cached", recording_cache)
    monkeypatch.setattr(SparseCrossAttention, "forward", recording_rows)
    per_source = generator.generate([model], sample, prefix_tokens=prefix)
    monkeypatch.undo()
    assert 12 in row_counts and 8 in row_counts  # the batch was compacted
    assert {sources for _, _, sources, _ in caches} == {3}  # per source (B = 3), not per hypothesis
    names = {name for _, name, _, _ in caches}
    assert names == (
        {"sentence_keys"} if path == "gather" else {"prev_key", "prev_value"} | ({"sentence_keys"} if top_r else set())
    )
    # one tensor per layer and name, never copied or recomputed
    assert len({(layer, name, pointer) for layer, name, _, pointer in caches}) == 2 * len(names)

    expand_per_hypothesis(model)
    expanded = generator.generate([model], sample, prefix_tokens=prefix)
    assert [len(hypotheses[0]["tokens"]) for hypotheses in per_source] == [11, 3, 11]
    for ours, reference in zip(per_source, expanded):
        for hypothesis, expected in zip(ours, reference):
            assert hypothesis["tokens"].tolist() == expected["tokens"].tolist()
            torch.testing.assert_close(hypothesis["score"], expected["score"], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(hypothesis["attention"], expected["attention"], atol=1e-5, rtol=1e-5)


def test_restores_tiny_bart_checkpoint(data_bin, tmp_path):
    from fairseq import checkpoint_utils

    path = make_tiny_bart_checkpoint(
        data_bin, str(tmp_path / "bart"), extra_args=["--max-source-positions", MAX_SOURCE]
    )
    bart_models, _ = checkpoint_utils.load_model_ensemble([path])
    bart = bart_models[0].eval()
    state = checkpoint_utils.load_checkpoint_to_cpu(path)["model"]
    _, task, model, _ = build(data_bin, "--top-r", "0")
    model.load_state_dict(copy.deepcopy(state), strict=True)
    model.eval()
    for i, layer in enumerate(model.decoder.layers):
        sentence = layer.encoder_attn.sentence_attention
        for name, source in (("sentence_query_proj", "q_proj"), ("sentence_key_proj", "k_proj")):
            for tensor in ("weight", "bias"):
                expected = state[f"decoder.layers.{i}.encoder_attn.{source}.{tensor}"]
                assert torch.equal(getattr(getattr(sentence, name), tensor), expected)
    assert state["decoder.layers.0.encoder_attn.q_proj.bias"].abs().sum() > 0  # the copy is not trivially zero
    sample = batch(task, model, (0, 1))
    with torch.no_grad():
        sparse_logits, _ = model(**sample["net_input"])
        net_input = {k: v for k, v in sample["net_input"].items() if k != "src_sent_ids"}
        bart_logits, _ = bart(**net_input)
    torch.testing.assert_close(sparse_logits, bart_logits, atol=1e-4, rtol=1e-4)


# --------------------------------------------------- losses and training stages


def snapshot(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before, model):
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())}


def test_interleaved_updates_touch_only_their_group(data_bin):
    from fairseq.trainer import Trainer

    cfg, task, model, criterion = build(data_bin)
    trainer = Trainer(cfg, task, model, criterion)
    approximator = set(model.approximator_parameter_names())
    decoder = {n for n, p in model.named_parameters() if p.requires_grad} - approximator
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert any(n.startswith("encoder.layers") for n in frozen) and "encoder.embed_tokens.weight" in frozen
    assert approximator and decoder and not (approximator & frozen)
    sample = batch(task, model)
    phases = []
    for update in range(3):
        before = snapshot(model)
        trainer.train_step([sample])
        moved = changed(before, model)
        assert not moved & frozen
        if update % 2 == 0:  # Eq. 13: theta_dec moves at fixed theta~
            phases.append("decoder")
            assert moved & decoder and not moved & approximator
        else:  # Eq. 14: theta~ moves on lambda * L_KL only
            phases.append("approximator")
            assert moved == approximator
    assert phases == ["decoder", "approximator", "decoder"]


def test_joint_stage_updates_both_groups(data_bin):
    from fairseq.trainer import Trainer

    cfg, task, model, criterion = build(data_bin, stage="joint")
    trainer = Trainer(cfg, task, model, criterion)
    before = snapshot(model)
    trainer.train_step([batch(task, model)])
    moved = changed(before, model)
    assert set(model.approximator_parameter_names()) <= moved
    assert any(name.startswith("decoder.layers") and "sentence" not in name for name in moved)


@pytest.mark.parametrize("sentence_encoder", ["bigru", "attention-pooling"])
def test_kl_only_stage_lowers_kl_on_a_small_set(data_bin, sentence_encoder):
    from fairseq.trainer import Trainer

    cfg, task, model, criterion = build(
        data_bin, "--lr", "1e-2", "--sentence-encoder", sentence_encoder, stage="kl-only"
    )
    expected_encoder = SentenceEncoder if sentence_encoder == "bigru" else PoolingSentenceEncoder
    assert isinstance(model.encoder.sentence_encoder, expected_encoder)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(model.approximator_parameter_names())
    trainer = Trainer(cfg, task, model, criterion)
    sample = batch(task, model, (0, 1))
    kls = []
    for _ in range(8):
        logging = trainer.train_step([sample])
        kls.append(float(logging["kl_loss"]))  # per target token
    assert kls[-1] < 0.6 * kls[0], kls


# ------------------------------------------------- activation checkpointing


def record_grad_modes(module):
    """``torch.is_grad_enabled()`` at every call of ``module``: a module run
    by fairseq's checkpoint function is called without gradients in the
    forward pass and called again with them when the backward pass
    recomputes it; a plain module is called once, with gradients."""
    modes = []
    handle = module.register_forward_hook(lambda *_: modes.append(torch.is_grad_enabled()))
    return modes, handle


def loss_gradients_and_encoder_calls(model, criterion, sample):
    encoder = model.encoder.sentence_encoder
    # the BiGRU's output projection runs once per (chunk of) sentence_vectors call
    inner = encoder.output_proj if isinstance(encoder, SentenceEncoder) else encoder.pooling
    modes, handle = record_grad_modes(inner)
    try:
        model.train()
        model.zero_grad()
        loss, _, _ = criterion(model, sample)
        forward_modes = list(modes)
        loss.backward()
    finally:
        handle.remove()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), gradients, forward_modes, modes[len(forward_modes) :]


@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
@pytest.mark.parametrize("sentence_encoder", ["bigru", "attention-pooling"])
def test_checkpoint_activations_reach_the_sentence_encoder(data_bin, sentence_encoder, flag, monkeypatch):
    """--checkpoint-activations (and --offload-activations, which implies it)
    recompute the sentence encoder of Eq. 10 (BiGRU by chunks of sentences,
    or the attention pooling of Sec. 4.5 as one layer) in the backward pass:
    it runs without gradients in the forward pass and again in the backward
    pass, with the same loss and gradients as without the flag. The joint
    stage trains the sentence encoder on the frozen BART encoder's states,
    inputs that do not require grad."""
    from mdsfair.modules import cross_attention_components

    chunk = 8  # the tiny batch's ~20 sentences span several chunks
    monkeypatch.setattr(cross_attention_components, "SENTENCE_ENCODER_CHECKPOINT_CHUNK", chunk)
    _, task, plain, criterion = build(data_bin, "--sentence-encoder", sentence_encoder, stage="joint")
    _, _, model, _ = build(data_bin, "--sentence-encoder", sentence_encoder, flag, stage="joint")
    encoder = model.encoder.sentence_encoder
    offload = flag == "--offload-activations"
    if sentence_encoder == "bigru":
        assert encoder.checkpoint_chunk_sentences == chunk
        assert encoder.offload_activations == offload
        assert plain.encoder.sentence_encoder.checkpoint_chunk_sentences == 0
    else:
        assert hasattr(encoder, "precheckpoint_forward") and encoder.forward.args[1] == offload
        assert not hasattr(plain.encoder.sentence_encoder, "precheckpoint_forward")
    sample = batch(task, plain)
    # the BiGRU runs once over all sentences (by chunks when checkpointed), the pooling once
    sentences = int(sentence_layout(sample["net_input"]["src_sent_ids"]).sentence_mask.sum())
    loss, gradients, forward_modes, backward_modes = loss_gradients_and_encoder_calls(plain, criterion, sample)
    assert forward_modes == [True] and backward_modes == []
    checkpointed_loss, checkpointed_gradients, forward_modes, backward_modes = loss_gradients_and_encoder_calls(
        model, criterion, sample
    )
    chunks = -(-sentences // chunk) if sentence_encoder == "bigru" else 1
    assert sentence_encoder == "attention-pooling" or chunks > 1
    assert forward_modes == [False] * chunks and backward_modes == [True] * chunks
    assert torch.equal(checkpointed_loss, loss)
    assert set(checkpointed_gradients) == set(gradients)
    assert any(name.startswith("encoder.sentence_encoder.") for name in gradients)
    for name, gradient in gradients.items():
        torch.testing.assert_close(checkpointed_gradients[name], gradient, atol=1e-6, rtol=1e-5, msg=name)


def test_sentence_encoder_equals_the_bidirectional_gru_on_each_sentence_alone():
    """The BiGRU of Eq. 10 over all sentences of a batch as one packed
    sequence: every sentence vector, and the gradients of the parameters and
    of the encoder states, equal ``nn.GRU`` run on that sentence alone
    (float64), for sentences of different lengths in two examples (padding,
    an empty slot), in 1 and 2 layers."""
    torch.manual_seed(0)
    sentence_ids = torch.cat([torch.full((n,), i) for i, n in enumerate([5, 1, 3, 5, 2, 4])])
    src_sent_ids = torch.stack([sentence_ids, sentence_ids.flip(0)])
    src_sent_ids[1, -3:] = -1  # padding; the second example's sentence 0 loses 3 tokens, sentence 1 is empty
    layout = sentence_layout(src_sent_ids)
    for layers in (1, 2):
        encoder = SentenceEncoder(12, 10, num_layers=layers).double()
        for parameter in encoder.parameters():  # off the zero-bias start, so that every term counts
            torch.nn.init.normal_(parameter, std=0.3)
        reference = copy.deepcopy(encoder)
        states = torch.randn(2, src_sent_ids.size(1), 12, dtype=torch.float64)
        inputs = [states.clone().requires_grad_(True) for _ in range(2)]
        ours = encoder(inputs[0], layout)
        theirs = torch.zeros_like(ours)
        for b in range(2):
            for s in range(layout.lengths.size(1)):
                if layout.lengths[b, s] > 0:
                    _, final = reference.gru(inputs[1][b, src_sent_ids[b] == s].unsqueeze(0))
                    theirs[b, s] = reference.output_proj(torch.cat([final[-2], final[-1]], dim=-1))[0]
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
        assert bool(ours[~layout.sentence_mask].eq(0).all())
        ours.pow(2).sum().backward()
        theirs.pow(2).sum().backward()
        for (name, got), expected in zip(encoder.named_parameters(), reference.parameters()):
            torch.testing.assert_close(got.grad, expected.grad, atol=1e-12, rtol=0, msg=name)
        torch.testing.assert_close(inputs[0].grad, inputs[1].grad, atol=1e-12, rtol=0)


def test_packed_sentences_hold_every_token_once_in_packed_sequence_order():
    """pack_sentences: the non-empty sentences longest first, step t holding
    token t of every sentence longer than t: the data and batch sizes
    ``pack_padded_sequence`` gives for the sentences padded, without a token
    of padding (whatever the lengths)."""
    from torch.nn.utils.rnn import pack_padded_sequence

    lengths = [3, 1, 17, 6, 2, 9]
    sentence_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    src_sent_ids = torch.stack([sentence_ids, sentence_ids.flip(0)])  # [2, 38], differently ordered
    src_sent_ids[1, -4:] = -1  # padding: sentence 0 of the second example loses 3 tokens, sentence 1 becomes empty
    layout = sentence_layout(src_sent_ids)
    slot_lengths = layout.lengths.view(-1)
    rows = sentences_longest_first(slot_lengths)
    assert rows.tolist() == sorted(slot_lengths.gt(0).nonzero().view(-1).tolist(), key=lambda r: -int(slot_lengths[r]))
    packed = pack_sentences(layout, rows, src_sent_ids.size(1))
    states = torch.randn(2, src_sent_ids.size(1), 5, dtype=torch.float64)
    padded = sentence_token_states(states, layout).index_select(0, rows)
    expected = pack_padded_sequence(padded, slot_lengths.index_select(0, rows), batch_first=True)
    assert torch.equal(states.flatten(0, 1).index_select(0, packed.tokens), expected.data)
    assert torch.equal(packed.batch_sizes, expected.batch_sizes)
    assert packed.tokens.numel() == int(slot_lengths.sum()) < rows.numel() * int(slot_lengths.max())
    assert packed.tokens.unique().numel() == packed.tokens.numel()


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--top-r", "-1"),
        ("--sentence-encoder-layers", "0"),
        ("--sentence-encoder-hidden-dim", "0"),
        ("--mix-decay-updates", "0"),
    ],
)
def test_sparse_flags_are_range_checked_by_the_parser(flag, value, capsys):
    import argparse

    from mdsfair.models.sparse_bart import SparseBARTModel

    parser = argparse.ArgumentParser(prog="fairseq-train")
    SparseBARTModel.add_args(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([flag, value])
    assert f"argument {flag}" in capsys.readouterr().err
