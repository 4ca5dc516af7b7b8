"""Hugging Face model ids as importer sources (:mod:`mdsfair.importers.hf_hub`).

A tiny BART folder (:mod:`tests.import_fixtures`) is laid out in a temporary
``HF_HUB_CACHE`` exactly as ``huggingface_hub.snapshot_download`` leaves a
download (``huggingface_hub/file_download.py``, ``_snapshot_download.py``,
``_tree_cache.py``): ``models--ORG--NAME/blobs/<hash>`` (the git blob sha1
of a plain file, the sha256 of an LFS file), ``snapshots/<commit>/<file>`` a
relative link to ``../../blobs/<hash>``, ``refs/<branch>`` holding the
commit without a newline, ``trees/<commit>.json`` the file listing. The
command runs in a fresh interpreter with ``HF_HUB_OFFLINE=1`` and
``HF_HUB_CACHE`` in its environment (huggingface_hub reads both when it is
imported), and its import must equal the import of the folder. The Hub
itself is not reachable here: what an online run asks of it is checked with
``HfApi.list_repo_files`` and ``snapshot_download`` replaced.
"""

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from mdsfair.importers import ImportRefused
from mdsfair.importers.cli import import_main
from mdsfair.importers.hf_bart import import_hf_bart
from mdsfair.importers.hf_hub import (
    CONFIG_FILES,
    TOKENIZER_FILES,
    parse_model_id,
    resolve_model_source,
    weight_patterns,
)
from mdsfair.importers.hf_led import import_hf_led
from mdsfair.importers.pagesum import config_location
from tests.import_fixtures import import_transformers, tiny_hf_bart, tiny_hf_led
from tests.utils import REPO_ROOT

REPO_ID = "mdsfair-tests/tiny-bart"
MAIN_COMMIT = hashlib.sha1(b"main commit").hexdigest()
OTHER_COMMIT = hashlib.sha1(b"another commit").hexdigest()
#: the files a model repository keeps in Git LFS (its .gitattributes)
LFS_SUFFIXES = (".safetensors", ".bin", ".model")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lay_out_hub_cache(cache: str, repo_id: str, commit: str, folder: str, refs=("main",)) -> str:
    """The files of ``folder`` as ``snapshot_download(repo_id)`` leaves them in
    ``cache`` at ``commit`` (each name in ``refs`` pointing at it); returns
    the snapshot folder."""
    storage = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    snapshot = os.path.join(storage, "snapshots", commit)
    os.makedirs(os.path.join(storage, "blobs"), exist_ok=True)
    os.makedirs(snapshot)
    tree = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        if name.endswith(LFS_SUFFIXES):
            etag = hashlib.sha256(data).hexdigest()  # an LFS file's ETag: the sha256 of its content
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{etag}\nsize {len(data)}\n"
            tree[name] = {
                "size": len(data),
                "blob_id": git_blob_sha1(pointer.encode()),
                "lfs_sha256": etag,
                "lfs_size": len(data),
            }
        else:
            etag = git_blob_sha1(data)  # a plain file's ETag: its git blob id
            tree[name] = {"size": len(data), "blob_id": etag}
        blob = os.path.join(storage, "blobs", etag)
        with open(blob, "wb") as f:
            f.write(data)
        link = os.path.join(snapshot, name)
        os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)  # file_download._create_symlink
    os.makedirs(os.path.join(storage, "trees"), exist_ok=True)
    with open(os.path.join(storage, "trees", f"{commit}.json"), "w", encoding="utf-8") as f:
        json.dump({"format_version": 1, "files": tree}, f, indent=1)
    for ref in refs:
        os.makedirs(os.path.join(storage, "refs"), exist_ok=True)
        with open(os.path.join(storage, "refs", ref), "w") as f:
            f.write(commit)
    return snapshot


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """Two commits of a tiny BART in a hub cache (``main`` and the tag ``v1``
    on different weights), each also imported from its folder."""
    import_transformers()
    root = tmp_path_factory.mktemp("hub")
    cache = str(root / "cache")
    models = {}
    for commit, seed, refs in ((MAIN_COMMIT, 5, ("main",)), (OTHER_COMMIT, 6, ("v1",))):
        folder = str(root / f"model-{seed}")
        tiny_hf_bart(folder, seed=seed)
        direct = str(root / f"direct-{seed}")
        import_hf_bart(folder, direct)
        snapshot = lay_out_hub_cache(cache, REPO_ID, commit, folder, refs)
        models[commit] = {"folder": folder, "direct": direct, "snapshot": snapshot}
    return {"root": root, "cache": cache, "models": models}


