"""``--static-decoding``: beam search with a fixed batch x beam shape gives
the beams of fairseq's generator (issue 35.3), for every generating
architecture, in float64 (so that the comparison does not depend on the
CPU's vector units), on the golden checkpoints of ``tests/golden_outputs.py``
whose three clusters finish at different steps (fairseq's generator
compacts its batch; the static one keeps the finished rows as padding)."""
import os

import pytest
import torch

from mdsfair.generation.sequence_generator import GenerationSettingsError
from mdsfair.generation.static_decoding import (
    StaticShapeSequenceGenerator,
    bucket_size,
    parse_bucket_sizes,
)
from tests import golden_outputs as golden
from tests.test_golden_outputs import ARCHITECTURES, load

#: fairseq's get_normalized_probs casts every step's log-probabilities to float32 whatever the
#: model's dtype: two batch shapes may round a float32 sum differently, a few units of float32
#: round-off at the scale of the scores; anything else would be a different computation.
SCORE_TOLERANCE = 64 * torch.finfo(torch.float32).eps


def generate(task, model, cfg, sample, static: bool, buckets: str = "", prefix_tokens=None, keep_attention=False,
             **settings):
    generation = golden.generation_config(cfg)
    for name, value in settings.items():
        setattr(generation, name, value)
    task.cfg.static_decoding, task.cfg.static_decoding_buckets = static, buckets
    try:
        generator = task.build_generator([model], generation)
    finally:
        task.cfg.static_decoding, task.cfg.static_decoding_buckets = False, ""
    assert isinstance(generator, StaticShapeSequenceGenerator) == static
    if static:
        assert generator.keep_attention is False  # the default: nothing asks for it (no --print-alignment)
        generator.keep_attention = keep_attention
    with torch.no_grad():
        return task.inference_step(generator, [model], sample, prefix_tokens=prefix_tokens)


def assert_same_beams(static, dynamic):
    assert len(static) == len(dynamic)
    for ours, theirs in zip(static, dynamic):
        assert len(ours) == len(theirs)
        for mine, reference in zip(ours, theirs):
            assert mine["tokens"].tolist() == reference["tokens"].tolist()
            scale = max(1.0, reference["positional_scores"].abs().max().item())
            torch.testing.assert_close(mine["positional_scores"], reference["positional_scores"],
                                       atol=SCORE_TOLERANCE * scale, rtol=0)
            torch.testing.assert_close(mine["score"], reference["score"], atol=SCORE_TOLERANCE * scale, rtol=0)


@pytest.fixture(scope="module")
def golden_models():
    return {arch: load(arch) for arch in ARCHITECTURES}


def golden_sample(arch):
    return torch.load(os.path.join(golden.GOLDEN_DIR, arch, "batch.pt"), weights_only=True)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_static_decoding_gives_the_beams_of_fairseqs_generator(golden_models, arch):
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    dynamic = generate(task, model, cfg, sample, static=False)
    lengths = {len(hypotheses[0]["tokens"]) for hypotheses in dynamic}
    static = generate(task, model, cfg, sample, static=True)
    assert_same_beams(static, dynamic)
    # every hypothesis of the n-best list, not only the best
    assert all(len(hypotheses) == golden.GENERATION["beam"] for hypotheses in static)
    assert lengths  # decoded something


@pytest.mark.parametrize("arch", ["sparse_bart_tiny", "hierencdec_bart_tiny", "led_tiny"])
def test_buckets_pad_the_batch_and_drop_the_copies(golden_models, arch):
    """A batch of 3 in a bucket of 4 (the last source repeated, finished
    from the start) and a batch of 2 in a bucket of 4 give the beams of the
    batch on its own."""
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    dynamic = generate(task, model, cfg, sample, static=False)
    assert_same_beams(generate(task, model, cfg, sample, static=True, buckets="1,4,8"), dynamic)
    two = {**sample, "id": sample["id"][:2],
           "net_input": {k: v[:2] if torch.is_tensor(v) and v.dim() > 0 else v
                         for k, v in sample["net_input"].items()}}
    assert_same_beams(generate(task, model, cfg, two, static=True, buckets="4"), dynamic[:2])


