"""``mdsfair-import hf-bart`` / ``mdsfair-export hf-bart``: tiny random
Hugging Face BART models (both ``scale_embedding`` settings, tied and untied
``lm_head``, both weight file formats) and a byte-level BPE tokenizer written
here; the imported fairseq model computes Hugging Face's logits, finds the
same best beam hypothesis, restores into every BART-based architecture, and
mdsfair-preprocess writes the Hugging Face tokenizer's ids."""

import copy
import json
import os
import shutil
import time

import pytest
import torch
from fairseq import checkpoint_utils, tasks
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from mdsfair.checkpoints.fingerprints import data_fingerprint
from mdsfair.data.manifest import read_manifest
from mdsfair.importers import ImportRefused
from mdsfair.importers.cli import export_main, import_main
from mdsfair.importers.hf_bart import export_hf_bart, import_hf_bart
from mdsfair.preprocess.subword import GPT2BPEEncoder
from tests.import_fixtures import (
    TEXTS,
    default_clusters,
    gpt2_data_bin,
    hf_tokenizer,
    import_transformers,
    restore_with_trainer,
    tiny_hf_bart,
)
from tests.tolerances import assert_close_in_dtype

VARIANTS = {
    "plain-safetensors": dict(scale_embedding=False, tied=True, weights_format="safetensors"),
    "scaled-bin": dict(scale_embedding=True, tied=True, weights_format="bin"),
    "untied-safetensors": dict(scale_embedding=False, tied=False, weights_format="safetensors"),
    "scaled-untied-bin": dict(scale_embedding=True, tied=False, weights_format="bin"),
}
POSITIONS = 96  # TINY_BART's max_position_embeddings


@pytest.fixture(scope="module")
def transformers():
    return import_transformers()


@pytest.fixture(scope="module")
def imported(tmp_path_factory, transformers):
    """Every variant: the Hugging Face directory, its model and the import's OUT_DIR."""
    result = {}
    for seed, (name, options) in enumerate(VARIANTS.items()):
        root = tmp_path_factory.mktemp(name)
        hf_dir, out_dir = str(root / "hf"), str(root / "out")
        tiny_hf_bart(hf_dir, seed=seed, eos_pull=5.0, **options)
        summary = import_hf_bart(hf_dir, out_dir)
        model = transformers.BartForConditionalGeneration.from_pretrained(hf_dir).eval()
        result[name] = {"hf_dir": hf_dir, "out_dir": out_dir, "hf": model, "summary": summary}
    return result


@pytest.fixture(scope="module")
def data_bin(imported, tmp_path_factory):
    """mdsfair-preprocess --subword gpt2 with the first import's files."""
    return gpt2_data_bin(str(tmp_path_factory.mktemp("gpt2")), imported["plain-safetensors"]["out_dir"])


@pytest.fixture(scope="module")
def task(data_bin, imported):
    state = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(imported["plain-safetensors"]["out_dir"], "model.pt"))
    cfg = copy.deepcopy(state["cfg"].task)
    cfg.data = data_bin
    cfg.max_source_positions = 1024
    cfg.max_target_positions = 1024
    task = tasks.setup_task(cfg)
    task.load_dataset("valid")
    return task


def fairseq_model(out_dir, task):
    models, _ = checkpoint_utils.load_model_ensemble([os.path.join(out_dir, "model.pt")], task=task)
    return models[0].eval()


def hf_batch(hf_dir, texts):
    tokenizer = hf_tokenizer(hf_dir)
    return tokenizer(texts, padding=True, return_tensors="pt")


# ------------------------------------------------------------- equivalence


