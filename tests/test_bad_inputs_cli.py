"""Every bad input of issue 22 through the command-line entry points, as a
user runs them: each stops with its message (file and line or the offending
entry, what to do instead), no traceback, and nothing on disk changes except
the outputs the command is expected to write (a before/after listing with
SHA-256 of every file in the folders involved).

The cases that need concurrent or interrupted processes run the same way in
their own files: a second preprocess into a locked destination and
``--overwrite`` on a folder mdsfair did not write (tests/test_destination_safety.py),
resuming with a changed architecture (tests/test_resume_arch_change.py), Ctrl-C
in preprocess, train and generate (tests/test_interrupts.py), fairseq's size
filter on a test split (tests/test_size_filter.py)."""

import hashlib
import json
import os
import shutil
import subprocess
from typing import Dict, List

import pytest
import torch

from tests.utils import make_tiny_data_bin, run_python, tiny_transformer

pytestmark = pytest.mark.slow  # the slow tier: docs/tests.md

GOOD = {
    "id": "c1",
    "documents": ["The council approved the budget. Critics objected."],
    "summary": "The budget passed.",
}


def snapshot(*folders) -> Dict[str, str]:
    """``{path: sha256}`` of every file under ``folders``."""
    listing = {}
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    listing[path] = hashlib.sha256(handle.read()).hexdigest()
    return listing


def run_cli(arguments: List[str], cwd) -> subprocess.CompletedProcess:
    return run_python(arguments, cwd)


def refused(result: subprocess.CompletedProcess, *messages: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    for message in messages:
        assert message in output, (message, output[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def write_raw(folder, test_lines: List[str]) -> None:
    os.makedirs(folder, exist_ok=True)
    for split in ("train", "valid"):
        lines = [json.dumps({**GOOD, "id": f"{split}{i}"}) for i in range(6)]
        with open(os.path.join(folder, f"{split}.jsonl"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "test.jsonl"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(test_lines) + "\n")


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("cli_bad")), train=8, valid=2, test=3)


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (json.dumps({**GOOD, "documents": ["Fine \ud800 text."]}), "documents[0] holds a lone surrogate"),
        (json.dumps({**GOOD, "id": "c1\tc2"}), "ids may not contain tabs or line breaks"),
        (json.dumps({**GOOD, "id": ""}), "is empty"),
        (json.dumps({**GOOD, "id": "c1\rc2"}), "id 'c1\\rc2' holds '\\r', which would break the line count of ids.txt"),
        (json.dumps({**GOOD, "id": "c1\nc2"}), "id 'c1\\nc2' holds '\\n', which would break the line count of ids.txt"),
        (json.dumps({**GOOD, "summary": "The budget \udc00 passed."}), "summary holds a lone surrogate U+DC00"),
        (json.dumps({**GOOD, "id": "c\ud800"}), "id holds a lone surrogate U+D800"),
        ('{"id": "t1" "documents": []}', "not valid JSON (Expecting ',' delimiter at column 13)"),
    ],
    ids=[
        "lone_surrogate",
        "id_with_tab",
        "empty_id",
        "id_with_cr",
        "id_with_lf",
        "lone_surrogate_in_summary",
        "lone_surrogate_in_id",
        "bad_json_line",
    ],
)
def test_preprocess_refuses_hostile_text_and_writes_nothing(tmp_path, bad_line, message):
    raw = tmp_path / "raw"
    write_raw(raw, [json.dumps({**GOOD, "id": "t0"}), bad_line])
    before = snapshot(tmp_path)
    destination = tmp_path / "data-bin"
    result = run_cli(
        [
            "-m",
            "mdsfair.preprocess.binarize",
            "--input-dir",
            str(raw),
            "--destdir",
            str(destination),
            "--vocab-size",
            "60",
            "--no-progress-bar",
        ],
        tmp_path,
    )
    refused(result, f"{raw / 'test.jsonl'}:2:", message)
    after = snapshot(tmp_path)
    assert after == before, sorted(set(after) ^ set(before))


def test_preprocess_names_invalid_utf8_by_file_and_line(tmp_path):
    raw = tmp_path / "raw"
    write_raw(raw, [json.dumps({**GOOD, "id": "t0"})])
    with open(raw / "test.jsonl", "ab") as handle:
        handle.write(b'{"id": "t1", "documents": ["caf\xe9"], "summary": "S."}\n')
    before = snapshot(tmp_path)
    result = run_cli(
        [
            "-m",
            "mdsfair.preprocess.binarize",
            "--input-dir",
            str(raw),
            "--destdir",
            str(tmp_path / "data-bin"),
            "--vocab-size",
            "60",
            "--no-progress-bar",
        ],
        tmp_path,
    )
    refused(result, f"{raw / 'test.jsonl'}:2: invalid UTF-8 at byte 31")  # the 0xe9 of "caf\xe9"
    assert snapshot(tmp_path) == before


