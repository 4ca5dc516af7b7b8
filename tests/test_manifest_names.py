"""File names in ``mdsfair.json`` stay inside their data-bin, and a damaged
manifest is reported with its path and what rebuilds it."""
import json
import os
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
        ("splits.test.reference_files[0] = '../secret.txt'", lambda m: m["splits"]["test"].update(reference_files=["../secret.txt"])),
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
    target = copy_with_manifest(data_bin, str(tmp_path), lambda m: m["splits"]["test"].update(reference_files=["../secret.txt"]))
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a line\n" * 4)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-m", "mdsfair.evaluation.rouge", str(hyp), "--data-bin", target, "--split", "test", "--fast"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode != 0
    assert "splits.test.reference_files[0] = '../secret.txt'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("content, state", [("", "is empty"), ('{"format": "mdsfair-binarized", "dictio', "is damaged")])
def test_empty_or_cut_manifest_names_path_and_rebuild_command(data_bin, tmp_path, content, state):
    target = str(tmp_path / "data-bin")
    shutil.copytree(data_bin, target)
    with open(os.path.join(target, MANIFEST_NAME), "w", encoding="utf-8") as f:
        f.write(content)
    with pytest.raises(ManifestError) as raised:
        read_manifest(target)
    message = str(raised.value)
    assert message.startswith(os.path.join(target, MANIFEST_NAME)) and state in message and "mdsfair-preprocess" in message


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
