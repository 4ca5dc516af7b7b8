"""``--static-decoding``: beam search with a fixed batch x beam shape gives
the beams of fairseq's generator (issue 35.3), for every generating
architecture, in float64 (so that the comparison does not depend on the
CPU's vector units), on the golden checkpoints of ``tests/golden_outputs.py``
whose three clusters finish at different steps (fairseq's generator
compacts its batch; the static one keeps the finished rows as padding)."""

import copy
import os

import pytest
import torch

from mdsfair.generation.fast import fast_variants, make_generation_fast_
from mdsfair.generation.fast.beam_cached_self_attention import BeamCachedSelfAttention
from mdsfair.generation.fast.static_beam_search import (
    FollowsStaticBeamSearch,
    StaticBeamSearch,
    following_static_beam_search,
)
from mdsfair.generation.sequence_generator import GenerationSettingsError
from mdsfair.generation.static_decoding import (
    StaticShapeSequenceGenerator,
    beam_candidates,
    bucket_size,
    decoder_state_reorders,
    parse_bucket_sizes,
    row_top_k,
)
from mdsfair.tasks.model_inputs import net_input_for
from tests import golden_outputs as golden
from tests.generation_checks import SCORE_TOLERANCE, assert_same_beams
from tests.golden_outputs import ARCHITECTURES, load


def generate(
    task, model, cfg, sample, static: bool, buckets: str = "", prefix_tokens=None, keep_attention=False, **settings
):
    generation = golden.generation_config(cfg)
    for name, value in settings.items():
        setattr(generation, name, value)
    task.cfg.static_decoding, task.cfg.static_decoding_buckets = static, buckets
    task.cfg.fairseq_generator = not static
    try:
        generator = task.build_generator([model], generation)
    finally:
        task.cfg.static_decoding, task.cfg.static_decoding_buckets, task.cfg.fairseq_generator = False, "", False
    assert isinstance(generator, StaticShapeSequenceGenerator) == static
    if static:
        assert generator.keep_attention is False  # the default: nothing asks for it (no --print-alignment)
        generator.keep_attention = keep_attention
    with torch.no_grad():
        return task.inference_step(generator, [model], sample, prefix_tokens=prefix_tokens)


@pytest.fixture(scope="module")
def golden_models():
    return {arch: load(arch) for arch in ARCHITECTURES}


def golden_sample(arch):
    return torch.load(os.path.join(golden.GOLDEN_DIR, arch, "batch.pt"), weights_only=True)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_static_decoding_gives_the_beams_of_fairseqs_generator(golden_models, arch, monkeypatch):
    """The speed-ups in place (mdsfair's decoders: the in-place
    self-attention cache ran at every step), the same beams as fairseq's
    generator on the reference model."""
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    dynamic = generate(task, model, cfg, sample, static=False)
    lengths = {len(hypotheses[0]["tokens"]) for hypotheses in dynamic}
    in_place_steps = []
    beam_step = BeamCachedSelfAttention._beam_step
    monkeypatch.setattr(
        BeamCachedSelfAttention, "_beam_step", lambda self, *args: in_place_steps.append(1) or beam_step(self, *args)
    )
    static = generate(task, model, cfg, sample, static=True)
    assert bool(in_place_steps) == any(isinstance(module, BeamCachedSelfAttention) for module in model.modules())
    assert_same_beams(static, dynamic)
    # every hypothesis of the n-best list, not only the best
    assert all(len(hypotheses) == golden.GENERATION["beam"] for hypotheses in static)
    assert lengths  # decoded something


#: search settings the static generator covers (it is then the default): fairseq's beams for each
COVERED_SETTINGS = {
    "n-gram blocking": {"no_repeat_ngram_size": 2},
    "diverse siblings": {"diversity_rate": 0.5},
    "length and unknown-word penalties": {"lenpen": 2.0, "unkpen": 0.5},
    "a longer minimum length": {"min_len": 6, "max_len_b": 10},
}


