"""Issue 34 item 3-4: foreign checkpoint files are read as safely as data-bins.
A sharded index names only plain files beside it, a tensor in two shards is
refused, and damaged or unexpected files are one-line refusals naming the file
(never a traceback): a truncated safetensors file, a pickled ``.bin``, JSON of
the wrong type or encoding, a null in the weight map."""

import json
import os

import pytest
import torch

from mdsfair.importers import ImportRefused
from mdsfair.importers.hf_bart_files import load_hf_weights, read_json


def write_shards(directory, shards, weight_map=None):
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    for name, tensors in shards.items():
        save_file(tensors, os.path.join(directory, name))
    if weight_map is None:
        weight_map = {tensor: name for name, tensors in shards.items() for tensor in tensors}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def test_a_sharded_checkpoint_loads_whole(tmp_path):
    write_shards(str(tmp_path), {"a.safetensors": {"x": torch.ones(2)}, "b.safetensors": {"y": torch.zeros(3)}})
    state, source = load_hf_weights(str(tmp_path))
    assert set(state) == {"x", "y"} and source.endswith("model.safetensors.index.json")


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/a.safetensors", "..", ""])
def test_an_index_may_name_only_files_beside_it(tmp_path, shard):
    from safetensors.torch import save_file

    model_dir = tmp_path / "model"
    save_file({"x": torch.ones(2)}, str(tmp_path / "outside.safetensors"))  # a file the index must not reach
    write_shards(str(model_dir), {}, {"x": shard})
    with pytest.raises(ImportRefused, match=r"model.safetensors.index.json: shard .* is not a plain file name"):
        load_hf_weights(str(model_dir))


def test_a_null_in_the_weight_map_is_refused(tmp_path):
    write_shards(str(tmp_path), {"a.safetensors": {"x": torch.ones(2)}}, {"x": None})
    with pytest.raises(ImportRefused, match=r"weight map must map tensor names to shard file names, got 'x': None"):
        load_hf_weights(str(tmp_path))


def test_a_tensor_in_two_shards_is_refused(tmp_path):
    write_shards(
        str(tmp_path),
        {"a.safetensors": {"x": torch.ones(2)}, "b.safetensors": {"x": torch.zeros(2)}},
        {"x": "a.safetensors", "y": "b.safetensors"},
    )
    with pytest.raises(ImportRefused, match=r"tensor 'x' is in two shards, a.safetensors and b.safetensors"):
        load_hf_weights(str(tmp_path))


def test_a_truncated_safetensors_file_is_refused(tmp_path):
    from safetensors.torch import save_file

    path = str(tmp_path / "model.safetensors")
    save_file({"x": torch.ones(1000)}, path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(ImportRefused, match=r"model.safetensors: not a readable .safetensors file"):
        load_hf_weights(str(tmp_path))


class Payload:
    """An object a pickle may carry (and run code through when unpickled)."""


def test_a_pickled_bin_is_refused_not_unpickled(tmp_path):
    path = str(tmp_path / "pytorch_model.bin")
    torch.save({"x": torch.ones(2), "extra": Payload()}, path)
    with pytest.raises(ImportRefused, match=r"pytorch_model.bin: holds pickled objects besides tensors"):
        load_hf_weights(str(tmp_path))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[1, 2]", r"config.json: the cfg must be a JSON object, got list"),
        (b'"text"', r"config.json: the cfg must be a JSON object, got str"),
        (b"\xff\xfe{}", r"config.json: not UTF-8 text \(byte 0\)"),
    ],
)
def test_json_of_the_wrong_type_or_encoding_is_refused(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ImportRefused, match=message):
        read_json(str(path), "cfg", dict)
