"""Checks shared by the generation tests (``tests/test_static_decoding.py``,
``tests/test_sparse_generation_step.py``, ``tests/test_sparse_t5.py``): fairseq's or the
static generator's hypotheses, their equality, and the fast sparse step's incremental logits
against the reference's."""

import torch
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks import FairseqTask
from torch import nn

from mdsfair.generation.fast.sparse_generation_step import SparseGenerationStep
from mdsfair.generation.fast.static_beam_search import StaticBeamSearch, following_static_beam_search
from mdsfair.generation.static_decoding import StaticShapeSequenceGenerator
from mdsfair.tasks.model_inputs import net_input_for
from tests import golden_outputs as golden

#: fairseq's get_normalized_probs casts every step's log-probabilities to float32 whatever the
#: model's dtype: two computations of a score may differ by a few float32 units of its scale
SCORE_TOLERANCE = 64 * torch.finfo(torch.float32).eps


def generate(task, model, cfg, sample, static: bool):
    """The golden generation settings' hypotheses of ``model``: the static
    generator's (which puts the fast variants in ``model``), or fairseq's."""
    generator_class = StaticShapeSequenceGenerator if static else SequenceGenerator
    generator = FairseqTask.build_generator(task, [model], golden.generation_config(cfg), seq_gen_cls=generator_class)
    with torch.no_grad():
        return task.inference_step(generator, [model], sample)


def assert_same_beams(ours, theirs):
    assert len(ours) == len(theirs)
    for hypotheses, expected_hypotheses in zip(ours, theirs):
        assert len(hypotheses) == len(expected_hypotheses)
        for mine, expected in zip(hypotheses, expected_hypotheses):
            assert mine["tokens"].tolist() == expected["tokens"].tolist()
            scale = max(1.0, expected["positional_scores"].abs().max().item())
            torch.testing.assert_close(
                mine["positional_scores"], expected["positional_scores"], atol=SCORE_TOLERANCE * scale, rtol=0
            )
            torch.testing.assert_close(mine["score"], expected["score"], atol=SCORE_TOLERANCE * scale, rtol=0)


def counting_fast_steps(monkeypatch) -> list:
    calls = []
    original = SparseGenerationStep._generation_step
    monkeypatch.setattr(
        SparseGenerationStep, "_generation_step", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    return calls


def sparse_attention_classes(model) -> set:
    return {type(layer.encoder_attn) for layer in model.decoder.layers}


def incremental_logits(model, sample, steps: int, beam: int):
    """``steps`` incremental decoder calls over the beam-expanded rows (each
    source's rows back to back, as the static generator lays them out), the
    best token of each row fed back; the sparse cross-attentions (only
    they) follow a static beam search of these rows."""
    net_input = net_input_for(model, sample["net_input"])
    sparse_attentions = nn.ModuleList(layer.encoder_attn for layer in model.decoder.layers)
    rows = torch.arange(net_input["src_tokens"].size(0)).repeat_interleave(beam)
    search = StaticBeamSearch(rows.numel(), beam)
    with torch.no_grad(), following_static_beam_search([sparse_attentions], [search]):
        encoder_out = model.encoder.forward_torchscript(net_input)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, rows)
        tokens = torch.full((rows.numel(), 1), model.decoder.dictionary.eos())
        incremental_state, logits = {}, []
        for _ in range(steps):
            out, _ = model.decoder(tokens, encoder_out=encoder_out, incremental_state=incremental_state)
            logits.append(out[:, -1])
            tokens = torch.cat([tokens, out[:, -1].argmax(-1, keepdim=True)], dim=1)
    return logits


def assert_fast_incremental_logits(reference, fast, sample, monkeypatch) -> list:
    """Five incremental steps over three beam-expanded rows per source: the
    fast model gives the reference's float64 logits to round-off (the
    reference runs no fast step). Returns the fast steps taken."""
    calls = counting_fast_steps(monkeypatch)
    expected = incremental_logits(reference, sample, steps=5, beam=3)
    assert not calls
    for mine, theirs in zip(incremental_logits(fast, sample, steps=5, beam=3), expected):
        assert mine.dtype == torch.float64
        torch.testing.assert_close(mine, theirs, atol=1e-10 * max(1.0, theirs.abs().max().item()), rtol=0)
    return calls