@pytest.fixture
def offline(hub, monkeypatch):
    """This process's huggingface_hub offline, on the test cache (it read
    HF_HUB_OFFLINE and HF_HUB_CACHE when it was imported)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", hub["cache"])
    return hub


def run_offline(cache: str, home: str, *arguments):
    """``mdsfair-import ARGUMENTS`` in a fresh interpreter with
    HF_HUB_OFFLINE=1 and HF_HUB_CACHE=cache."""
    code = (
        "import sys\nfrom mdsfair.importers.cli import import_main\n"
        "sys.argv[0] = 'mdsfair-import'\nsys.exit(import_main())\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": REPO_ROOT,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": cache,
        "HF_HOME": home,
    }
    return subprocess.run(
        [sys.executable, "-c", code, *arguments], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def model_state(out_dir: str):
    import torch

    return torch.load(os.path.join(out_dir, "model.pt"), map_location="cpu", weights_only=False)["model"]


def assert_same_import(out_dir: str, expected_dir: str) -> None:
    import torch

    written, expected = model_state(out_dir), model_state(expected_dir)
    assert written.keys() == expected.keys()
    assert all(torch.equal(written[key], expected[key]) for key in expected)
    for name in ("dict.txt", "encoder.json", "vocab.bpe"):
        with open(os.path.join(out_dir, name), "rb") as a, open(os.path.join(expected_dir, name), "rb") as b:
            assert a.read() == b.read(), name


def imported_from(out_dir: str):
    with open(os.path.join(out_dir, "mdsfair.json"), encoding="utf-8") as f:
        return json.load(f)["imported_from"]


def test_the_cache_layout_is_the_hubs(offline):
    """The layout written here is one huggingface_hub itself reads: its cache
    scan lists the repository, both commits and their refs."""
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(offline["cache"])
    assert not info.warnings
    (repo,) = info.repos
    assert repo.repo_id == REPO_ID and repo.repo_type == "model"
    refs = {revision.commit_hash: set(revision.refs) for revision in repo.revisions}
    assert refs == {MAIN_COMMIT: {"main"}, OTHER_COMMIT: {"v1"}}


def test_a_model_id_imports_from_the_offline_cache_as_its_folder_does(hub, tmp_path):
    out = str(tmp_path / "out")
    done = run_offline(hub["cache"], str(tmp_path / "home"), "hf-bart", REPO_ID, out)
    assert done.returncode == 0, done.stderr[-3000:]
    snapshot = hub["models"][MAIN_COMMIT]["snapshot"]
    assert f"INFO: {REPO_ID}: local cache {snapshot}\n" in done.stdout
    assert_same_import(out, hub["models"][MAIN_COMMIT]["direct"])
    record = imported_from(out)
    assert (record["repo_id"], record["revision"], record["path"]) == (REPO_ID, MAIN_COMMIT, snapshot)
    assert "repo_id" not in imported_from(hub["models"][MAIN_COMMIT]["direct"])  # a folder records none


@pytest.mark.parametrize("revision", [OTHER_COMMIT, "v1"], ids=["commit", "tag"])
def test_a_revision_selects_its_snapshot(offline, tmp_path, revision, capsys):
    out = str(tmp_path / "out")
    assert import_main(["hf-bart", f"{REPO_ID}@{revision}", out]) == 0
    snapshot = offline["models"][OTHER_COMMIT]["snapshot"]
    assert f"INFO: {REPO_ID}: local cache {snapshot}" in capsys.readouterr().out
    assert_same_import(out, offline["models"][OTHER_COMMIT]["direct"])
    assert imported_from(out)["revision"] == OTHER_COMMIT


def test_a_model_id_not_in_the_offline_cache_is_one_line_naming_the_cache(hub, tmp_path):
    out = str(tmp_path / "out")
    empty_cache = str(tmp_path / "empty-cache")
    done = run_offline(empty_cache, str(tmp_path / "home"), "hf-bart", "mdsfair-tests/absent@v2", out)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mdsfair-import hf-bart: error: mdsfair-tests/absent@v2: not a folder here, and not in")
    for part in (empty_cache, "HF_HUB_OFFLINE=1", "`hf download mdsfair-tests/absent --revision v2`", "folder"):
        assert part in lines[0]
    assert not os.path.exists(out)


def test_a_revision_the_cache_lacks_is_refused(offline, tmp_path):
    with pytest.raises(ImportRefused, match=r"@v9: not a folder here, and not in the Hugging Face cache"):
        import_hf_bart(f"{REPO_ID}@v9", str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_an_incomplete_cached_snapshot_is_refused(offline, tmp_path, monkeypatch):
    """The cache's file listing names a tokenizer file the snapshot lacks (an
    interrupted download)."""
    cache = str(tmp_path / "cache")
    snapshot = lay_out_hub_cache(cache, "mdsfair-tests/partial", MAIN_COMMIT, offline["models"][MAIN_COMMIT]["folder"])
    os.remove(os.path.join(snapshot, "merges.txt"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    with pytest.raises(ImportRefused, match=r"mdsfair-tests/partial: the copy in the Hugging Face cache .* incomplete"):
        resolve_model_source("mdsfair-tests/partial")


@pytest.mark.parametrize("source", ["no-such-folder", "no/such/folder", "./missing/", "org/name@", "a--b/c"])
def test_neither_a_folder_nor_a_model_id_is_one_line(source, tmp_path, capsys):
    assert import_main(["hf-bart", source, str(tmp_path / "out")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"mdsfair-import hf-bart: error: {source}: no such folder, and not a Hugging Face model id "
        "(ORG/NAME or ORG/NAME@REVISION)"
    ]


def test_a_file_is_not_a_model_folder(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{}")
    with pytest.raises(ImportRefused, match="not a folder"):
        resolve_model_source(str(path))


def test_model_ids_follow_the_hubs_rule():
    assert parse_model_id("allenai/PRIMERA-multinews") == ("allenai/PRIMERA-multinews", None)
    assert parse_model_id("facebook/bart-large@refs/pr/1") == ("facebook/bart-large", "refs/pr/1")
    for name in ("bart-large", "a/b/c", "-a/b", "a/b.", "a/b..c", "a/b.git", "a/" + "b" * 97, "a/b@", "/abs/path"):
        assert parse_model_id(name) is None, name


def test_without_huggingface_hub_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import raises ImportError
    with pytest.raises(ImportRefused, match=r"needs the huggingface_hub package \(pip install huggingface_hub"):
        resolve_model_source("facebook/bart-large")


def hub_answering(monkeypatch, hub, repo_files):
    """huggingface_hub online, with the Hub's answers replaced: the file list
    ``repo_files``, and a snapshot_download that copies from the test folder
    exactly the files its ``allow_patterns`` select. Returns its calls."""
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    calls = []

    def list_repo_files(self, repo_id, *, revision=None, **kwargs):
        calls.append(("list_repo_files", repo_id, revision))
        return list(repo_files)

    def snapshot_download(repo_id, *, revision=None, allow_patterns=None, local_files_only=False, **kwargs):
        calls.append(("snapshot_download", repo_id, revision, list(allow_patterns), local_files_only))
        folder = hub["models"][MAIN_COMMIT]["folder"]
        snapshot = os.path.join(str(hub["root"]), "online", "snapshots", MAIN_COMMIT)
        shutil.rmtree(snapshot, ignore_errors=True)
        os.makedirs(snapshot)
        for name in os.listdir(folder):
            if any(fnmatch.fnmatch(name, pattern) for pattern in allow_patterns):
                shutil.copy(os.path.join(folder, name), snapshot)
        return snapshot

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", list_repo_files)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


REPO_FILES = [
    ".gitattributes",
    "README.md",
    "config.json",
    "generation_config.json",
    "flax_model.msgpack",
    "tf_model.h5",
    "rust_model.ot",
    "model.safetensors",
    "pytorch_model.bin",
    "merges.txt",
    "vocab.json",
    "tokenizer.json",
    "onnx/decoder_model.onnx",
]


def test_online_fetches_the_files_the_importer_reads_and_one_weight_format(hub, monkeypatch, tmp_path):
    calls = hub_answering(monkeypatch, hub, REPO_FILES)
    out = str(tmp_path / "out")
    summary = import_hf_bart(f"{REPO_ID}@main", out)
    wanted = [*CONFIG_FILES, *TOKENIZER_FILES, "*.safetensors", "model.safetensors.index.json"]
    assert calls == [
        ("list_repo_files", REPO_ID, "main"),
        ("snapshot_download", REPO_ID, "main", wanted, False),
    ]
    # the patterns select exactly what the importer read: its result is the folder's
    assert_same_import(out, hub["models"][MAIN_COMMIT]["direct"])
    assert summary["found"] == [f"{REPO_ID}: Hugging Face Hub, cached in {os.path.dirname(summary['source'])}"]
    assert imported_from(out)["revision"] == MAIN_COMMIT
    selected = [name for name in REPO_FILES if any(fnmatch.fnmatch(name, p) for p in wanted)]
    assert sorted(selected) == sorted(
        ["config.json", "generation_config.json", "model.safetensors", "merges.txt", "vocab.json", "tokenizer.json"]
    )


def test_weight_format_follows_the_importers_preference():
    assert weight_patterns(["model-00001-of-00002.safetensors", "pytorch_model.bin"])[0] == "*.safetensors"
    assert weight_patterns(["pytorch_model-00001-of-00002.bin", "tf_model.h5"]) == [
        "pytorch_model*.bin",
        "pytorch_model.bin.index.json",
    ]
    assert len(weight_patterns(["tf_model.h5"])) == 4  # neither: both, and the importer names what is missing


def test_a_tokenizer_or_config_source_fetches_no_weights(hub, monkeypatch, tmp_path):
    calls = hub_answering(monkeypatch, hub, REPO_FILES)
    config_path, source = config_location("facebook/bart-large-cnn")  # PageSum's HF_CONFIG
    assert calls == [
        ("list_repo_files", "facebook/bart-large-cnn", None),
        ("snapshot_download", "facebook/bart-large-cnn", None, [*CONFIG_FILES, *TOKENIZER_FILES], False),
    ]
    assert os.path.isfile(config_path) and source.repo_id == "facebook/bart-large-cnn"
    assert not os.path.exists(os.path.join(source.path, "model.safetensors"))


def test_without_the_hub_the_cache_is_used(hub, monkeypatch, tmp_path):
    """No network: the file list fails, and the snapshot comes from the cache
    (local_files_only), reported as the local cache."""
    calls = hub_answering(monkeypatch, hub, REPO_FILES)
    import huggingface_hub

    def unreachable(self, repo_id, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", unreachable)
    source = resolve_model_source(REPO_ID)
    assert calls == [("snapshot_download", REPO_ID, None, [*CONFIG_FILES, *TOKENIZER_FILES], True)]
    assert source.description().startswith(f"{REPO_ID}: local cache ")


def test_hf_led_takes_a_model_id(offline, tmp_path, monkeypatch):
    """hf-led resolves its source as hf-bart does (one LED in the offline cache)."""
    transformers = import_transformers()
    folder = str(tmp_path / "led")
    tiny_hf_led(folder, transformers, primera=True)
    cache = str(tmp_path / "cache")
    snapshot = lay_out_hub_cache(cache, "mdsfair-tests/tiny-primera", MAIN_COMMIT, folder)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    summary = import_hf_led("mdsfair-tests/tiny-primera", str(tmp_path / "from-id"))
    import_hf_led(folder, str(tmp_path / "from-folder"))
    assert summary["found"] == [f"mdsfair-tests/tiny-primera: local cache {snapshot}"]
    assert_same_import(str(tmp_path / "from-id"), str(tmp_path / "from-folder"))
    assert imported_from(str(tmp_path / "from-id"))["repo_id"] == "mdsfair-tests/tiny-primera"
