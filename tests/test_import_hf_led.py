"""``mdsfair-import hf-led`` / ``mdsfair-export hf-led``: tiny random Hugging
Face ``LEDForConditionalGeneration`` models written here in the on-disk
layouts of allenai/led-*-16384 (safetensors, bin, sharded) and
allenai/PRIMERA (``<doc-sep>`` added to the tokenizer, one embedding row more);
the imported checkpoints load with ``load_model_ensemble_and_task`` and
compute Hugging Face's logits; the PRIMERA-like one, on a cluster
preprocessed with the imported GPT-2 files, gets the ids of allenai/PRIMER's
dataloader and Hugging Face's logits; the export round trip is exact."""

import json
import os
import shutil

import pytest
import torch
from fairseq import checkpoint_utils

import mdsfair  # noqa: F401
from mdsfair.importers import ImportRefused
from mdsfair.importers.cli import export_main, import_main
from mdsfair.importers.hf_led import export_hf_led, import_hf_led
from tests.import_fixtures import (
    TEXTS,
    TINY_LED_DECODER_POSITIONS,
    TINY_LED_ENCODER_POSITIONS,
    TINY_LED_WINDOWS,
    default_clusters,
    gpt2_data_bin,
    hf_tokenizer,
    import_transformers,
    tiny_hf_led,
)
from tests.tolerances import assert_close_in_dtype

VARIANTS = {
    "safetensors": "safetensors",
    "bin": "bin",
    "sharded": "sharded",
    "untied": "safetensors",
    "primera": "safetensors",
}


@pytest.fixture(scope="module")
def transformers():
    return import_transformers()


@pytest.fixture(scope="module")
def imported(tmp_path_factory, transformers):
    result = {}
    for seed, (name, layout) in enumerate(VARIANTS.items()):
        root = tmp_path_factory.mktemp(name)
        hf_dir, out_dir = str(root / "hf"), str(root / "out")
        model, vocab = tiny_hf_led(
            hf_dir, transformers, layout, primera=name == "primera", seed=seed, tied=name != "untied"
        )
        summary = import_hf_led(hf_dir, out_dir)
        result[name] = {"hf_dir": hf_dir, "out_dir": out_dir, "hf": model, "vocab": vocab, "summary": summary}
    return result


def load_imported(out_dir, data=None):
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": data or out_dir}
    )
    return models[0].eval(), task


def right_padded(rows):
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), 1, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
    return tokens


def decoder_batch(tokenizer):
    labels = tokenizer([TEXTS[1], TEXTS[2][:30], TEXTS[5]], padding=True, return_tensors="pt").input_ids
    return labels, torch.cat([torch.full((labels.size(0), 1), 2), labels[:, :-1]], dim=1)


@pytest.mark.parametrize("variant", ["safetensors", "bin", "sharded", "untied"])
def test_led_logits_equal_hugging_face(variant, imported):
    """Batch 3, right padding, sources of 20-40 tokens (several windows of 4
    and 8), global attention on the first token as LED's checkpoint records."""
    entry = imported[variant]
    model, task = load_imported(entry["out_dir"])
    assert entry["summary"]["arch"] == "led_large" and entry["summary"]["document_separator"] is None
    assert model.encoder.self_attention_component.global_attention == "first"
    assert model.encoder.self_attention_component.windows == TINY_LED_WINDOWS
    assert model.encoder.embed_positions.weight.size(0) == TINY_LED_ENCODER_POSITIONS + 2
    assert model.decoder.embed_positions.weight.size(0) == TINY_LED_DECODER_POSITIONS + 2
    tied = variant != "untied"
    assert (model.decoder.output_projection.weight is model.encoder.embed_tokens.weight) == tied
    assert (model.decoder.embed_tokens.weight is model.encoder.embed_tokens.weight) == tied
    if not tied:
        hf_state = entry["hf"].state_dict()
        assert torch.equal(model.decoder.output_projection.weight, hf_state["lm_head.weight"])
        assert not torch.equal(hf_state["lm_head.weight"], hf_state["led.encoder.embed_tokens.weight"])
    tokenizer = hf_tokenizer(entry["hf_dir"])
    source = tokenizer([TEXTS[0], TEXTS[3], TEXTS[6][:40]], padding=True, return_tensors="pt")
    assert source.attention_mask.sum(1).min() > 2 * max(TINY_LED_WINDOWS)
    labels, decoder_input = decoder_batch(tokenizer)
    global_mask = torch.zeros_like(source.input_ids)
    global_mask[:, 0] = 1
    with torch.no_grad():
        expected = entry["hf"](
            input_ids=source.input_ids,
            attention_mask=source.attention_mask,
            global_attention_mask=global_mask,
            decoder_input_ids=decoder_input,
        ).logits
        logits, _ = model(source.input_ids, source.attention_mask.sum(1), decoder_input)
    real = labels.ne(1)
    assert expected[real].std() > 0.3
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])


