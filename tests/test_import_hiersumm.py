"""``mdsfair-import hiersumm``: a tiny checkpoint in the exact layout of the
hiersumm code's saves (random weights, both LayerNorm namings, the generator
inside ``model`` or as its own entry) and a tiny SentencePiece model with
their special pieces, trained here; the import is checked key by key and by
output against the reimplementation of their Summarizer in
tests/hiersumm_reference.py, on raw text preprocessed by mdsfair-preprocess."""

import argparse
import json
import os

import pytest
import sentencepiece
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils, options, tasks
from fairseq.data import Dictionary

from mdsfair.importers.hiersumm import cli_main
from mdsfair.importers.hiersumm_checkpoint import HiersummImportError
from mdsfair.importers.hiersumm_vocabulary import sentencepiece_order
from tests.hiersumm_fixtures import (
    DEC_LAYERS,
    DIM,
    ENC_LAYERS,
    HEADS,
    INTER,
    TEXT,
    their_opt,
    their_state_dict,
    train_spm,
)
from tests.hiersumm_reference import export_to_hiersumm_layout, ref_log_probs
from tests.utils import REPO_ROOT, USER_DIR


def save_their_checkpoint(path, sd, separate_generator=False):
    model = {k: v for k, v in sd.items() if not (separate_generator and k.startswith("generator."))}
    checkpoint = {"model": model, "opt": their_opt(), "optim": {"state": {}, "param_groups": []}}
    if separate_generator:
        checkpoint["generator"] = {k[len("generator.") :]: v for k, v in sd.items() if k.startswith("generator.")}
    torch.save(checkpoint, path)
    return path


def normalized(sd):
    return {k.replace(".a_2", ".weight").replace(".b_2", ".bias"): v for k, v in sd.items()}


class Opt:
    heads, inter_heads, enc_layers, dec_layers, inter_layers = HEADS, HEADS, ENC_LAYERS, DEC_LAYERS, INTER


@pytest.fixture(scope="module", params=["user_defined", "control"])
def imported(request, tmp_path_factory):
    """(work dir, spm path, their state dict, import dir) for each way the
    specials can sit in the SentencePiece model; the user-defined variant
    uses the old a_2/b_2 names and a separate generator entry."""
    work = tmp_path_factory.mktemp(f"hiersumm_{request.param}")
    control = request.param == "control"
    spm_path = train_spm(str(work / "spm9998_3"), control_roles=control)
    vocab_size = sentencepiece.SentencePieceProcessor(model_file=spm_path).get_piece_size()
    sd = their_state_dict(vocab_size, seed=1 if control else 2, old_layer_norm_names=not control)
    checkpoint = save_their_checkpoint(str(work / "model_step_100000.pt"), sd, separate_generator=not control)
    out_dir = str(work / "imported")
    assert cli_main([checkpoint, spm_path, out_dir]) == 0
    return work, spm_path, normalized(sd), out_dir


def load_imported(out_dir):
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": out_dir}
    )
    return models[0].eval(), cfg, task


def spm_to_fairseq(out_dir, spm_path):
    """fairseq index of every SentencePiece id, read from the written files."""
    processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    dictionary = Dictionary.load(os.path.join(out_dir, "dict.txt"))
    manifest = json.load(open(os.path.join(out_dir, "mdsfair.json"), encoding="utf-8"))
    specials = manifest["imported_from"]["fairseq_specials"]
    index = {}
    for symbol, piece in specials.items():
        index[processor.piece_to_id(piece)] = dictionary.index(symbol)
    for piece_id in range(processor.get_piece_size()):
        if piece_id not in index:
            index[piece_id] = dictionary.index(processor.id_to_piece(piece_id))
    return torch.tensor([index[i] for i in range(processor.get_piece_size())]), dictionary


