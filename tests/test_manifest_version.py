"""The manifest's ``version`` is read: a data-bin written by a newer mdsfair
(a higher version than :data:`mdsfair.data.manifest.MANIFEST_VERSION`) is
refused with one line naming its manifest; an older one, or one without the
entry, is read as it is."""

import json
import os
import shutil

import pytest

from mdsfair.data.manifest import (
    MANIFEST_NAME,
    MANIFEST_VERSION,
    STRUCTURE_STREAMS,
    ManifestVersionError,
    read_manifest,
)
from tests.utils import make_tiny_data_bin


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("version")), train=8, valid=2, test=2, vocab_size=300)


def copy_with_version(data_bin, directory, version):
    """A copy of ``data_bin`` whose manifest records ``version`` (the entry
    removed for ``None``)."""
    target = os.path.join(str(directory), "data-bin")
    shutil.copytree(data_bin, target)
    path = os.path.join(target, MANIFEST_NAME)
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    if version is None:
        del manifest["version"]
    else:
        manifest["version"] = version
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    return target


def test_preprocessing_records_the_version_and_the_structure_streams(data_bin):
    manifest = read_manifest(data_bin)
    assert manifest["version"] == MANIFEST_VERSION
    assert manifest["structure"] == list(STRUCTURE_STREAMS)
    for stream in STRUCTURE_STREAMS:
        assert os.path.exists(os.path.join(data_bin, f"train.{stream}.bin"))


def test_a_newer_version_is_refused_in_one_line_naming_the_manifest(data_bin, tmp_path):
    target = copy_with_version(data_bin, tmp_path, MANIFEST_VERSION + 1)
    with pytest.raises(ManifestVersionError) as raised:
        read_manifest(target)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"{os.path.join(target, MANIFEST_NAME)}: manifest version {MANIFEST_VERSION + 1} "
        "is newer than this mdsfair reads"
    )


@pytest.mark.parametrize("version", [MANIFEST_VERSION, MANIFEST_VERSION - 1, None])
def test_this_version_an_older_one_or_none_is_read_as_it_is(data_bin, tmp_path, version):
    target = copy_with_version(data_bin, tmp_path, version)
    manifest = read_manifest(target)
    assert manifest.get("version") == version
    expected = read_manifest(data_bin)
    expected.pop("version")
    manifest.pop("version", None)
    assert manifest == expected


@pytest.mark.parametrize("version", ["2", 1.5, True, [1]])
def test_a_version_that_is_not_an_integer_is_refused(data_bin, tmp_path, version):
    target = copy_with_version(data_bin, tmp_path, version)
    with pytest.raises(ManifestVersionError, match="is not an integer") as raised:
        read_manifest(target)
    assert str(raised.value).startswith(os.path.join(target, MANIFEST_NAME) + ": ")


def test_the_task_refuses_a_data_bin_of_a_newer_version(data_bin, tmp_path):
    from fairseq import options, tasks

    target = copy_with_version(data_bin, tmp_path, MANIFEST_VERSION + 1)
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            target,
            "--user-dir",
            "mdsfair",
            "--task",
            "multidoc_summarization",
            "--arch",
            "bart_base",
        ],
    )
    with pytest.raises(ManifestVersionError, match="is newer than this mdsfair reads"):
        tasks.setup_task(args)
