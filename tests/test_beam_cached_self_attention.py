"""The in-place self-attention cache of static-shape beam search
(:mod:`mdsfair.generation.fast.beam_cached_self_attention`): the same
attention as fairseq's ``MultiheadAttention`` step by step, through beam
reorders, with the cache never copied; and only while a static beam search
is followed.

Compared in float64. fairseq's ``utils.softmax`` computes the attention
probabilities in float32 whatever the model's dtype, and so does the in-place
path (as fairseq does); two float64 score computations that round their last
bit differently can round to neighbouring float32 values there, so the
outputs are compared with a float32-derived tolerance (``tests/tolerances.py``).
"""

import contextlib
import copy

import pytest
import torch
from fairseq.modules import MultiheadAttention

from benchmarks import harness, operator_counts
from mdsfair.generation.fast import make_generation_fast_, static_beam_search
from mdsfair.generation.fast.beam_cached_self_attention import BeamCachedSelfAttention
from mdsfair.generation.fast.static_beam_search import (
    INITIAL_CAPACITY,
    BeamHistory,
    StaticBeamSearch,
    following_static_beam_search,
)
from mdsfair.modules.transformer_layers import DecoderSelfAttention
from tests.tolerances import tolerance

EMBED_DIM, HEADS = 16, 4


def within_group_orders(sources: int, beam: int, steps: int, seed: int = 0):
    """A random reorder per step that keeps every row among its source's rows."""
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.arange(sources).view(-1, 1) * beam + torch.randint(0, beam, (sources, beam), generator=generator)).view(
            -1
        )
        for _ in range(steps)
    ]


def attention_pair():
    torch.manual_seed(0)
    stock = MultiheadAttention(EMBED_DIM, HEADS, self_attention=True).double().eval()
    ours = DecoderSelfAttention(EMBED_DIM, HEADS, self_attention=True).double().eval()
    ours.load_state_dict(stock.state_dict())
    make_generation_fast_(ours)
    assert type(ours) is BeamCachedSelfAttention
    return stock, ours


def step(attention, x, state, search):
    """One step of ``attention`` while it follows ``search`` (or none)."""
    with following_static_beam_search([attention], [search]) if search else contextlib.nullcontext():
        out, _ = attention(x, x, x, incremental_state=state, need_weights=False)
    if search:
        search.advance()
    return out


def float32_close(actual, expected):
    """Equal up to float32 round-off (the softmax's dtype; see the module docstring)."""
    atol, rtol = tolerance(expected.float())
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("settle_interval", [None, 1])
@pytest.mark.parametrize("capacity", [None, 2])
def test_each_step_equals_fairseqs_attention_through_reorders(capacity, settle_interval, monkeypatch):
    """Steps with a reorder before each (rows copied from others of their
    source, so histories diverge and merge): every step's output equals
    fairseq's. ``capacity`` 2: the buffers grow while decoding.
    ``settle_interval`` 1: the history looks for settled steps after every
    step, and a reorder where every row continues its source's first row
    settles the steps before it, twice (each layer then keeps one key per
    source for them and moves the later keys)."""
    sources, beam, steps = 3, 4, 9
    if settle_interval:
        monkeypatch.setattr(static_beam_search, "SETTLE_INTERVAL", settle_interval)
    stock, ours = attention_pair()
    stock_state, our_state = {}, {}
    search = StaticBeamSearch(sources * beam, beam, capacity)
    generator = torch.Generator().manual_seed(1)
    orders = within_group_orders(sources, beam, steps)
    orders[5] = (torch.arange(sources) * beam).repeat_interleave(beam)  # every row continues its source's first
    orders[7] = orders[5] + 1  # and later its source's second
    settled = []
    with torch.no_grad():
        for index in range(steps):
            if index:
                stock.reorder_incremental_state(stock_state, orders[index])
                ours.reorder_incremental_state(our_state, orders[index])
                search.reorder(orders[index])
            x = torch.randn(1, sources * beam, EMBED_DIM, generator=generator, dtype=torch.float64)
            expected, _ = stock(x, x, x, incremental_state=stock_state, need_weights=False)
            float32_close(step(ours, x, our_state, search), expected)
            settled.append(search.history.settled)
    # the in-place cache was used and never reordered: fairseq's keys are absent from its state
    assert ours.get_incremental_state(our_state, "beam_cache") is not None
    assert ours._get_input_buffer(our_state) == {}
    if settle_interval:  # the steps before the merging reorder settled, and later ones after them
        assert settled[5] >= 5 and settled[7] >= 7
    else:
        assert set(settled) == {0}


def test_a_history_that_is_not_reordered_gives_other_outputs():
    """The comparison above can fail: without the history's reorder the
    in-place attention reads the wrong rows' keys."""
    sources, beam, steps = 2, 4, 5
    stock, ours = attention_pair()
    stock_state, our_state = {}, {}
    search = StaticBeamSearch(sources * beam, beam)
    generator = torch.Generator().manual_seed(2)
    orders = within_group_orders(sources, beam, steps, seed=3)
    largest = 0.0
    with torch.no_grad():
        for index in range(steps):
            if index:
                stock.reorder_incremental_state(stock_state, orders[index])
            x = torch.randn(1, sources * beam, EMBED_DIM, generator=generator, dtype=torch.float64)
            expected, _ = stock(x, x, x, incremental_state=stock_state, need_weights=False)
            actual = step(ours, x, our_state, search)
            largest = max(largest, (actual - expected).abs().max().item())
    assert largest > 1e-3


