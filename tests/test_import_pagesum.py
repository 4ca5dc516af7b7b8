"""``mdsfair-import pagesum``: a tiny state dict in the layout of the authors'
``PageSumModel`` (yixinL7/PageSum ``modeling_bart_ours.py``: BART's
``model.*``, ``lm_head``, ``final_logits_bias`` and the page scorer ``lin``)
converts key by key into ``pagesum_bart``, with the authors' page settings in
the checkpoint's cfg, and computes the logits of a reference forward that
mirrors their ``PageSum`` / ``PageSumModel.forward`` on the original weights."""
import os
from types import SimpleNamespace

import pytest
import torch

import mdsfair  # noqa: F401
from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from mdsfair.importers import ImportRefused
from mdsfair.importers.cli import import_main
from mdsfair.importers.pagesum import PRESETS, import_pagesum
from mdsfair.models.pagesum_bart import PageSumBARTModel
from tests.import_fixtures import TEXTS, hf_tokenizer, tiny_hf_bart

PAGES, PAGE_LENGTH = 3, 64


def write_release(root, scale_embedding=False):
    """``facebook/bart-large-cnn``-like config directory (config.json,
    vocab.json, merges.txt) and a PageSumModel state dict saved as the authors
    saved theirs (``torch.save(model.state_dict())``: every tied name present)."""
    config_dir = str(root / "bart-large-cnn")
    model, _ = tiny_hf_bart(config_dir, seed=3, weights_format="bin", extra_rows=-1,  # cnn: <mask> beyond the rows
                            scale_embedding=scale_embedding)
    os.remove(os.path.join(config_dir, "pytorch_model.bin"))
    torch.manual_seed(4)
    lin = torch.nn.Linear(model.config.d_model, 1)
    state = dict(model.state_dict())
    state["lin.weight"], state["lin.bias"] = lin.weight.detach().clone(), lin.bias.detach().clone() + 0.5
    path = str(root / "model.bin")
    torch.save(state, path)
    return {"config_dir": config_dir, "state_dict": path, "state": state, "hf": model, "root": root}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("pagesum"))


@pytest.fixture(scope="module")
def imported(released):
    out_dir = str(released["root"] / "out")
    settings = dict(locality="document", pages=PAGES, page_length=PAGE_LENGTH)
    summary = import_pagesum(released["state_dict"], released["config_dir"], out_dir, settings)
    return {"out_dir": out_dir, "summary": summary,
            "checkpoint": checkpoint_utils.load_checkpoint_to_cpu(os.path.join(out_dir, "model.pt"))}


def test_keys_convert_one_to_one(released, imported):
    converted = imported["checkpoint"]["model"]
    state = released["state"]
    assert torch.equal(converted["decoder.page_confidence.weight"], state["lin.weight"])
    assert torch.equal(converted["decoder.page_confidence.bias"], state["lin.bias"])
    assert torch.equal(converted["encoder.embed_tokens.weight"], state["model.shared.weight"])
    assert torch.equal(converted["decoder.output_projection.weight"], state["lm_head.weight"])
    compared = 0
    for key, value in state.items():
        if key.startswith("model.") and "embed_tokens" not in key and key != "model.shared.weight":
            assert torch.equal(converted[key[len("model."):]], value), key
            compared += 1
    assert compared == len([k for k in converted if ".layers." in k or "embed_positions" in k or "layernorm_embedding" in k])


def test_page_settings_are_recorded(imported):
    model_cfg = imported["checkpoint"]["cfg"].model
    assert model_cfg.arch == "pagesum_bart_large"
    assert (model_cfg.locality, model_cfg.num_pages, model_cfg.page_tokens) == ("document", PAGES, PAGE_LENGTH)
    assert model_cfg.page_overflow == "truncate" and model_cfg.empty_pages == "filler"
    assert model_cfg.max_page_positions == 96 and model_cfg.global_decoding is False
    assert imported["checkpoint"]["cfg"].task.max_source_positions == PAGES * PAGE_LENGTH