def test_every_variant_writes_the_same_vocabulary_files(imported):
    reference = imported["plain-safetensors"]["out_dir"]
    for name, entry in imported.items():
        for file in ("dict.txt", "encoder.json", "vocab.bpe"):
            with (
                open(os.path.join(reference, file), encoding="utf-8") as a,
                open(os.path.join(entry["out_dir"], file), encoding="utf-8") as b,
            ):
                assert a.read() == b.read(), (name, file)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_equal_hugging_face_under_teacher_forcing(variant, imported, task, transformers):
    entry = imported[variant]
    model = fairseq_model(entry["out_dir"], task)
    assert model.encoder.embed_scale == 1.0  # sqrt(d) folded into the weights when the source scales
    assert (model.decoder.output_projection.weight is model.decoder.embed_tokens.weight) == VARIANTS[variant]["tied"]
    source = hf_batch(entry["hf_dir"], [TEXTS[0], TEXTS[3], TEXTS[6][:40]])
    labels = hf_batch(entry["hf_dir"], [TEXTS[1], TEXTS[2][:30], TEXTS[5]]).input_ids
    decoder_input = transformers.models.bart.modeling_bart.shift_tokens_right(labels, 1, 2)
    with torch.no_grad():
        expected = entry["hf"](
            input_ids=source.input_ids, attention_mask=source.attention_mask, decoder_input_ids=decoder_input
        ).logits
        logits, _ = model(source.input_ids, source.attention_mask.sum(1), decoder_input)
    real = decoder_input.ne(1)
    assert logits.shape == expected.shape
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])


@pytest.mark.parametrize("variant", ["plain-safetensors", "scaled-untied-bin"])
@pytest.mark.parametrize("lenpen", [1.0, 2.0])
def test_beam_search_best_hypothesis_equals_hugging_face(variant, lenpen, imported, task):
    """Beam 4, the same length penalty, min and max lengths, no n-gram
    blocking. fairseq counts lengths without the decoder's start token and
    with </s> (--min-len = min_length - 1, --max-len-b = max_length - 2);
    Hugging Face is told to never emit <pad>, which fairseq forbids."""
    entry = imported[variant]
    model = fairseq_model(entry["out_dir"], task)
    source = hf_batch(entry["hf_dir"], [TEXTS[0], TEXTS[3], TEXTS[6][:40], TEXTS[5]])
    min_len, max_len = 5, 30
    generator = SequenceGenerator(
        [model],
        task.target_dictionary,
        beam_size=4,
        max_len_a=0,
        max_len_b=max_len,
        min_len=min_len,
        len_penalty=lenpen,
    )
    sample = {"net_input": {"src_tokens": source.input_ids, "src_lengths": source.attention_mask.sum(1)}}
    ours = generator.generate([model], sample)
    theirs = entry["hf"].generate(
        input_ids=source.input_ids,
        attention_mask=source.attention_mask,
        num_beams=4,
        length_penalty=lenpen,
        min_length=min_len + 1,
        max_length=max_len + 2,
        early_stopping=True,
        no_repeat_ngram_size=0,
        suppress_tokens=[1],
        do_sample=False,
        forced_bos_token_id=None,
        forced_eos_token_id=2,
        return_dict_in_generate=True,
        output_scores=True,
    )
    lengths = []
    for index, hypotheses in enumerate(ours):
        expected = theirs.sequences[index].tolist()[1:]  # drop the decoder start token
        expected = expected[: expected.index(2) + 1]
        assert hypotheses[0]["tokens"].tolist() == expected
        # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
        assert_close_in_dtype(hypotheses[0]["score"], theirs.sequences_scores[index])
        lengths.append(len(expected))
    # The hypotheses end by themselves (not at the length limit) and the minimum binds.
    assert max(lengths) < max_len + 1 and min(lengths) == min_len + 1, lengths


def test_preprocess_writes_the_hugging_face_token_ids(task, imported):
    """The task's source is every document's ``<s> tokens`` and one closing
    ``</s>``: for each document the Hugging Face ids without their ``</s>``;
    the target is the summary's ids without ``<s>``."""
    tokenizer = hf_tokenizer(imported["plain-safetensors"]["hf_dir"])
    dataset = task.datasets["valid"]
    for index, cluster in enumerate(default_clusters()):
        item = dataset[index]
        expected = [i for document in cluster["documents"] for i in tokenizer(document).input_ids[:-1]] + [2]
        assert item["source"].tolist() == expected
        assert item["target"].tolist() == tokenizer(cluster["summary"]).input_ids[1:]
    out_dir = imported["plain-safetensors"]["out_dir"]
    encoder = GPT2BPEEncoder(os.path.join(out_dir, "encoder.json"), os.path.join(out_dir, "vocab.bpe"))
    symbols = encoder.encode(TEXTS[2])
    assert [task.dictionary.index(s) for s in symbols] == tokenizer(TEXTS[2]).input_ids[1:-1]
    assert encoder.decode(symbols) == TEXTS[2]


