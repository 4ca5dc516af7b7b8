"""Hub interface and hubconf.py: torch.hub loading, training-identical
preprocessing, batch invariance, and agreement with mdsfair-generate."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from fairseq.models import MODEL_REGISTRY

from mdsfair.data.indexed import NumpyMMapDataset
from mdsfair.data.side_data import SideDataSpec
from mdsfair.hub_interface import (
    HUB_ENTRIES,
    HubEntry,
    MultiDocSummarizationHubInterface,
    copy_inference_files,
    hub_entries,
)
from mdsfair.preprocess.pipeline import preprocessing_args
from mdsfair.preprocess.side_data import SIDE_DATA_PRODUCERS, SideDataProducer
from mdsfair.preprocess.structure import InputFormatError
from tests.utils import REPO_ROOT, TINY_TRANSFORMER_ARGS, USER_DIR, fairseq_cli, make_tiny_data_bin

GENERATION = {"beam": 2, "max_len_b": 24, "min_len": 3}
SIDE_DATA = "hubtest_sentence_start"


class SentenceStartProducer(SideDataProducer):
    """Test side data: a pointer from every token to the first token of its
    sentence (-1 at that first token)."""

    spec = SideDataSpec(SIDE_DATA, "token_pointer", "int32")

    def __call__(self, cluster, encoded):
        sent = encoded.sent_ids
        sentence_start = np.flatnonzero(np.r_[True, sent[1:] != sent[:-1]])
        pointer = sentence_start[sent].astype(np.int32)
        pointer[sentence_start] = -1
        return pointer


@pytest.fixture(scope="module")
def sentence_start_producer():
    """Register the test producer for this module only."""
    SIDE_DATA_PRODUCERS[SIDE_DATA] = SentenceStartProducer
    yield SIDE_DATA
    del SIDE_DATA_PRODUCERS[SIDE_DATA]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, sentence_start_producer):
    """A tiny data-bin (with side data) and a stock transformer trained on it
    for a few updates."""
    work = str(tmp_path_factory.mktemp("hub"))
    data_bin = make_tiny_data_bin(work, train=24, valid=4, test=8, extra_args=["--side-data", sentence_start_producer])
    save_dir = os.path.join(work, "checkpoints")
    fairseq_cli(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            *TINY_TRANSFORMER_ARGS,
            "--optimizer",
            "adam",
            "--lr",
            "3e-3",
            "--max-sentences",
            "8",
            "--max-update",
            "3",
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--no-progress-bar",
            "--cpu",
            "--seed",
            "1",
        ],
    )
    assert os.path.exists(os.path.join(save_dir, "checkpoint_best.pt"))
    raw_test = [json.loads(line) for line in open(os.path.join(work, "raw", "test.jsonl"), encoding="utf-8")]
    return {"data_bin": data_bin, "save_dir": save_dir, "raw_test": raw_test}


@pytest.fixture(scope="module")
def hub(trained):
    return torch.hub.load(
        REPO_ROOT, "transformer", model_dir=trained["save_dir"], data_name_or_path=trained["data_bin"], source="local"
    )


def load_hubconf():
    spec = importlib.util.spec_from_file_location("mdsfair_hubconf_under_test", os.path.join(REPO_ROOT, "hubconf.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hubconf_exposes_every_registered_entry():
    hubconf = load_hubconf()
    # torch.hub lists public callables of hubconf as entry points.
    public = sorted(name for name in dir(hubconf) if callable(getattr(hubconf, name)) and not name.startswith("_"))
    assert public == sorted(HUB_ENTRIES)
    assert {"summarizer", "transformer", "bart"} <= set(public)
    assert hubconf.dependencies == ["torch", "fairseq", "sentencepiece"]
    assert "model_dir" in hubconf.transformer.__doc__


MDSFAIR_MODELS = (
    "dape_transformer",
    "hat_bart",
    "hepos_bart",
    "hierencdec_bart",
    "hiertransformer",
    "led",
    "lobart",
    "longt5",
    "multidoc_bart",
    "pagesum_bart",
    "pegasus",
    "sparse_bart",
    "t5_v1_1",
    "tdmca",
)


def test_hub_entries_are_declared_by_the_model_classes(monkeypatch):
    entries = hub_entries()
    assert entries == HUB_ENTRIES
    assert sorted(entries) == sorted(MDSFAIR_MODELS + ("bart", "summarizer", "transformer"))
    for name in MDSFAIR_MODELS:
        cls = MODEL_REGISTRY[name]
        assert entries[name] == HubEntry(name, cls.hub_description, (name,))
        assert cls.hub_models() == {}  # fairseq's map of downloadable releases: mdsfair publishes none
    # a registered subclass without its own hub_description gets no entry; with one it does
    base = MODEL_REGISTRY["pagesum_bart"]
    monkeypatch.setitem(MODEL_REGISTRY, "pagesum_variant", type("PageSumVariant", (base,), {}))
    assert "pagesum_variant" not in hub_entries()
    monkeypatch.setitem(
        MODEL_REGISTRY, "pagesum_variant", type("PageSumVariant", (base,), {"hub_description": "a variant"})
    )
    assert hub_entries()["pagesum_variant"] == HubEntry("pagesum_variant", "a variant", ("pagesum_variant",))
    monkeypatch.setitem(MODEL_REGISTRY, "not-a-name", type("Bad", (base,), {"hub_description": "x"}))
    with pytest.raises(ValueError, match="not a Python identifier"):
        hub_entries()


def test_model_class_from_pretrained_loads_only_its_own_family(trained):
    with pytest.raises(ValueError, match="holds a 'transformer' model; hub entry 'pagesum_bart'"):
        MODEL_REGISTRY["pagesum_bart"].from_pretrained(trained["save_dir"], data_name_or_path=trained["data_bin"])


def test_hub_load_returns_interface(hub):
    assert isinstance(hub, MultiDocSummarizationHubInterface)
    assert not hub.models[0].training
    assert hub.device == torch.device("cpu")


def test_hub_encoding_equals_binarized_split(hub, trained):
    """Raw test clusters encoded by the hub equal what mdsfair-preprocess
    stored for them: tokens, structure ids and target."""
    prefix = os.path.join(trained["data_bin"], "test")
    keys = ("source", "doc", "para", "sent", "target", SIDE_DATA)
    stored = {key: NumpyMMapDataset(f"{prefix}.{key}") for key in keys}
    assert len(stored["source"]) == len(trained["raw_test"])
    for i, cluster in enumerate(trained["raw_test"]):
        encoded = hub.encode_cluster(cluster, i)
        np.testing.assert_array_equal(encoded.tokens, stored["source"][i])
        np.testing.assert_array_equal(encoded.doc_ids, stored["doc"][i])
        np.testing.assert_array_equal(encoded.para_ids, stored["para"][i])
        np.testing.assert_array_equal(encoded.sent_ids, stored["sent"][i])
        np.testing.assert_array_equal(encoded.target, stored["target"][i])
        np.testing.assert_array_equal(encoded.side_data[SIDE_DATA], stored[SIDE_DATA][i])
    # A plain list of documents encodes the same source as the dict form.
    as_list = hub.encode_cluster(trained["raw_test"][0]["documents"])
    np.testing.assert_array_equal(as_list.tokens, stored["source"][0])


def test_pipeline_encoding_equals_workers_output_with_arcs_and_graphs(tmp_path):
    """What the hub encodes with (ClusterEncoder.from_data_bin on the
    data-bin) equals what mdsfair-preprocess's worker processes wrote, with
    lowercasing, dependency arcs (all subword pairs) and a paragraph graph."""
    from mdsfair.preprocess.pipeline import ClusterEncoder

    side = ["dep_head", "dep_rel", "dep_word", "graph_similarity"]
    data_bin = make_tiny_data_bin(
        str(tmp_path),
        train=6,
        valid=2,
        test=5,
        vocab_size=200,
        extra_args=[
            "--side-data",
            *side,
            "--dep-subword-arcs",
            "all-subwords",
            "--lowercase",
            "--workers",
            "2",
            "--chunk-size",
            "2",
        ],
    )
    manifest = json.load(open(os.path.join(data_bin, "mdsfair.json")))
    encoder = ClusterEncoder.from_data_bin(data_bin, manifest)
    raw_test = [json.loads(line) for line in open(os.path.join(str(tmp_path), "raw", "test.jsonl"), encoding="utf-8")]
    keys = ("source", "doc", "para", "sent", "target") + tuple(side)
    stored = {key: NumpyMMapDataset(os.path.join(data_bin, f"test.{key}")) for key in keys}
    for i, cluster in enumerate(raw_test):
        encoded = encoder.encode(cluster, i)
        arrays = {
            "source": encoded.tokens,
            "doc": encoded.doc_ids,
            "para": encoded.para_ids,
            "sent": encoded.sent_ids,
            "target": encoded.target,
            **encoded.side_data,
        }
        for key in keys:
            np.testing.assert_array_equal(arrays[key], stored[key][i], err_msg=f"{key} of cluster {i}")
        assert (encoded.side_data["dep_head"] >= 0).sum() > len(encoded.tokens) // 2


def test_hub_takes_nothing_but_the_pipeline_from_preprocessing():
    """The hub reaches preprocessing only through mdsfair.preprocess.pipeline,
    the module mdsfair-preprocess encodes with, so the two cannot drift."""
    import ast

    with open(os.path.join(REPO_ROOT, "mdsfair", "hub_interface.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "preprocess" in node.module:
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names if "preprocess" in alias.name}
    assert imported == {"mdsfair.preprocess.pipeline"}


def test_hub_dataset_equals_task_dataset(hub, trained):
    """After truncation and special tokens, the hub's inference dataset gives
    the model the same inputs as the task's test split."""
    task_dataset = hub.task.load_dataset("test")
    encoded = [hub.encode_cluster(c, i) for i, c in enumerate(trained["raw_test"])]
    hub_dataset = hub.task.build_dataset_for_inference(encoded)
    for i in range(len(encoded)):
        ours, theirs = hub_dataset[i], task_dataset[i]
        assert torch.equal(ours["source"], theirs["source"])
        for key in ("doc", "para", "sent"):
            assert torch.equal(ours["structure"][key], theirs["structure"][key])
        assert torch.equal(ours["side_data"][SIDE_DATA], theirs["side_data"][SIDE_DATA])
        assert ours["source"][0] == hub.dictionary.bos() and ours["source"][-1] == hub.dictionary.eos()
    assert hub_dataset.truncation_counts == task_dataset.truncation_counts