def test_spatial_preset_records_the_authors_chunking(released, tmp_path):
    summary = import_pagesum(released["state_dict"], os.path.join(released["config_dir"], "config.json"),
                             str(tmp_path / "out"), dict(PRESETS["govreport"], page_length=PAGE_LENGTH),
                             tokenizer_dir=released["config_dir"])
    model_cfg = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(summary["out_dir"], "model.pt"))["cfg"].model
    assert (model_cfg.locality, model_cfg.num_pages) == ("spatial", 20)
    assert model_cfg.spatial_remainder_to_last_page is True
    assert summary["generate_flags"][-1] == "900" and "--min-len" in summary["generate_flags"]


def test_presets_are_the_authors_config():
    """config.py of yixinL7/PageSum: num_pages 7 (arxiv, pubmed, multinews), 8
    (arxiv_discourse), 20 (govreport); page_type multi_doc for multinews and
    arxiv_discourse; page_max_len 1024; gen_min_len/gen_max_len 100/350
    (arXiv), 150/400 (PubMed, Multi-News), 500/900 (GovReport)."""
    expected = {"arxiv-spatial": ("spatial", 7, 100, 350), "arxiv-section": ("discourse", 8, 100, 350),
                "pubmed": ("spatial", 7, 150, 400), "govreport": ("spatial", 20, 500, 900),
                "multinews": ("document", 7, 150, 400)}
    for name, (locality, pages, gen_min, gen_max) in expected.items():
        preset = PRESETS[name]
        assert (preset["locality"], preset["pages"], preset["gen_min_len"], preset["gen_max_len"]) == \
            (locality, pages, gen_min, gen_max), name
        assert preset["page_length"] == 1024
    assert PRESETS["arxiv-section"]["discourse_unit"] == "section"


def reference_logits(hf, lin, pages, page_mask, decoder_input):
    """The authors' forward: encode the [B * P, L] pages independently, decode
    every page with the summary prefix repeated P times, score each page's last
    hidden state with ``lin``, softmax over pages, mix the hidden states, then
    ``lm_head`` + ``final_logits_bias``."""
    batch, num_pages, length = pages.shape
    encoder_out = hf.model.encoder(input_ids=pages.view(batch * num_pages, length),
                                   attention_mask=page_mask.view(batch * num_pages, length)).last_hidden_state
    hidden = hf.model.decoder(
        input_ids=decoder_input.repeat_interleave(num_pages, dim=0), encoder_hidden_states=encoder_out,
        encoder_attention_mask=page_mask.view(batch * num_pages, length),
    ).last_hidden_state
    hidden = hidden.view(batch, num_pages, -1, hidden.size(-1)).transpose(1, 2)  # [B, T, P, d]
    weights = torch.softmax(lin(hidden), dim=2)  # [B, T, P, 1]
    mixed = (hidden * weights).sum(dim=2)
    return hf.lm_head(mixed) + hf.final_logits_bias


def test_logits_equal_the_authors_forward(released, imported):
    assert_logits_equal_the_authors_forward(released, imported)


def test_scaled_embeddings_fold_into_the_page_scorer_too(tmp_path):
    """With ``scale_embedding`` the import folds sqrt(d) into the weights
    (hf_bart) and the page scorer reads the rescaled decoder states."""
    release = write_release(tmp_path, scale_embedding=True)
    out_dir = str(tmp_path / "out")
    summary = import_pagesum(release["state_dict"], release["config_dir"], out_dir,
                             dict(locality="document", pages=PAGES, page_length=PAGE_LENGTH))
    checkpoint = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(out_dir, "model.pt"))
    assert_logits_equal_the_authors_forward(release, {"out_dir": out_dir, "summary": summary, "checkpoint": checkpoint})