def test_dictionary_follows_the_embedding_rows(tmp_path):
    """<mask> in vocab.json beyond the rows (bart-large-cnn: 50,264 rows), no
    <mask> at all, and rows no token uses: one dictionary symbol per row."""
    cases = {
        "mask-beyond-rows": dict(mask=True, extra_rows=-1),
        "no-mask": dict(mask=False, extra_rows=0),
        "unused-rows": dict(mask=True, extra_rows=3),
    }
    for name, case in cases.items():
        hf_dir, out_dir = str(tmp_path / name / "hf"), str(tmp_path / name / "out")
        _, vocab = tiny_hf_bart(hf_dir, **case)
        import_hf_bart(hf_dir, out_dir)
        with open(os.path.join(out_dir, "dict.txt"), encoding="utf-8") as f:
            symbols = [line.split()[0] for line in f]
        assert len(symbols) + 4 == len(vocab) + case["extra_rows"], name
        assert ("<mask>" in symbols) == (name == "unused-rows"), name
        assert symbols[:3] == ["4", "5", "6"]
        assert sum(s.startswith("madeupword") for s in symbols) == max(case["extra_rows"], 0), name
        with open(os.path.join(out_dir, "encoder.json"), encoding="utf-8") as f:
            encoder = json.load(f)
        assert all(vocab[token] == index for token, index in encoder.items())
        assert len(encoder) == len(vocab) - 4 - int(case["mask"])


@pytest.mark.parametrize("weights_format", ["safetensors", "bin"])
def test_sharded_weights_import_like_one_file(weights_format, imported, tmp_path):
    """``model.safetensors.index.json`` / ``pytorch_model.bin.index.json`` with two shards."""
    from safetensors.torch import load_file, save_file

    entry = imported["plain-safetensors"]
    sharded = str(tmp_path / "sharded")
    shutil.copytree(entry["hf_dir"], sharded)
    os.remove(os.path.join(sharded, "model.safetensors"))
    state = load_file(os.path.join(entry["hf_dir"], "model.safetensors"))
    names = sorted(state)
    weight_map = {}
    for shard, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        file = f"model-{shard + 1:05d}-of-00002." + ("safetensors" if weights_format == "safetensors" else "bin")
        tensors = {name: state[name] for name in part}
        if weights_format == "safetensors":
            save_file(tensors, os.path.join(sharded, file))
        else:
            torch.save(tensors, os.path.join(sharded, file))
        weight_map.update({name: file for name in part})
    index = "model.safetensors.index.json" if weights_format == "safetensors" else "pytorch_model.bin.index.json"
    with open(os.path.join(sharded, index), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    summary = import_hf_bart(sharded, str(tmp_path / "out"))
    assert summary["source"].endswith(index)
    ours = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(summary["out_dir"], "model.pt"))["model"]
    reference = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(entry["out_dir"], "model.pt"))["model"]
    assert set(ours) == set(reference)
    assert all(torch.equal(ours[key], reference[key]) for key in reference)