def test_attention_window_from_config():
    """One value (LEDConfig's int default) is repeated per layer; a list must
    have one even window per encoder layer."""
    from mdsfair.importers.hf_led import led_windows

    assert led_windows({"attention_window": 512}, "config.json", 3) == [512, 512, 512]
    assert led_windows({"attention_window": [4, 8]}, "config.json", 2) == [4, 8]
    for bad in ([4, 8, 8], 7, [4, 0]):
        with pytest.raises(ImportRefused, match="config.json: attention_window"):
            led_windows({"attention_window": bad}, "config.json", 2)


def test_every_layout_imports_the_same_vocabulary_files(imported):
    reference = imported["safetensors"]["out_dir"]
    for name in ("bin", "sharded", "untied"):
        for file in ("dict.txt", "encoder.json", "vocab.bpe"):
            with (
                open(os.path.join(reference, file), encoding="utf-8") as a,
                open(os.path.join(imported[name]["out_dir"], file), encoding="utf-8") as b,
            ):
                assert a.read() == b.read(), (name, file)


def test_primera_checkpoint_records_doc_sep_layout_and_dictionary(imported):
    entry = imported["primera"]
    separator = len(entry["vocab"])
    assert entry["summary"]["arch"] == "primera" and entry["summary"]["document_separator"] == separator
    state = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(entry["out_dir"], "model.pt"))
    assert recorded(state, "model", "global_attention") == "doc-sep"
    assert recorded(state, "model", "attention_window") == "4,8"
    assert recorded(state, "model", "max_encoder_positions") == TINY_LED_ENCODER_POSITIONS
    assert recorded(state, "task", "source_layout") == "primera"
    assert recorded(state, "task", "max_source_positions") == TINY_LED_ENCODER_POSITIONS
    assert recorded(state, "task", "max_target_positions") == TINY_LED_DECODER_POSITIONS
    with open(os.path.join(entry["out_dir"], "dict.txt"), encoding="utf-8") as f:
        symbols = [line.split()[0] for line in f]
    assert len(symbols) + 4 == separator + 1 and symbols[-1] == "<doc-sep>" and symbols[-2] == "<mask>"
    with open(os.path.join(entry["out_dir"], "encoder.json"), encoding="utf-8") as f:
        assert "<doc-sep>" not in json.load(f)
    led = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(imported["safetensors"]["out_dir"], "model.pt"))
    assert recorded(led, "model", "global_attention") == "first"
    assert recorded(led, "task", "source_layout") is None  # the data-bin's layout, or 'documents'
    # OUT_DIR is a data-bin without splits: PRIMERA's records its layout and <doc-sep> id
    with open(os.path.join(entry["out_dir"], "mdsfair.json"), encoding="utf-8") as f:
        assert json.load(f)["source_layout"] == {
            "name": "primera",
            "document_separator": "<doc-sep>",
            "document_separator_id": separator,
            "per_document_budget": True,
        }
    with open(os.path.join(imported["safetensors"]["out_dir"], "mdsfair.json"), encoding="utf-8") as f:
        assert "source_layout" not in json.load(f)


def recorded(state, section, name):
    """A value of the checkpoint's cfg (its model section is the training Namespace)."""
    part = state["cfg"][section]
    return part[name] if isinstance(part, dict) else getattr(part, name)


def primer_dataloader_ids(tokenizer, documents, separator):
    """allenai/PRIMER script/dataloader.py, join method concat_start_wdoc_global,
    mask_num 0, no truncation: every document encoded alone, its <s>/</s>
    stripped, a <doc-sep> after each; <s> first and </s> last."""
    ids = []
    for document in documents:
        document = " ".join(document.replace("\n", " ").split())
        ids.extend(tokenizer.encode(document)[1:-1])
        ids.append(separator)
    return [tokenizer.bos_token_id] + ids + [tokenizer.eos_token_id]


