"""The pointer-generator with coverage (See et al. 2017) and the
CopyTransformer (Gehrmann et al. 2018): the final distribution (Eq. 9), the
coverage loss (Eq. 12-13), incremental decoding, training, and fairseq-generate
through the ``multidoc_summarization`` task. The model contract
(``tests/test_model_contract.py``) runs both models' architectures too."""

import argparse
import os
from types import SimpleNamespace

import pytest
import torch

from tests.tolerances import assert_close_in_dtype
from tests.utils import (
    USER_DIR,
    fairseq_cli,
    generation_command,
    hypothesis_lines,
    model_on_dictionary,
    short_training,
    toy_dictionary,
)


def toy_batch(dictionary, lengths=(7, 4), target_length=5, seed=1):
    """Right-padded sources of ``lengths`` (a repeated token in the first, so
    copying adds two attentions onto one id) and teacher-forced targets."""
    generator = torch.Generator().manual_seed(seed)
    first_word, vocabulary = dictionary.nspecial, len(dictionary)
    src_tokens = torch.full((len(lengths), max(lengths)), dictionary.pad())
    for row, length in enumerate(lengths):
        src_tokens[row, : length - 1] = torch.randint(first_word, vocabulary, (length - 1,), generator=generator)
        src_tokens[row, length - 1] = dictionary.eos()
    src_tokens[0, 1] = src_tokens[0, 0]
    target = torch.randint(first_word, vocabulary, (len(lengths), target_length), generator=generator)
    target[:, -1] = dictionary.eos()
    prev_output_tokens = torch.cat([target.new_full((len(lengths), 1), dictionary.eos()), target[:, :-1]], dim=1)
    return src_tokens, torch.tensor(lengths), prev_output_tokens, target


def scattered_by_hand(attention, src_tokens, vocabulary: int):
    """``sum_{i: w_i = w} a_i`` for every step, one source position at a time."""
    batch, steps, source = attention.shape
    table = torch.zeros(batch, steps, vocabulary, dtype=attention.dtype)
    for row in range(batch):
        for position in range(source):
            table[row, :, src_tokens[row, position]] += attention[row, :, position]
    return table


# ------------------------------------------------------------ Eq. 9, Eq. 12


def test_pointer_generator_distribution_is_eq_9_and_sums_to_one():
    dictionary = toy_dictionary()
    model = model_on_dictionary("pointer_generator_tiny", dictionary)
    src_tokens, src_lengths, prev_output_tokens, _ = toy_batch(dictionary)
    with torch.no_grad():
        encoder_out = model.encoder(src_tokens, src_lengths)
        probabilities, extra = model.decoder(prev_output_tokens, encoder_out)
        features, _ = model.decoder(prev_output_tokens, encoder_out, features_only=True)
        decoder = model.decoder
        hidden = decoder.output_hidden.out_features
        states, context = features[..., :hidden], features[..., hidden:]  # [s_t ; h*_t]
        inputs = decoder.embed_tokens(prev_output_tokens)
        vocabulary = torch.softmax(decoder.output_projection(decoder.output_hidden(features)), dim=-1)  # Eq. 4
        p_gen = torch.sigmoid(decoder.generation_switch(torch.cat([context, states, inputs], dim=-1)))  # Eq. 8
    attention = extra["attn"][0]
    assert probabilities.dtype == torch.float64
    assert torch.allclose(attention.sum(-1), torch.ones_like(attention[..., 0]), atol=1e-12)
    assert (attention[1, :, 4:] == 0).all()  # padding of the second source
    expected = p_gen * vocabulary + (1 - p_gen) * scattered_by_hand(attention, src_tokens, len(dictionary))
    assert torch.allclose(probabilities, expected, atol=1e-12)
    assert torch.allclose(probabilities.sum(-1), torch.ones_like(probabilities[..., 0]), atol=1e-12)
    assert 0 < p_gen.min() and p_gen.max() < 1


def test_copy_mixture_adds_the_attention_of_every_occurrence():
    from mdsfair.modules.pointer_attention import copy_mixture

    vocabulary = torch.tensor([[[0.1, 0.2, 0.3, 0.4]]], dtype=torch.float64)
    attention = torch.tensor([[[0.5, 0.25, 0.25]]], dtype=torch.float64)
    src_tokens = torch.tensor([[2, 0, 2]])
    p_gen = torch.tensor([[[0.6]]], dtype=torch.float64)
    mixed = copy_mixture(vocabulary, attention, src_tokens, p_gen)
    # 0.6 * P_vocab + 0.4 * (a on id 0: 0.25, on id 2: 0.5 + 0.25)
    expected = torch.tensor([[[0.06 + 0.1, 0.12, 0.18 + 0.3, 0.24]]], dtype=torch.float64)
    assert torch.allclose(mixed, expected, atol=1e-15)


