"""``mdsfair-import pagesum``: a tiny state dict in the layout of the authors'
``PageSumModel`` (yixinL7/PageSum ``modeling_bart_ours.py``: BART's
``model.*``, ``lm_head``, ``final_logits_bias`` and the page scorer ``lin``)
converts key by key into ``pagesum_bart``, with the authors' page settings in
the checkpoint's cfg (their ``"."`` page for missing documents:
``empty_pages="filler"``). Loaded as fairseq-generate loads it, on a GPT-2 BPE
data-bin made with the import's files, it computes the logits of a reference
forward that mirrors their ``PageSum`` / ``PageSumModel.forward`` on the
original weights, with pages built from the raw text as their
``data_utils.py`` builds them; the hub and fairseq-generate decode it."""

import argparse
import os

import pytest
import torch
from fairseq import checkpoint_utils

from mdsfair.importers import ImportRefused
from mdsfair.importers.cli import import_main
from mdsfair.importers.pagesum import PRESETS, import_pagesum
from mdsfair.models.pagesum_bart import PageSumBARTModel
from tests.import_fixtures import TEXTS, gpt2_data_bin, hf_tokenizer, tiny_hf_bart
from tests.tolerances import assert_close_in_dtype
from tests.utils import REPO_ROOT, USER_DIR, generate_in_process

PAGES, PAGE_LENGTH = 3, 64


def write_release(root, scale_embedding=False):
    """``facebook/bart-large-cnn``-like config directory (config.json,
    vocab.json, merges.txt) and a PageSumModel state dict saved as the authors
    saved theirs (``torch.save(model.state_dict())``: every tied name present)."""
    config_dir = str(root / "bart-large-cnn")
    model, _ = tiny_hf_bart(
        config_dir,
        seed=3,
        weights_format="bin",
        extra_rows=-1,  # cnn: <mask> beyond the rows
        scale_embedding=scale_embedding,
        eos_pull=5.0,
    )  # hypotheses end by themselves
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
    return {
        "out_dir": out_dir,
        "summary": summary,
        "checkpoint": checkpoint_utils.load_checkpoint_to_cpu(os.path.join(out_dir, "model.pt")),
    }


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
            assert torch.equal(converted[key[len("model.") :]], value), key
            compared += 1
    assert compared == len(
        [k for k in converted if ".layers." in k or "embed_positions" in k or "layernorm_embedding" in k]
    )


def test_page_settings_are_recorded(imported):
    model_cfg = imported["checkpoint"]["cfg"].model
    assert model_cfg.arch == "pagesum_bart_large"
    assert (model_cfg.locality, model_cfg.num_pages, model_cfg.page_tokens) == ("document", PAGES, PAGE_LENGTH)
    assert model_cfg.page_overflow == "truncate" and model_cfg.empty_pages == "filler"
    # The cfg field is the model's --empty-pages, and "filler" one of its values.
    parser = argparse.ArgumentParser()
    PageSumBARTModel.add_args(parser)
    action = next(a for a in parser._actions if "--empty-pages" in a.option_strings)
    assert action.dest == "empty_pages" and "filler" in action.choices
    flags = imported["summary"]["arch_flags"]
    assert flags[flags.index("--empty-pages") + 1] == "filler"
    assert model_cfg.max_page_positions == 96 and model_cfg.global_decoding is False
    assert imported["checkpoint"]["cfg"].task.max_source_positions == PAGES * PAGE_LENGTH


def test_spatial_preset_records_the_authors_chunking(released, tmp_path):
    summary = import_pagesum(
        released["state_dict"],
        os.path.join(released["config_dir"], "config.json"),
        str(tmp_path / "out"),
        dict(PRESETS["govreport"], page_length=PAGE_LENGTH),
        tokenizer_dir=released["config_dir"],
    )
    model_cfg = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(summary["out_dir"], "model.pt"))["cfg"].model
    assert (model_cfg.locality, model_cfg.num_pages) == ("spatial", 20)
    assert model_cfg.spatial_remainder_to_last_page is True
    assert summary["generate_flags"][-1] == "900" and "--min-len" in summary["generate_flags"]