def test_primera_preprocessed_cluster_gets_primer_ids_and_hugging_face_logits(imported, tmp_path):
    entry = imported["primera"]
    data_bin = gpt2_data_bin(str(tmp_path), entry["out_dir"])
    model, task = load_imported(entry["out_dir"], data=data_bin)
    separator = len(entry["vocab"])
    assert task.cfg.source_layout == "primera" and task.document_separator() == separator
    assert model.encoder.self_attention_component.document_separator == separator
    tokenizer = hf_tokenizer(entry["hf_dir"])
    assert tokenizer.convert_tokens_to_ids("<doc-sep>") == separator
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    sources = []
    for index, cluster in enumerate(default_clusters()):
        expected = primer_dataloader_ids(tokenizer, cluster["documents"], separator)
        assert dataset[index]["source"].tolist() == expected
        assert expected.count(separator) == len(cluster["documents"])
        # and HF's tokenizer on the joined text, <doc-sep> written after every document
        assert tokenizer("".join(d + "<doc-sep>" for d in cluster["documents"])).input_ids == expected
        sources.append(expected)
    src = right_padded(sources)
    mask = src.ne(1).long()
    global_mask = (src.eq(separator) | (torch.arange(src.size(1)) == 0)).long()  # primer_hf_main.py
    labels = right_padded([tokenizer(c["summary"]).input_ids for c in default_clusters()])
    decoder_input = torch.cat([torch.full((labels.size(0), 1), 2), labels[:, :-1]], dim=1)
    with torch.no_grad():
        expected = entry["hf"](
            input_ids=src, attention_mask=mask, global_attention_mask=global_mask, decoder_input_ids=decoder_input
        ).logits
        logits, _ = model(src, mask.sum(1), decoder_input)
        first_only = entry["hf"](
            input_ids=src,
            attention_mask=mask,
            global_attention_mask=(global_mask * 0).index_fill(1, torch.tensor([0]), 1),
            decoder_input_ids=decoder_input,
        ).logits
    real = labels.ne(1)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])
    assert (first_only[real] - expected[real]).abs().max() > 1e-3  # the <doc-sep> global tokens matter


@pytest.mark.parametrize(
    "variant,weights_format", [("safetensors", "safetensors"), ("primera", "bin"), ("untied", "safetensors")]
)
def test_export_round_trip_is_exact(variant, weights_format, imported, tmp_path, transformers):
    entry = imported[variant]
    out = str(tmp_path / "hf")
    export_hf_led(
        os.path.join(entry["out_dir"], "model.pt"),
        os.path.join(entry["out_dir"], "dict.txt"),
        out,
        weights_format=weights_format,
    )
    with open(os.path.join(entry["hf_dir"], "config.json")) as f:
        original = json.load(f)
    with open(os.path.join(out, "config.json")) as f:
        exported = json.load(f)
    for key in (
        "vocab_size",
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "max_encoder_position_embeddings",
        "max_decoder_position_embeddings",
        "attention_window",
        "activation_function",
        "dropout",
        "attention_dropout",
        "activation_dropout",
        "tie_word_embeddings",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "decoder_start_token_id",
        "model_type",
    ):
        assert exported[key] == original[key], key
    with open(os.path.join(out, "vocab.json"), encoding="utf-8") as f:
        assert json.load(f) == entry["vocab"]
    with (
        open(os.path.join(out, "merges.txt"), encoding="utf-8") as a,
        open(os.path.join(entry["hf_dir"], "merges.txt"), encoding="utf-8") as b,
    ):
        assert [line for line in a.read().splitlines() if not line.startswith("#")] == [
            line for line in b.read().splitlines() if not line.startswith("#")
        ]
    if variant == "primera":
        with open(os.path.join(out, "added_tokens.json")) as f:
            assert json.load(f) == {"<doc-sep>": len(entry["vocab"])}
        assert hf_tokenizer(out).convert_tokens_to_ids("<doc-sep>") == len(entry["vocab"])
    else:
        assert not os.path.exists(os.path.join(out, "added_tokens.json"))
    reloaded = transformers.LEDForConditionalGeneration.from_pretrained(out).eval()
    theirs, ours = entry["hf"].state_dict(), reloaded.state_dict()
    assert set(theirs) == set(ours)
    unused = set()
    if variant == "untied":  # HF's forward never reads led.shared when nothing is tied; the import says so
        unused = {"led.shared.weight"}
        assert any("shared.weight differs" in note for note in entry["summary"]["notes"])
        assert torch.equal(ours["led.shared.weight"], theirs["led.encoder.embed_tokens.weight"])
    for key in set(theirs) - unused:
        assert torch.equal(theirs[key], ours[key]), key
    tokenizer = hf_tokenizer(entry["hf_dir"])
    source = tokenizer([TEXTS[0], TEXTS[3]], padding=True, return_tensors="pt")
    with torch.no_grad():
        before = entry["hf"](**source, decoder_input_ids=source.input_ids[:, :5]).logits
        after = reloaded(**source, decoder_input_ids=source.input_ids[:, :5]).logits
    assert torch.equal(before, after)
    # and the exported directory imports back to the same checkpoint
    again = import_hf_led(out, str(tmp_path / "again"))
    first = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(entry["out_dir"], "model.pt"))
    second = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(again["out_dir"], "model.pt"))
    assert set(first["model"]) == set(second["model"])
    assert all(torch.equal(first["model"][k], second["model"][k]) for k in first["model"])
    assert recorded(first, "model", "attention_window") == recorded(second, "model", "attention_window") == "4,8"
    for file in ("dict.txt", "encoder.json"):
        with (
            open(os.path.join(entry["out_dir"], file), encoding="utf-8") as a,
            open(os.path.join(again["out_dir"], file), encoding="utf-8") as b,
        ):
            assert a.read() == b.read(), file