def preprocess_into(tmp_path, destination, *extra):
    return run_cli(
        [
            "-m",
            "mdsfair.preprocess.binarize",
            "--input-dir",
            str(tmp_path / "raw"),
            "--destdir",
            str(destination),
            "--vocab-size",
            "60",
            "--no-progress-bar",
            *extra,
        ],
        tmp_path,
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda manifest: "",
            "mdsfair.json: the manifest is empty; mdsfair-preprocess --overwrite cannot tell which "
            "files of {dest} it wrote without a sound manifest, so it refuses the folder: move it aside",
        ),
        (
            lambda manifest: json.dumps(
                {
                    **{k: v for k, v in manifest.items() if k != "files"},
                    "splits": {"train": {**manifest["splits"]["train"], "skip_report": "../victim.txt"}},
                }
            ),
            "mdsfair.json: refusing a manifest whose file names leave the data-bin directory: "
            "splits.train.skip_report = '../victim.txt'",
        ),
    ],
    ids=["damaged_manifest", "escaping_manifest"],
)
def test_preprocess_overwrite_refuses_a_damaged_or_escaping_manifest(tmp_path, damage, message):
    """``--overwrite`` removes nothing from a data-bin whose manifest cannot
    say which files are mdsfair's (issue 22 items 2, 4 and 6): not the
    data-bin's files, not ``../victim.txt`` that an escaping manifest names."""
    write_raw(tmp_path / "raw", [json.dumps({**GOOD, "id": "t0"})])
    destination = tmp_path / "data-bin"
    assert preprocess_into(tmp_path, destination).returncode == 0
    manifest_path = destination / "mdsfair.json"
    manifest_path.write_text(damage(json.loads(manifest_path.read_text(encoding="utf-8"))), encoding="utf-8")
    (tmp_path / "victim.txt").write_text("not mdsfair's\n", encoding="utf-8")
    before = snapshot(tmp_path)
    result = preprocess_into(tmp_path, destination, "--overwrite")
    refused(
        result,
        f"mdsfair-preprocess: error: --destdir {destination}: {destination}/" + message.format(dest=destination),
        "Nothing was removed; it holds",
    )
    assert snapshot(tmp_path) == before


def test_baseline_with_a_lone_surrogate_keeps_the_old_output(tmp_path):
    source = tmp_path / "test.jsonl"
    source.write_text(
        json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "c2", "summary": "S \udfff"}) + "\n", encoding="utf-8"
    )
    output = tmp_path / "lead.txt"
    output.write_text("an earlier run\n", encoding="utf-8")
    before = snapshot(tmp_path)
    result = run_cli(
        ["-m", "mdsfair.evaluation.baselines", str(source), "--method", "lead", "-o", str(output)], tmp_path
    )
    refused(result, f"{source}:2:", "summary holds a lone surrogate")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "manifest_text, message",
    [
        ("", "is empty"),
        ('{"format": "mdsfair-binarized", "dicti', "is damaged"),
        (None, "splits.test.reference_files[0] = '../secret.txt'"),
    ],
    ids=["empty_manifest", "cut_manifest", "reference_outside_the_folder"],
)
def test_rouge_refuses_a_damaged_or_escaping_manifest(data_bin, tmp_path, manifest_text, message):
    copy = tmp_path / "data-bin"
    shutil.copytree(data_bin, copy)
    manifest_path = copy / "mdsfair.json"
    if manifest_text is None:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        manifest["splits"]["test"]["reference_files"] = ["../secret.txt"]
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    else:
        manifest_path.write_text(manifest_text, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("not a reference\n", encoding="utf-8")
    hypotheses = tmp_path / "hypotheses.txt"
    hypotheses.write_text("a summary\n" * 3, encoding="utf-8")
    before = snapshot(tmp_path)
    result = run_cli(
        ["-m", "mdsfair.evaluation.rouge", str(hypotheses), "--data-bin", str(copy), "--split", "test", "--fast"],
        tmp_path,
    )
    refused(result, message)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--beam", "0"], "--beam (beam=) must be at least 1, got 0"),
        (["--max-len-b", "0"], "--max-len-b 0 with --max-len-a 0 allows no output token"),
        (["--max-len-b", "5", "--min-len", "10"], "--min-len 10 is above the length limit --max-len-b 5"),
    ],
    ids=["beam_0", "max_len_b_0", "min_len_above_max"],
)
def test_generate_refuses_impossible_settings_before_loading(data_bin, tmp_path, flags, message):
    results = tmp_path / "results"
    before = snapshot(data_bin, tmp_path)
    result = run_cli(
        [
            "-c",
            "from mdsfair.cli import generate_main; generate_main()",
            data_bin,
            "--path",
            str(tmp_path / "checkpoint.pt"),
            "--results-path",
            str(results),
            *flags,
        ],
        tmp_path,
    )
    refused(result, message)
    assert snapshot(data_bin, tmp_path) == before and not results.exists()