@pytest.mark.parametrize("setting", sorted(COVERED_SETTINGS))
@pytest.mark.parametrize("arch", ["sparse_bart_tiny", "led_tiny"])
def test_the_settings_the_static_generator_covers_give_fairseqs_beams(golden_models, arch, setting):
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    settings = COVERED_SETTINGS[setting]
    assert_same_beams(
        generate(task, model, cfg, sample, static=True, **settings),
        generate(task, model, cfg, sample, static=False, **settings),
    )


@pytest.mark.parametrize("arch", ["sparse_bart_tiny", "hierencdec_bart_tiny", "led_tiny"])
def test_buckets_pad_the_batch_and_drop_the_copies(golden_models, arch):
    """A batch of 3 in a bucket of 4 (the last source repeated, finished
    from the start) and a batch of 2 in a bucket of 4 give the beams of the
    batch on its own."""
    model, cfg, task = golden_models[arch]
    sample = golden_sample(arch)
    dynamic = generate(task, model, cfg, sample, static=False)
    assert_same_beams(generate(task, model, cfg, sample, static=True, buckets="1,4,8"), dynamic)
    two = {
        **sample,
        "id": sample["id"][:2],
        "net_input": {k: v[:2] if torch.is_tensor(v) and v.dim() > 0 else v for k, v in sample["net_input"].items()},
    }
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


#: settings handed over to fairseq's generator by default, each with the flag its log line names
HANDED_OVER = {
    "--print-alignment": ({"print_alignment": "hard"}, "SequenceGeneratorWithAlignment"),
    "--constraints": ({"constraints": "ordered"}, "SequenceGenerator"),
    "--sampling": ({"sampling": True}, "SequenceGenerator"),
    "--diverse-beam-groups": ({"diverse_beam_groups": 3}, "SequenceGenerator"),
    "--score-reference": ({"score_reference": True}, "SequenceScorer"),
}


def build(task, model, cfg, seq_gen_cls=None, prefix_allowed_tokens_fn=None, **settings):
    generation = golden.generation_config(cfg)
    for name, value in settings.items():
        setattr(generation, name, value)
    return task.build_generator(
        [model], generation, seq_gen_cls=seq_gen_cls, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn
    )


def test_the_static_generator_is_the_default_and_gives_fairseqs_beams(golden_models, caplog):
    model, cfg, task = golden_models["sparse_bart_tiny"]
    assert not task.cfg.static_decoding and not task.cfg.fairseq_generator
    with caplog.at_level("INFO", logger="mdsfair.generation.sequence_generator"):
        generator = build(task, model, cfg)
    assert type(generator) is StaticShapeSequenceGenerator
    assert "fairseq's generator" not in caplog.text
    sample = golden_sample("sparse_bart_tiny")
    with torch.no_grad():
        default = task.inference_step(generator, [model], sample)
    assert_same_beams(default, generate(task, model, cfg, sample, static=False))


@pytest.mark.parametrize("flag", sorted(HANDED_OVER))
def test_what_the_static_generator_does_not_cover_goes_to_fairseqs_with_the_reason(golden_models, caplog, flag):
    settings, expected = HANDED_OVER[flag]
    model, cfg, task = golden_models["sparse_bart_tiny"]
    with caplog.at_level("INFO", logger="mdsfair.generation.sequence_generator"):
        generator = build(task, model, cfg, **settings)
    assert type(generator).__name__ == expected
    handed_over = [record.getMessage() for record in caplog.records if "fairseq's generator" in record.getMessage()]
    assert len(handed_over) == 1 and flag in handed_over[0]


def test_an_asked_for_generator_class_or_constrained_prefixes_go_to_fairseqs(golden_models, caplog):
    from fairseq.sequence_generator import SequenceGenerator

    model, cfg, task = golden_models["sparse_bart_tiny"]
    with caplog.at_level("INFO", logger="mdsfair.generation.sequence_generator"):
        assert type(build(task, model, cfg, seq_gen_cls=SequenceGenerator)) is SequenceGenerator
        assert type(build(task, model, cfg, prefix_allowed_tokens_fn=lambda batch, tokens: [4])) is SequenceGenerator
    messages = [record.getMessage() for record in caplog.records if "fairseq's generator" in record.getMessage()]
    assert len(messages) == 2
    assert "SequenceGenerator was asked for" in messages[0] and "prefix_allowed_tokens_fn" in messages[1]


