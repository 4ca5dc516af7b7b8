"""The in-place self-attention cache of static-shape beam search
(:mod:`mdsfair.modules.beam_cached_self_attention`, issue 35): the same
attention as fairseq's ``MultiheadAttention`` step by step, through beam
reorders, with the cache never copied.

Compared in float64. fairseq's ``utils.softmax`` computes the attention
probabilities in float32 whatever the model's dtype, and so does the in-place
path (as fairseq does); two float64 score computations that round their last
bit differently can round to neighbouring float32 values there, so the
outputs are compared with a float32-derived tolerance (``tests/tolerances.py``).
"""
import pytest
import torch
from fairseq.modules import MultiheadAttention

from benchmarks import operator_counts
from mdsfair.modules.beam_cached_self_attention import (
    BEAM_GROUPS,
    BeamCachedSelfAttention,
    BeamHistory,
    declare_beam_groups,
)
from tests.tolerances import tolerance

EMBED_DIM, HEADS = 16, 4


def within_group_orders(sources: int, beam: int, steps: int, seed: int = 0):
    """A random reorder per step that keeps every row among its source's rows."""
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.arange(sources).view(-1, 1) * beam
         + torch.randint(0, beam, (sources, beam), generator=generator)).view(-1)
        for _ in range(steps)
    ]


def attention_pair():
    torch.manual_seed(0)
    stock = MultiheadAttention(EMBED_DIM, HEADS, self_attention=True).double().eval()
    ours = BeamCachedSelfAttention(EMBED_DIM, HEADS, self_attention=True).double().eval()
    ours.load_state_dict(stock.state_dict())
    return stock, ours


def float32_close(actual, expected):
    """Equal up to float32 round-off (the softmax's dtype; see the module docstring)."""
    atol, rtol = tolerance(expected.float())
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("capacity", [None, 2])
def test_each_step_equals_fairseqs_attention_through_reorders(capacity):
    """Steps with a reorder before each (rows copied from others of their
    source, so histories diverge and merge): every step's output equals
    fairseq's. ``capacity`` 2: the buffers grow while decoding."""
    sources, beam, steps = 3, 4, 9
    stock, ours = attention_pair()
    stock_state, our_state = {}, {}
    declare_beam_groups(our_state, beam, capacity)
    history = BeamHistory(sources * beam, beam, capacity or 64, torch.device("cpu"))
    generator = torch.Generator().manual_seed(1)
    orders = within_group_orders(sources, beam, steps)
    with torch.no_grad():
        for step in range(steps):
            if step:
                stock.reorder_incremental_state(stock_state, orders[step])
                ours.reorder_incremental_state(our_state, orders[step])
                history.reorder(orders[step])
            x = torch.randn(1, sources * beam, EMBED_DIM, generator=generator, dtype=torch.float64)
            expected, _ = stock(x, x, x, incremental_state=stock_state, need_weights=False)
            actual, _ = ours(x, x, x, incremental_state=our_state, need_weights=False, beam_history=history)
            history.advance()
            float32_close(actual, expected)
    # the in-place cache was used and never reordered: fairseq's keys are absent from its state
    assert ours.get_incremental_state(our_state, "beam_cache") is not None
    assert ours._get_input_buffer(our_state) == {}


def test_a_history_that_is_not_reordered_gives_other_outputs():
    """The comparison above can fail: without the history's reorder the
    in-place attention reads the wrong rows' keys."""
    sources, beam, steps = 2, 4, 5
    stock, ours = attention_pair()
    stock_state, our_state = {}, {}
    history = BeamHistory(sources * beam, beam, 64, torch.device("cpu"))
    generator = torch.Generator().manual_seed(2)
    orders = within_group_orders(sources, beam, steps, seed=3)
    largest = 0.0
    with torch.no_grad():
        for step in range(steps):
            if step:
                stock.reorder_incremental_state(stock_state, orders[step])
            x = torch.randn(1, sources * beam, EMBED_DIM, generator=generator, dtype=torch.float64)
            expected, _ = stock(x, x, x, incremental_state=stock_state, need_weights=False)
            actual, _ = ours(x, x, x, incremental_state=our_state, need_weights=False, beam_history=history)
            history.advance()
            largest = max(largest, (actual - expected).abs().max().item())
    assert largest > 1e-3


def test_reorders_must_keep_the_rows():
    history = BeamHistory(8, 4, 16, torch.device("cpu"))
    with pytest.raises(ValueError, match="keep the number of rows"):
        history.reorder(torch.arange(4))
    with pytest.raises(ValueError, match="do not form groups of 4"):
        BeamHistory(6, 4, 16, torch.device("cpu"))
    with pytest.raises(ValueError, match="beam size must be at least 1"):
        declare_beam_groups({}, 0)


@pytest.mark.parametrize("arch", ["sparse_bart_base", "hierencdec_bart_base"])
def test_a_decoder_with_beam_groups_gives_the_logits_of_fairseqs_caches(arch):
    """A component decoder (6 layers) stepped with within-source reorders:
    declaring the beam groups (the static generator does) keeps every
    self-attention cache in place and gives the same log-probabilities as
    fairseq's caches."""
    dictionary = operator_counts.dictionary_of(60)
    dims = operator_counts.encoder_decoder_dims(6, 16, 4, max_source_positions=48, max_target_positions=32)
    model = operator_counts.build(arch, dictionary, **dims).double()
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
    for declared in (False, True):
        state = {}
        if declared:
            declare_beam_groups(state, beam, 4)  # grows past 4 steps
        with torch.no_grad():
            inputs = model.encoder_inputs(net_input) if hasattr(model, "encoder_inputs") else net_input
            encoder_out = model.encoder(**inputs)
            expand = torch.arange(sources).view(-1, 1).repeat(1, beam).view(-1)
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, expand)
            steps_out = []
            for step in range(steps):
                if step:
                    model.decoder.reorder_incremental_state_scripting(state, orders[step])
                logits, _ = model.decoder(tokens[:, : step + 1], encoder_out=encoder_out, incremental_state=state)
                steps_out.append(torch.log_softmax(logits[:, -1], dim=-1))
        outputs[declared] = torch.stack(steps_out)
        in_place = [layer.self_attn.get_incremental_state(state, "beam_cache") is not None
                    for layer in model.decoder.layers]
        assert all(in_place) == declared and any(in_place) == declared
        assert (BEAM_GROUPS in state) == declared
    float32_close(outputs[True], outputs[False])


def test_a_long_length_limit_does_not_preallocate_the_whole_limit():
    """The caches start at most INITIAL_CAPACITY steps long, whatever the
    generator's limit, and grow by doubling: a summary that ends early never
    holds memory for the limit."""
    from mdsfair.modules.beam_cached_self_attention import INITIAL_CAPACITY, beam_history

    dictionary = operator_counts.dictionary_of(40)
    dims = operator_counts.encoder_decoder_dims(1, 16, 4, max_source_positions=32, max_target_positions=32)
    model = operator_counts.build("sparse_bart_base", dictionary, **dims)
    state = {}
    declare_beam_groups(state, 2, max_steps=100_000)
    with torch.no_grad():
        history = beam_history(model.decoder, state, rows=4, device=torch.device("cpu"))
    assert history.capacity == INITIAL_CAPACITY
    history.length = INITIAL_CAPACITY
    history.ensure_capacity(INITIAL_CAPACITY + 1)
    assert history.capacity == 2 * INITIAL_CAPACITY
    assert torch.equal(history.parents[:, INITIAL_CAPACITY:],
                       (torch.arange(4) % 2).unsqueeze(1).expand(4, INITIAL_CAPACITY))
