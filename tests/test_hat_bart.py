"""HAT-BART (Rohde et al. 2021): the hierarchical layers read the
sentence-start states only, the decoder's second cross-attention, restoring
from BART with only the new layers new, and the model contract."""

import dataclasses
import os

import pytest
import torch

from mdsfair.modules.hat_components import is_hierarchical_parameter
from tests import contract_checks as checks
from tests.utils import (
    USER_DIR,
    fairseq_cli,
    generation_command,
    hypothesis_lines,
    model_on_dictionary,
    short_training,
    toy_dictionary,
)

#: two sources of different lengths (the second padded) and their sentences
SOURCE_SENTENCES = ([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3], [0, 1, 1, 1, 2, 2])


def toy_batch(dictionary, seed=1):
    generator = torch.Generator().manual_seed(seed)
    length = max(len(ids) for ids in SOURCE_SENTENCES)
    tokens = torch.full((len(SOURCE_SENTENCES), length), dictionary.pad())
    sentences = torch.full((len(SOURCE_SENTENCES), length), -1)
    for row, ids in enumerate(SOURCE_SENTENCES):
        n = len(ids)
        tokens[row, :n] = torch.randint(dictionary.nspecial, len(dictionary), (n,), generator=generator)
        tokens[row, 0], tokens[row, n - 1] = dictionary.bos(), dictionary.eos()
        sentences[row, :n] = torch.tensor(ids)
    lengths = tokens.ne(dictionary.pad()).sum(1)
    return tokens, lengths, sentences


def build(**flags):
    """hat_bart_tiny on the toy dictionary, float64, perturbed."""
    model = model_on_dictionary("hat_bart_tiny", toy_dictionary(), **flags)
    checks.perturb_parameters(model, seed=0)
    return model


def test_the_hierarchical_layers_see_only_the_sentence_start_states():
    """Oracle: each example alone, its sentence-start states picked by a
    loop over the tokens, through the hierarchical layers unpadded."""
    dictionary = toy_dictionary()
    model = build()
    tokens, lengths, sentences = toy_batch(dictionary)
    with torch.no_grad():
        out = model.encoder(tokens, lengths, src_sent_ids=sentences)
        token_states = out["encoder_out"][0]  # T x B x C
        for row, ids in enumerate(SOURCE_SENTENCES):
            starts = [t for t in range(len(ids)) if t == 0 or ids[t] != ids[t - 1]]
            x = torch.stack([token_states[t, row] for t in starts]).unsqueeze(1)  # S x 1 x C
            for layer in model.encoder.hierarchical_encoder.layers:
                x = layer(x, encoder_padding_mask=torch.zeros(1, len(starts), dtype=torch.bool))
            got = out["source_context"][0].sentence_states[row, : len(starts)]
            assert torch.allclose(got, x[:, 0], atol=1e-12), row
            padding = out["source_context"][0].sentence_padding_mask[row]
            assert padding.tolist() == [False] * len(starts) + [True] * (padding.numel() - len(starts))


def test_the_sentence_states_ignore_every_token_state_but_the_starts():
    """Gradient of the sentence states w.r.t. the token encoder's output is
    zero everywhere but at the sentence-start tokens."""
    dictionary = toy_dictionary()
    model = build()
    tokens, _, sentences = toy_batch(dictionary)
    token_states = torch.randn(tokens.size(1), tokens.size(0), model.encoder.embed_tokens.embedding_dim).double()
    token_states.requires_grad_(True)
    memory = model.encoder.hierarchical_encoder(token_states, sentences, 4)
    memory.states.masked_fill(memory.padding_mask.t().unsqueeze(-1), 0).sum().backward()
    touched = token_states.grad.abs().sum(-1).t().ne(0)  # B x T
    for row, ids in enumerate(SOURCE_SENTENCES):
        starts = [t for t in range(len(ids)) if t == 0 or ids[t] != ids[t - 1]]
        assert touched[row].nonzero().flatten().tolist() == starts