def test_gelu_new_is_fairseq_gelu_accurate(transformers):
    from fairseq.modules import gelu_accurate

    x = torch.linspace(-6, 6, 1001)
    torch.testing.assert_close(transformers.activations.ACT2FN["gelu_new"](x), gelu_accurate(x), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(transformers.activations.ACT2FN["gelu"](x), torch.nn.functional.gelu(x))


# -------------------------------------------------------------- restoring


RESTORE_ARCHS = {
    "bart_large": ["--max-source-positions", str(POSITIONS), "--max-target-positions", str(POSITIONS)],
    "hierencdec_bart_large": ["--max-source-positions", "4096", "--max-target-positions", str(POSITIONS)],
    "pagesum_bart_large": [
        "--max-page-positions",
        str(POSITIONS),
        "--page-tokens",
        str(POSITIONS),
        "--max-target-positions",
        str(POSITIONS),
    ],
    "sparse_bart_large": ["--max-source-positions", str(POSITIONS), "--max-target-positions", str(POSITIONS)],
}


@pytest.mark.parametrize("arch", RESTORE_ARCHS)
def test_restore_file_into_every_bart_architecture(arch, imported, data_bin, tmp_path):
    entry = imported["scaled-bin"]
    flags = entry["summary"]["arch_flags"] + RESTORE_ARCHS[arch]
    trainer = restore_with_trainer(data_bin, os.path.join(entry["out_dir"], "model.pt"), arch, flags, str(tmp_path))
    restored = trainer.get_model().state_dict()
    converted = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(entry["out_dir"], "model.pt"))["model"]
    compared = 0
    for key, value in converted.items():
        if key.endswith(".version") or key == "encoder.embed_positions.weight" and arch.startswith("hierencdec"):
            continue
        assert torch.equal(restored[key], value), key
        compared += 1
    assert compared >= 60
    if arch.startswith("hierencdec"):
        table = restored["encoder.embed_positions.weight"]
        loaded = converted["encoder.embed_positions.weight"]
        assert table.shape[0] == 4098
        assert torch.equal(table[: loaded.size(0)], loaded)


# ----------------------------------------------------------------- export


def test_export_round_trip_is_exact(imported, tmp_path, transformers):
    entry = imported["plain-safetensors"]
    export_dir = str(tmp_path / "exported")
    assert (
        export_main(
            [
                "hf-bart",
                os.path.join(entry["out_dir"], "model.pt"),
                os.path.join(entry["out_dir"], "dict.txt"),
                export_dir,
            ]
        )
        == 0
    )
    from safetensors.torch import load_file

    original = load_file(os.path.join(entry["hf_dir"], "model.safetensors"))
    exported = load_file(os.path.join(export_dir, "model.safetensors"))
    assert set(exported) == set(original)
    for key in original:
        assert torch.equal(exported[key], original[key]), key
    with open(os.path.join(entry["hf_dir"], "config.json")) as a, open(os.path.join(export_dir, "config.json")) as b:
        before, after = json.load(a), json.load(b)
    for field in (
        "vocab_size",
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "max_position_embeddings",
        "activation_function",
        "scale_embedding",
        "tie_word_embeddings",
        "pad_token_id",
        "decoder_start_token_id",
    ):
        assert after[field] == before[field], field
    with open(os.path.join(entry["hf_dir"], "vocab.json")) as a, open(os.path.join(export_dir, "vocab.json")) as b:
        assert json.load(a) == json.load(b)
    reloaded_tokenizer = hf_tokenizer(export_dir)
    assert reloaded_tokenizer(TEXTS[2]).input_ids == hf_tokenizer(entry["hf_dir"])(TEXTS[2]).input_ids
    reloaded = transformers.BartForConditionalGeneration.from_pretrained(export_dir).eval()
    source = hf_batch(entry["hf_dir"], [TEXTS[0], TEXTS[4]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**source).logits, entry["hf"](**source).logits, atol=0, rtol=0)


def test_export_round_trip_of_folded_and_untied_models_computes_the_same(imported, tmp_path, transformers):
    entry = imported["scaled-untied-bin"]
    export_dir = str(tmp_path / "exported")
    export_hf_bart(
        os.path.join(entry["out_dir"], "model.pt"),
        os.path.join(entry["out_dir"], "dict.txt"),
        export_dir,
        weights_format="bin",
    )
    with open(os.path.join(export_dir, "config.json")) as f:
        config = json.load(f)
    assert config["tie_word_embeddings"] is False and config["scale_embedding"] is False  # folded on import
    reloaded = transformers.BartForConditionalGeneration.from_pretrained(export_dir).eval()
    source = hf_batch(entry["hf_dir"], [TEXTS[0], TEXTS[4]])
    with torch.no_grad():
        # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
        assert_close_in_dtype(reloaded(**source).logits, entry["hf"](**source).logits)