class WritesMarker:
    """A pickled object whose unpickling writes a file: what a hostile
    checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_generate_refuses_a_checkpoint_that_needs_pickle(data_bin, tmp_path):
    marker = tmp_path / "ran.txt"
    checkpoint = tmp_path / "hostile.pt"
    torch.save({"model": {}, "payload": WritesMarker(str(marker))}, checkpoint)
    before = snapshot(data_bin, tmp_path)
    result = run_cli(
        [
            "-c",
            "from mdsfair.cli import generate_main; generate_main()",
            data_bin,
            "--path",
            str(checkpoint),
            "--task",
            "multidoc_summarization",
            "--cpu",
            "--gen-subset",
            "test",
        ],
        tmp_path,
    )
    refused(
        result,
        f"mdsfair-generate: error: {checkpoint}: the checkpoint pickles io.open, which loading it would "
        "have to execute",
        "MDSFAIR_TRUST_CHECKPOINTS=1",
    )  # refused() also checks: no "Traceback"
    assert "Traceback" not in result.stdout + result.stderr
    assert not marker.exists()
    assert snapshot(data_bin, tmp_path) == before


@pytest.mark.parametrize("kind", ["empty", "truncated"])
def test_generate_refuses_an_empty_or_truncated_checkpoint(data_bin, tmp_path, kind):
    checkpoint = tmp_path / "checkpoint_best.pt"
    if kind == "empty":
        checkpoint.write_bytes(b"")
        message = f"mdsfair-generate: error: checkpoint {checkpoint} is empty (0 bytes): an interrupted save"
    else:
        torch.save({"model": {"weight": torch.zeros(64, 64)}}, checkpoint)
        whole = checkpoint.read_bytes()
        checkpoint.write_bytes(whole[: len(whole) // 2])
        message = f"mdsfair-generate: error: cannot read checkpoint {checkpoint} ({len(whole) // 2} bytes)"
    before = snapshot(data_bin, tmp_path)
    result = run_cli(
        [
            "-c",
            "from mdsfair.cli import generate_main; generate_main()",
            data_bin,
            "--path",
            str(checkpoint),
            "--task",
            "multidoc_summarization",
            "--cpu",
            "--gen-subset",
            "test",
            "--results-path",
            str(tmp_path / "results"),
        ],
        tmp_path,
    )
    refused(result, message)
    assert "Traceback" not in result.stdout + result.stderr
    assert snapshot(data_bin, tmp_path) == before and not (tmp_path / "results").exists()


@pytest.mark.parametrize("kind", ["empty", "truncated", "hostile"])
def test_train_refuses_a_restore_file_it_cannot_resume_in_one_line(data_bin, tmp_path, kind):
    """mdsfair-train --restore-file with an empty, cut or pickle-needing
    checkpoint: one error line naming the file, exit 1, nothing written."""
    checkpoint = tmp_path / "restore.pt"
    marker = tmp_path / "ran.txt"
    if kind == "empty":
        checkpoint.write_bytes(b"")
        message = f"mdsfair-train: error: checkpoint {checkpoint} is empty (0 bytes): an interrupted save"
    elif kind == "truncated":
        torch.save({"model": {"weight": torch.zeros(64, 64)}}, checkpoint)
        whole = checkpoint.read_bytes()
        checkpoint.write_bytes(whole[: len(whole) // 2])
        message = f"mdsfair-train: error: cannot read checkpoint {checkpoint} ({len(whole) // 2} bytes)"
    else:
        torch.save({"model": {}, "payload": WritesMarker(str(marker))}, checkpoint)
        message = f"mdsfair-train: error: {checkpoint}: the checkpoint pickles io.open"
    save_dir = tmp_path / "checkpoints"
    before = snapshot(data_bin, tmp_path)
    result = run_cli(
        [
            "-c",
            "from mdsfair.cli import train_main; train_main()",
            data_bin,
            "--task",
            "multidoc_summarization",
            *tiny_transformer(embed_dim=16, ffn_embed_dim=16, attention_heads=2, share_all_embeddings=False),
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "4096",
            "--max-update",
            "1",
            "--cpu",
            "--no-progress-bar",
            "--restore-file",
            str(checkpoint),
            "--save-dir",
            str(save_dir),
        ],
        tmp_path,
    )
    refused(result, message)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert not marker.exists()
    after = snapshot(data_bin, tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(str(save_dir))} == before
    assert not any(name.endswith(".pt") for name in after if name.startswith(str(save_dir)))


def test_rouge_warns_about_a_reference_without_a_word(tmp_path):
    references = tmp_path / "references.txt"
    references.write_text("the budget passed .\n... !!!\n", encoding="utf-8")
    hypotheses = tmp_path / "hypotheses.txt"
    hypotheses.write_text("the budget passed .\nsomething\n", encoding="utf-8")
    before = snapshot(tmp_path)
    result = run_cli(["-m", "mdsfair.evaluation.rouge", str(hypotheses), "--ref", str(references), "--fast"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{references}:2: cluster 1: its reference has no word" in result.stderr
    assert snapshot(tmp_path) == before
