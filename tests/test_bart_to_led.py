"""``mdsfair-import bart-to-led``: a tiny imported BART (96 positions) made
into an led checkpoint as LED was made (Beltagy et al. 2020, Sec. 6): the
encoder position rows repeat BART's, the global projections equal the local
ones, and with a window covering the whole source and only the first token
global the converted model's logits equal BART's; fairseq-train
--restore-file restores it with the printed flags."""

import os

import pytest
import torch
from fairseq import checkpoint_utils

import mdsfair  # noqa: F401
from mdsfair.importers import ImportRefused
from mdsfair.importers.bart_to_led import convert_bart_to_led
from mdsfair.importers.cli import import_main
from mdsfair.importers.hf_bart import import_hf_bart
from tests.import_fixtures import (
    TEXTS,
    gpt2_data_bin,
    hf_tokenizer,
    import_transformers,
    restore_with_trainer,
    tiny_hf_bart,
)

BART_POSITIONS = 96  # TINY_BART's max_position_embeddings
LED_POSITIONS = 300  # 3 full copies and a cut one


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    import_transformers()
    root = tmp_path_factory.mktemp("bart")
    hf_dir, out_dir = str(root / "hf"), str(root / "out")
    tiny_hf_bart(hf_dir, seed=3)
    import_hf_bart(hf_dir, out_dir)
    return {"hf_dir": hf_dir, "out_dir": out_dir, "data_bin": gpt2_data_bin(str(root / "data"), out_dir)}


def convert(bart, tmp_path, window):
    out = str(tmp_path / f"led-{window}.pt")
    summary = convert_bart_to_led(os.path.join(bart["out_dir"], "model.pt"), out, LED_POSITIONS, str(window))
    return out, summary


def load(path, data_bin):
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_bin})
    return models[0].eval(), task


def test_position_rows_repeat_and_global_projections_equal_local(bart, tmp_path):
    out, summary = convert(bart, tmp_path, 8)
    assert summary["arch"] == "led_large" and summary["copies"] == 4
    led = checkpoint_utils.load_checkpoint_to_cpu(out)["model"]
    source = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(bart["out_dir"], "model.pt"))["model"]
    table, original = led["encoder.embed_positions.weight"], source["encoder.embed_positions.weight"]
    assert table.shape == (LED_POSITIONS + 2, original.size(1))
    for position in (0, 1, 95, 96, 97, 191, 192, 250, 287, 288, 299):
        assert torch.equal(table[2 + position], original[2 + position % BART_POSITIONS]), position
    assert torch.equal(table[:2], original[:2])
    assert torch.equal(led["decoder.embed_positions.weight"], source["decoder.embed_positions.weight"])
    layers = 0
    for key, tensor in source.items():
        if key.startswith("encoder.layers.") and any(f".self_attn.{p}_proj." in key for p in "qkv"):
            local = key.split(".self_attn.")[1][0]
            assert torch.equal(led[key], tensor)
            assert torch.equal(led[key.replace(f".{local}_proj.", f".{local}_global_proj.")], tensor)
            layers += 1
        elif key != "encoder.embed_positions.weight":
            assert torch.equal(led[key], tensor), key
    assert layers == 2 * 3 * 2  # 2 layers x q, k, v x weight, bias
    assert sum("_global_proj." in key for key in led) == layers


def test_whole_source_window_and_first_token_global_equal_bart(bart, tmp_path):
    """Sources of 20-40 tokens: window 128 lets every token see 64 on each side,
    i.e. all of them; logits equal BART's. Window 8 (4 each side) differs."""
    bart_model, task = load(os.path.join(bart["out_dir"], "model.pt"), bart["data_bin"])
    tokenizer = hf_tokenizer(bart["hf_dir"])
    source = tokenizer([TEXTS[0], TEXTS[3], TEXTS[6][:40]], padding=True, return_tensors="pt")
    labels = tokenizer([TEXTS[1], TEXTS[2][:30], TEXTS[5]], padding=True, return_tensors="pt").input_ids
    decoder_input = torch.cat([torch.full((3, 1), 2), labels[:, :-1]], dim=1)
    lengths = source.attention_mask.sum(1)
    assert lengths.max() <= 64 and lengths.min() > 16
    real = labels.ne(1)
    # float64: the two models compute the same function by different kernels (banded windows against
    # one full attention), whose float32 round-off differs by CPU (1.5e-5 on an Intel Xeon, below 1e-5
    # on an AMD EPYC); in float64 it is ~1e-13 on both, so 1e-9 tests the function, not the CPU
    with torch.no_grad():
        expected, _ = bart_model.double()(source.input_ids, lengths, decoder_input)
        for window, equal in ((128, True), (8, False)):
            led, _task = load(convert(bart, tmp_path, window)[0], bart["data_bin"])
            assert (
                led.encoder.self_attention_component.global_attention == "first"
                and led.encoder.max_source_positions == LED_POSITIONS
            )
            logits, _ = led.double()(source.input_ids, lengths, decoder_input)
            if equal:
                torch.testing.assert_close(logits[real], expected[real], atol=1e-9, rtol=1e-9)
            else:
                assert (logits[real] - expected[real]).abs().max() > 1e-3


def test_restore_file_with_the_printed_flags(bart, tmp_path, capsys):
    out = str(tmp_path / "led.pt")
    assert (
        import_main(
            [
                "bart-to-led",
                os.path.join(bart["out_dir"], "model.pt"),
                out,
                "--max-source-positions",
                str(LED_POSITIONS),
                "--attention-window",
                "8",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    command = next(line for line in printed.splitlines() if "fairseq-train" in line).split()
    flags = command[command.index("--arch") + 2 : command.index("--restore-file")]
    assert "--max-encoder-positions" in flags and "--attention-window" in flags
    trainer = restore_with_trainer(
        bart["data_bin"], out, command[command.index("--arch") + 1], flags, save_dir=str(tmp_path / "save")
    )
    restored = trainer.model.state_dict()
    converted = checkpoint_utils.load_checkpoint_to_cpu(out)["model"]
    for key, tensor in converted.items():
        if not key.endswith(".version"):
            assert torch.equal(restored[key], tensor), key
    assert import_main(["bart-to-led", os.path.join(bart["out_dir"], "model.pt"), out]) == 1
    assert "already there" in capsys.readouterr().err


def test_refuses_led_checkpoints_and_shorter_tables(bart, tmp_path):
    out, _ = convert(bart, tmp_path, 8)
    with pytest.raises(ImportRefused, match="is not a plain fairseq bart architecture"):
        convert_bart_to_led(out, str(tmp_path / "again.pt"))
    with pytest.raises(ImportRefused, match="below BART's 96"):
        convert_bart_to_led(os.path.join(bart["out_dir"], "model.pt"), str(tmp_path / "short.pt"), 64)
