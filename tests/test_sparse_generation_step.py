"""The sparse cross-attention's fast generation step
(:mod:`mdsfair.generation.fast.sparse_generation_step`) swapped into a whole
model by :func:`~mdsfair.generation.fast.make_generation_fast_`, on the
golden ``sparse_bart_tiny`` checkpoint in float64: the same teacher-forced
logits, the same logits at every incremental step over beam-expanded rows,
and the same static-decoding beams as the reference model (and as fairseq's
generator). The step-level comparison (output, selection, report,
alignment, bfloat16) is in ``tests/test_sparse_bart.py``."""

import copy
import os

import pytest
import torch

from mdsfair.generation.fast import make_generation_fast_
from mdsfair.generation.fast.sparse_generation_step import ROW_TABLES_KEY, SparseGenerationStep
from mdsfair.generation.fast.static_beam_search import StaticBeamSearch, following_static_beam_search
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sentence_saliency import sentence_layout
from mdsfair.modules.sentence_selection import kept_token_bounds
from mdsfair.modules.sparse_cross_attention import SentenceContext, SparseCrossAttention
from tests import golden_outputs as golden
from tests.generation_checks import (
    assert_fast_incremental_logits,
    assert_same_beams,
    counting_fast_steps,
    generate,
    sparse_attention_classes,
)
from tests.golden_outputs import load
from tests.tolerances import FLOAT32_SOFTMAX_ROUND_OFF

ARCH = "sparse_bart_tiny"


@pytest.fixture(scope="module")
def golden_model():
    return load(ARCH)


def golden_sample():
    return torch.load(os.path.join(golden.GOLDEN_DIR, ARCH, "batch.pt"), weights_only=True)


def with_generation_path(model, path: str):
    """A copy of ``model`` whose sparse cross-attentions take ``path``."""
    model = copy.deepcopy(model)
    for layer in model.decoder.layers:
        layer.encoder_attn.generation_path = path
    return model


@pytest.mark.parametrize("path", ["gather", "auto"])
def test_fast_step_gives_the_reference_logits(golden_model, monkeypatch, path):
    """Teacher forcing on the fast model is the reference's computation
    (bitwise); five incremental steps over beam-expanded rows give the
    reference's logits to float64 round-off, the fast step running at
    every layer and step when asked to gather."""
    model, _, task = golden_model
    sample = golden_sample()
    reference = with_generation_path(model, path)
    fast = make_generation_fast_(copy.deepcopy(reference))
    assert sparse_attention_classes(reference) == {SparseCrossAttention}
    assert sparse_attention_classes(fast) == {SparseGenerationStep}
    # teacher forcing runs the reference in both: the same computation
    assert torch.equal(
        golden.teacher_forced_lprobs(task, fast, sample), golden.teacher_forced_lprobs(task, reference, sample)
    )
    calls = assert_fast_incremental_logits(reference, fast, sample, monkeypatch)
    if path == "gather":
        assert len(calls) == 5 * len(fast.decoder.layers)


@pytest.mark.parametrize("path", ["gather", "auto"])
def test_static_decoding_beams_are_the_same_with_the_fast_step(golden_model, monkeypatch, path):
    """``--static-decoding`` on the fast model gives the beams of the
    reference model, under fairseq's generator and under the static one."""
    model, cfg, task = golden_model
    sample = golden_sample()
    reference = with_generation_path(model, path)
    dynamic = generate(task, reference, cfg, sample, static=False)
    assert sparse_attention_classes(reference) == {SparseCrossAttention}
    static_reference = generate(task, copy.deepcopy(reference), cfg, sample, static=True)
    calls = counting_fast_steps(monkeypatch)
    fast = make_generation_fast_(copy.deepcopy(reference))
    static_fast = generate(task, fast, cfg, sample, static=True)
    assert_same_beams(static_fast, dynamic)
    assert_same_beams(static_fast, static_reference)
    if path == "gather":
        assert calls  # the fast step decoded


def sentence_ids_of(lengths_per_source, src_len):
    """``[B, src_len]`` sentence ids, source ``b`` made of sentences of the
    given lengths, then right padding (-1)."""
    ids = torch.full((len(lengths_per_source), src_len), -1, dtype=torch.long)
    for b, lengths in enumerate(lengths_per_source):
        ids[b, : sum(lengths)] = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    return ids


@pytest.mark.parametrize("approximator", ["model-based", "model-free"])
@pytest.mark.parametrize(
    "sentence_lengths",
    [
        [[3, 5, 2, 4, 6, 1, 3], [4, 4, 2, 7, 1, 3, 2]],  # both sources fill the S = 7 slots
        [[3, 5, 2, 4, 6, 1, 3], [4, 4, 2, 7]],  # the second source has 3 empty slots
    ],
)
def test_fast_step_masks_empty_sentence_slots_only_where_a_source_has_some(monkeypatch, approximator, sentence_lengths):
    """Float64, six steps over three rows per source: the fast step (which
    adds the score bias and masks the ranking only when a source has fewer
    sentences than the S slots) selects the reference's sentences and gives
    its output (up to the round-off of the word-level softmax, which both
    compute in float32 as fairseq's ``utils.softmax``, over kept-token
    layouts of different widths: the fast step lays out each source's rows
    to that source's widest) and approximator report, with and without
    empty slots."""
    torch.manual_seed(0)
    src_len, dim, beam = 30, 16, 3
    ids = sentence_ids_of(sentence_lengths, src_len)
    module = SparseCrossAttention(dim, 4, top_r=3, approximator=approximator, generation_path="gather").double().eval()
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    fast = make_generation_fast_(copy.deepcopy(module))
    layout = sentence_layout(ids)
    num_sources, num_slots = layout.lengths.shape
    rows = HypothesisRows.from_source_index(torch.arange(num_sources).repeat_interleave(beam), num_sources)
    context = SentenceContext(
        ids,
        layout,
        torch.randn(num_sources, num_slots, dim, dtype=torch.float64),
        rows,
        kept_token_bounds=kept_token_bounds(layout.lengths),
    )
    key, padding = torch.randn(src_len, num_sources, dim, dtype=torch.float64), ids.lt(0)
    queries = torch.randn(6, num_sources * beam, dim, dtype=torch.float64)
    reference_state, fast_state = {}, {}
    calls = counting_fast_steps(monkeypatch)
    with torch.no_grad(), following_static_beam_search([fast], [StaticBeamSearch(num_sources * beam, beam)]):
        for step in range(queries.size(0)):
            expected, expected_report = module(
                queries[step : step + 1], key, padding, context, incremental_state=reference_state
            )
            out, report = fast(queries[step : step + 1], key, padding, context, incremental_state=fast_state)
            atol, rtol = FLOAT32_SOFTMAX_ROUND_OFF
            torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
            assert torch.equal(report.selection, expected_report.selection)
            finite = expected_report.approx_log.isfinite()
            assert torch.equal(report.approx_log.isfinite(), finite)
            torch.testing.assert_close(
                report.approx_log[finite], expected_report.approx_log[finite], atol=1e-10, rtol=1e-10
            )
    assert len(calls) == queries.size(0)  # the fast step ran at every step
    has_empty = any(len(lengths) < num_slots for lengths in sentence_lengths)
    assert fast_state[ROW_TABLES_KEY].has_empty_sentence_slots() is has_empty