# ------------------------------------------------------------ refusals


@pytest.fixture
def source_copy(imported, tmp_path):
    directory = str(tmp_path / "copy")
    shutil.copytree(imported["primera"]["hf_dir"], directory)
    return directory


def edit_json(path, **changes):
    with open(path) as f:
        data = json.load(f)
    data.update(changes)
    with open(path, "w") as f:
        json.dump(data, f)


def drop_doc_sep_ids(directory):
    """Remove every place that names <doc-sep> from the PRIMERA-like
    tokenizer files: added_tokens.json, tokenizer.json, and the
    additional_special_tokens / added_tokens_decoder entries of
    tokenizer_config.json and special_tokens_map.json."""
    for name in ("added_tokens.json", "tokenizer.json"):
        os.remove(os.path.join(directory, name))
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = os.path.join(directory, name)
        if not os.path.exists(path):  # newer transformers write no special_tokens_map.json
            continue
        with open(path) as f:
            data = json.load(f)
        data.pop("additional_special_tokens", None)
        decoder = data.pop("added_tokens_decoder", None)
        if decoder is not None:  # keep <s> <pad> </s> <unk> <mask>
            data["added_tokens_decoder"] = {i: e for i, e in decoder.items() if e["content"] != "<doc-sep>"}
        with open(path, "w") as f:
            json.dump(data, f)


@pytest.mark.parametrize("declared_in", ["special_tokens_map.json", "tokenizer_config.json"])
def test_doc_sep_declared_only_as_an_additional_special_token(
    declared_in, imported, source_copy, tmp_path, transformers
):
    """<doc-sep> named only by ``additional_special_tokens`` (a string, as
    PRIMERA's special_tokens_map.json, or an AddedToken object) gets the id
    Hugging Face's tokenizer gives it on loading, the next after vocab.json:
    the same import as with added_tokens.json."""
    drop_doc_sep_ids(source_copy)
    entry = {
        "content": "<doc-sep>",
        "lstrip": False,
        "normalized": True,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }
    path = os.path.join(source_copy, declared_in)
    if not os.path.exists(path):
        with open(path, "w") as f:  # PRIMERA's special_tokens_map.json (test_primera_release_file_layout)
            json.dump(
                {
                    "bos_token": "<s>",
                    "eos_token": "</s>",
                    "unk_token": "<unk>",
                    "sep_token": "</s>",
                    "pad_token": "<pad>",
                    "cls_token": "<s>",
                    "mask_token": "<mask>",
                },
                f,
            )
    edit_json(path, additional_special_tokens=["<doc-sep>"] if declared_in == "special_tokens_map.json" else [entry])
    separator = len(imported["primera"]["vocab"])
    assert hf_tokenizer(source_copy).convert_tokens_to_ids("<doc-sep>") == separator
    summary = import_hf_led(source_copy, str(tmp_path / "out"))
    assert summary["document_separator"] == separator and summary["arch"] == "primera"
    with (
        open(os.path.join(str(tmp_path / "out"), "dict.txt"), encoding="utf-8") as a,
        open(os.path.join(imported["primera"]["out_dir"], "dict.txt"), encoding="utf-8") as b,
    ):
        assert a.read() == b.read()


def test_refuses_an_embedding_row_no_tokenizer_file_names(imported, source_copy, tmp_path):
    """PRIMERA's weights (one row more than vocab.json) without any file that
    declares <doc-sep>: refused, naming the directory, instead of importing
    an unnamed row as an LED."""
    drop_doc_sep_ids(source_copy)
    rows = len(imported["primera"]["vocab"]) + 1
    with pytest.raises(
        ImportRefused,
        match=rf"{source_copy}: the model has {rows} embedding rows but the tokenizer "
        rf"names only {rows - 1} \(vocab.json\) and no <doc-sep> was found",
    ):
        import_hf_led(source_copy, str(tmp_path / "out"))
    assert not os.path.exists(str(tmp_path / "out" / "model.pt"))