def test_presets_are_the_authors_config():
    """config.py of yixinL7/PageSum: num_pages 7 (arxiv, pubmed, multinews), 8
    (arxiv_discourse), 20 (govreport); page_type multi_doc for multinews and
    arxiv_discourse; page_max_len 1024; gen_min_len/gen_max_len 100/350
    (arXiv), 150/400 (PubMed, Multi-News), 500/900 (GovReport)."""
    expected = {
        "arxiv-spatial": ("spatial", 7, 100, 350),
        "arxiv-section": ("discourse", 8, 100, 350),
        "pubmed": ("spatial", 7, 150, 400),
        "govreport": ("spatial", 20, 500, 900),
        "multinews": ("document", 7, 150, 400),
    }
    for name, (locality, pages, gen_min, gen_max) in expected.items():
        preset = PRESETS[name]
        assert (preset["locality"], preset["pages"], preset["gen_min_len"], preset["gen_max_len"]) == (
            locality,
            pages,
            gen_min,
            gen_max,
        ), name
        assert preset["page_length"] == 1024
    assert PRESETS["arxiv-section"]["discourse_unit"] == "section"


def test_model_defaults_are_the_authors_multinews_setting():
    """pagesum_bart's DEFAULTS table says it is Liu et al.'s multi-document
    setting: document locality, 7 pages of 1,024 tokens, as config.py's
    multinews entry (the preset above checks that entry against the file)."""
    from mdsfair.models.pagesum_bart import DEFAULTS

    preset = PRESETS["multinews"]
    assert (
        (DEFAULTS["locality"], DEFAULTS["num_pages"], DEFAULTS["page_tokens"])
        == (preset["locality"], preset["pages"], preset["page_length"])
        == ("document", 7, 1024)
    )


def reference_logits(hf, lin, pages, page_mask, decoder_input):
    """The authors' forward (``PageSumModel.forward``): encode the [B * P, L]
    pages independently, decode every page with the summary prefix repeated
    P times, score each page's last hidden state with ``lin``, softmax over
    all P pages, mix the hidden states, then ``lm_head`` + ``final_logits_bias``."""
    batch, num_pages, length = pages.shape
    encoder_out = hf.model.encoder(
        input_ids=pages.view(batch * num_pages, length), attention_mask=page_mask.view(batch * num_pages, length)
    ).last_hidden_state
    hidden = hf.model.decoder(
        input_ids=decoder_input.repeat_interleave(num_pages, dim=0),
        encoder_hidden_states=encoder_out,
        encoder_attention_mask=page_mask.view(batch * num_pages, length),
    ).last_hidden_state
    hidden = hidden.view(batch, num_pages, -1, hidden.size(-1)).transpose(1, 2)  # [B, T, P, d]
    weights = torch.softmax(lin(hidden), dim=2)  # [B, T, P, 1]
    mixed = (hidden * weights).sum(dim=2)
    return hf.lm_head(mixed) + hf.final_logits_bias


def authors_pages(tokenizer, clusters, num_pages, page_max_len):
    """``src_input_ids`` of the authors' ``PageSumDataset.__getitem__`` with
    ``page_type="multi_doc"`` and ``collate_mp`` (yixinL7/PageSum
    ``data_utils.py``): article item i (a document) is page i for
    i < num_pages, the rest are dropped, a page left empty gets the text
    ``"."``, and every page is ``batch_encode_plus``-ed with
    ``max_length=page_max_len, padding="max_length", truncation=True``;
    the attention mask is ``input_ids != pad`` (their ``main.py``)."""
    batch = []
    for documents in clusters:
        article = [[] for _ in range(num_pages)]
        for i in range(min(len(documents), num_pages)):
            article[i].append(documents[i])
        for i in range(num_pages):
            if len(article[i]) == 0:
                article[i].append(".")
        article = [" ".join(x) for x in article]
        # batch_encode_plus (transformers 4.6) is the tokenizer's call on a list today.
        batch.append(
            tokenizer(article, max_length=page_max_len, return_tensors="pt", padding="max_length", truncation=True)[
                "input_ids"
            ]
        )
    pages = torch.stack(batch)
    return pages, pages.ne(tokenizer.pad_token_id).long()