def test_files_vocabulary_and_every_parameter(imported):
    work, spm_path, theirs, out_dir = imported
    for name in ("model.pt", "dict.txt", "spm.model", "mdsfair.json"):
        assert os.path.exists(os.path.join(out_dir, name))
    processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    index, dictionary = spm_to_fairseq(out_dir, spm_path)
    # a permutation: every SentencePiece id has its own fairseq index and nothing else is there
    assert len(dictionary) == processor.get_piece_size()
    assert sorted(index.tolist()) == list(range(len(dictionary)))
    assert index[processor.piece_to_id("<S>")] == dictionary.bos() == 0
    assert index[processor.piece_to_id("<PAD>")] == dictionary.pad() == 1
    assert index[processor.piece_to_id("</S>")] == dictionary.eos() == 2
    assert index[processor.unk_id()] == dictionary.unk() == 3
    for piece in ("<T>", "<P>", "<Q>"):
        assert dictionary.index(piece) == index[processor.piece_to_id(piece)] > 3
    # key by key: our parameters, renamed back to theirs and un-permuted, are theirs exactly
    model, cfg, _ = load_imported(out_dir)
    assert cfg.model._name == "hiertransformer_hiersumm"
    assert (cfg.model.local_layers, cfg.model.global_layers, cfg.model.decoder_layers) == (2, 1, DEC_LAYERS)
    exported = export_to_hiersumm_layout(model)
    permuted = {"encoder.embeddings.weight", "decoder.embeddings.weight", "generator.0.weight", "generator.0.bias"}
    for key, value in exported.items():
        expected = theirs[key]
        assert torch.equal(value[index] if key in permuted else value, expected), key
    parameters = {k for k in theirs if not k.endswith((".pe", ".mask"))}
    assert set(exported) == parameters
    assert model.decoder.output_projection.weight is model.encoder.embed_tokens.weight


def test_logits_on_preprocessed_text_equal_their_model(imported, tmp_path):
    """Raw clusters -> mdsfair-preprocess with the imported spm.model and
    dict.txt -> the imported model; against their Summarizer (reimplemented
    from their equations) on the same paragraphs encoded by SentencePiece."""
    from mdsfair.preprocess.binarize import run

    work, spm_path, theirs, out_dir = imported
    raw = tmp_path / "raw"
    raw.mkdir()
    clusters = [
        {
            "id": "0",
            "title": "Lake ferry",
            "summary": "The ferry crosses the lake at noon.",
            "documents": ["The lake ferry leaves at noon.\n\nIt carries cars and bikes.", "Tickets cost ten dollars."],
        },
        {
            "id": "1",
            "title": "Island airport",
            "summary": "The airport opened in 1939.",
            "documents": ["The island airport opened in 1939 and serves regional flights."],
        },
    ]
    with open(raw / "test.jsonl", "w", encoding="utf-8") as f:
        for cluster in clusters:
            f.write(json.dumps(cluster) + "\n")
    data_bin = str(tmp_path / "data-bin")
    run(
        [
            "--input-dir",
            str(raw),
            "--destdir",
            data_bin,
            "--spm-model",
            os.path.join(out_dir, "spm.model"),
            "--dict",
            os.path.join(out_dir, "dict.txt"),
            "--lowercase",
            "--no-progress-bar",
        ]
    )
    assert open(os.path.join(data_bin, "dict.txt")).read() == open(os.path.join(out_dir, "dict.txt")).read()

    model, _, _ = load_imported(out_dir)
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization", "--arch", "hiertransformer_hiersumm"],
    )
    task = tasks.setup_task(args)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    sample = dataset.collater([dataset[0], dataset[1]])
    net_input = sample["net_input"]
    assert net_input["src_tokens"][0, 0].item() == task.source_dictionary.bos()  # the data contract's <s> is there

    # their input: the paragraphs encoded by SentencePiece, [B, n_blocks, n_tokens], no special tokens
    processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    pad = processor.piece_to_id("<PAD>")
    paragraphs = [[p.lower() for d in c["documents"] for p in d.split("\n\n")] for c in clusters]
    encoded = [[processor.encode(p) for p in ps] for ps in paragraphs]
    width = max(len(ids) for ps in encoded for ids in ps)
    src = torch.full((2, max(len(ps) for ps in encoded), width), pad)
    for b, ps in enumerate(encoded):
        for p, ids in enumerate(ps):
            src[b, p, : len(ids)] = torch.tensor(ids)
    index, _ = spm_to_fairseq(out_dir, spm_path)
    ours_src = net_input["src_tokens"]
    real = ~torch.isin(ours_src, torch.tensor([0, 1, 2]))
    assert [index[torch.tensor(sum(ps, []))].tolist() for ps in encoded] == [
        ours_src[b][real[b]].tolist() for b in range(2)
    ]

    # a target, in their ids starting with <S>, and as fairseq's prev_output_tokens starting with </s>
    generator = torch.Generator().manual_seed(0)
    ordinary = torch.tensor(
        [
            i
            for i in range(processor.get_piece_size())
            if not processor.is_control(i) and not processor.is_unknown(i) and i != pad
        ]
    )
    tgt = ordinary[torch.randint(len(ordinary), (2, 6), generator=generator)]
    tgt[:, 0] = processor.piece_to_id("<S>")
    tgt[1, 4:] = pad
    prev = index[tgt]
    prev[:, 0] = task.target_dictionary.eos()
    model = model.double()
    inputs = {k: net_input[k] for k in ("src_tokens", "src_lengths", "src_para_ids")}
    ours = F.log_softmax(model(**inputs, prev_output_tokens=prev)[0], dim=-1)
    theirs_double = {k: v.double() if v.is_floating_point() else v for k, v in theirs.items()}
    reference = ref_log_probs(src, tgt, theirs_double, Opt, pad=pad)
    keep = tgt.ne(pad)
    assert torch.allclose(ours[..., index][keep], reference[keep], atol=1e-6)


