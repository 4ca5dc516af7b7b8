"""Issue 47, class 2: imported configurations are checked against the weights.

Every importer that reads a configuration (``mdsfair-import hf-bart``,
``hf-led``, ``pagesum``, ``hiersumm``, ``bart-to-led``) refuses a size that
is not an integer (``"16x"``, ``16.5``, ``1e12``, ``true``), is out of range
(``0``, ``-16``) or disagrees with the tensors it describes (``d_model`` and
the embedding width, ``encoder_ffn_dim`` and ``fc1``, the layer counts and
the layers present, ``vocab_size`` and the embedding rows, the position
tables, heads that do not divide the width), with one line naming the file,
the key, the value and the tensor's shape, through the command's own
``cli_main``, no traceback, and nothing written."""

import argparse
import json
import os
import shutil

import pytest
import torch

from mdsfair.importers.cli import import_main
from tests.import_fixtures import import_transformers, tiny_hf_bart, write_tokenizer

#: (key, bad value, what the one-line error says), for every BART-shaped
#: configuration. TINY_BART: d_model 24, 2 + 2 layers, 4 heads, FFN 40, 96 positions.
BART_CASES = [
    ("d_model", "16x", 'd_model must be an integer, got "16x"'),
    ("d_model", 16.5, "d_model must be an integer, got 16.5"),
    ("d_model", -16, "d_model must be at least 1, got -16"),
    ("d_model", 16, "d_model 16 does not match the weights: model.shared.weight in"),
    ("encoder_attention_heads", 0, "encoder_attention_heads must be at least 1, got 0"),
    ("decoder_attention_heads", 5, "decoder_attention_heads 5 does not divide d_model 24"),
    ("num_attention_heads", 0, "num_attention_heads 0 and encoder_attention_heads 4 disagree"),
    ("encoder_ffn_dim", 1e12, "encoder_ffn_dim must be an integer, got 1000000000000.0"),
    ("encoder_ffn_dim", 10**12, "encoder_ffn_dim 1000000000000 does not match the weights: model.encoder.layers.0.fc1"),
    ("decoder_ffn_dim", 41, "decoder_ffn_dim 41 does not match the weights: model.decoder.layers.0.fc1"),
    ("encoder_layers", 3, "encoder_layers 3 does not match the weights"),
    ("decoder_layers", True, "decoder_layers must be an integer, got true"),
    ("vocab_size", 5, "vocab_size 5 does not match the weights: model.shared.weight in"),
]


def edited_copy(source: str, target: str, config_name: str = "config.json", **changes) -> str:
    shutil.copytree(source, target)
    path = os.path.join(target, config_name)
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)
    return target


def assert_one_line_refusal(capsys, command: str, expected: str, out_dir: str, where: str = "config.json") -> None:
    """The command printed one error line naming ``where`` and ``expected``,
    no traceback, and left nothing at ``out_dir``."""
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"mdsfair-import {command}: error: "), lines[0]
    assert where in lines[0] and expected in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert not os.path.exists(out_dir) or not os.listdir(out_dir), os.listdir(out_dir)


@pytest.fixture(scope="module")
def hf_bart(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("hf_bart") / "hf")
    tiny_hf_bart(directory)
    return directory


@pytest.mark.parametrize(
    "key, value, expected",
    BART_CASES
    + [
        (
            "max_position_embeddings",
            95,
            "max_position_embeddings 95 does not match the weights: model.encoder.embed_positions.weight",
        ),
    ],
)
def test_class_2_hf_bart_config_sizes_are_checked_against_the_weights(hf_bart, tmp_path, capsys, key, value, expected):
    source = edited_copy(hf_bart, str(tmp_path / "hf"), **{key: value})
    out_dir = str(tmp_path / "out")
    assert import_main(["hf-bart", source, out_dir]) == 1
    assert_one_line_refusal(capsys, "hf-bart", expected, out_dir)