def authors_model(release):
    """The released weights as the authors' model uses them: BART plus ``lin``."""
    hf, state = release["hf"], release["state"]
    lin = torch.nn.Linear(hf.config.d_model, 1)
    lin.load_state_dict({"weight": state["lin.weight"], "bias": state["lin.bias"]})
    return hf, lin


# Raw clusters for the data-bins: 1 and 3 documents (fewer than the pages, so
# filler pages), 7 short ones (none at 7 pages; 4 dropped at 3 pages).
CLUSTERS = [
    {"id": "one", "documents": [TEXTS[0]], "summary": TEXTS[1]},
    {"id": "three", "documents": [TEXTS[5], TEXTS[6], TEXTS[7]], "summary": TEXTS[0]},
    {"id": "seven", "documents": [text[:24].strip() for text in TEXTS[:7]], "summary": TEXTS[4]},
]


def load_through_task(out_dir, data_bin, **model_overrides):
    """``fairseq-generate --path OUT_DIR/model.pt DATA [--model-overrides]``'s
    loading: ``load_model_ensemble_and_task`` with the data-bin made with the
    import's ``dict.txt``, ``encoder.json`` and ``vocab.bpe``."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": data_bin, **model_overrides}
    )
    task.load_dataset("valid")
    return models[0].eval(), task


def assert_logits_equal_the_authors_forward(release, out_dir, data_bin, num_pages):
    """mdsfair's logits on the data-bin's batch equal the authors' forward on
    the original weights, their pages built from the raw text as their data
    code builds them ("." in every missing page)."""
    model, task = load_through_task(out_dir, data_bin)
    tokenizer = hf_tokenizer(release["config_dir"])
    page_builder = model.encoder.page_builder
    dot = tokenizer(".").input_ids
    assert page_builder.empty_pages == "filler" and [0, *page_builder.filler_tokens, 2] == dot
    dataset = task.datasets["valid"]
    sample = dataset.collater([dataset[i] for i in range(len(CLUSTERS))])
    net_input = task._sample_for(model, sample)["net_input"]
    documents = [cluster["documents"] for cluster in CLUSTERS]
    pages, page_mask = authors_pages(tokenizer, documents, num_pages, PAGE_LENGTH)

    # The pages themselves: the same ids, "<s> . </s>" where a document is missing.
    layout = page_builder(net_input["src_tokens"], net_input["src_doc_ids"])
    assert layout.filler_mask.tolist() == [[p >= len(d) for p in range(num_pages)] for d in documents]
    assert layout.page_mask.all()
    for b in range(len(CLUSTERS)):
        for p in range(num_pages):
            ours = [t for t in layout.tokens[b, p].tolist() if t != 1]
            assert ours == [t for t in pages[b, p].tolist() if t != 1], (b, p)
            if p >= len(documents[b]):
                assert ours == dot

    hf, lin = authors_model(release)
    decoder_input = net_input["prev_output_tokens"]
    with torch.no_grad():
        expected = reference_logits(hf, lin, pages, page_mask, decoder_input)
        logits, extra = model(**net_input)
    real = decoder_input.ne(1)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])
    weights = extra["page_weights"][0]
    assert weights.shape == (len(CLUSTERS), decoder_input.size(1), num_pages)
    assert (weights[real] > 0).all()  # the filler pages take part in the softmax
    return model, task


@pytest.fixture(scope="module")
def data_bin(imported, tmp_path_factory):
    """mdsfair-preprocess --subword gpt2 with the import's files."""
    return gpt2_data_bin(str(tmp_path_factory.mktemp("pagesum-data")), imported["out_dir"], CLUSTERS)


@pytest.fixture(scope="module")
def multinews(released, data_bin):
    """The multinews preset (7 document pages, their generate() settings) at
    pages of PAGE_LENGTH tokens (the tiny position table)."""
    out_dir = str(released["root"] / "multinews")
    summary = import_pagesum(
        released["state_dict"], released["config_dir"], out_dir, dict(PRESETS["multinews"], page_length=PAGE_LENGTH)
    )
    return {"out_dir": out_dir, "summary": summary}


