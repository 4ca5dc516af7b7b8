"""``mdsfair-export hf-t5`` (:mod:`mdsfair.importers.hf_t5_export`): a tiny
random Hugging Face T5 v1.1, imported with ``mdsfair-import hf-t5`` and
exported back, loads with ``T5ForConditionalGeneration.from_pretrained`` and
gives the original's logits in float64, with the same weights, and its
``T5Tokenizer`` gives the original's ids; the console script writes a
folder Hugging Face loads; what is no T5 v1.1 checkpoint with its
dictionary is refused in one line naming the file, nothing written."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.hf_t5_family import TRAINING_LINES, padded_batch, transformers
from tests.t5_fixtures import tiny_hf_t5
from tests.tolerances import assert_close_in_dtype
from tests.utils import REPO_ROOT


@pytest.fixture(scope="module")
def t5_folders(tmp_path_factory):
    """``make(own_lm_head)``: the Hugging Face folder, its import and the
    export of the import, made once for each kind of ``lm_head``."""
    from mdsfair.importers.hf_t5 import import_hf_t5
    from mdsfair.importers.hf_t5_export import export_hf_t5

    made = {}

    def make(own_lm_head: bool):
        if own_lm_head not in made:
            root = tmp_path_factory.mktemp("t5_round_trip")
            hf_dir = tiny_hf_t5(str(root / "hf"), own_lm_head=own_lm_head)
            imported, exported = str(root / "imported"), str(root / "exported")
            import_hf_t5(hf_dir, imported)
            summary = export_hf_t5(os.path.join(imported, "model.pt"), os.path.join(imported, "dict.txt"), exported)
            made[own_lm_head] = hf_dir, imported, exported, summary
        return made[own_lm_head]

    return make


@pytest.fixture(params=[True, False], ids=["own_lm_head", "tied_lm_head"])
def round_trip(request, t5_folders):
    return t5_folders(request.param)


def batch():
    """Two sources of different lengths, right-padded with T5's pad 0, their
    mask, and decoder inputs starting from pad."""
    ids, mask = padded_batch([21, 12], seed=3)
    targets = torch.randint(3, 180, (2, 7), generator=torch.Generator().manual_seed(4))
    return ids, mask, torch.cat([torch.zeros(2, 1, dtype=torch.long), targets[:, :-1]], dim=1)


def test_the_export_gives_the_original_weights_and_logits_in_float64(round_trip):
    hf_dir, _imported, exported, summary = round_trip
    assert summary["files"] == ["config.json", "tokenizer_config.json", "model.safetensors", "spiece.model"]
    original = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir).double().eval()
    again = transformers.T5ForConditionalGeneration.from_pretrained(exported).double().eval()
    config = json.load(open(os.path.join(exported, "config.json")))
    assert (config["feed_forward_proj"], config["decoder_start_token_id"], config["vocab_size"]) == (
        "gated-gelu",
        0,
        184,
    )
    assert again.config.scale_decoder_outputs is False and again.config.d_kv == 8
    ours, theirs = again.state_dict(), original.state_dict()
    assert ours.keys() == theirs.keys()
    assert [name for name in ours if not torch.equal(ours[name], theirs[name])] == []
    ids, mask, decoder_input = batch()
    with torch.no_grad():
        expected = original(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        logits = again(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
    assert_close_in_dtype(logits, expected)


def test_the_exported_tokenizer_gives_the_original_ids(round_trip):
    hf_dir, _imported, exported, _summary = round_trip
    original = transformers.T5Tokenizer.from_pretrained(hf_dir)
    again = transformers.AutoTokenizer.from_pretrained(exported)
    assert type(again).__name__ == "T5Tokenizer" and len(again) == len(original)
    for text in TRAINING_LINES[:6] + ["a sentinel <extra_id_0> and the last one <extra_id_99>, unknown ü"]:
        assert again(text).input_ids == original(text).input_ids, text


def run_console_script(*arguments: str) -> subprocess.CompletedProcess:
    """``mdsfair-export ARGUMENTS`` through the installed console script, on this checkout."""
    script = os.path.join(os.path.dirname(sys.executable), "mdsfair-export")
    if not os.path.isfile(script):
        pytest.skip(f"no console script {script} (mdsfair not installed)")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, script, *arguments], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_console_script_writes_a_folder_hugging_face_loads(t5_folders, tmp_path):
    hf_dir, imported, _exported, _summary = t5_folders(True)
    out_dir = str(tmp_path / "hf")
    done = run_console_script(
        "hf-t5",
        os.path.join(imported, "model.pt"),
        os.path.join(imported, "dict.txt"),
        out_dir,
        "--weights-format",
        "bin",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == (
        f"wrote config.json, tokenizer_config.json, pytorch_model.bin, spiece.model to {out_dir}"
    )
    original = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir).eval()
    again = transformers.T5ForConditionalGeneration.from_pretrained(out_dir).eval()
    ids, mask, decoder_input = batch()
    with torch.no_grad():
        expected = original(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        logits = again(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
    assert torch.equal(logits, expected)


@pytest.fixture(scope="module")
def bart_checkpoint(tmp_path_factory):
    """A tiny imported BART (model.pt, dict.txt): a checkpoint that is no T5."""
    from mdsfair.importers.hf_bart import import_hf_bart
    from tests.import_fixtures import import_transformers, tiny_hf_bart

    import_transformers()
    root = tmp_path_factory.mktemp("bart")
    tiny_hf_bart(str(root / "hf"), seed=5)
    import_hf_bart(str(root / "hf"), str(root / "out"))
    return os.path.join(str(root / "out"), "model.pt")


def test_the_command_refuses_what_is_no_t5_checkpoint_with_its_dictionary(
    t5_folders, bart_checkpoint, tmp_path, capsys
):
    """A non-T5 checkpoint, a missing dictionary, a dictionary without its
    SentencePiece model, and one that is not that model's vocabulary in T5's
    order: one line naming the file, nothing written."""
    from mdsfair.importers.cli import export_main

    _hf_dir, imported, _exported, _summary = t5_folders(True)
    checkpoint, dictionary = os.path.join(imported, "model.pt"), os.path.join(imported, "dict.txt")
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copyfile(dictionary, lonely / "dict.txt")
    reordered = tmp_path / "reordered"
    shutil.copytree(imported, reordered)
    lines = open(dictionary, encoding="utf-8").read().splitlines(keepends=True)
    lines[5], lines[6] = lines[6], lines[5]  # fairseq indices 9 and 10
    (reordered / "dict.txt").write_text("".join(lines), encoding="utf-8")
    cases = [
        (bart_checkpoint, dictionary, f"{bart_checkpoint}: arch 'bart_", "is not a t5_v1_1 architecture"),
        (checkpoint, str(tmp_path / "none.txt"), f"{tmp_path}/none.txt: missing", "the dict.txt the checkpoint"),
        (checkpoint, str(lonely / "dict.txt"), f"{lonely}/spm.model: missing", "--sentencepiece-model"),
        (checkpoint, str(reordered / "dict.txt"), f"{reordered}/dict.txt: entry 9 is", "T5 vocabulary"),
    ]
    for checkpoint_path, dict_path, starts, says in cases:
        out_dir = str(tmp_path / "out")
        assert export_main(["hf-t5", checkpoint_path, dict_path, out_dir]) == 1
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"mdsfair-export hf-t5: error: {starts}") and says in error, error
        assert "\n" not in error and not os.path.exists(out_dir)


@pytest.mark.parametrize("attention", ["local", "transient-global"])
def test_longt5_import_then_export_gives_the_original_weights_logits_and_ids(attention, tmp_path):
    """``mdsfair-export hf-longt5``: the encoder's attention under its
    LongT5 name (and transient-global's own tensors), no ``lm_head``; sources
    of several local and global blocks."""
    from mdsfair.importers.cli import export_main
    from mdsfair.importers.hf_longt5 import import_hf_longt5

    hf_dir = tiny_hf_t5(str(tmp_path / "hf"), longt5_attention=attention)
    imported, exported = str(tmp_path / "imported"), str(tmp_path / "exported")
    import_hf_longt5(hf_dir, imported)
    model_pt, dictionary = os.path.join(imported, "model.pt"), os.path.join(imported, "dict.txt")
    assert export_main(["hf-longt5", model_pt, dictionary, exported]) == 0
    config = json.load(open(os.path.join(exported, "config.json")))
    assert (config["model_type"], config["encoder_attention_type"]) == ("longt5", attention)
    assert (config["local_radius"], config["global_block_size"]) == (3, 4)
    original = transformers.LongT5ForConditionalGeneration.from_pretrained(hf_dir).double().eval()
    again = transformers.LongT5ForConditionalGeneration.from_pretrained(exported).double().eval()
    ours, theirs = again.state_dict(), original.state_dict()
    assert ours.keys() == theirs.keys()
    assert [name for name in ours if not torch.equal(ours[name], theirs[name])] == []
    ids, mask = padded_batch([40, 27], seed=3)
    decoder_input = batch()[2]
    with torch.no_grad():
        expected = original(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        logits = again(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
    assert_close_in_dtype(logits, expected)
    text = TRAINING_LINES[1] + " <extra_id_0>"
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported)
    assert tokenizer(text).input_ids == transformers.T5Tokenizer.from_pretrained(hf_dir)(text).input_ids
    # a longt5 checkpoint is no t5_v1_1 one
    assert export_main(["hf-t5", model_pt, dictionary, str(tmp_path / "as_t5")]) == 1