def test_class_2_hf_bart_generation_settings_are_integers(hf_bart, tmp_path, capsys):
    source = edited_copy(hf_bart, str(tmp_path / "hf"))
    with open(os.path.join(source, "generation_config.json"), "w") as f:
        json.dump({"num_beams": "4x", "max_length": 20}, f)
    out_dir = str(tmp_path / "out")
    assert import_main(["hf-bart", source, out_dir]) == 1
    assert_one_line_refusal(
        capsys, "hf-bart", 'num_beams must be an integer, got "4x"', out_dir, where="generation_config.json"
    )


def test_class_2_hf_bart_alias_equal_to_its_key_imports(hf_bart, tmp_path):
    """An alias that agrees with its key (Hugging Face writes both in some
    files) is no conflict."""
    source = edited_copy(hf_bart, str(tmp_path / "hf"), num_attention_heads=4, hidden_size=24)
    assert import_main(["hf-bart", source, str(tmp_path / "out")]) == 0


@pytest.fixture(scope="module")
def hf_led(tmp_path_factory):
    """A tiny random LED saved as Hugging Face saves it (d_model 16, 2 + 2
    layers, 2 heads, FFN 32, 64 encoder and 32 decoder positions)."""
    transformers = import_transformers()
    directory = str(tmp_path_factory.mktemp("hf_led") / "hf")
    vocab = write_tokenizer(directory)
    config = transformers.LEDConfig(
        vocab_size=len(vocab),
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_encoder_position_embeddings=64,
        max_decoder_position_embeddings=32,
        attention_window=[4, 4],
    )
    torch.manual_seed(0)
    transformers.LEDForConditionalGeneration(config).save_pretrained(directory)
    return directory


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("d_model", "16x", 'd_model must be an integer, got "16x"'),
        ("encoder_attention_heads", 0, "encoder_attention_heads must be at least 1, got 0"),
        (
            "encoder_ffn_dim",
            10**12,
            "encoder_ffn_dim 1000000000000 does not match the weights: led.encoder.layers.0.fc1",
        ),
        ("decoder_layers", 1, "decoder_layers 1 does not match the weights"),
        ("max_encoder_position_embeddings", 63.5, "max_encoder_position_embeddings must be an integer, got 63.5"),
        (
            "max_encoder_position_embeddings",
            65,
            "max_encoder_position_embeddings 65 does not match the weights: led.encoder.embed_positions.weight",
        ),
        ("max_decoder_position_embeddings", 0, "max_decoder_position_embeddings must be at least 1, got 0"),
        ("vocab_size", 5, "vocab_size 5 does not match the weights"),
    ],
)
def test_class_2_hf_led_config_sizes_are_checked_against_the_weights(hf_led, tmp_path, capsys, key, value, expected):
    source = edited_copy(hf_led, str(tmp_path / "hf"), **{key: value})
    out_dir = str(tmp_path / "out")
    assert import_main(["hf-led", source, out_dir]) == 1
    assert_one_line_refusal(capsys, "hf-led", expected, out_dir)


@pytest.fixture(scope="module")
def pagesum_release(tmp_path_factory):
    """PageSum's release layout: a BART config directory and a PageSumModel
    state dict (BART's keys plus the page scorer ``lin``)."""
    root = tmp_path_factory.mktemp("pagesum")
    config_dir = str(root / "bart-large-cnn")
    model, _ = tiny_hf_bart(config_dir, weights_format="bin")
    os.remove(os.path.join(config_dir, "pytorch_model.bin"))
    state = dict(model.state_dict())
    state["lin.weight"], state["lin.bias"] = torch.zeros(1, model.config.d_model), torch.zeros(1)
    path = str(root / "model.bin")
    torch.save(state, path)
    return config_dir, path


@pytest.mark.parametrize("key, value, expected", BART_CASES)
def test_class_2_pagesum_config_sizes_are_checked_against_the_weights(
    pagesum_release, tmp_path, capsys, key, value, expected
):
    config_dir, state_dict = pagesum_release
    source = edited_copy(config_dir, str(tmp_path / "cnn"), **{key: value})
    out_dir = str(tmp_path / "out")
    assert (
        import_main(
            ["pagesum", state_dict, source, out_dir, "--locality", "document", "--pages", "2", "--page-length", "64"]
        )
        == 1
    )
    assert_one_line_refusal(capsys, "pagesum", expected, out_dir)