def test_logits_equal_the_authors_forward(released, imported, data_bin):
    """3 document pages: the 1-document cluster has two "." pages, the
    7-document one loses documents 4-7 as the authors' ``min(len, num_pages)``
    loop does."""
    assert_logits_equal_the_authors_forward(released, imported["out_dir"], data_bin, PAGES)


def test_multinews_preset_with_filler_pages_equals_the_authors_and_generates(released, multinews, data_bin):
    """A 3-document cluster at the Multi-News preset's 7
    pages (4 "." pages), next to 1 and 7 documents; the checkpoint loads
    through the task (logits equal the authors' forward) and through the hub,
    whose greedy search equals greedy decoding with the authors' forward
    token for token, and whose beam search with the preset's flags summarizes."""
    out_dir = multinews["out_dir"]
    assert_logits_equal_the_authors_forward(released, out_dir, data_bin, 7)

    hub = torch.hub.load(
        REPO_ROOT,
        "pagesum_bart",
        model_dir=out_dir,
        checkpoint_file="model.pt",
        data_name_or_path=data_bin,
        source="local",
    )
    assert hub.models[0].encoder.page_builder.empty_pages == "filler"
    documents = [cluster["documents"] for cluster in CLUSTERS]
    min_len, max_len = 3, 16
    greedy = hub.generate(
        documents,
        batch_size=3,
        beam=1,
        lenpen=1.0,
        min_len=min_len,
        max_len_a=0,
        max_len_b=max_len,
        no_repeat_ngram_size=0,
    )
    hf, lin = authors_model(released)
    pages, page_mask = authors_pages(hf_tokenizer(released["config_dir"]), documents, 7, PAGE_LENGTH)
    for b, hypotheses in enumerate(greedy):
        prefix = [2]  # BART's decoder start token
        with torch.no_grad():
            while prefix[-1] != 2 or len(prefix) == 1:
                scores = reference_logits(hf, lin, pages[b : b + 1], page_mask[b : b + 1], torch.tensor([prefix]))[
                    0, -1
                ]
                scores[1] = float("-inf")  # fairseq never emits <pad>
                if len(prefix) - 1 < min_len:
                    scores[2] = float("-inf")
                prefix.append(2 if len(prefix) - 1 == max_len else int(scores.argmax()))
        assert hypotheses[0]["tokens"].tolist() == prefix[1:], b

    # The authors' beam search flags (the import's), with lengths for the tiny model.
    flags = multinews["summary"]["generate_flags"]
    assert flags[:6] == ["--beam", "4", "--lenpen", "2.0", "--no-repeat-ngram-size", "3"]
    lengths = ["--min-len", str(min_len), "--max-len-a", "0", "--max-len-b", str(max_len)]
    summaries = hub.summarize(
        documents,
        batch_size=3,
        beam=4,
        lenpen=2.0,
        no_repeat_ngram_size=3,
        min_len=min_len,
        max_len_a=0,
        max_len_b=max_len,
    )
    assert len(summaries) == 3 and all(isinstance(s, str) and s.strip() for s in summaries)
    beams = hub.generate(
        documents,
        batch_size=1,
        beam=4,
        lenpen=2.0,
        no_repeat_ngram_size=3,
        min_len=min_len,
        max_len_a=0,
        max_len_b=max_len,
    )
    assert summaries == [hub.decode(hypotheses[0]["tokens"]) for hypotheses in beams]
    assert all(len(hypotheses) == 4 for hypotheses in beams)
    # fairseq-generate on the data-bin: the same best hypotheses.
    generated = generate_in_process(
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--path",
            os.path.join(out_dir, "model.pt"),
            "--gen-subset",
            "valid",
            "--batch-size",
            "3",
            *flags[:6],
            *lengths,
            "--cpu",
        ],
        results_dir=os.path.join(out_dir, "generate"),
    )
    best = {
        int(line.split("\t")[0][2:]): line.split("\t")[2] for line in generated.splitlines() if line.startswith("H-")
    }
    dictionary = hub.task.target_dictionary
    assert best == {i: dictionary.string(hypotheses[0]["tokens"]) for i, hypotheses in enumerate(beams)}


