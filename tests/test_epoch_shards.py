"""Data past one disk (issue 21 item 5): ``mdsfair-preprocess --shards N``
writes fairseq epoch shards with one dictionary, fairseq-train reads shard
``(epoch - 1) % N`` in each epoch, and shards that do not share a dictionary
are refused. (A data-bin whose directory name contains ``:`` is refused in
tests/test_generation_settings.py.)"""

import json
import os
import shutil

import pytest

from mdsfair.preprocess.binarize import run
from tests.utils import USER_DIR, make_synthetic_jsonl, tiny_transformer

TRAIN_CLUSTERS = 9  # odd: the shards differ by one cluster

TINY_TRANSFORMER = tiny_transformer(embed_dim=16, ffn_embed_dim=32, attention_heads=2)


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def raw_ids(path):
    return [json.loads(line)["id"] for line in read_lines(path) if line.strip()]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """Raw splits and ``--shards 2`` written from them, with the printed report."""
    work = tmp_path_factory.mktemp("shards")
    raw = make_synthetic_jsonl(str(work / "raw"), train=TRAIN_CLUSTERS, valid=3, test=3)
    dest = str(work / "bin")
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        reports = run(
            ["--input-dir", raw, "--destdir", dest, "--vocab-size", "300", "--no-progress-bar", "--shards", "2"]
        )
    return raw, dest, reports, printed.getvalue()


def test_two_shards_share_dictionary_and_subword_model_and_split_the_training_clusters(sharded):
    raw, dest, reports, printed = sharded
    shard0, shard1 = os.path.join(dest, "shard0"), os.path.join(dest, "shard1")
    assert sorted(os.listdir(dest)) == ["shard0", "shard1"]
    for name in ("dict.txt", "spm.model"):
        with open(os.path.join(shard0, name), "rb") as a, open(os.path.join(shard1, name), "rb") as b:
            assert a.read() == b.read(), name
    ids0, ids1 = (read_lines(os.path.join(shard, "train.ids.txt")) for shard in (shard0, shard1))
    assert not set(ids0) & set(ids1)
    assert sorted(ids0 + ids1) == sorted(raw_ids(os.path.join(raw, "train.jsonl")))
    assert (len(ids0), len(ids1)) == (5, 4)
    # every shard a complete data-bin: its own manifest listing what it holds
    manifests = [json.load(open(os.path.join(shard, "mdsfair.json"), encoding="utf-8")) for shard in (shard0, shard1)]
    assert sorted(manifests[0]["splits"]) == ["test", "train", "valid"]  # valid/test where fairseq reads them
    assert sorted(manifests[1]["splits"]) == ["train"]
    for shard, manifest in zip((shard0, shard1), manifests):
        assert all(os.path.isfile(os.path.join(shard, name)) for name in manifest["files"])
        assert manifest["subword"] == manifests[0]["subword"]
        assert manifest["vocabulary"] == manifests[0]["vocabulary"]
        assert manifest["shard"]["count"] == 2
    assert read_lines(os.path.join(shard0, "valid.ids.txt")) == raw_ids(os.path.join(raw, "valid.jsonl"))
    # counts reported, and the DATA path to train on
    assert reports["shard0/train"]["clusters"] + reports["shard1/train"]["clusters"] == TRAIN_CLUSTERS
    assert f"train: {TRAIN_CLUSTERS} clusters = 5 (shard0) + 4 (shard1)" in printed
    assert f"{shard0}{os.pathsep}{shard1}" in printed.splitlines()[-1]
    assert "test, valid: in shard0 only" in printed