def test_sources_finishing_early_keep_their_rows(golden_models):
    """One source forced to end at its third token (prefix tokens with
    </s>) finishes steps before the others: fairseq's generator drops its
    rows, the static one keeps them as padding; same beams, and the static
    generator's rows never change in number."""
    arch = "sparse_bart_tiny"
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    dictionary = task.target_dictionary
    prefix = torch.full((3, 3), dictionary.pad())
    prefix[:, :2] = dictionary.nspecial + 6
    prefix[1, 2] = dictionary.eos()
    rows = []
    forward = model.decoder.forward

    def counting(prev_output_tokens, *args, **kwargs):
        rows.append(prev_output_tokens.size(0))
        return forward(prev_output_tokens, *args, **kwargs)

    model.decoder.forward = counting
    try:
        dynamic = generate(task, model, cfg, sample, static=False, prefix_tokens=prefix, max_len_b=10)
        dynamic_rows, rows[:] = list(rows), []
        static = generate(task, model, cfg, sample, static=True, prefix_tokens=prefix, max_len_b=10)
    finally:
        del model.decoder.forward
    assert len(dynamic[1][0]["tokens"]) == 3 and len(dynamic[0][0]["tokens"]) > 3
    assert min(dynamic_rows) < max(dynamic_rows)  # fairseq's generator compacted its batch
    assert set(rows) == {3 * golden.GENERATION["beam"]}  # the static one never did
    assert_same_beams(static, dynamic)


def test_static_decoding_refuses_what_it_cannot_run(golden_models):
    model, cfg, task = golden_models["sparse_bart_tiny"]
    generation = golden.generation_config(cfg)
    task.cfg.static_decoding = True
    try:
        generation.print_alignment = "hard"
        with pytest.raises(GenerationSettingsError, match="--print-alignment"):
            task.build_generator([model], generation)
        generation.print_alignment = None
        generation.constraints = "ordered"
        with pytest.raises(GenerationSettingsError, match="--constraints"):
            task.build_generator([model], generation)
        generation.constraints = None
        task.cfg.static_decoding_buckets = "4,x"
        with pytest.raises(GenerationSettingsError, match="--static-decoding-buckets"):
            task.build_generator([model], generation)
    finally:
        task.cfg.static_decoding, task.cfg.static_decoding_buckets = False, ""


def test_bucket_sizes():
    assert parse_bucket_sizes("") == [] and parse_bucket_sizes(None) == []
    assert parse_bucket_sizes("8, 2,4,2") == [2, 4, 8]
    with pytest.raises(ValueError):
        parse_bucket_sizes("0,4")
    assert bucket_size(3, [2, 4, 8]) == 4 and bucket_size(4, [2, 4, 8]) == 4
    assert bucket_size(9, [2, 4, 8]) == 9 and bucket_size(5, []) == 5


@pytest.mark.parametrize("arch", ["sparse_bart_tiny", "hierencdec_bart_tiny", "led_tiny", "dape_transformer_tiny"])
def test_attention_is_kept_only_when_asked_and_then_equals_fairseqs(golden_models, arch):
    """By default the hypotheses carry no attention (the alignment it serves
    is refused with --static-decoding, and keeping it copies a [rows, source,
    steps] table at every step); with ``keep_attention`` it is fairseq's."""
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    dynamic = generate(task, model, cfg, sample, static=False)
    without = generate(task, model, cfg, sample, static=True)
    kept = generate(task, model, cfg, sample, static=True, keep_attention=True)
    assert_same_beams(without, dynamic)
    assert_same_beams(kept, dynamic)
    for ours, plain, theirs in zip(kept, without, dynamic):
        for mine, empty, reference in zip(ours, plain, theirs):
            assert empty["attention"].numel() == 0
            assert reference["attention"].numel() > 0
            torch.testing.assert_close(mine["attention"], reference["attention"],
                                       atol=SCORE_TOLERANCE * max(1.0, reference["attention"].abs().max().item()),
                                       rtol=0)


def test_nan_log_probabilities_are_never_chosen_as_in_fairseqs_generator(golden_models, monkeypatch):
    """A NaN log-probability counts as -inf (fairseq's ``lprobs[lprobs !=
    lprobs] = -inf``; the static generator's in one pass without a host
    read): with the first beams' most frequent token made NaN at every step,
    neither generator ever emits it, and their beams are the same."""
    from fairseq.sequence_generator import EnsembleModel

    arch = "sparse_bart_tiny"
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    before = generate(task, model, cfg, sample, static=False)
    emitted = torch.cat([hypotheses[0]["tokens"][:-1] for hypotheses in before])
    poisoned = int(emitted.bincount().argmax())
    forward_decoder = EnsembleModel.forward_decoder

    def with_nan(self, *args, **kwargs):
        lprobs, attention = forward_decoder(self, *args, **kwargs)
        lprobs[:, poisoned] = float("nan")
        return lprobs, attention

    monkeypatch.setattr(EnsembleModel, "forward_decoder", with_nan)
    dynamic = generate(task, model, cfg, sample, static=False)
    static = generate(task, model, cfg, sample, static=True)
    assert_same_beams(static, dynamic)
    for hypotheses in static:
        for hypothesis in hypotheses:
            assert poisoned not in hypothesis["tokens"].tolist()
            assert hypothesis["score"].isfinite()