def test_scaled_embeddings_fold_into_the_page_scorer_too(tmp_path):
    """With ``scale_embedding`` the import folds sqrt(d) into the weights
    (hf_bart) and the page scorer reads the rescaled decoder states."""
    release = write_release(tmp_path, scale_embedding=True)
    out_dir = str(tmp_path / "out")
    import_pagesum(
        release["state_dict"],
        release["config_dir"],
        out_dir,
        dict(locality="document", pages=PAGES, page_length=PAGE_LENGTH),
    )
    data_bin = gpt2_data_bin(str(tmp_path / "data"), out_dir, CLUSTERS)
    assert_logits_equal_the_authors_forward(release, out_dir, data_bin, PAGES)


def test_empty_pages_mask_at_import_or_generation(released, imported, data_bin, tmp_path, capsys):
    """``mdsfair-import pagesum --empty-pages mask`` records mdsfair's default,
    and ``fairseq-generate --model-overrides "{'empty_pages': 'mask'}"`` turns
    a filler import into it: the missing pages are left out of the softmax
    (weight 0), unlike the authors'."""
    out_dir = str(tmp_path / "out")
    assert (
        import_main(
            [
                "pagesum",
                released["state_dict"],
                released["config_dir"],
                out_dir,
                "--locality",
                "document",
                "--pages",
                str(PAGES),
                "--page-length",
                str(PAGE_LENGTH),
                "--empty-pages",
                "mask",
            ]
        )
        == 0
    )
    assert "empty pages masked out of the softmax, unlike the authors'" in capsys.readouterr().out
    for model, task in (
        load_through_task(out_dir, data_bin),
        load_through_task(imported["out_dir"], data_bin, empty_pages="mask"),
    ):
        assert model.encoder.page_builder.empty_pages == "mask" and model.encoder.page_builder.filler_tokens is None
        dataset = task.datasets["valid"]
        sample = dataset.collater([dataset[0], dataset[1]])  # 1 document (pages 2, 3 empty) and 3 documents
        with torch.no_grad():
            _, extra = model(**task._sample_for(model, sample)["net_input"])
        weights = extra["page_weights"][0]
        real = sample["net_input"]["prev_output_tokens"].ne(1)
        assert weights.shape[2] == PAGES
        assert (weights[0][real[0]][:, 1:] == 0).all() and (weights[1][real[1]] > 0).all()
    with pytest.raises(ImportRefused, match="--empty-pages must be one of"):
        import_pagesum(
            released["state_dict"],
            released["config_dir"],
            str(tmp_path / "x"),
            dict(locality="document", pages=PAGES, page_length=PAGE_LENGTH, empty_pages="drop"),
        )


def test_refusals(released, tmp_path):
    state = {k: v for k, v in released["state"].items() if not k.startswith("lin.")}
    path = str(tmp_path / "bart_only.bin")
    torch.save(state, path)
    settings = dict(locality="document", pages=PAGES, page_length=PAGE_LENGTH)
    with pytest.raises(ImportRefused, match=r"lin\.weight, lin\.bias missing; not a PageSumModel state dict"):
        import_pagesum(path, released["config_dir"], str(tmp_path / "a"), settings)
    with pytest.raises(ImportRefused, match="exceeds the model's position table"):
        import_pagesum(
            released["state_dict"], released["config_dir"], str(tmp_path / "b"), dict(settings, page_length=1024)
        )
    with pytest.raises(ImportRefused, match=r"vocab\.json: missing"):
        import_pagesum(
            released["state_dict"], released["config_dir"], str(tmp_path / "c"), settings, tokenizer_dir=str(tmp_path)
        )


def test_cli(released, tmp_path, capsys):
    out_dir = str(tmp_path / "out")
    assert (
        import_main(
            [
                "pagesum",
                released["state_dict"],
                released["config_dir"],
                out_dir,
                "--preset",
                "multinews",
                "--page-length",
                str(PAGE_LENGTH),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "locality document, 7 pages of 64 tokens" in printed
    assert f"--max-source-positions {7 * PAGE_LENGTH}" in printed and "--lenpen 2.0" in printed
    assert import_main(["pagesum", released["state_dict"], released["config_dir"], str(tmp_path / "x")]) == 1
    assert "--locality must be one of" in capsys.readouterr().err