def test_every_decoder_layer_attends_to_the_sentence_states():
    """Changing the sentence states changes the logits; the token memory
    alone (BART's path) gives other logits."""
    dictionary = toy_dictionary()
    model = build()
    tokens, lengths, sentences = toy_batch(dictionary)
    prev = torch.tensor([[dictionary.eos(), 7, 8, 9], [dictionary.eos(), 10, 11, 12]])
    with torch.no_grad():
        out = model.encoder(tokens, lengths, src_sent_ids=sentences)
        logits = model.decoder(prev, encoder_out=out)[0]
        (source,) = out["source_context"]
        out["source_context"] = [dataclasses.replace(source, sentence_states=source.sentence_states + 0.5)]
        moved = model.decoder(prev, encoder_out=out)[0]
    assert not torch.allclose(logits, moved)
    assert all(hasattr(layer, "sentence_attn") for layer in model.decoder.layers)


def test_restoring_bart_creates_exactly_the_hierarchical_layers():
    """A BART state dict loads strictly into hat_bart: the tensors created
    are exactly the new layers', every other one is BART's."""
    dictionary = toy_dictionary()
    from tests.utils import TINY_BART_ARGS

    dims = {TINY_BART_ARGS[i][2:].replace("-", "_"): int(TINY_BART_ARGS[i + 1]) for i in range(2, 18, 2)}
    bart = model_on_dictionary("bart_base", dictionary, **dims)
    hat = build(task="multidoc_summarization")  # (BART's upgrade reads the task)
    bart_state = bart.state_dict()
    hat_keys = set(hat.state_dict())
    new_keys = hat_keys - set(bart_state)
    assert new_keys == {key for key in hat_keys if is_hierarchical_parameter(key)}
    assert any(key.startswith("encoder.hierarchical_encoder.layers.1.") for key in new_keys)
    assert any(key.startswith("decoder.layers.1.sentence_attn_layer_norm.") for key in new_keys)
    hat.load_state_dict(dict(bart_state), strict=True)
    restored = hat.state_dict()
    assert all(torch.equal(restored[key], value) for key, value in bart_state.items() if key in restored)


def test_the_large_preset_is_bart_large_with_two_hierarchical_layers_and_3072_tokens():
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY["hat_bart_large"].add_args(parser)
    args = parser.parse_args([])
    ARCH_CONFIG_REGISTRY["hat_bart_large"](args)
    assert (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim) == (12, 12, 1024)
    assert args.hierarchical_sentence_layers == 2 and args.cross_attention == "hat"
    assert args.max_source_positions == 3072 and args.max_encoder_positions == 3072


#: The placement examples/hat_bart/README.md states (this implementation's reading of Rohde et al.
#: 2021: the paper's Sec. 3 was not readable here, only its abstract; the README says so).
TOKEN_LAYERS, HIERARCHICAL_LAYERS, DECODER_LAYERS = 12, 2, 12  # hat_bart_large: BART-large + 2
DECODER_LAYER_ORDER = ["token cross-attention", "sentence cross-attention", "feed-forward"]