def test_coverage_loss_terms_on_a_hand_example():
    from mdsfair.modules.pointer_attention import coverage_loss_terms

    attention = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]], dtype=torch.float64)
    coverage = torch.tensor([[[0.0, 0.0, 0.0], [0.5, 0.3, 0.2], [0.6, 0.9, 0.5]]], dtype=torch.float64)
    # t=2: min(.1,.5) + min(.6,.3) + min(.3,.2) = .6; t=3: min(.2,.6) + min(.2,.9) + min(.6,.5) = .9
    assert torch.allclose(coverage_loss_terms(attention, coverage), torch.tensor([[0.0, 0.6, 0.9]]).double())


def test_the_model_reports_eq_12_over_its_own_attention_and_the_criterion_adds_eq_13():
    from mdsfair.criterions.pointer_generator_coverage import PointerGeneratorCoverageCriterion

    dictionary = toy_dictionary()
    model = model_on_dictionary("pointer_generator_tiny", dictionary)
    src_tokens, src_lengths, prev_output_tokens, target = toy_batch(dictionary)
    target[1, -2:] = dictionary.pad()
    net_input = {"src_tokens": src_tokens, "src_lengths": src_lengths, "prev_output_tokens": prev_output_tokens}
    with torch.no_grad():
        probabilities, extra = model(**net_input)
    attention = extra["attn"][0]
    coverage = torch.cumsum(attention, dim=1) - attention  # c^t = sum_{t' < t} a^{t'} (Eq. 10)
    by_hand = torch.minimum(attention, coverage).sum(-1)
    assert torch.allclose(extra["coverage_loss"][0], by_hand, atol=1e-12)
    assert by_hand[:, 1:].gt(0).all()

    task = SimpleNamespace(target_dictionary=dictionary)
    criterion = PointerGeneratorCoverageCriterion(task, False, 0.0, coverage_weight=0.5)
    sample = {"net_input": net_input, "target": target, "ntokens": int(target.ne(dictionary.pad()).sum())}
    with torch.no_grad():
        loss, sample_size, logging_output = criterion(model, sample)
    real = target.ne(dictionary.pad())
    nll = -probabilities.gather(2, target[..., None]).squeeze(-1).log()[real].sum()
    assert torch.allclose(loss, nll + 0.5 * by_hand[real].sum(), atol=1e-10)
    assert torch.allclose(logging_output["coverage_loss"], by_hand[real].sum(), atol=1e-10)
    assert sample_size == real.sum()


def test_coverage_enters_the_attention_scores_and_no_coverage_removes_it():
    dictionary = toy_dictionary()
    with_coverage = model_on_dictionary("pointer_generator_tiny", dictionary)
    without = model_on_dictionary("pointer_generator_tiny", dictionary, no_coverage=True)
    assert with_coverage.decoder.attention.coverage_projection is not None
    assert without.decoder.attention.coverage_projection is None
    names = set(with_coverage.state_dict()) - set(without.state_dict())
    assert names == {"decoder.attention.coverage_projection.weight"}


# ------------------------------------------------------- incremental decoding


@pytest.mark.parametrize("arch", ["pointer_generator_tiny", "copy_transformer_tiny"])
def test_incremental_decoding_with_reordering_equals_full_decoding(arch):
    dictionary = toy_dictionary()
    model = model_on_dictionary(arch, dictionary)
    src_tokens, src_lengths, prev_output_tokens, _ = toy_batch(dictionary)
    order = torch.tensor([1, 0, 1])  # a beam reorder: rows swapped and one repeated
    with torch.no_grad():
        encoder_out = model.encoder(src_tokens, src_lengths)
        full, _ = model.decoder(prev_output_tokens, encoder_out)
        reordered_full, _ = model.decoder(
            prev_output_tokens[order], model.encoder.reorder_encoder_out(encoder_out, order)
        )
        incremental_state = {}
        steps = []
        for step in range(prev_output_tokens.size(1)):
            output, _ = model.decoder(prev_output_tokens[:, : step + 1], encoder_out, incremental_state)
            steps.append(output)
        assert_close_in_dtype(torch.cat(steps, dim=1), full)  # float64 (the copy transformer mixes in float32)
        # reorder after two steps, as beam search does, and continue
        incremental_state = {}
        for step in range(2):
            model.decoder(prev_output_tokens[:, : step + 1], encoder_out, incremental_state)
        model.decoder.reorder_incremental_state_scripting(incremental_state, order)
        reordered_out = model.encoder.reorder_encoder_out(encoder_out, order)
        for step in range(2, prev_output_tokens.size(1)):
            output, _ = model.decoder(prev_output_tokens[order, : step + 1], reordered_out, incremental_state)
            assert_close_in_dtype(output[:, 0], reordered_full[:, step])


# ------------------------------------------------------------ CopyTransformer


