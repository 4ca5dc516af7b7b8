"""File names in ``mdsfair.json`` stay inside their data-bin, and a damaged
manifest is reported with its path and what rebuilds it."""

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from mdsfair.data.manifest import MANIFEST_NAME, ManifestError, read_manifest
from tests.utils import REPO_ROOT, make_tiny_data_bin


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("names")), train=12, valid=4, test=4)


def copy_with_manifest(data_bin, directory, edit):
    target = os.path.join(directory, "data-bin")
    shutil.copytree(data_bin, target)
    path = os.path.join(target, MANIFEST_NAME)
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    edit(manifest)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    return target


def listing(directory):
    return sorted(os.listdir(directory))


@pytest.mark.parametrize(
    "entry, edit",
    [
        ("dictionary = '../dict.txt'", lambda m: m.update(dictionary="../dict.txt")),
        ("subword.model = '/etc/passwd'", lambda m: m["subword"].update(model="/etc/passwd")),
        ("files[0] = '../../notes.txt'", lambda m: m["files"].__setitem__(0, "../../notes.txt")),
        ("side_data = '../graph'", lambda m: m.update(side_data={"../graph": {}})),
        (
            "splits.test.reference_files[0] = '../secret.txt'",
            lambda m: m["splits"]["test"].update(reference_files=["../secret.txt"]),
        ),
        (
            "splits.train.skip_report = '../victim.txt'",
            lambda m: m["splits"]["train"].update(skip_report="../victim.txt"),
        ),
        (
            "splits.train.skip_report = '/tmp/victim.txt'",
            lambda m: m["splits"]["train"].update(skip_report="/tmp/victim.txt"),
        ),
        ("structure[0] = 'sub/doc'", lambda m: m.update(structure=["sub/doc"])),
    ],
)
def test_a_name_outside_the_folder_is_refused_by_entry(data_bin, tmp_path, entry, edit):
    target = copy_with_manifest(data_bin, str(tmp_path), edit)
    with pytest.raises(ManifestError) as raised:
        read_manifest(target)
    assert entry in str(raised.value) and os.path.join(target, MANIFEST_NAME) in str(raised.value)


def test_hub_copy_refuses_to_read_outside_the_data_bin(data_bin, tmp_path):
    from mdsfair.hub_interface import copy_inference_files

    secret = tmp_path / "secret.model"
    secret.write_text("not yours")
    target = copy_with_manifest(data_bin, str(tmp_path), lambda m: m["subword"].update(model=str(secret)))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    with pytest.raises(ManifestError, match=r"subword\.model"):
        copy_inference_files(target, str(model_dir))
    assert listing(str(model_dir)) == []


def test_rouge_refuses_reference_files_outside_the_data_bin(data_bin, tmp_path):
    (tmp_path / "secret.txt").write_text("a line\n")
    target = copy_with_manifest(
        data_bin, str(tmp_path), lambda m: m["splits"]["test"].update(reference_files=["../secret.txt"])
    )
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a line\n" * 4)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-m", "mdsfair.evaluation.rouge", str(hyp), "--data-bin", target, "--split", "test", "--fast"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode != 0
    assert "splits.test.reference_files[0] = '../secret.txt'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "entry, edit",
    [
        ("splits must be a JSON object, not list", lambda m: m.update(splits=["train"])),
        ("files must be a JSON list, not str 'dict.txt'", lambda m: m.update(files="dict.txt")),
        (
            "splits.train.reference_files must be a JSON list",
            lambda m: m["splits"]["train"].update(reference_files="../x"),
        ),
    ],
)
def test_a_malformed_name_entry_is_refused_by_entry(data_bin, tmp_path, entry, edit):
    target = copy_with_manifest(data_bin, str(tmp_path), edit)
    with pytest.raises(ManifestError) as raised:
        read_manifest(target)
    message = str(raised.value)
    assert (
        message.startswith(f"{os.path.join(target, MANIFEST_NAME)}: refusing a malformed manifest: ")
        and entry in message
    )


def damage(folder, content):
    with open(os.path.join(folder, MANIFEST_NAME), "w", encoding="utf-8") as f:
        f.write(content)