def test_export_refuses_mdsfair_architectures(imported, data_bin, tmp_path):
    from mdsfair.importers.fairseq_bart import save_fairseq_checkpoint, training_namespace

    entry = imported["plain-safetensors"]
    flags = entry["summary"]["arch_flags"] + RESTORE_ARCHS["hierencdec_bart_large"]
    trainer = restore_with_trainer(
        data_bin, os.path.join(entry["out_dir"], "model.pt"), "hierencdec_bart_large", flags, str(tmp_path)
    )
    path = save_fairseq_checkpoint(
        str(tmp_path / "hierencdec.pt"),
        training_namespace("hierencdec_bart_large", flags),
        trainer.get_model().state_dict(),
    )
    with pytest.raises(ImportRefused, match="not a plain fairseq bart architecture"):
        export_hf_bart(path, os.path.join(entry["out_dir"], "dict.txt"), str(tmp_path / "out"))


# ---------------------------------------------------------------- refusals


@pytest.fixture
def source_copy(imported, tmp_path):
    target = str(tmp_path / "hf")
    shutil.copytree(imported["plain-safetensors"]["hf_dir"], target)
    return target


def edit_json(path, **changes):
    with open(path) as f:
        data = json.load(f)
    data.update(changes)
    with open(path, "w") as f:
        json.dump(data, f)


def test_refuses_another_model_type(source_copy, tmp_path):
    edit_json(os.path.join(source_copy, "config.json"), model_type="mbart")
    with pytest.raises(ImportRefused, match=r"config\.json: model_type is 'mbart'"):
        import_hf_bart(source_copy, str(tmp_path / "out"))


def test_refuses_pre_layernorm_configuration(source_copy, tmp_path):
    edit_json(os.path.join(source_copy, "config.json"), normalize_before=True)
    with pytest.raises(ImportRefused, match="normalize_before=true"):
        import_hf_bart(source_copy, str(tmp_path / "out"))


def test_refuses_missing_weights_and_tokenizer_files(source_copy, tmp_path):
    os.remove(os.path.join(source_copy, "vocab.json"))
    with pytest.raises(ImportRefused, match=r"vocab\.json: missing"):
        import_hf_bart(source_copy, str(tmp_path / "out"))
    os.remove(os.path.join(source_copy, "model.safetensors"))
    with pytest.raises(ImportRefused, match="no weights: none of model.safetensors, pytorch_model.bin"):
        import_hf_bart(source_copy, str(tmp_path / "out"))


def test_refuses_nonzero_final_logits_bias_and_foreign_weights(source_copy, tmp_path):
    from safetensors.torch import load_file, save_file

    path = os.path.join(source_copy, "model.safetensors")
    state = load_file(path)
    state["final_logits_bias"][0, 7] = 0.5
    save_file(state, path)
    with pytest.raises(ImportRefused, match="final_logits_bias is nonzero"):
        import_hf_bart(source_copy, str(tmp_path / "out"))
    state["final_logits_bias"].zero_()
    state["model.encoder.layer_norm.weight"] = torch.ones(24)
    save_file(state, path)
    with pytest.raises(ImportRefused, match=r"1 weights are not BART's .*model\.encoder\.layer_norm\.weight"):
        import_hf_bart(source_copy, str(tmp_path / "out"))