def test_refuses_another_model_type(source_copy, tmp_path):
    edit_json(os.path.join(source_copy, "config.json"), model_type="bart")
    with pytest.raises(ImportRefused, match=r"config.json: model_type is 'bart', not 'led'"):
        import_hf_led(source_copy, str(tmp_path / "out"))


def test_refuses_added_tokens_other_than_doc_sep(source_copy, tmp_path):
    edit_json(os.path.join(source_copy, "added_tokens.json"), **{"<extra>": 999})
    with pytest.raises(ImportRefused, match=r"adds '<extra>' \(id 999\)"):
        import_hf_led(source_copy, str(tmp_path / "out"))


def test_refuses_nonzero_final_logits_bias_and_mismatched_layers(source_copy, tmp_path):
    from safetensors.torch import load_file, save_file

    path = os.path.join(source_copy, "model.safetensors")
    state = load_file(path)
    state["final_logits_bias"] = torch.full_like(state["final_logits_bias"], 0.5)
    save_file(state, path)
    with pytest.raises(ImportRefused, match="final_logits_bias is nonzero"):
        import_hf_led(source_copy, str(tmp_path / "out"))
    state["final_logits_bias"].zero_()
    save_file(state, path)
    edit_json(os.path.join(source_copy, "config.json"), encoder_layers=1, attention_window=[4])
    with pytest.raises(
        ImportRefused,
        match=r"config\.json: encoder_layers 1 does not match the weights: .*holds "
        r"layers 0-1 under led\.encoder\.layers\.N",
    ):
        import_hf_led(source_copy, str(tmp_path / "out"))
    assert not os.path.exists(str(tmp_path / "out" / "model.pt"))


def test_cli_lists_and_runs_hf_led(imported, tmp_path, capsys):
    assert import_main(["--help"]) == 0 and "  hf-led" in capsys.readouterr().out
    assert export_main(["--help"]) == 0 and "  hf-led" in capsys.readouterr().out
    entry = imported["primera"]
    out_dir = str(tmp_path / "out")
    assert import_main(["hf-led", entry["hf_dir"], out_dir]) == 0
    printed = capsys.readouterr().out
    assert f"--dict {out_dir}/dict.txt" in printed and "--arch primera" in printed
    assert "--attention-window 4,8" in printed and "--global-attention doc-sep" in printed
    preprocess = next(line for line in printed.splitlines() if "mdsfair-preprocess" in line)
    assert preprocess.endswith(f"--dict {out_dir}/dict.txt --source-layout primera")
    generate = next(line for line in printed.splitlines() if "fairseq-generate" in line)
    assert f"--max-source-positions {TINY_LED_ENCODER_POSITIONS}" in generate and "--source-layout" not in generate
    train = next(line for line in printed.splitlines() if "fairseq-train" in line)
    assert train.count("--source-layout primera") == 1 and "--per-document-budget" not in train
    assert import_main(["hf-led", entry["hf_dir"], out_dir]) == 1
    err = capsys.readouterr().err
    assert "is not empty" in err and "give --overwrite" in err
    assert (
        export_main(
            ["hf-led", os.path.join(out_dir, "model.pt"), os.path.join(out_dir, "dict.txt"), str(tmp_path / "hf")]
        )
        == 0
    )
    assert os.path.isfile(str(tmp_path / "hf" / "added_tokens.json"))


# ------------------------------------------------ the README recipe, tiny