def test_fairseqs_generator_is_one_flag_away(golden_models, caplog):
    from fairseq.sequence_generator import SequenceGenerator

    model, cfg, task = golden_models["sparse_bart_tiny"]
    task.cfg.fairseq_generator = True
    try:
        with caplog.at_level("INFO", logger="mdsfair.generation.sequence_generator"):
            assert type(build(task, model, cfg)) is SequenceGenerator
        assert "fairseq's generator" not in caplog.text  # asked for: nothing to explain
        task.cfg.static_decoding = True
        with pytest.raises(GenerationSettingsError, match="--static-decoding and --fairseq-generator"):
            build(task, model, cfg)
    finally:
        task.cfg.fairseq_generator, task.cfg.static_decoding = False, False


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
            torch.testing.assert_close(
                mine["attention"],
                reference["attention"],
                atol=SCORE_TOLERANCE * max(1.0, reference["attention"].abs().max().item()),
                rtol=0,
            )


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


def fairseqs_beam_step(step, lprobs, scores):
    from fairseq.data import Dictionary
    from fairseq.search import BeamSearch

    return BeamSearch(Dictionary()).step(step, lprobs, scores[:, :, :step])


@pytest.mark.parametrize("vocab", [3, 7, 500, 4099])
@pytest.mark.parametrize("step", [0, 1, 5])
def test_beam_candidates_are_fairseqs_beam_search(vocab, step):
    """The two-stage ranking (each row's best, then the best of those)
    gives fairseq's BeamSearch.step: the same candidates in the same order
    with the same sums (float64, no equal sums), also where a row has fewer
    words than the candidates (vocab 3 < 2 * beam) and where the rows are
    ranked through their blocks' maxima (vocab 4,099: row_top_k's two
    passes, with a partial last block)."""
    generator = torch.Generator().manual_seed(vocab * 10 + step)
    bsz, beam = 3, 4
    lprobs = torch.randn(bsz, beam, vocab, generator=generator, dtype=torch.float64).log_softmax(-1)
    scores = torch.randn(bsz, beam, step + 1, generator=generator, dtype=torch.float64) * 3
    ours = beam_candidates(step, lprobs, scores)
    theirs = fairseqs_beam_step(step, lprobs, scores)
    for mine, reference in zip(ours, theirs):
        assert torch.equal(mine, reference)


@pytest.mark.parametrize("shape", [(3, 4, 50265), (2, 5000 + 37), (1, 2, 64 * 32), (2, 64 * 32 - 1)])
@pytest.mark.parametrize("k", [1, 8])
def test_row_top_k_is_torch_topk(shape, k):
    """row_top_k gives torch.topk's values and indices (float64, distinct
    values), on rows ranked in two passes (with and without a partial last
    block) and on rows too short for them (64 * 32 - 1 < 4 * k blocks for
    k = 8), and for a strided view of the rows (the first step's
    lprobs[:, 0, :])."""
    generator = torch.Generator().manual_seed(sum(shape) + k)
    values = torch.randn(*shape, generator=generator, dtype=torch.float64)
    for rows in (values, values[:, 0, :] if values.dim() == 3 else values[:, 1:]):
        ours, theirs = row_top_k(rows, k), torch.topk(rows, k, dim=-1)
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_row_top_k_finds_the_best_values_wherever_they_cluster():
    """The k best values all in one block, spread one per block, or among
    few finite values (the rest -inf, as masked words): the values are
    torch.topk's, the finite ones at torch.topk's indices."""
    generator = torch.Generator().manual_seed(5)
    rows = torch.randn(3, 3000, generator=generator, dtype=torch.float64)
    rows[0, 640:648] = 10 + torch.arange(8, dtype=torch.float64)  # one block holds all eight
    rows[1, torch.arange(8) * 64 + 3] = 10 + torch.arange(8, dtype=torch.float64)  # one per block
    rows[2] = float("-inf")
    rows[2, [5, 2999, 1500]] = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64)  # the last in the partial block
    ours, theirs = row_top_k(rows, 8), torch.topk(rows, 8, dim=-1)
    assert torch.equal(ours[0], theirs[0])
    finite = theirs[0].isfinite()
    assert torch.equal(ours[1][finite], theirs[1][finite])
    assert ours[1][2, :3].tolist() == [2999, 1500, 5]


