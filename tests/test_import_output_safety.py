"""Imports hold their output folder as ``mdsfair-preprocess`` holds
``--destdir`` (issue 34 item 3; mdsfair/importers/output.py): one run at a
time, staged and committed, ``--overwrite`` touching only what mdsfair
wrote, and the imported checkpoint recording the fingerprints of its
``dict.txt`` and BPE files. And the importers' user errors of item 4: one
``PROG KIND: error: ...`` line, exit 1, nothing written."""

import json
import os
import shutil

import pytest
import torch
from fairseq import checkpoint_utils

import mdsfair  # noqa: F401
from mdsfair.checkpoints.fingerprints import DictionaryMismatchError
from mdsfair.checkpoints.record import RECORD_KEY
from mdsfair.importers import ImportRefused
from mdsfair.importers.cli import import_main
from tests.import_fixtures import gpt2_data_bin, import_transformers, tiny_hf_bart, tiny_hf_led
from tests.utils import snapshot


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory):
    """Two Hugging Face BART directories with the same rows and weights whose
    vocab.json differ only in two tokens' ids: their imports' dict.txt are the
    same (the symbol at index i is "i"), their encoder.json are not."""
    import_transformers()
    root = tmp_path_factory.mktemp("hf")
    first, second = str(root / "first"), str(root / "second")
    tiny_hf_bart(first, seed=5)
    shutil.copytree(first, second)
    path = os.path.join(second, "vocab.json")
    with open(path, encoding="utf-8") as f:
        vocab = json.load(f)
    a, b = [token for token, i in sorted(vocab.items(), key=lambda item: item[1]) if i >= 10][:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    return first, second


def one_error_line(capsys, program):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{program}: error: "), err
    return lines[0]


def interrupt_after_saving(monkeypatch):
    """Ctrl-C right after the importer has written its checkpoint (the
    latest moment before it commits its output folder)."""
    from mdsfair.importers import fairseq_bart

    save = fairseq_bart.save_fairseq_checkpoint

    def save_then_interrupt(path, *args, **kwargs):
        save(path, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(fairseq_bart, "save_fairseq_checkpoint", save_then_interrupt)


def test_a_second_import_into_the_folder_is_refused_while_the_first_runs(hf_models, tmp_path, monkeypatch, capsys):
    """Two imports with --overwrite into one folder at once: the second is
    refused by the lock (it names the first); the folder holds one whole
    import, never one model's model.pt beside the other's mdsfair.json."""
    from mdsfair.importers import fairseq_bart

    first, second = hf_models
    out = str(tmp_path / "out")
    assert import_main(["hf-bart", second, out]) == 0
    capsys.readouterr()
    save = fairseq_bart.save_fairseq_checkpoint
    inner = {}

    def save_then_race(path, *args, **kwargs):
        save(path, *args, **kwargs)
        monkeypatch.setattr(fairseq_bart, "save_fairseq_checkpoint", save)
        inner["status"] = import_main(["hf-bart", second, out, "--overwrite"])  # while the first holds the folder
        inner["err"] = capsys.readouterr().err

    monkeypatch.setattr(fairseq_bart, "save_fairseq_checkpoint", save_then_race)
    assert import_main(["hf-bart", first, out, "--overwrite"]) == 0
    assert inner["status"] == 1
    assert inner["err"].startswith(
        f"mdsfair-import hf-bart: error: OUT_DIR {out} is in use by another mdsfair-import hf-bart run: pid "
    )
    with open(os.path.join(out, "mdsfair.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["imported_from"]["path"] == os.path.abspath(first)
    with open(os.path.join(first, "vocab.json"), encoding="utf-8") as f:
        first_vocab = json.load(f)
    with open(os.path.join(out, "encoder.json"), encoding="utf-8") as f:
        assert json.load(f) == {t: i for t, i in first_vocab.items() if i >= 4 and t != "<mask>"}
    assert sorted(os.listdir(out)) == sorted(manifest["files"])  # no lock, no staging folder left


@pytest.mark.parametrize("existing", [False, True])
def test_ctrl_c_during_an_import_leaves_the_folder_as_it_was_and_a_rerun_works(
    hf_models, tmp_path, monkeypatch, capsys, existing
):
    first, second = hf_models
    out = str(tmp_path / "out")
    if existing:
        assert import_main(["hf-bart", second, out]) == 0
    before = snapshot(out) if existing else None
    interrupt_after_saving(monkeypatch)
    capsys.readouterr()
    assert import_main(["hf-bart", first, out, "--overwrite"]) == 130
    assert capsys.readouterr().err.startswith("mdsfair-import hf-bart: interrupted; nothing written")
    if existing:
        assert snapshot(out) == before
    else:
        assert not os.path.exists(out)
    monkeypatch.undo()  # the importer saves again
    assert import_main(["hf-bart", first, out] + (["--overwrite"] if existing else [])) == 0


def test_overwrite_replaces_only_what_an_import_wrote(hf_models, tmp_path, capsys):
    first, second = hf_models
    out = tmp_path / "out"
    assert import_main(["hf-bart", first, str(out)]) == 0
    (out / "notes.txt").write_text("mine")
    assert import_main(["hf-bart", second, str(out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    # a folder mdsfair did not write is refused, with or without --overwrite, and left alone
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "model.pt").write_bytes(b"someone else's")
    capsys.readouterr()
    for extra in ([], ["--overwrite"]):
        assert import_main(["hf-bart", first, str(foreign), *extra]) == 1
        assert "did not write it" in one_error_line(capsys, "mdsfair-import hf-bart")
        assert sorted(os.listdir(foreign)) == ["model.pt"] and (foreign / "model.pt").read_bytes() == b"someone else's"


def test_an_import_records_its_files_and_refuses_a_data_bin_made_with_another_imports_files(hf_models, tmp_path):
    first, second = hf_models
    out_first, out_second = str(tmp_path / "first"), str(tmp_path / "second")
    assert import_main(["hf-bart", first, out_first]) == 0
    assert import_main(["hf-bart", second, out_second]) == 0
    with open(os.path.join(out_first, "dict.txt"), "rb") as a, open(os.path.join(out_second, "dict.txt"), "rb") as b:
        assert a.read() == b.read()  # the dictionaries agree: only the BPE files tell the imports apart
    record = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(out_first, "model.pt"))["task_state"][RECORD_KEY]
    assert sorted(record["data"]["subword"]["files"]) == ["encoder.json", "vocab.bpe"]
    assert record["data"]["data_bins"] == [os.path.abspath(out_first)]
    own = gpt2_data_bin(str(tmp_path / "own"), out_first)
    other = gpt2_data_bin(str(tmp_path / "other"), out_second)
    model_path = os.path.join(out_first, "model.pt")
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([model_path], arg_overrides={"data": own})
    assert models
    with pytest.raises(DictionaryMismatchError, match=r"subword model: gpt2 encoder.json sha256"):
        checkpoint_utils.load_model_ensemble_and_task([model_path], arg_overrides={"data": other})


def test_bart_to_led_keeps_the_fingerprints_and_writes_its_file_whole(hf_models, tmp_path, monkeypatch, capsys):
    first, _second = hf_models
    out = str(tmp_path / "bart")
    assert import_main(["hf-bart", first, out]) == 0
    led = str(tmp_path / "led.pt")
    assert (
        import_main(
            [
                "bart-to-led",
                os.path.join(out, "model.pt"),
                led,
                "--max-source-positions",
                "200",
                "--attention-window",
                "8",
            ]
        )
        == 0
    )
    state = checkpoint_utils.load_checkpoint_to_cpu(led)
    bart = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(out, "model.pt"))
    assert state["task_state"][RECORD_KEY]["data"] == bart["task_state"][RECORD_KEY]["data"]
    before = snapshot(str(tmp_path))
    interrupt_after_saving(monkeypatch)
    capsys.readouterr()
    assert (
        import_main(
            [
                "bart-to-led",
                os.path.join(out, "model.pt"),
                led,
                "--overwrite",
                "--max-source-positions",
                "300",
                "--attention-window",
                "8",
            ]
        )
        == 130
    )
    assert snapshot(str(tmp_path)) == before


# ------------------------------------------------------------ item 4: one line


def test_bart_to_led_doc_sep_on_a_dictionary_without_doc_sep_is_one_line(hf_models, tmp_path, capsys):
    first, _second = hf_models
    out = str(tmp_path / "bart")
    assert import_main(["hf-bart", first, out]) == 0
    capsys.readouterr()
    led = str(tmp_path / "led.pt")
    assert (
        import_main(
            [
                "bart-to-led",
                os.path.join(out, "model.pt"),
                led,
                "--global-attention",
                "doc-sep",
                "--max-source-positions",
                "200",
                "--attention-window",
                "8",
            ]
        )
        == 1
    )
    line = one_error_line(capsys, "mdsfair-import bart-to-led")
    assert f"{os.path.join(out, 'dict.txt')}: no <doc-sep> symbol" in line
    assert not os.path.exists(led)
    # an output path that is a folder
    assert import_main(["bart-to-led", os.path.join(out, "model.pt"), str(tmp_path), "--attention-window", "8"]) == 1
    assert f"{tmp_path}: is a directory" in one_error_line(capsys, "mdsfair-import bart-to-led")


def test_output_path_that_is_a_file_is_one_line(hf_models, tmp_path, capsys):
    first, _second = hf_models
    target = tmp_path / "a-file"
    target.write_text("x")
    assert import_main(["hf-bart", first, str(target)]) == 1
    assert f"OUT_DIR {target} exists and is not a directory" in one_error_line(capsys, "mdsfair-import hf-bart")
    assert target.read_text() == "x"


def unwritable_folder(tmp_path):
    """A folder this process may not create files in: a directory without
    write permission when not root; as root (permissions do not bite) a path
    under /sys, which the kernel refuses to create files in."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return str(folder / "out")
    if not os.path.isdir("/sys/fs"):
        pytest.skip("no folder this root process cannot write")
    return "/sys/fs/mdsfair-import-test"


def test_an_unwritable_output_folder_is_one_line(hf_models, tmp_path, capsys):
    first, _second = hf_models
    out = unwritable_folder(tmp_path)
    assert import_main(["hf-bart", first, out]) == 1
    line = one_error_line(capsys, "mdsfair-import hf-bart")
    assert out in line and line.endswith("nothing written")
    assert not os.path.exists(out)


def test_non_integer_attention_window_and_non_utf8_merges_are_one_line(tmp_path, capsys):
    hf_dir = str(tmp_path / "led")
    tiny_hf_led(hf_dir, import_transformers())
    config_path = os.path.join(hf_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    for window in ("wide", 7.5, [4, "8"]):
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump({**config, "attention_window": window}, f)
        assert import_main(["hf-led", hf_dir, str(tmp_path / "out")]) == 1
        assert f"{config_path}: attention_window" in one_error_line(capsys, "mdsfair-import hf-led")
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    merges = os.path.join(hf_dir, "merges.txt")
    with open(merges, "ab") as f:
        f.write(b"\xff\xfe \x80\n")
    with open(merges, "rb") as f:
        line_number = f.read().count(b"\n")
    assert import_main(["hf-led", hf_dir, str(tmp_path / "out")]) == 1
    assert f"{merges}:{line_number}: not UTF-8 text" in one_error_line(capsys, "mdsfair-import hf-led")
    assert not os.path.exists(tmp_path / "out")


def test_resuming_a_doc_sep_led_on_a_data_bin_without_primera_layout_is_one_line(tmp_path, capsys):
    """mdsfair-train --restore-file of a PRIMERA import as --arch led_large
    --global-attention doc-sep (the primera architecture sets the layout
    itself) on a data-bin preprocessed without --source-layout primera."""
    from mdsfair.cli import train_main
    from mdsfair.importers.hf_led import import_hf_led

    hf_dir, out = str(tmp_path / "primera"), str(tmp_path / "out")
    tiny_hf_led(hf_dir, import_transformers(), primera=True)
    summary = import_hf_led(hf_dir, out)
    data_bin = gpt2_data_bin(str(tmp_path / "data"), out)  # no --source-layout primera
    save_dir = tmp_path / "checkpoints"
    flags = list(summary["arch_flags"])
    del flags[flags.index("--source-layout") : flags.index("--source-layout") + 2]  # the data-bin's layout is used
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_status:
        train_main(
            [
                data_bin,
                "--task",
                "multidoc_summarization",
                "--arch",
                "led_large",
                *flags,
                "--restore-file",
                os.path.join(out, "model.pt"),
                "--reset-optimizer",
                "--optimizer",
                "adam",
                "--lr",
                "1e-4",
                "--max-tokens",
                "2048",
                "--cpu",
                "--save-dir",
                str(save_dir),
                "--max-update",
                "1",
                "--no-progress-bar",
                "--criterion",
                "cross_entropy",
                "--num-workers",
                "0",
            ]
        )
    assert exit_status.value.code == 1
    line = one_error_line(capsys, "mdsfair-train")
    assert "uses --global-attention doc-sep" in line and f"{data_bin} records no PRIMERA layout" in line
    assert not save_dir.exists() or not any(save_dir.iterdir())


def test_import_refused_is_still_the_error_type(tmp_path):
    from mdsfair.importers.output import ImportOutput

    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ImportRefused):
        with ImportOutput(str(target), False, "mdsfair-import test"):
            pass
    assert torch.__version__  # torch imported with the importers