def test_the_built_model_places_the_layers_as_the_recipe_states():
    """On a 12 + 12-layer hat_bart (tiny widths): the 12 token layers all run before the 2
    hierarchical layers, and each of the 12 decoder layers runs its token cross-attention, then
    its sentence cross-attention, then its feed-forward (forward hooks record the order)."""
    dictionary = toy_dictionary()
    model = build(encoder_layers=TOKEN_LAYERS, decoder_layers=DECODER_LAYERS)
    assert len(model.encoder.hierarchical_encoder.layers) == HIERARCHICAL_LAYERS
    calls = []

    def record(name):
        return lambda module, inputs, output: calls.append(name)

    for index, layer in enumerate(model.encoder.layers):
        layer.register_forward_hook(record(("token layer", index)))
    for index, layer in enumerate(model.encoder.hierarchical_encoder.layers):
        layer.register_forward_hook(record(("hierarchical layer", index)))
    for index, layer in enumerate(model.decoder.layers):
        layer.encoder_attn.register_forward_hook(record(("token cross-attention", index)))
        layer.sentence_attn.register_forward_hook(record(("sentence cross-attention", index)))
        layer.fc1.register_forward_hook(record(("feed-forward", index)))
    tokens, lengths, sentences = toy_batch(dictionary)
    prev = torch.tensor([[dictionary.eos(), 7, 8], [dictionary.eos(), 10, 11]])
    with torch.no_grad():
        model.decoder(prev, encoder_out=model.encoder(tokens, lengths, src_sent_ids=sentences))
    encoder_calls = [call for call in calls if call[0] in ("token layer", "hierarchical layer")]
    assert encoder_calls == [("token layer", i) for i in range(TOKEN_LAYERS)] + [
        ("hierarchical layer", i) for i in range(HIERARCHICAL_LAYERS)
    ]
    decoder_calls = [call for call in calls if call not in encoder_calls]
    assert decoder_calls == [(name, i) for i in range(DECODER_LAYERS) for name in DECODER_LAYER_ORDER]
    readme = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "hat_bart", "README.md")).read()
    flat = " ".join(readme.split())
    assert "12 token layers, then `--hierarchical-sentence-layers` 2 layers over the sentence starts" in flat
    assert "in each of the 12 decoder layers the sentence cross-attention after the token cross-attention" in flat


# ------------------------------------------------------------ the contract


def test_the_contract_checks_in_float64(contract_data, tmp_path):
    checks.check_the_contract_in_float64("hat_bart_tiny", contract_data, str(tmp_path / "checkpoint.pt"))


@pytest.mark.slow
def test_trains_and_generates_through_the_task(tmp_path, tiny_data):
    data_bin = tiny_data["data-bin"]
    save_dir = str(tmp_path / "checkpoints")
    log = fairseq_cli(
        "fairseq_cli.train",
        [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization", "--arch", "hat_bart_tiny"]
        + ["--criterion", "label_smoothed_cross_entropy"]
        + short_training(save_dir, updates=2)
        + ["--log-format", "simple"],
    )
    assert "done training" in log
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    output = fairseq_cli(
        "fairseq_cli.generate", generation_command(data_bin, checkpoint, "--user-dir", USER_DIR, beam=2)
    )
    assert len(hypothesis_lines(output)) == 4


# ------------------------------------------------------------ the benchmark


def test_the_benchmark_measures_both_systems_and_records_the_ratios(tmp_path, capsys):
    """benchmarks/hat_bart.py at toy size: a row per system and length and one
    of hat / full ratios, the device named."""
    import json

    from benchmarks import hat_bart, results

    out = tmp_path / "hat_bart.json"
    hat_bart.main(
        ["--size", "tiny", "--lengths", "64", "--target-tokens", "8", "--sentence-tokens", "8"]
        + ["--steps", "1", "--vocab-size", "100", "--json", str(out)]
    )
    record = json.loads(out.read_text())
    assert results.problems(record) == [] and record["device"]
    assert [row["system"] for row in record["rows"]] == ["hat", "full", "hat / full"]
    ratios = record["rows"][2]
    assert ratios["memory_ratio"] == pytest.approx(record["rows"][0]["peak_mib"] / record["rows"][1]["peak_mib"])
    printed = capsys.readouterr().out
    assert printed.startswith("device: ") and "hat" in printed


# ------------------------------------------------------------ the papers


def test_the_recipe_states_pagesums_table_2_row_for_hat_bart():
    """The input length and scores the recipe quotes are PageSum's Table 2 HAT-BART row."""
    from tests.utils import paper_text

    text = paper_text("pagesum-liu2022.txt")
    assert "HAT-BART* (3072) 46.68 19.07 42.17 48.36 21.43 37.00" in text
    readme = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "hat_bart", "README.md")).read()
    assert "46.68 / 19.07 / 42.17" in readme and "48.36 / 21.43 / 37.00" in readme
    assert "--max-source-positions 3072" in readme