def test_beam_candidates_with_masked_words_are_fairseqs_finite_candidates():
    """With words masked (-inf: padding, a minimum length, n-gram blocking),
    the finite candidates are fairseq's, in order; -inf fills the rest as
    in fairseq's (which of the -inf words fill it neither specifies)."""
    generator = torch.Generator().manual_seed(3)
    lprobs = torch.randn(2, 4, 50, generator=generator, dtype=torch.float64).log_softmax(-1)
    lprobs[:, :, 1] = float("-inf")
    lprobs[0, :, 3:] = float("-inf")  # the first source: 2 words per row, 8 candidates in all
    lprobs[0, 1, 0] = float("-inf")  # ... but for one: 7 finite candidates
    lprobs[1, 1:] = float("-inf")  # the second: one row with 3 words left
    lprobs[1, 0, 4:] = float("-inf")
    scores = torch.randn(2, 4, 3, generator=generator, dtype=torch.float64)
    (our_scores, our_tokens, our_beams), (their_scores, their_tokens, their_beams) = (
        beam_candidates(2, lprobs, scores),
        fairseqs_beam_step(2, lprobs, scores),
    )
    assert torch.equal(our_scores, their_scores)
    finite = their_scores.isfinite()
    assert not finite.all()
    assert torch.equal(our_tokens[finite], their_tokens[finite]) and torch.equal(our_beams[finite], their_beams[finite])


def decoder_steps(model, sample, steps, keep_attention):
    """``steps`` incremental decoder calls of the fast ``model`` on the
    golden batch (two rows per source, the best token fed back), as the
    static generator drives them; returns the logits and the ``attn`` of
    every step."""
    net_input = net_input_for(model, sample["net_input"])  # the side inputs the model reads, as the task gives them
    with torch.no_grad():
        encoder_out = model.encoder.forward_torchscript(net_input)  # as the generators call it
        rows = torch.arange(net_input["src_tokens"].size(0)).repeat_interleave(2)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, rows)
    incremental_state = {}
    search = StaticBeamSearch(rows.numel(), 2, steps, keep_attention=keep_attention)
    tokens = torch.full((rows.numel(), 1), model.decoder.dictionary.eos())
    logits, attentions = [], []
    with torch.no_grad(), following_static_beam_search([model], [search]):
        for _ in range(steps):
            out, extra = model.decoder(tokens, encoder_out=encoder_out, incremental_state=incremental_state)
            search.advance()
            logits.append(out[:, -1])
            attentions.append(extra["attn"][0])
            tokens = torch.cat([tokens, out[:, -1].argmax(-1, keepdim=True)], dim=1)
    return logits, attentions