def run_module(module, *arguments, cwd):
    """``python -m module arguments`` (the console scripts on PATH run the
    installed checkout, not this one); returns stdout, fails with stderr."""
    import subprocess
    import sys

    env = {
        **os.environ,
        "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(mdsfair.__file__))),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run([sys.executable, "-m", module, *arguments], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_readme_recipe_import_convert_preprocess_generate_rouge(imported, tmp_path):
    """examples/led/README.md's PRIMERA-multinews sequence on the tiny
    PRIMERA-like model: mdsfair-import hf-led, mdsfair-convert multinews,
    mdsfair-preprocess with the imported files, fairseq-generate with the
    recipe's flags (lengths shrunk), mdsfair-rouge."""
    work = str(tmp_path)
    out = os.path.join(work, "imported")
    run_module("mdsfair.importers.cli", "hf-led", imported["primera"]["hf_dir"], out, cwd=work)
    release = os.path.join(work, "multi-news")
    os.makedirs(release)
    clusters = [c for c in default_clusters() if len(c["documents"]) > 1] * 2
    with (
        open(os.path.join(release, "test.src"), "w", encoding="utf-8") as src,
        open(os.path.join(release, "test.tgt"), "w", encoding="utf-8") as tgt,
    ):
        for cluster in clusters:
            src.write(" story_separator_special_tag ".join(cluster["documents"]) + "\n")
            tgt.write("– " + cluster["summary"] + "\n")
    os.makedirs(os.path.join(work, "raw"))
    run_module(
        "mdsfair.preprocess.converters",
        "multinews",
        os.path.join(release, "test.src"),
        "--split",
        "test",
        "-o",
        os.path.join(work, "raw", "test.jsonl"),
        cwd=work,
    )
    run_module(
        "mdsfair.preprocess.binarize",
        "--input-dir",
        "raw",
        "--destdir",
        "data-bin",
        "--subword",
        "gpt2",
        "--gpt2-encoder-json",
        f"{out}/encoder.json",
        "--gpt2-vocab-bpe",
        f"{out}/vocab.bpe",
        "--dict",
        f"{out}/dict.txt",
        "--source-layout",
        "primera",
        "--no-progress-bar",
        cwd=work,
    )
    log = run_module(
        "fairseq_cli.generate",
        "data-bin",
        "--user-dir",
        os.path.dirname(mdsfair.__file__),
        "--task",
        "multidoc_summarization",
        "--max-source-positions",
        str(TINY_LED_ENCODER_POSITIONS),
        "--path",
        f"{out}/model.pt",
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--lenpen",
        "1.0",
        "--max-len-a",
        "0",
        "--max-len-b",
        "20",
        "--batch-size",
        "2",
        "--cpu",
        cwd=work,
    )
    hypotheses = [line for line in log.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == len(clusters)
    sources = [line for line in log.splitlines() if line.startswith("S-")]
    assert all(
        line.count("<doc-sep>") == len(cluster["documents"])
        for line, cluster in zip(sorted(sources, key=lambda line: int(line.split("\t")[0][2:])), clusters)
    )  # the data-bin's layout
    with open(os.path.join(work, "gen.out"), "w", encoding="utf-8") as f:
        f.write(log)
    table = run_module(
        "mdsfair.evaluation.rouge",
        "gen.out",
        "--data-bin",
        "data-bin",
        "--split",
        "test",
        "--fast",
        "--json",
        "scores.json",
        cwd=work,
    )
    assert "R-Lsum" in table
    with open(os.path.join(work, "scores.json")) as f:
        scores = json.load(f)
    for metric in ("rouge-1", "rouge-2", "rouge-l", "rouge-lsum"):
        assert 0.0 <= scores[metric]["f"] <= 1.0
    assert scores["info"]["references"].endswith("test.summary.txt")


def readme_commands(program):
    """The ``program ...`` command lines of examples/led/README.md's code blocks
    (continuation lines joined, ``> file`` dropped)."""
    import shlex

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "examples", "led", "README.md"), encoding="utf-8") as f:
        text = f.read()
    commands = []
    for block in text.split("```")[1::2]:
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line.split(">")[0]) if line.strip().startswith(program) else []
            if words and words[0] == program:
                commands.append(words[1:])
    return root, commands


def test_readme_fairseq_commands_parse_with_their_flags(monkeypatch):
    """Every fairseq-train / fairseq-generate line of the recipe parses with
    fairseq's own parsers (flags exist, values have their types, the archs are
    registered); every mdsfair-import / mdsfair-export kind exists."""
    from fairseq import options

    from mdsfair.importers.cli import EXPORT_KINDS, IMPORT_KINDS

    root, train = readme_commands("fairseq-train")
    monkeypatch.chdir(root)  # --user-dir mdsfair, as a user runs it from the checkout
    _, generate = readme_commands("fairseq-generate")
    assert len(train) == 2 and len(generate) == 1
    # PRIMERA's layout is a data-bin option: the README's PRIMERA data-bins are preprocessed with it
    from mdsfair.preprocess.binarize import get_parser

    _, preprocess = readme_commands("mdsfair-preprocess")
    layouts = {}
    for argv in preprocess:
        parsed = get_parser().parse_args(argv)
        assert parsed.subword == "gpt2" and parsed.dict.endswith("/dict.txt")
        layouts[parsed.destdir] = parsed.source_layout
    for argv in train:
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        assert args.arch in ("primera", "led_large") and args.max_source_positions == 4096
        if args.arch == "primera":
            assert layouts[argv[0]] == "primera" and "--per-document-budget" not in argv and args.lr == [3e-5]
            assert (args.warmup_updates, int(args.total_num_update), args.update_freq) == (1000, 50000, [4])
            # PRIMERA keeps the checkpoint with the best validation avgr, decoded with beam 1
            assert args.eval_rouge and args.best_checkpoint_metric == "rouge_avg"
            assert args.maximize_best_checkpoint_metric and json.loads(args.eval_rouge_args)["beam"] == 1
        else:
            assert args.lr == [5e-5] and args.lr_scheduler == "fixed" and args.global_attention == "first"
    args = options.parse_args_and_arch(options.get_generation_parser(), generate[0])
    assert (args.beam, args.lenpen, args.max_len_a, args.max_len_b) == (5, 1.0, 0, 1022)
    assert layouts[generate[0][0]] == "primera" and args.source_layout is None and not args.per_document_budget
    _, imports = readme_commands("mdsfair-import")
    _, exports = readme_commands("mdsfair-export")
    assert {argv[0] for argv in imports} == {"hf-led", "bart-to-led"} <= set(IMPORT_KINDS)
    assert {argv[0] for argv in exports} == {"hf-led"} <= set(EXPORT_KINDS)