def test_refuses_tokenizers_whose_ids_preprocessing_cannot_reproduce(source_copy, tmp_path):
    vocab_path = os.path.join(source_copy, "vocab.json")
    with open(vocab_path) as f:
        vocab = json.load(f)
    with open(os.path.join(source_copy, "added_tokens.json"), "w") as f:
        json.dump({"<sep>": len(vocab)}, f)
    with pytest.raises(ImportRefused, match=r"added_tokens\.json: the tokenizer adds tokens .*'<sep>'"):
        import_hf_bart(source_copy, str(tmp_path / "out"))
    os.remove(os.path.join(source_copy, "added_tokens.json"))
    with open(os.path.join(source_copy, "tokenizer_config.json"), "w") as f:
        json.dump({"add_prefix_space": True}, f)
    with pytest.raises(ImportRefused, match="add_prefix_space"):
        import_hf_bart(source_copy, str(tmp_path / "out"))
    os.remove(os.path.join(source_copy, "tokenizer_config.json"))
    vocab["<pad>"], vocab["!"] = vocab["!"], vocab["<pad>"]
    with open(vocab_path, "w") as f:
        json.dump(vocab, f)
    with pytest.raises(ImportRefused, match=r"vocab\.json: <pad> has id 4"):
        import_hf_bart(source_copy, str(tmp_path / "out"))


def test_refuses_to_overwrite_without_flag(imported, tmp_path):
    entry = imported["plain-safetensors"]
    assert import_main(["hf-bart", entry["hf_dir"], str(tmp_path / "out")]) == 0
    assert import_main(["hf-bart", entry["hf_dir"], str(tmp_path / "out")]) == 1
    assert import_main(["hf-bart", entry["hf_dir"], str(tmp_path / "out"), "--overwrite"]) == 0


# --------------------------------------------------------------------- CLI


def test_cli_lists_the_kinds(capsys):
    assert import_main(["--help"]) == 0
    listing = capsys.readouterr().out
    for kind in ("hf-bart", "pagesum", "hiersumm"):
        assert f"  {kind}" in listing
    assert import_main(["nope"]) == 2
    assert export_main(["--help"]) == 0
    assert "hf-bart" in capsys.readouterr().out


def test_cli_import_prints_the_commands_that_follow(imported, tmp_path, capsys):
    entry = imported["scaled-bin"]
    out_dir = str(tmp_path / "out")
    assert import_main(["hf-bart", entry["hf_dir"], out_dir]) == 0
    printed = capsys.readouterr().out
    assert f"--dict {out_dir}/dict.txt" in printed
    assert f"--restore-file {out_dir}/model.pt --reset-optimizer --reset-dataloader --reset-meters" in printed
    assert "--encoder-embed-dim 24" in printed and "--max-source-positions 96" in printed
    assert "folded" in printed
    for name in ("model.pt", "dict.txt", "encoder.json", "vocab.bpe"):
        assert os.path.isfile(os.path.join(out_dir, name))


# ------------------------------------------------------- BART-base sized


BART_BASE = dict(d_model=768, layers=6, heads=12, ffn=3072, positions=1024, vocab=50265)