def test_preprocessing_args_follow_manifest_and_producer_defaults(tmp_path):
    class WindowProducer(SentenceStartProducer):
        spec = SideDataSpec("hubtest_window", "token", "int32")

        @staticmethod
        def add_args(parser):
            parser.add_argument("--hubtest-window", type=int, default=3, help="a window size")

    SIDE_DATA_PRODUCERS["hubtest_window"] = WindowProducer
    try:
        manifest = {
            "sentence_splitter": "spacy",
            "lowercase": True,
            "side_data": {"hubtest_window": {}},
            "subword": {"type": "gpt2", "encoder_json": "encoder.json", "vocab_bpe": "vocab.bpe"},
        }
        args = preprocessing_args(manifest, str(tmp_path))
        assert (args.hubtest_window, args.sentence_splitter, args.lowercase) == (3, "spacy", True)
        assert args.side_data == ["hubtest_window"]
        # producers that re-read the subword model find it in the data dir
        assert (args.subword, args.gpt2_encoder_json) == ("gpt2", str(tmp_path / "encoder.json"))
        assert args.gpt2_vocab_bpe == str(tmp_path / "vocab.bpe") and args.spm_model is None
        assert preprocessing_args({**manifest, "side_data_args": {"hubtest_window": 4}}, "d").hubtest_window == 4
        assert preprocessing_args(manifest, "d", {"hubtest_window": 5}).hubtest_window == 5
    finally:
        del SIDE_DATA_PRODUCERS["hubtest_window"]
    with pytest.raises(ValueError, match="no installed producer"):
        preprocessing_args(manifest, "d")