# Fields of allenai/PRIMERA's config.json (and of the models fine-tuned from it) that
# Hugging Face's LEDConfig ignores: the Longformer / BART-era settings it was converted from,
# and the generation defaults added to PRIMERA-multinews (num_beams, trigram block).
PRIMERA_LEGACY_FIELDS = {
    "_num_labels": 3,
    "add_bias_logits": False,
    "add_final_layer_norm": False,
    "attention_mode": "sliding_chunks",
    "autoregressive": False,
    "classif_dropout": 0.0,
    "extra_pos_embeddings": 2,
    "force_bos_token_to_be_generated": False,
    "max_position_embeddings": 4096,
    "normalize_before": False,
    "normalize_embedding": True,
    "static_position_embeddings": False,
    "num_beams": 5,
    "no_repeat_ngram_size": 3,
}


def test_primera_release_file_layout(imported, tmp_path, capsys):
    """PRIMERA's own files: legacy config fields, attention_dilation, a
    tokenizer_config.json with only model_max_length, special_tokens_map.json
    and added_tokens.json {"<doc-sep>": id}, no tokenizer.json: the same
    checkpoint and dictionary as the save_pretrained layout, and the config's
    generation defaults become fairseq-generate flags."""
    entry = imported["primera"]
    release = str(tmp_path / "PRIMERA-like")
    shutil.copytree(entry["hf_dir"], release)
    with open(os.path.join(release, "config.json")) as f:
        config = json.load(f)
    config.update(PRIMERA_LEGACY_FIELDS, attention_dilation=[1] * config["encoder_layers"])
    with open(os.path.join(release, "config.json"), "w") as f:
        json.dump(config, f)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        if os.path.exists(os.path.join(release, name)):
            os.remove(os.path.join(release, name))
    separator = len(entry["vocab"])
    with open(os.path.join(release, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": TINY_LED_ENCODER_POSITIONS}, f)
    with open(os.path.join(release, "special_tokens_map.json"), "w") as f:
        json.dump(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "sep_token": "</s>",
                "pad_token": "<pad>",
                "cls_token": "<s>",
                "mask_token": "<mask>",
                "additional_special_tokens": ["<doc-sep>"],
            },
            f,
        )
    with open(os.path.join(release, "added_tokens.json"), "w") as f:
        json.dump({"<doc-sep>": separator}, f)
    out = str(tmp_path / "out")
    assert import_main(["hf-led", release, out]) == 0
    generate = next(line for line in capsys.readouterr().out.splitlines() if "fairseq-generate" in line)
    assert "--beam 5" in generate and "--no-repeat-ngram-size 3" in generate
    for file in ("dict.txt", "encoder.json", "vocab.bpe"):
        with (
            open(os.path.join(out, file), encoding="utf-8") as a,
            open(os.path.join(entry["out_dir"], file), encoding="utf-8") as b,
        ):
            assert a.read() == b.read(), file
    ours = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(out, "model.pt"))
    reference = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(entry["out_dir"], "model.pt"))
    assert all(torch.equal(ours["model"][k], reference["model"][k]) for k in reference["model"])
    for name in ("global_attention", "attention_window", "max_encoder_positions", "max_target_positions"):
        assert recorded(ours, "model", name) == recorded(reference, "model", name)
    # a legacy field with another value than BART's is a model fairseq's layers do not compute
    config["normalize_before"] = True
    with open(os.path.join(release, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(ImportRefused, match="normalize_before=true"):
        import_hf_led(release, str(tmp_path / "refused"))


LED_BASE_CONFIG = dict(  # allenai/led-base-16384's dimensions (LEDConfig fields)
    model_type="led",
    vocab_size=50265,
    d_model=768,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=12,
    decoder_attention_heads=12,
    encoder_ffn_dim=3072,
    decoder_ffn_dim=3072,
    max_encoder_position_embeddings=16384,
    max_decoder_position_embeddings=1024,
    attention_window=[1024] * 6,
)
PRIMERA_CONFIG = dict(  # allenai/PRIMERA's (led-large dimensions, 4,096 positions, window 512, one row more)
    LED_BASE_CONFIG,
    vocab_size=50266,
    d_model=1024,
    encoder_layers=12,
    decoder_layers=12,
    encoder_attention_heads=16,
    decoder_attention_heads=16,
    encoder_ffn_dim=4096,
    decoder_ffn_dim=4096,
    max_encoder_position_embeddings=4096,
    attention_window=[512] * 12,
    **PRIMERA_LEGACY_FIELDS,
)


@pytest.mark.parametrize(
    "name,config,separator,arch",
    [
        ("led-base-16384", LED_BASE_CONFIG, None, "led_base"),
        (
            "led-large-16384",
            dict(PRIMERA_CONFIG, vocab_size=50265, max_encoder_position_embeddings=16384, attention_window=[1024] * 12),
            None,
            "led_large",
        ),
        ("PRIMERA", PRIMERA_CONFIG, 50265, "primera"),
    ],
)
def test_released_configurations_map_to_their_architecture(name, config, separator, arch):
    """The released models' dimensions select their arch with no dimension
    flag, and the model that arch builds (on the meta device) has the
    released weight shapes: position tables of P + 2 rows, global projections."""
    from mdsfair.importers.fairseq_bart import training_namespace
    from mdsfair.importers.hf_led import expected_parameter_names, led_arguments, led_shape, position_arguments

    shape, positions, windows = led_shape(config, f"{name}/config.json")
    chosen, flags = led_arguments(shape, positions, windows, separator)
    assert chosen == arch
    assert not any(flag.startswith(("--encoder-", "--decoder-")) for flag in flags[::2]), flags
    args = training_namespace(chosen, flags + position_arguments(shape, positions))
    shapes = expected_parameter_names(args, config["vocab_size"], separator)
    d, layers = config["d_model"], config["encoder_layers"]
    assert shapes["encoder.embed_positions.weight"] == (positions + 2, d)
    assert shapes["decoder.embed_positions.weight"] == (1024 + 2, d)
    assert shapes["encoder.embed_tokens.weight"] == (config["vocab_size"], d)
    assert shapes[f"encoder.layers.{layers - 1}.self_attn.k_global_proj.weight"] == (d, d)
    assert f"encoder.layers.{layers}.fc1.weight" not in shapes
    assert args.attention_window == str(windows[0]) and args.max_encoder_positions == positions
    assert args.global_attention == ("doc-sep" if separator else "first")


def test_a_primera_import_restores_into_primera_hierencdec(imported, tmp_path):
    """Issue 31: ``mdsfair-import hf-led``'s PRIMERA output restores into
    ``primera_hierencdec`` with fairseq-train's ``--restore-file`` (the
    import's architecture flags, the arch and global tokens replaced: the
    documents layout, each document's <s> global; ``--allow-arch-change``, as
    mdsfair refuses a silent change of architecture). No parameter is new:
    every restored tensor equals the import's, and the model computes."""
    from tests.import_fixtures import restore_with_trainer

    entry = imported["primera"]
    assert entry["summary"]["arch"] == "primera"
    flags = list(entry["summary"]["arch_flags"])
    for flag in ("--global-attention", "--source-layout"):
        if flag in flags:
            index = flags.index(flag)
            del flags[index : index + 2]
    data_bin = gpt2_data_bin(str(tmp_path / "data"), entry["out_dir"])
    trainer = restore_with_trainer(
        data_bin,
        os.path.join(entry["out_dir"], "model.pt"),
        "primera_hierencdec",
        [
            *flags,
            "--global-attention",
            "documents",
            "--allow-arch-change",
            "--max-source-positions",
            str(TINY_LED_ENCODER_POSITIONS),
        ],
        save_dir=str(tmp_path / "save"),
    )
    model = trainer.model
    assert (
        model.encoder.self_attention_component.name,
        model.encoder.position_component.name,
        model.decoder.cross_attention_component.name,
    ) == ("longformer", "document-restart", "document-scaled")
    imported_state = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(entry["out_dir"], "model.pt"))["model"]
    restored = model.state_dict()
    assert set(restored) == set(imported_state)
    for name, tensor in imported_state.items():
        assert torch.equal(restored[name].cpu(), tensor), name
    task = trainer.task
    dataset = task.dataset("valid")
    sample = task._sample_for(model, dataset.collater([dataset[0], dataset[1]]))
    model.eval()
    with torch.no_grad():
        logits = model(**sample["net_input"])[0]
    assert torch.isfinite(logits).all()