@pytest.fixture(scope="module")
def hiersumm_release(tmp_path_factory):
    import sentencepiece

    from tests.hiersumm_fixtures import their_state_dict, train_spm

    root = tmp_path_factory.mktemp("hiersumm")
    spm_path = train_spm(str(root / "spm"), control_roles=False)
    vocab_size = sentencepiece.SentencePieceProcessor(model_file=spm_path).get_piece_size()
    return root, spm_path, their_state_dict(vocab_size)


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("emb_size", "16x", 'opt.emb_size must be an integer, got "16x"'),
        ("ff_size", 24.5, "opt.ff_size must be an integer, got 24.5"),
        ("heads", 0, "opt.heads must be at least 1, got 0"),
        ("inter_heads", 3, "opt.inter_heads 3 does not divide opt.emb_size 16"),
        ("ff_size", 10**12, "opt.ff_size 1000000000000 does not match the weights: encoder.transformer_layers.0"),
        ("dec_layers", 3, "opt.dec_layers 3 does not match the weights"),
        ("heads", 2, "opt.heads 2 does not match the weights: encoder.transformer_layers.2.pooling.linear_keys.weight"),
        ("inter_layers", "2,x", "opt.inter_layers '2,x' is not a comma-separated list"),
    ],
)
def test_class_2_hiersumm_options_are_checked_against_the_weights(
    hiersumm_release, tmp_path, capsys, option, value, expected
):
    """hiersumm's configuration is the ``opt`` namespace of its checkpoint;
    every size is checked before the model is built (an ``ff_size`` of 10^12
    would allocate terabytes)."""
    from tests.hiersumm_fixtures import their_opt

    root, spm_path, state = hiersumm_release
    opt = argparse.Namespace(**{**vars(their_opt()), option: value})
    path = str(tmp_path / "bad.pt")
    torch.save({"model": state, "opt": opt}, path)
    out_dir = str(tmp_path / "out")
    assert import_main(["hiersumm", path, spm_path, out_dir]) == 1
    assert_one_line_refusal(capsys, "hiersumm", expected, out_dir, where=path)


@pytest.fixture(scope="module")
def fairseq_bart(hf_bart, tmp_path_factory):
    """A fairseq BART checkpoint (an hf-bart import's model.pt)."""
    out_dir = str(tmp_path_factory.mktemp("fairseq_bart") / "out")
    assert import_main(["hf-bart", hf_bart, out_dir]) == 0
    return os.path.join(out_dir, "model.pt")


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("encoder_embed_dim", 16.5, "cfg.model.encoder_embed_dim must be an integer, got 16.5"),
        ("decoder_layers", "2x", 'cfg.model.decoder_layers must be an integer, got "2x"'),
        (
            "encoder_attention_heads",
            5,
            "cfg.model.encoder_attention_heads 5 does not divide cfg.model.encoder_embed_dim 24",
        ),
        (
            "encoder_ffn_embed_dim",
            10**12,
            "cfg.model.encoder_ffn_embed_dim 1000000000000 does not match the weights: encoder.layers.0.fc1",
        ),
        ("encoder_layers", 3, "cfg.model.encoder_layers 3 does not match the weights"),
    ],
)
def test_class_2_bart_to_led_checkpoint_sizes_are_checked_against_the_weights(
    fairseq_bart, tmp_path, capsys, key, value, expected
):
    """bart-to-led reads the sizes of a fairseq checkpoint's ``cfg.model``."""
    state = torch.load(fairseq_bart, map_location="cpu", weights_only=False)
    model_cfg = state["cfg"]["model"]  # the training namespace, as fairseq keeps it
    if isinstance(model_cfg, dict):
        model_cfg[key] = value
    else:
        setattr(model_cfg, key, value)
    source = str(tmp_path / "bart.pt")
    torch.save(state, source)
    out = str(tmp_path / "led.pt")
    capsys.readouterr()
    assert import_main(["bart-to-led", source, out]) == 1
    assert_one_line_refusal(capsys, "bart-to-led", expected, out, where=source)