def test_hub_summarizes_from_the_import_directory(imported):
    _, _, _, out_dir = imported
    summarizer = torch.hub.load(
        REPO_ROOT,
        "hiertransformer",
        model_dir=out_dir,
        checkpoint_file="model.pt",
        data_name_or_path=out_dir,
        source="local",
    )
    summaries = summarizer.summarize(
        [
            {"documents": ["The lake ferry leaves at noon.\n\nIt carries cars and bikes."]},
            ["The island airport opened in 1939."],
        ],
        beam=2,
        max_len_b=5,
        min_len=1,
        batch_size=2,
    )
    assert len(summaries) == 2 and all(isinstance(s, str) for s in summaries)


def test_what_cannot_be_converted_is_refused_by_name(tmp_path):
    spm_path = train_spm(str(tmp_path / "spm"), control_roles=False)
    vocab_size = sentencepiece.SentencePieceProcessor(model_file=spm_path).get_piece_size()
    out = str(tmp_path / "out")

    def attempt(sd, **opt_changes):
        path = str(tmp_path / "bad.pt")
        checkpoint = {"model": sd, "opt": argparse.Namespace(**{**vars(their_opt()), **opt_changes})}
        torch.save(checkpoint, path)
        from mdsfair.importers.hiersumm import import_hiersumm

        with pytest.raises(HiersummImportError) as error:
            import_hiersumm(path, spm_path, out)
        assert path in str(error.value) or spm_path in str(error.value)
        return str(error.value)

    good = their_state_dict(vocab_size)
    assert "flat model" in attempt(good, hier=False)
    assert "inter layers must be the last" in attempt(good, inter_layers=[0])
    untied = dict(good, **{"decoder.embeddings.weight": good["decoder.embeddings.weight"] + 1})
    assert "embeddings differ" in attempt(untied)
    missing = {k: v for k, v in good.items() if k != "encoder.layer_norm.bias"}
    assert "encoder.layer_norm.bias" in attempt(missing)
    extra = dict(good, **{"encoder.transformer_layers.2.pooling.final_linear.weight": torch.zeros(DIM, DIM)})
    assert "no place for" in attempt(extra)
    assert "embedding rows" in attempt(their_state_dict(vocab_size + 3))
    not_a_checkpoint = str(tmp_path / "other.pt")
    torch.save({"state_dict": {}}, not_a_checkpoint)
    assert cli_main([not_a_checkpoint, spm_path, out]) == 1
    # a SentencePiece model without their specials
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT),
        model_prefix=str(tmp_path / "plain"),
        vocab_size=60,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(HiersummImportError, match="no piece '<S>'"):
        sentencepiece_order(
            sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "plain.model")), "plain.model"
        )