def assert_logits_equal_the_authors_forward(released, imported):
    tokenizer = hf_tokenizer(released["config_dir"])
    clusters = [[TEXTS[0], TEXTS[1][:50], TEXTS[2]], [TEXTS[3][:30], TEXTS[4], TEXTS[5][:45]]]
    # The authors' pages: one document per page, "<s> ... </s>", padded.
    page_ids = [[tokenizer(document).input_ids for document in cluster] for cluster in clusters]
    length = max(len(ids) for cluster in page_ids for ids in cluster)
    pages = torch.full((2, PAGES, length), 1)
    for b, cluster in enumerate(page_ids):
        for p, ids in enumerate(cluster):
            pages[b, p, : len(ids)] = torch.tensor(ids)
    page_mask = pages.ne(1).long()
    # The same clusters as mdsfair's flat stream: <s> per document, one closing </s>.
    streams = [[t for ids in cluster for t in ids[:-1]] + [2] for cluster in page_ids]
    doc_ids = [[d for d, ids in enumerate(cluster) for _ in ids[:-1]] + [len(cluster) - 1] for cluster in page_ids]
    width = max(map(len, streams))
    src_tokens = torch.tensor([s + [1] * (width - len(s)) for s in streams])
    src_doc_ids = torch.tensor([d + [-1] * (width - len(d)) for d in doc_ids])
    summaries = [tokenizer(TEXTS[6]).input_ids, tokenizer(TEXTS[7][:40]).input_ids]
    target_length = max(map(len, summaries))
    decoder_input = torch.tensor([[2] + s[:-1] + [1] * (target_length - len(s)) for s in summaries])

    hf, state = released["hf"], released["state"]
    lin = torch.nn.Linear(hf.config.d_model, 1)
    lin.load_state_dict({"weight": state["lin.weight"], "bias": state["lin.bias"]})
    dictionary = Dictionary.load(os.path.join(imported["out_dir"], "dict.txt"))
    checkpoint = imported["checkpoint"]
    model = PageSumBARTModel.build_model(checkpoint["cfg"].model,
                                         SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary))
    model.load_state_dict(checkpoint["model"])
    model.eval()
    with torch.no_grad():
        expected = reference_logits(hf, lin, pages, page_mask, decoder_input)
        logits, extra = model(src_tokens, src_tokens.ne(1).sum(1), decoder_input, src_doc_ids=src_doc_ids)
    real = decoder_input.ne(1)
    torch.testing.assert_close(logits[real], expected[real], atol=1e-5, rtol=1e-5)
    assert extra["page_weights"][0].shape == (2, target_length, PAGES)


def test_refusals(released, tmp_path):
    state = {k: v for k, v in released["state"].items() if not k.startswith("lin.")}
    path = str(tmp_path / "bart_only.bin")
    torch.save(state, path)
    settings = dict(locality="document", pages=PAGES, page_length=PAGE_LENGTH)
    with pytest.raises(ImportRefused, match=r"lin\.weight, lin\.bias missing; not a PageSumModel state dict"):
        import_pagesum(path, released["config_dir"], str(tmp_path / "a"), settings)
    with pytest.raises(ImportRefused, match="exceeds the model's position table"):
        import_pagesum(released["state_dict"], released["config_dir"], str(tmp_path / "b"), dict(settings, page_length=1024))
    with pytest.raises(ImportRefused, match=r"vocab\.json: missing"):
        import_pagesum(released["state_dict"], released["config_dir"], str(tmp_path / "c"), settings,
                       tokenizer_dir=str(tmp_path))


def test_cli(released, tmp_path, capsys):
    out_dir = str(tmp_path / "out")
    assert import_main(["pagesum", released["state_dict"], released["config_dir"], out_dir, "--preset", "multinews",
                        "--page-length", str(PAGE_LENGTH)]) == 0
    printed = capsys.readouterr().out
    assert "locality document, 7 pages of 64 tokens" in printed
    assert f"--max-source-positions {7 * PAGE_LENGTH}" in printed and "--lenpen 2.0" in printed
    assert import_main(["pagesum", released["state_dict"], released["config_dir"], str(tmp_path / "x")]) == 1
    assert "--locality must be one of" in capsys.readouterr().err