@pytest.mark.parametrize("arch", ["sparse_bart_tiny", "led_tiny"])
def test_an_unkept_attention_is_not_computed_and_changes_nothing_else(golden_models, arch):
    """A static beam search that does not keep the attention over the source
    (the default: no --print-alignment): mdsfair's fast decoder layers then
    compute none, and every step's logits are exactly those computed with
    it."""
    model = make_generation_fast_(copy.deepcopy(golden_models[arch][0]))
    sample = golden_sample(arch)
    with_alignment, attentions = decoder_steps(model, sample, 4, keep_attention=True)
    without_alignment, none = decoder_steps(model, sample, 4, keep_attention=False)
    assert all(attention is not None for attention in attentions) and all(attention is None for attention in none)
    for mine, reference in zip(without_alignment, with_alignment):
        assert torch.equal(mine, reference)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_speed_ups_change_nothing_outside_a_static_beam_search(arch):
    """``make_generation_fast_`` on every architecture: the teacher-forced
    log-probabilities (float64) and the beams of fairseq's generator are
    those of the reference model, bit for bit (outside a static beam search
    every fast module runs its reference ``forward``); the model's own
    decoder modules were replaced (for mdsfair's decoders), and a stock
    fairseq attention was not."""
    reference, cfg, task = golden.load(arch)
    fast = make_generation_fast_(copy.deepcopy(reference))
    sample = golden_sample(arch)
    assert torch.equal(
        golden.teacher_forced_lprobs(task, fast, sample), golden.teacher_forced_lprobs(task, reference, sample)
    )
    dynamic = generate(task, reference, cfg, sample, static=False)
    for ours, theirs in zip(generate(task, fast, cfg, sample, static=False), dynamic):
        for mine, expected in zip(ours, theirs):
            assert mine["tokens"].tolist() == expected["tokens"].tolist()
            assert torch.equal(mine["positional_scores"], expected["positional_scores"])
    references = set(fast_variants())
    for module, original in zip(fast.modules(), reference.modules()):
        if type(original) in references:
            assert type(module) is fast_variants()[type(original)]
        elif not isinstance(module, FollowsStaticBeamSearch):  # fc1/fc2 become step-product linears
            assert type(module) is type(original)


def test_no_stale_beam_search_reaches_fairseqs_generator(golden_models, monkeypatch):
    """After a static generation (also one that fails midway) no fast module
    follows a search any more: fairseq's generator on the same model then
    gives the reference beams exactly."""
    from fairseq.sequence_generator import EnsembleModel

    arch = "sparse_bart_tiny"
    reference, cfg, task = golden.load(arch)
    model = copy.deepcopy(reference)
    sample = golden_sample(arch)
    expected = generate(task, reference, cfg, sample, static=False)
    generate(task, model, cfg, sample, static=True)
    followers = [module for module in model.modules() if isinstance(module, FollowsStaticBeamSearch)]
    assert followers and all(module.static_beam_search is None for module in followers)
    forward_decoder = EnsembleModel.forward_decoder
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            assert all(module.static_beam_search is not None for module in followers)
            raise RuntimeError("a failure midway")
        return forward_decoder(self, *args, **kwargs)

    monkeypatch.setattr(EnsembleModel, "forward_decoder", failing)
    with pytest.raises(RuntimeError, match="a failure midway"):
        generate(task, model, cfg, sample, static=True)
    monkeypatch.undo()
    assert all(module.static_beam_search is None for module in followers)
    for ours, theirs in zip(generate(task, model, cfg, sample, static=False), expected):
        for mine, reference_hypothesis in zip(ours, theirs):
            assert mine["tokens"].tolist() == reference_hypothesis["tokens"].tolist()
            assert torch.equal(mine["positional_scores"], reference_hypothesis["positional_scores"])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_state_reorders_found_once_are_fairseqs_walk(golden_models, arch):
    """The reorders the static generator finds once per generation call the
    modules fairseq's ``reorder_incremental_state_scripting`` finds at every
    step, in its order, each given the state the one before returned; a
    decoder with its own walk (PageSum's) keeps it."""
    from fairseq.models import FairseqIncrementalDecoder
    from fairseq.sequence_generator import EnsembleModel

    model = golden_models[arch][0]
    (reorder,) = decoder_state_reorders(EnsembleModel([model]))
    walk = FairseqIncrementalDecoder.reorder_incremental_state_scripting
    if type(model.decoder).reorder_incremental_state_scripting is not walk:
        assert reorder == model.decoder.reorder_incremental_state_scripting
        return
    calls = []
    for name, module in model.decoder.named_modules():
        if hasattr(module, "reorder_incremental_state"):

            def record(state, new_order, name=name):
                calls.append((name, state["step"]))
                return {"step": state["step"] + 1}

            module.reorder_incremental_state = record
    try:
        model.decoder.reorder_incremental_state_scripting({"step": 0}, torch.arange(2))
        walked, calls[:] = list(calls), []
        reorder({"step": 0}, torch.arange(2))
    finally:
        for _, module in model.decoder.named_modules():
            module.__dict__.pop("reorder_incremental_state", None)
    assert len(walked) > 1 and calls == walked