def test_reorders_must_keep_the_rows():
    history = BeamHistory(8, 4, 16, torch.device("cpu"))
    with pytest.raises(ValueError, match="keeps the number of rows"):
        history.reorder(torch.arange(4))
    with pytest.raises(ValueError, match="do not form groups of 4"):
        BeamHistory(6, 4, 16, torch.device("cpu"))
    with pytest.raises(ValueError, match="beam size must be at least 1"):
        StaticBeamSearch(4, 0)


def test_outside_a_static_beam_search_the_fast_attention_is_fairseqs():
    """Without a search followed (fairseq's generator, a full forward) the
    fast variant is fairseq's attention, bit for bit, with fairseq's cache."""
    stock, ours = attention_pair()
    stock_state, our_state = {}, {}
    generator = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for index in range(4):
            if index:
                order = torch.randperm(6, generator=generator)
                stock.reorder_incremental_state(stock_state, order)
                ours.reorder_incremental_state(our_state, order)
            x = torch.randn(1, 6, EMBED_DIM, generator=generator, dtype=torch.float64)
            expected, _ = stock(x, x, x, incremental_state=stock_state, need_weights=False)
            assert torch.equal(step(ours, x, our_state, None), expected)
    assert ours.get_incremental_state(our_state, "beam_cache") is None


@pytest.mark.parametrize("arch", ["sparse_bart_base", "hierencdec_bart_base"])
def test_a_decoder_with_beam_groups_gives_the_logits_of_fairseqs_caches(arch):
    """A component decoder (6 layers) stepped with within-source reorders:
    made fast and following a static beam search (as the static generator
    runs it), every self-attention cache stays in place, and the
    log-probabilities are those of the reference decoder with fairseq's
    caches."""
    dictionary = harness.synthetic_dictionary(60)
    dims = harness.dimensions(6, 16, 64, 4, max_source_positions=48, max_target_positions=32)
    reference = operator_counts.build(arch, dictionary, **dims).double().eval()
    fast = make_generation_fast_(copy.deepcopy(reference))
    sources, beam, steps = 2, 3, 7
    net_input = operator_counts.sentence_source(dictionary, sources, 48, 8)
    if arch.startswith("hierencdec"):
        net_input = {"src_tokens": net_input["src_tokens"], "src_doc_ids": net_input["src_sent_ids"] // 3}
        net_input["src_tokens"][:, 0] = dictionary.bos()
        net_input["src_tokens"][:, 24] = dictionary.bos()
        net_input["src_doc_ids"] = (torch.arange(48) >= 24).long().repeat(sources, 1)
    orders = within_group_orders(sources, beam, steps, seed=4)
    generator = torch.Generator().manual_seed(5)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (sources * beam, steps), generator=generator)
    outputs = {}
    for declared, model in ((False, reference), (True, fast)):
        state = {}
        search = StaticBeamSearch(sources * beam, beam, 4) if declared else None  # grows past 4 steps
        with torch.no_grad(), following_static_beam_search([model], [search]) if declared else contextlib.nullcontext():
            inputs = model.encoder_inputs(net_input) if hasattr(model, "encoder_inputs") else net_input
            encoder_out = model.encoder(**inputs)
            expand = torch.arange(sources).view(-1, 1).repeat(1, beam).view(-1)
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, expand)
            steps_out = []
            for step in range(steps):
                if step:
                    if search:
                        search.reorder(orders[step])
                    model.decoder.reorder_incremental_state_scripting(state, orders[step])
                logits, _ = model.decoder(tokens[:, : step + 1], encoder_out=encoder_out, incremental_state=state)
                if search:
                    search.advance()
                steps_out.append(torch.log_softmax(logits[:, -1], dim=-1))
        outputs[declared] = torch.stack(steps_out)
        in_place = [
            layer.self_attn.get_incremental_state(state, "beam_cache") is not None for layer in model.decoder.layers
        ]
        assert all(in_place) == declared and any(in_place) == declared
    float32_close(outputs[True], outputs[False])


def test_a_long_length_limit_does_not_preallocate_the_whole_limit():
    """The caches start at most INITIAL_CAPACITY steps long, whatever the
    generator's limit, and grow by doubling: a summary that ends early never
    holds memory for the limit."""
    search = StaticBeamSearch(4, 2, max_steps=100_000)
    history = search.history
    assert history.capacity == INITIAL_CAPACITY
    history.length = INITIAL_CAPACITY
    history.ensure_capacity(INITIAL_CAPACITY + 1)
    assert history.capacity == 2 * INITIAL_CAPACITY
    assert torch.equal(
        history.parents[:, INITIAL_CAPACITY:], (torch.arange(4) % 2).unsqueeze(1).expand(4, INITIAL_CAPACITY)
    )