def test_copy_transformer_copies_with_the_first_head_of_the_last_decoder_layer():
    dictionary = toy_dictionary()
    model = model_on_dictionary("copy_transformer_tiny", dictionary)
    decoder = model.decoder
    assert (decoder.alignment_layer, decoder.alignment_heads) == (len(decoder.layers) - 1, 1)
    captured = {}

    def keep_head_weights(module, inputs, output):
        captured["attention"] = output[1]  # [heads, B, T, S] (need_head_weights at the alignment layer)

    hook = decoder.layers[-1].encoder_attn.register_forward_hook(keep_head_weights)
    src_tokens, src_lengths, prev_output_tokens, _ = toy_batch(dictionary)
    try:
        with torch.no_grad():
            encoder_out = model.encoder(src_tokens, src_lengths)
            probabilities, _ = decoder(prev_output_tokens, encoder_out)
            features, _ = decoder(prev_output_tokens, encoder_out, features_only=True)
    finally:
        hook.remove()
    head = captured["attention"][0]
    assert captured["attention"].shape[0] == 4 and not torch.allclose(head, captured["attention"][1])
    with torch.no_grad():
        vocabulary = torch.softmax(decoder.output_projection(features), dim=-1)
        inputs = decoder.embed_tokens(prev_output_tokens) * decoder.embed_scale
        p_gen = torch.sigmoid(decoder.project_p_gens(torch.cat([inputs, features], dim=-1)))
    expected = p_gen * vocabulary + (1 - p_gen) * scattered_by_hand(head, src_tokens, len(dictionary))
    # fairseq's plugin mixes in float32 whatever the model's dtype: the float32 tolerance
    assert probabilities.dtype == torch.float32
    assert_close_in_dtype(probabilities, expected.float())
    assert_close_in_dtype(probabilities.sum(-1), torch.ones_like(probabilities[..., 0]))


def test_copy_transformer_has_gehrmanns_sizes_and_takes_no_position_markers():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import mdsfair

    mdsfair.register()
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["copy_transformer"](args)
    sizes = (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim)
    assert sizes == (4, 4, 512, 2048) and args.encoder_attention_heads == 8
    assert (args.alignment_layer, args.alignment_heads, args.source_position_markers) == (3, 1, 0)
    assert args.encoder_normalize_before and args.decoder_normalize_before and args.share_all_embeddings
    # a checkpoint's stored (already counted) layer is kept on reload
    ARCH_CONFIG_REGISTRY["copy_transformer"](args)
    assert args.alignment_layer == 3


def test_pointer_generator_has_the_papers_sizes():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import mdsfair

    mdsfair.register()
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["pointer_generator_see2017"](args)
    assert (args.word_embed_dim, args.lstm_hidden_dim, args.no_coverage, args.dropout) == (128, 256, False, 0.0)


# ----------------------------------------------------------------- training


@pytest.mark.parametrize(
    "arch, criterion",
    [("pointer_generator_tiny", "pointer_generator_coverage"), ("copy_transformer_tiny", "cross_entropy")],
)
def test_a_few_training_steps_lower_the_loss(arch, criterion):
    from fairseq.criterions import CRITERION_REGISTRY

    dictionary = toy_dictionary()
    model = model_on_dictionary(arch, dictionary, dropout=0.0).train()
    src_tokens, src_lengths, prev_output_tokens, target = toy_batch(dictionary)
    sample = {
        "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths, "prev_output_tokens": prev_output_tokens},
        "target": target,
        "ntokens": target.numel(),
    }
    task = SimpleNamespace(target_dictionary=dictionary)
    loss_function = (
        CRITERION_REGISTRY[criterion](task, False, 0.0)
        if criterion != "cross_entropy"
        else CRITERION_REGISTRY[criterion](task, False)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss, _, _ = loss_function(model, sample)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# -------------------------------------------------------- fairseq-generate


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch, criterion",
    [
        ("pointer_generator_tiny", "pointer_generator_coverage"),
        ("copy_transformer_tiny", "label_smoothed_cross_entropy"),
    ],
)
def test_trains_and_generates_through_the_task(tmp_path, tiny_data, arch, criterion):
    data_bin = tiny_data["data-bin"]
    save_dir = str(tmp_path / "checkpoints")
    task = [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization"]
    task += ["--max-source-positions", "400", "--max-target-positions", "100"]
    log = fairseq_cli(
        "fairseq_cli.train",
        task
        + ["--arch", arch, "--criterion", criterion]
        + short_training(save_dir, updates=2)
        + ["--log-format", "simple"],
    )
    assert "done training" in log
    output = fairseq_cli(
        "fairseq_cli.generate",
        generation_command(data_bin, os.path.join(save_dir, "checkpoint_last.pt"), "--user-dir", USER_DIR, beam=2)
        + ["--max-len-b", "8"],
    )
    assert len(hypothesis_lines(output)) == 4