def test_shards_are_refused_in_a_destdir_with_a_colon_and_when_a_shard_folder_is_in_use(sharded, tmp_path, capsys):
    raw = sharded[0]
    with pytest.raises(SystemExit):
        run(["--input-dir", raw, "--destdir", str(tmp_path / "runs:1"), "--shards", "2", "--no-progress-bar"])
    assert "contains ':'" in capsys.readouterr().err
    assert not (tmp_path / "runs:1").exists()
    # a shard folder that holds someone else's files is refused before any work; nothing is written
    dest = tmp_path / "bin"
    (dest / "shard1").mkdir(parents=True)
    (dest / "shard1" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        run(["--input-dir", raw, "--destdir", str(dest), "--shards", "2", "--vocab-size", "300", "--no-progress-bar"])
    assert "shard1 is not empty and holds no mdsfair.json" in capsys.readouterr().err
    assert sorted(os.listdir(dest)) == ["shard1"] and os.listdir(dest / "shard1") == ["notes.txt"]
    with pytest.raises(SystemExit):
        run(
            [
                "--input-dir",
                raw,
                "--destdir",
                str(tmp_path / "many"),
                "--shards",
                str(TRAIN_CLUSTERS + 1),
                "--no-progress-bar",
            ]
        )
    assert f"has {TRAIN_CLUSTERS} clusters, fewer than the shards" in capsys.readouterr().err


def test_fairseq_train_reads_shard_0_in_epoch_1_and_shard_1_in_epoch_2(sharded, tmp_path, monkeypatch):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train as train_cli

    from mdsfair.tasks.multidoc_summarization import MultiDocSummarizationTask

    _, dest, reports, _ = sharded
    shard0, shard1 = os.path.join(dest, "shard0"), os.path.join(dest, "shard1")
    loaded = []
    load_dataset = MultiDocSummarizationTask.load_dataset

    def recording_load_dataset(self, split, epoch=1, combine=False, **kwargs):
        dataset = load_dataset(self, split, epoch=epoch, combine=combine, **kwargs)
        loaded.append((split, epoch, dataset.name, len(dataset)))
        return dataset

    monkeypatch.setattr(MultiDocSummarizationTask, "load_dataset", recording_load_dataset)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            f"{shard0}{os.pathsep}{shard1}",
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            *TINY_TRANSFORMER,
            "--max-source-positions",
            "256",
            "--max-target-positions",
            "64",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "4096",
            "--max-epoch",
            "2",
            "--save-dir",
            str(tmp_path / "checkpoints"),
            "--no-save",
            "--no-progress-bar",
            "--cpu",
            "--seed",
            "1",
            "--skip-invalid-size-inputs-valid-test",
        ],
    )
    train_cli.main(convert_namespace_to_omegaconf(args))
    train_loads = [(epoch, name, size) for split, epoch, name, size in loaded if split == "train"]
    # fairseq loads the next epoch's shard at the end of an epoch: epoch 3 wraps round to shard 0
    assert train_loads == [
        (1, f"{shard0}/train", reports["shard0/train"]["clusters"]),
        (2, f"{shard1}/train", reports["shard1/train"]["clusters"]),
        (3, f"{shard0}/train", reports["shard0/train"]["clusters"]),
    ]
    assert [(epoch, name) for split, epoch, name, _ in loaded if split == "valid"] == [(1, f"{shard0}/valid")]


def test_the_task_reads_each_shard_manifest_once_when_it_is_set_up(sharded, tmp_path):
    """The task splits DATA once and keeps every shard's manifest: loading a
    split of any epoch checks it against the manifest read at setup, so
    manifests damaged afterwards are not read again."""
    from fairseq import options, tasks

    shards = [shutil.copytree(os.path.join(sharded[1], name), str(tmp_path / name)) for name in ("shard0", "shard1")]
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            f"{shards[0]}{os.pathsep}{os.pathsep}{shards[1]}",
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            *TINY_TRANSFORMER,
        ],
    )
    task = tasks.setup_task(args)
    assert [shard.folder for shard in task.shards] == shards and task.data_dir == shards[0]
    assert task.manifest is task.shards[0].manifest
    assert sorted(task.shards[0].manifest["splits"]) == ["test", "train", "valid"]
    assert sorted(task.shards[1].manifest["splits"]) == ["train"]
    assert task.data_fingerprint()["data_bins"] == [os.path.abspath(shard) for shard in shards]
    for shard in shards:
        with open(os.path.join(shard, "mdsfair.json"), "w", encoding="utf-8"):
            pass  # empty: read_manifest would refuse it as damaged
    sizes = {}
    for split, epoch in (("train", 1), ("train", 2), ("train", 3), ("valid", 1)):
        sizes[split, epoch] = len(task.load_dataset(split, epoch=epoch))
    assert sizes == {("train", 1): 5, ("train", 2): 4, ("train", 3): 5, ("valid", 1): 3}


def test_shards_with_different_dictionaries_are_refused_naming_both(sharded, tmp_path):
    from fairseq.data import Dictionary

    from mdsfair.data.manifest import read_manifest
    from mdsfair.tasks.data_paths import open_epoch_shards

    dest = sharded[1]
    shard0 = os.path.join(dest, "shard0")
    other = str(tmp_path / "other-shard")
    shutil.copytree(os.path.join(dest, "shard1"), other)
    dictionary = Dictionary.load(os.path.join(shard0, "dict.txt"))
    manifest = read_manifest(shard0)
    shards = open_epoch_shards([shard0, other], dictionary, manifest)  # same dictionary: accepted
    assert [shard.folder for shard in shards] == [shard0, other]
    assert shards[0].manifest is manifest and shards[1].manifest == read_manifest(other)
    with open(os.path.join(other, "dict.txt"), "a", encoding="utf-8") as handle:
        handle.write("unseenpiece 1\n")
    with pytest.raises(ValueError) as refused:
        open_epoch_shards([shard0, other], dictionary, manifest)
    message = str(refused.value)
    assert f"epoch shard {other} does not match the first shard {shard0}" in message
    assert f"dictionary: {len(dictionary)} symbols" in message and f"vs {len(dictionary) + 1} symbols" in message
    assert "mdsfair-preprocess --shards N" in message