def write_bart_base_sized(directory):
    """Random weights at bart-base dimensions in Hugging Face's layout
    (``model.safetensors``, ``config.json``) and a 50,265-token byte-level
    vocabulary: the 256 byte symbols, filler tokens, ``<mask>`` last."""
    from safetensors.torch import save_file

    from tests.import_fixtures import write_tokenizer

    d, v = BART_BASE["d_model"], BART_BASE["vocab"]
    generator = torch.Generator().manual_seed(0)

    def normal(*shape):
        return torch.randn(*shape, generator=generator) * 0.05

    state = {"model.shared.weight": normal(v, d), "final_logits_bias": torch.zeros(1, v)}
    for part in ("encoder", "decoder"):
        state[f"model.{part}.embed_positions.weight"] = normal(BART_BASE["positions"] + 2, d)
        state[f"model.{part}.layernorm_embedding.weight"] = 1 + normal(d)
        state[f"model.{part}.layernorm_embedding.bias"] = normal(d)
        for layer in range(BART_BASE["layers"]):
            prefix = f"model.{part}.layers.{layer}."
            attentions = ["self_attn"] + (["encoder_attn"] if part == "decoder" else [])
            for attention in attentions:
                for projection in ("k_proj", "v_proj", "q_proj", "out_proj"):
                    state[f"{prefix}{attention}.{projection}.weight"] = normal(d, d)
                    state[f"{prefix}{attention}.{projection}.bias"] = normal(d)
                state[f"{prefix}{attention}_layer_norm.weight"] = 1 + normal(d)
                state[f"{prefix}{attention}_layer_norm.bias"] = normal(d)
            state[f"{prefix}fc1.weight"] = normal(BART_BASE["ffn"], d)
            state[f"{prefix}fc1.bias"] = normal(BART_BASE["ffn"])
            state[f"{prefix}fc2.weight"] = normal(d, BART_BASE["ffn"])
            state[f"{prefix}fc2.bias"] = normal(d)
            state[f"{prefix}final_layer_norm.weight"] = 1 + normal(d)
            state[f"{prefix}final_layer_norm.bias"] = normal(d)
    os.makedirs(directory, exist_ok=True)
    save_file(state, os.path.join(directory, "model.safetensors"))
    vocab = write_tokenizer(directory, mask=False)
    for index in range(len(vocab), v - 1):
        vocab[f"\u0120filler{index}"] = index
    vocab["<mask>"] = v - 1
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    config = {
        "model_type": "bart",
        "vocab_size": v,
        "d_model": d,
        "max_position_embeddings": BART_BASE["positions"],
        "encoder_layers": 6,
        "decoder_layers": 6,
        "encoder_attention_heads": 12,
        "decoder_attention_heads": 12,
        "encoder_ffn_dim": 3072,
        "decoder_ffn_dim": 3072,
        "activation_function": "gelu",
        "scale_embedding": False,
        # transformers 3 fields of the released configurations, at BART's values
        "normalize_before": False,
        "add_final_layer_norm": False,
        "normalize_embedding": True,
        "static_position_embeddings": False,
        "add_bias_logits": False,
        "extra_pos_embeddings": 2,
        "dropout": 0.1,
        "attention_dropout": 0.1,
        "activation_dropout": 0.1,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_bos_token_id": 0,
        "num_beams": 4,
        "length_penalty": 2.0,
        "max_length": 142,
        "min_length": 56,
        "no_repeat_ngram_size": 3,
        "early_stopping": True,
    }
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)


def test_bart_base_sized_import_loads_and_generates_on_cpu(tmp_path, data_bin, task):
    started = time.perf_counter()
    hf_dir, out_dir = str(tmp_path / "hf"), str(tmp_path / "out")
    write_bart_base_sized(hf_dir)
    summary = import_hf_bart(hf_dir, out_dir)
    assert summary["arch"] == "bart_base" and summary["arch_flags"] == []
    assert summary["generate_flags"] == [
        "--beam",
        "4",
        "--lenpen",
        "2.0",
        "--min-len",
        "55",
        "--max-len-a",
        "0",
        "--max-len-b",
        "140",
        "--no-repeat-ngram-size",
        "3",
    ]
    with open(os.path.join(out_dir, "dict.txt"), encoding="utf-8") as f:
        assert sum(1 for _ in f) + 4 == BART_BASE["vocab"]
    base_task = copy.copy(task)  # the task with the imported 50,265-symbol dictionary
    base_task.dictionary = Dictionary.load(os.path.join(out_dir, "dict.txt"))
    # ... and its files: the import records their fingerprints, which the task compares with its data's
    base_task._data_fingerprint = data_fingerprint([out_dir], base_task.dictionary, read_manifest(out_dir))
    model = fairseq_model(out_dir, base_task)
    assert sum(p.numel() for p in model.parameters()) > 130_000_000
    generator = SequenceGenerator([model], base_task.target_dictionary, beam_size=2, max_len_a=0, max_len_b=5)
    sample = {
        "net_input": {
            "src_tokens": torch.tensor([[0, 100, 2000, 40000, 2], [0, 7, 8, 2, 1]]),
            "src_lengths": torch.tensor([5, 4]),
        }
    }
    hypotheses = generator.generate([model], sample)
    assert all(1 <= len(h[0]["tokens"]) <= 6 for h in hypotheses)
    elapsed = time.perf_counter() - started
    print(f"bart-base sized import + load + generate: {elapsed:.1f} s")