def test_summarize_returns_strings_and_batches_agree(hub, trained):
    clusters = [c["documents"] for c in trained["raw_test"][:5]]
    one = hub.generate(clusters, batch_size=1, **GENERATION)
    three = hub.generate(clusters, batch_size=3, **GENERATION)
    for hypos_one, hypos_three in zip(one, three):
        assert torch.equal(hypos_one[0]["tokens"], hypos_three[0]["tokens"])
        assert hypos_one[0]["score"].item() == pytest.approx(hypos_three[0]["score"].item(), abs=1e-4)
    # every cluster has its own encoder input, so its own best score: order is checked
    assert len({round(h[0]["score"].item(), 4) for h in one}) > 1
    summaries = hub.summarize(clusters, batch_size=3, **GENERATION)
    assert summaries == [hub.decode(h[0]["tokens"]) for h in one]
    assert all(isinstance(s, str) and s for s in summaries)
    assert all("<s>" not in s and "</s>" not in s and "<pad>" not in s for s in summaries)


def run_generate_wrapper(args, cwd):
    """mdsfair.cli.generate_main in a fresh process, mdsfair importable as an
    installed package would be (not through --user-dir)."""
    command = [sys.executable, "-c", "import sys; from mdsfair.cli import generate_main; generate_main(sys.argv[1:])"]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(command + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_summaries_equal_mdsfair_generate(hub, trained, tmp_path):
    """The hub on raw text and mdsfair-generate on the binarized split give
    the same summary for every test cluster: same preprocessing end to end."""
    output = run_generate_wrapper(
        [
            trained["data_bin"],
            "--task",
            "multidoc_summarization",
            "--gen-subset",
            "test",
            "--path",
            os.path.join(trained["save_dir"], "checkpoint_best.pt"),
            "--beam",
            str(GENERATION["beam"]),
            "--max-len-b",
            str(GENERATION["max_len_b"]),
            "--min-len",
            str(GENERATION["min_len"]),
            "--batch-size",
            "4",
            "--post-process",
            "sentencepiece",
            "--cpu",
        ],
        cwd=str(tmp_path),
    )
    generated = {}
    for line in output.splitlines():
        if line.startswith("H-"):
            tag, score, text = line.split("\t", 2)
            generated[int(tag[2:])] = (float(score), text)
    assert sorted(generated) == list(range(len(trained["raw_test"])))
    hypotheses = hub.generate(trained["raw_test"], batch_size=4, **GENERATION)
    for i, hypos in enumerate(hypotheses):
        score, text = generated[i]
        assert hub.decode(hypos[0]["tokens"]) == text
        # fairseq-generate prints scores in base 2
        assert hypos[0]["score"].item() / math.log(2) == pytest.approx(score, abs=1e-3)


def test_load_from_checkpoint_dir_with_copied_files(trained, tmp_path):
    model_dir = str(tmp_path / "model")
    os.makedirs(model_dir)
    os.link(os.path.join(trained["save_dir"], "checkpoint_best.pt"), os.path.join(model_dir, "checkpoint_best.pt"))
    with pytest.raises(FileNotFoundError, match="mdsfair.json"):
        torch.hub.load(REPO_ROOT, "summarizer", model_dir=model_dir, source="local")
    copied = copy_inference_files(trained["data_bin"], model_dir)
    assert sorted(os.path.basename(p) for p in copied) == ["dict.txt", "mdsfair.json", "spm.model"]
    summarizer = torch.hub.load(REPO_ROOT, "summarizer", model_dir=model_dir, source="local")
    stored_source = NumpyMMapDataset(os.path.join(trained["data_bin"], "test.source"))
    np.testing.assert_array_equal(summarizer.encode_cluster(trained["raw_test"][1]).tokens, stored_source[1])


def test_entry_rejects_other_family(trained):
    with pytest.raises(ValueError, match="holds a 'transformer' model; hub entry 'bart'"):
        torch.hub.load(
            REPO_ROOT, "bart", model_dir=trained["save_dir"], data_name_or_path=trained["data_bin"], source="local"
        )
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        torch.hub.load(
            REPO_ROOT,
            "transformer",
            model_dir=trained["save_dir"],
            checkpoint_file="missing.pt",
            data_name_or_path=trained["data_bin"],
            source="local",
        )


def test_bad_input_is_a_clear_error(hub):
    with pytest.raises(TypeError, match="cluster 0 is a string"):
        hub.summarize(["a document, not a cluster"])
    with pytest.raises(TypeError, match="list of clusters"):
        hub.summarize({"documents": ["x"]})
    with pytest.raises(InputFormatError, match="document 1 of cluster '0' is empty"):
        hub.summarize([["A real document.", "   "]])
    with pytest.raises(InputFormatError, match="no 'documents'"):
        hub.summarize([{"title": "only a title"}])
    # Issue 22.7/22.8: a lone surrogate or an id with a line break is named, not an encoding traceback.
    with pytest.raises(InputFormatError, match=r"<summarize input>:2: documents\[0\] holds a lone surrogate"):
        hub.summarize([["A real document."], ["Bad \ud800 text."]])
    with pytest.raises(InputFormatError, match="ids may not contain tabs or line breaks"):
        hub.summarize([{"id": "a\nb", "documents": ["A real document."]}])
    with pytest.raises(ValueError, match="unknown generation option 'beam_size'"):
        hub.summarize([["A document."]], beam_size=3)
    assert hub.summarize([]) == []
    # Issue 47, class 1: None summarized nothing, silently; a boolean id became "True" (class 6)
    with pytest.raises(TypeError, match="list of clusters .*not NoneType"):
        hub.summarize(None)
    with pytest.raises(InputFormatError, match="<summarize input>:2: id must be a string or an integer, got bool"):
        hub.summarize([["A real document."], {"id": True, "documents": ["A real document."]}])


def test_summarize_refuses_a_beam_below_one_before_encoding_anything(hub, monkeypatch):
    """Issue 22 item 10: ``summarize(..., beam=-1)`` is refused with the plain
    message of ``--beam`` before any cluster is encoded (here a cluster that
    would fail encoding: its error must not be the one raised) or run."""
    from mdsfair.generation.sequence_generator import GenerationSettingsError

    encoded = []
    real_encode = hub.encode_cluster
    monkeypatch.setattr(
        hub, "encode_cluster", lambda *args, **kwargs: encoded.append(args) or real_encode(*args, **kwargs)
    )
    for clusters in ([["A real document."], ["Bad \ud800 text."]], []):
        with pytest.raises(GenerationSettingsError) as raised:
            hub.summarize(clusters, beam=-1)
        assert str(raised.value) == "--beam (beam=) must be at least 1, got -1"
    assert encoded == []
    assert len(hub.summarize([["A real document."]], beam=1, max_len_b=4)) == 1 and len(encoded) == 1