def run_shell(command):
    subprocess.run(["sh", "-c", command], check=True, timeout=60)


@pytest.mark.parametrize(
    "content, state", [("", "is empty"), ('{"format": "mdsfair-binarized", "dictio', "is damaged")]
)
def test_empty_or_cut_data_bin_manifest_says_to_move_it_aside_and_rebuild(data_bin, tmp_path, content, state):
    target = str(tmp_path / "data-bin")
    shutil.copytree(data_bin, target)
    damage(target, content)
    with pytest.raises(ManifestError) as raised:
        read_manifest(target)
    message = str(raised.value)
    folder = shlex.quote(os.path.abspath(target))
    assert message.startswith(f"{os.path.join(target, MANIFEST_NAME)}: the manifest {state}")
    assert (
        f"mdsfair-preprocess --overwrite cannot tell which files of {target} it wrote without a sound manifest, "
        f"so it refuses the folder: move it aside (mv {folder} {shlex.quote(os.path.abspath(target) + '.damaged')}) "
        f"or remove it (rm -r {folder}), then build the data-bin again with mdsfair-preprocess (same options, same "
        "--destdir)"
    ) in message
    # (following the hint through mdsfair-preprocess: tests/test_destination_safety.py)


def test_damaged_manifest_of_a_checkpoint_folder_says_to_copy_it_again_and_that_works(data_bin, tmp_path):
    from mdsfair.hub_interface import copy_inference_files

    model_dir = str(tmp_path / "model")
    copy_inference_files(data_bin, model_dir)
    with open(os.path.join(model_dir, "checkpoint_best.pt"), "wb") as f:
        f.write(b"a checkpoint")
    damage(model_dir, '{"format": "mdsf')
    with pytest.raises(ManifestError) as raised:
        read_manifest(model_dir)
    message = str(raised.value)
    assert "mdsfair-preprocess" not in message  # not a data-bin: rebuilding one would not restore this folder
    hint = f"cp DATA_BIN/{MANIFEST_NAME} {shlex.quote(os.path.abspath(model_dir))}/"
    assert (
        f"{model_dir} holds checkpoints, so its manifest is a copy: copy the manifest again from the data-bin "
        f"the model was trained on: {hint}" in message
    )
    run_shell(hint.replace("DATA_BIN", shlex.quote(data_bin)))  # the hint, literally
    assert read_manifest(model_dir) == read_manifest(data_bin)


def test_damaged_manifest_of_an_hf_led_import_says_to_import_again_and_that_works(tmp_path):
    from mdsfair.importers.cli import import_main
    from tests.import_fixtures import import_transformers, tiny_hf_led

    hf_dir, out_dir = str(tmp_path / "hf"), str(tmp_path / "out")
    tiny_hf_led(hf_dir, import_transformers())
    assert import_main(["hf-led", hf_dir, out_dir]) == 0
    good = read_manifest(out_dir)
    damage(out_dir, "")
    with pytest.raises(ManifestError) as raised:
        read_manifest(out_dir)
    message = str(raised.value)
    assert "mdsfair-preprocess" not in message
    command = f"mdsfair-import hf-led HF_DIR {shlex.quote(os.path.abspath(out_dir))} --overwrite"
    assert f"{out_dir} is a model folder written by mdsfair-import hf-led: import it again with {command}" in message
    program, *arguments = shlex.split(command.replace("HF_DIR", shlex.quote(hf_dir)))  # the hint, literally
    assert program == "mdsfair-import" and import_main(arguments) == 0
    assert read_manifest(out_dir) == good


def test_manifest_write_is_atomic_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    from mdsfair.data import manifest as manifest_module

    path = str(tmp_path / MANIFEST_NAME)
    manifest_module.write_json_atomic(path, {"format": "mdsfair-binarized", "version": 1}, indent=2)
    before = open(path, encoding="utf-8").read()

    def dump_half_then_fail(obj, handle, **options):
        handle.write('{"format": "mdsf')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manifest_module.json, "dump", dump_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        manifest_module.write_json_atomic(path, {"format": "new"})
    assert open(path, encoding="utf-8").read() == before  # the old manifest, whole
    assert listing(str(tmp_path)) == [MANIFEST_NAME]  # no temporary left behind
