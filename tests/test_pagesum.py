"""PageSum on BART (Liu et al. 2022): pages, model equivalences, generation, CLI."""

import json
import logging
import os

import pytest
import torch
from fairseq import options, tasks
from fairseq.models.bart import BARTModel
from fairseq.sequence_generator import SequenceGenerator

from mdsfair.generation.sequence_generator import use_vectorized_ngram_blocker
from mdsfair.modules.pages import PageBuilder, filler_page_tokens, spatial_pages, unit_rank
from tests.tolerances import assert_close_in_dtype
from tests.utils import (
    REPO_ROOT,
    USER_DIR,
    fairseq_cli,
    generate_in_process,
)

BOS, PAD, EOS = 0, 1, 2


# ---------------------------------------------------------------- pages


def loop_pages(tokens, unit_ids, locality, num_pages, page_tokens, overflow="truncate"):
    """Slow reference: the pages of one example as lists of token ids."""
    content = [(t, u) for t, u in zip(tokens, unit_ids) if t not in (BOS, PAD, EOS)]
    units = []
    for token, unit in content:
        if not units or units[-1][0] != unit:
            units.append((unit, []))
        units[-1][1].append(token)
    unit_tokens = [toks for _, toks in units]
    if locality == "spatial":
        s = len(unit_tokens)
        if s < num_pages:
            groups = [[i] for i in range(s)]
        else:
            groups = [[] for _ in range(num_pages)]
            for i in range(s):
                groups[i * num_pages // s].append(i)
    elif overflow == "merge":
        groups = [[i] for i in range(min(len(unit_tokens), num_pages))]
        groups[-1].extend(range(num_pages, len(unit_tokens)))
    else:
        groups = [[i] for i in range(min(len(unit_tokens), num_pages))]
    pages = [[t for i in group for t in unit_tokens[i]][: page_tokens - 2] for group in groups]
    return [[BOS] + page + [EOS] for page in pages]


def example_batch():
    """Two examples (the second padded) with documents, paragraphs, sentences."""
    tokens = torch.tensor(
        [
            [BOS, 10, 11, 12, 13, BOS, 14, 15, 16, BOS, 17, 18, 19, 20, 21, EOS],
            [BOS, 30, 31, 32, BOS, 33, 34, EOS, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD],
        ]
    )
    doc = torch.tensor(
        [
            [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2],
            [0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1],
        ]
    )
    para = torch.tensor(
        [
            [0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4, 5, 5, 5],
            [0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1],
        ]
    )
    sent = torch.tensor(
        [
            [0, 0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 8, 8],
            [0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1],
        ]
    )
    return tokens, doc, para, sent


def layout_pages(layout, example):
    pages = []
    for page, used in zip(layout.tokens[example].tolist(), layout.page_mask[example].tolist()):
        if used:
            pages.append([t for t in page if t != PAD])
    return pages


@pytest.mark.parametrize(
    "locality,unit,num_pages,page_tokens,overflow",
    [
        ("document", "paragraph", 7, 1024, "truncate"),
        ("document", "paragraph", 2, 1024, "truncate"),
        ("document", "paragraph", 2, 1024, "merge"),
        ("discourse", "paragraph", 4, 1024, "truncate"),
        ("discourse", "paragraph", 4, 1024, "merge"),
        ("discourse", "section", 2, 1024, "merge"),
        ("spatial", "paragraph", 3, 1024, "truncate"),
        ("spatial", "paragraph", 4, 4, "truncate"),
    ],
)
def test_page_builder_matches_loop_reference(locality, unit, num_pages, page_tokens, overflow):
    tokens, doc, para, sent = example_batch()
    builder = PageBuilder(locality, num_pages, page_tokens, BOS, EOS, PAD, discourse_unit=unit, overflow=overflow)
    layout = builder(tokens, doc, para, sent)
    ids = {"spatial": sent, "document": doc}.get(locality, para if unit == "paragraph" else doc)
    for example in range(2):
        expected = loop_pages(
            tokens[example].tolist(), ids[example].tolist(), locality, num_pages, page_tokens, overflow
        )
        assert layout_pages(layout, example) == expected
    # every kept slot points back at the source token it holds
    slots = layout.source_position >= 0
    batch = torch.arange(2).view(2, 1, 1).expand_as(layout.tokens)
    assert torch.equal(layout.tokens[slots], tokens[batch[slots], layout.source_position[slots]])


def test_overflow_policies_are_counted():
    tokens, doc, para, sent = example_batch()
    truncate = PageBuilder("discourse", 4, 1024, BOS, EOS, PAD, overflow="truncate")(tokens, doc, para, sent)
    # example 0 has 6 paragraphs: paragraphs 4 and 5 (tokens 18, 19, 20, 21) are dropped
    assert truncate.dropped_units.tolist() == [2, 0]
    assert truncate.dropped_tokens.tolist() == [4, 0]
    assert truncate.merged_units.tolist() == [0, 0]
    merge = PageBuilder("discourse", 4, 1024, BOS, EOS, PAD, overflow="merge")(tokens, doc, para, sent)
    assert merge.merged_units.tolist() == [2, 0] and merge.dropped_tokens.tolist() == [0, 0]
    assert layout_pages(merge, 0)[-1] == [BOS, 17, 18, 19, 20, 21, EOS]
    cut = PageBuilder("document", 7, 4, BOS, EOS, PAD)(tokens, doc, para, sent)
    # pages of 2 content tokens: documents of 4, 3, 5 and 3, 2 tokens
    assert cut.cut_tokens.tolist() == [2 + 1 + 3, 1 + 0]
    assert cut.page_length == 4


def test_empty_pages_are_masked_and_encodable():
    tokens, doc, para, sent = example_batch()
    layout = PageBuilder("document", 7, 1024, BOS, EOS, PAD)(tokens, doc, para, sent)
    assert layout.page_mask.tolist() == [[True, True, True], [True, True, False]]
    assert layout.tokens[1, 2, :2].tolist() == [BOS, EOS]


def test_spatial_chunks_and_authors_variant():
    rank = torch.arange(10).unsqueeze(0)
    assert spatial_pages(rank, 3).tolist() == [[0, 0, 0, 0, 1, 1, 1, 2, 2, 2]]
    assert spatial_pages(rank, 3, remainder_to_last_page=True).tolist() == [[0, 0, 0, 1, 1, 1, 2, 2, 2, 2]]
    assert spatial_pages(torch.arange(2).unsqueeze(0), 4).tolist() == [[0, 1]]


def authors_spatial_labels(num_sentences, num_pages):
    """The page of every sentence in the authors' ``PageSumDataset.__getitem__``
    (``page_type=None``), copied in spirit from their ``data_utils.py``."""
    num = num_sentences // num_pages
    label = []
    for i in range(num_pages):
        label.extend([i] * num)
    while len(label) < num_sentences:
        label.append(num_pages - 1)
    return label


def test_spatial_remainder_to_last_page_is_the_authors_arithmetic():
    for num_pages in (1, 3, 7):
        for num_sentences in range(1, 23):
            rank = torch.arange(num_sentences).unsqueeze(0)
            pages = spatial_pages(rank, num_pages, remainder_to_last_page=True)
            assert pages[0].tolist() == authors_spatial_labels(num_sentences, num_pages), (num_sentences, num_pages)
    # 3 sentences, 7 pages: S // P = 0, so pages 0..5 are empty and page 6 holds all three.
    tokens = torch.tensor([[BOS, 10, 11, 12, 13, 14, EOS]])
    sent = torch.tensor([[0, 0, 0, 1, 2, 2, 2]])
    for empty_pages, filler in (("mask", None), ("filler", [4])):
        layout = PageBuilder(
            "spatial",
            7,
            1024,
            BOS,
            EOS,
            PAD,
            spatial_remainder_to_last_page=True,
            empty_pages=empty_pages,
            filler_tokens=filler,
        )(tokens, src_sent_ids=sent)
        assert layout.num_pages == 7
        assert [t for t in layout.tokens[0, 6].tolist() if t != PAD] == [BOS, 10, 11, 12, 13, 14, EOS]
        empty = [[t for t in page if t != PAD] for page in layout.tokens[0, :6].tolist()]
        assert empty == [[BOS] + (filler or []) + [EOS]] * 6
        assert layout.page_mask[0].tolist() == [empty_pages == "filler"] * 6 + [True]
        assert layout.filler_mask[0].tolist() == [empty_pages == "filler"] * 6 + [False]
    # the default chunking keeps one sentence per page
    assert spatial_pages(torch.arange(3).unsqueeze(0), 7).tolist() == [[0, 1, 2]]


def test_recipe_learning_rate_is_eq_11():
    """examples/pagesum/README.md: fairseq's inverse_sqrt with --lr 2e-5
    --warmup-updates 10000 --warmup-init-lr 0 gives Eq. 11,
    2e-3 * min(step^-0.5, step * 10000^-1.5), at every step checked."""
    from argparse import Namespace

    from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
        InverseSquareRootLRScheduleConfig,
        InverseSquareRootSchedule,
    )
    from fairseq.optim.sgd import SGD
    from omegaconf import OmegaConf

    cfg = OmegaConf.structured(InverseSquareRootLRScheduleConfig(warmup_updates=10000, warmup_init_lr=0, lr=[2e-5]))
    optimizer = SGD(Namespace(lr=[2e-5], momentum=0.0, weight_decay=0.0), [torch.nn.Parameter(torch.zeros(1))])
    scheduler = InverseSquareRootSchedule(cfg, optimizer)
    for step in (1, 10, 5000, 9999, 10000, 10001, 50000, 200000):
        eq_11 = 2e-3 * min(step**-0.5, step * 10000**-1.5)
        assert scheduler.step_update(step) == pytest.approx(eq_11, rel=1e-12), step
        assert optimizer.get_lr() == scheduler.step_update(step)


def authors_multi_doc_pages(documents, num_pages, dot_ids, page_max_len=1024):
    """The authors' pages for ``page_type="multi_doc"`` as token ids: page i is
    document i, an empty page is the text "." (``dot_ids`` once tokenized),
    each tokenized as ``<s> ... </s>`` and cut at ``page_max_len``."""
    pages = [documents[i] if i < len(documents) else dot_ids for i in range(num_pages)]
    return [[BOS] + page[: page_max_len - 2] + [EOS] for page in pages]


@pytest.mark.parametrize("num_pages", [7, 2])
def test_filler_pages_are_the_authors_pages(num_pages):
    """Document pages with --empty-pages filler are the authors' multi_doc
    pages: documents past --num-pages are dropped as theirs are (and counted
    here), missing ones are "."."""
    tokens, doc, para, sent = example_batch()
    builder = PageBuilder("document", num_pages, 1024, BOS, EOS, PAD, empty_pages="filler", filler_tokens=[4])
    layout = builder(tokens, doc, para, sent)
    assert layout.tokens.shape[:2] == (2, num_pages)
    for example in range(2):
        row = tokens[example].tolist()
        documents = [
            [t for t, d in zip(row, doc[example].tolist()) if d == i and t not in (BOS, EOS, PAD)]
            for i in range(int(doc[example].max()) + 1)
        ]
        pages = [[t for t in page if t != PAD] for page in layout.tokens[example].tolist()]
        assert pages == authors_multi_doc_pages(documents, num_pages, [4])
    assert layout.page_mask.all()
    if num_pages == 2:
        assert not layout.filler_mask.any() and layout.dropped_units.tolist() == [1, 0]
        return
    assert layout.filler_mask.tolist() == [[False] * 3 + [True] * 4, [False] * 2 + [True] * 5]
    assert (layout.source_position[layout.filler_mask] == -1).all()
    with pytest.raises(ValueError, match="no filler tokens"):
        PageBuilder("document", 7, 1024, BOS, EOS, PAD, empty_pages="filler")(tokens, doc, para, sent)
    with pytest.raises(ValueError, match="--empty-pages"):
        PageBuilder("document", 7, 1024, BOS, EOS, PAD, empty_pages="drop")


def test_filler_dot_is_bart_id_4_with_gpt2_bpe(tmp_path):
    """GPT-2's byte-level base vocabulary lists the printable bytes first, in
    ``bytes_to_unicode`` order, so "." is BPE id 13; BART's ``dict.txt``
    starts with the symbol ``13`` (its most frequent token), which fairseq
    numbers 4 after ``<s> <pad> </s> <unk>``: the filler page is ``0 4 2``,
    the ids ``BartTokenizer`` gives the authors' page "."."""
    from fairseq.data import Dictionary
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    from mdsfair.preprocess.subword import GPT2BPEEncoder

    vocab = {symbol: i for i, symbol in enumerate(bytes_to_unicode().values())}
    assert vocab["."] == 13 and vocab["!"] == 0
    (tmp_path / "encoder.json").write_text(json.dumps(vocab))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n")
    encoder = GPT2BPEEncoder(str(tmp_path / "encoder.json"), str(tmp_path / "vocab.bpe"))
    bart_dictionary = Dictionary()
    for symbol in ["13", "262", "11", "284"] + [str(i) for i in range(256)]:  # dict.txt's first lines, then bytes
        bart_dictionary.add_symbol(symbol)
    ids = filler_page_tokens(encoder, bart_dictionary)
    assert ids == [4]
    builder = PageBuilder("document", 7, 1024, BOS, EOS, PAD, empty_pages="filler", filler_tokens=ids)
    layout = builder(torch.tensor([[BOS, 300, 301, EOS]]), torch.tensor([[0, 0, 0, 0]]))
    assert layout.tokens[0, 1].tolist() == [0, 4, 2, PAD]
    with pytest.raises(ValueError, match="does not hold"):
        filler_page_tokens(encoder, Dictionary())


def test_unit_rank_handles_gaps():
    mask = torch.tensor([[True, True, True, True, False]])
    assert unit_rank(torch.tensor([[3, 3, 7, 9, -1]]), mask).tolist() == [[0, 0, 1, 2, -1]]


# ---------------------------------------------------------------- model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("pagesum"))


@pytest.fixture(scope="module")
def data_bin(tiny_bart):
    return tiny_bart["data-bin"]


@pytest.fixture(scope="module")
def bart_checkpoint(tiny_bart):
    return tiny_bart["checkpoint"]


def build(data_bin, arch="pagesum_bart_tiny", extra=()):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            arch,
            "--max-source-positions",
            "4096",
            "--dropout",
            "0",
            *extra,
        ],
    )
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    return task, task.build_model(args).eval()


@pytest.fixture(scope="module")
def valid_batch(data_bin):
    task, _ = build(data_bin)
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    return dataset, dataset.collater([dataset[i] for i in range(4)])


def single_document_batch(vocab_size):
    """``<s> tokens </s>`` with one document per example, the second padded."""
    g = torch.Generator().manual_seed(3)
    lengths = [12, 8]
    tokens = torch.full((2, 14), PAD)
    for row, length in enumerate(lengths):
        tokens[row, 0] = BOS
        tokens[row, 1 : length + 1] = torch.randint(4, vocab_size, (length,), generator=g)
        tokens[row, length + 1] = EOS
    real = tokens.ne(PAD)
    structure = torch.where(real, torch.zeros_like(tokens), torch.full_like(tokens, -1))
    sentence = torch.where(real, torch.arange(14).expand(2, 14) // 5, torch.full_like(tokens, -1))
    prev = torch.randint(4, vocab_size, (2, 6), generator=g)
    prev[:, 0] = EOS
    return {
        "src_tokens": tokens,
        "src_lengths": real.sum(1),
        "prev_output_tokens": prev,
        "src_doc_ids": structure,
        "src_para_ids": structure,
        "src_sent_ids": sentence,
    }


def test_the_encoder_refuses_structure_ids_that_are_not_runs_and_a_missing_unit(data_bin):
    """The batch check (``check_side_inputs``) runs once in the encoder, before
    the pages are built: the locality's unit ids are required, and every
    structure id given is checked."""
    task, model = build(data_bin)
    batch = single_document_batch(len(task.source_dictionary))
    assert model.side_inputs() == {"src_doc_ids": True, "src_para_ids": False, "src_sent_ids": False}
    with torch.no_grad():
        model(**batch)
        no_document = batch["src_doc_ids"].clone()
        no_document[0, 3] = -1
        with pytest.raises(ValueError) as refused:
            model(**{**batch, "src_doc_ids": no_document})
        assert refused.value.args[0].splitlines() == [
            "src_doc_ids [2, 14] is negative at a non-pad token of src_tokens [2, 14] (example 0, position 3: -1); "
            "every source token needs a document",
            "src_doc_ids [2, 14] must be non-decreasing runs along each example (one run per document), but "
            "example 0 goes from 0 to -1 at position 3",
        ]
        split_sentence = batch["src_sent_ids"].clone()
        split_sentence[1, 6] = 0
        with pytest.raises(ValueError) as refused:
            model(**{**batch, "src_sent_ids": split_sentence})
        assert refused.value.args[0] == (
            "src_sent_ids [2, 14] must be non-decreasing runs along each example (one run per sentence), but "
            "example 1 goes from 1 to 0 at position 6"
        )
        with pytest.raises(ValueError, match=r"^missing side input src_doc_ids \(needed by pagesum_bart --locality "):
            model(**{name: value for name, value in batch.items() if name != "src_doc_ids"})
    _, spatial = build(data_bin, extra=("--locality", "spatial"))
    with pytest.raises(
        ValueError, match=r"^missing side input src_sent_ids \(needed by pagesum_bart --locality spatial"
    ):
        spatial(**{name: value for name, value in batch.items() if name != "src_sent_ids"})


def test_one_page_equals_bart_and_restores_bart_checkpoint(data_bin, bart_checkpoint):
    task, pagesum = build(data_bin, extra=["--locality", "spatial", "--num-pages", "1"])
    _, global_pagesum = build(data_bin, extra=["--locality", "document", "--global-decoding"])
    bart_state = torch.load(bart_checkpoint, weights_only=False)["model"]
    confidence_before = pagesum.decoder.page_confidence.weight.clone()
    pagesum.load_state_dict(dict(bart_state), strict=True)  # upgrade_state_dict_named adds the confidence layer
    global_pagesum.load_state_dict(dict(bart_state), strict=True)
    assert torch.equal(pagesum.decoder.page_confidence.weight, confidence_before)
    assert "decoder.page_confidence.weight" not in global_pagesum.state_dict()

    parser = options.get_training_parser()
    bart_args = options.parse_args_and_arch(
        parser,
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "bart_base",
            "--encoder-layers",
            "2",
            "--decoder-layers",
            "2",
            "--encoder-embed-dim",
            "32",
            "--decoder-embed-dim",
            "32",
            "--encoder-ffn-embed-dim",
            "64",
            "--decoder-ffn-embed-dim",
            "64",
            "--encoder-attention-heads",
            "4",
            "--decoder-attention-heads",
            "4",
        ],
    )
    bart = BARTModel.build_model(bart_args, task).eval()
    bart.load_state_dict(dict(bart_state), strict=True)

    batch = single_document_batch(len(task.dictionary))
    with torch.no_grad():
        expected, _ = bart(batch["src_tokens"], batch["src_lengths"], batch["prev_output_tokens"])
        logits, extra = pagesum(**batch)
        global_logits, _ = global_pagesum(**batch)
    assert extra["page_weights"][0].shape == (2, 6, 1)
    assert torch.equal(extra["page_weights"][0], torch.ones(2, 6, 1))
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits, expected)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(global_logits, expected)


def test_confidence_weights_sum_to_one_and_skip_empty_pages(data_bin, valid_batch):
    _, model = build(data_bin, extra=["--locality", "discourse", "--num-pages", "20"])
    _, sample = valid_batch
    with torch.no_grad():
        _, extra = model(**sample["net_input"])
    weights = extra["page_weights"][0]
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]))
    page_mask = model.encoder.page_builder(
        sample["net_input"]["src_tokens"], src_para_ids=sample["net_input"]["src_para_ids"]
    ).page_mask
    assert (~page_mask).any(), "the fixture batch should have an example with fewer paragraphs"
    assert torch.all(weights.masked_select(~page_mask.unsqueeze(1).expand_as(weights)) == 0)
    assert torch.all(weights.masked_select(page_mask.unsqueeze(1).expand_as(weights)) > 0)


def test_empty_pages_filler_is_the_authors_page_and_joins_the_softmax(data_bin):
    """A 3-document cluster at 7 pages (the authors' Multi-News setting):
    with --empty-pages filler pages 4-7 hold exactly <s> "." </s> (the "."
    ids from the data's SentencePiece model) and get nonzero weights; the
    logits differ from masking, and equal masking on the cluster with four
    more documents holding just "." (the filler is an ordinary page)."""
    from mdsfair.preprocess.subword import load_encoder_from_manifest

    task, masked = build(data_bin, extra=["--locality", "document", "--num-pages", "7", "--max-documents", "3"])
    _, filler = build(
        data_bin,
        extra=["--locality", "document", "--num-pages", "7", "--max-documents", "3", "--empty-pages", "filler"],
    )
    assert filler.args.empty_pages == "filler" and masked.args.empty_pages == "mask"
    dot = load_encoder_from_manifest(task.data_dir, task.manifest["subword"]).encode(".")
    dot_ids = [task.source_dictionary.index(symbol) for symbol in dot]
    assert task.source_dictionary.unk() not in dot_ids
    assert filler.encoder.page_builder.filler_tokens == dot_ids
    filler.load_state_dict(masked.state_dict())
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    three = [i for i in range(len(dataset)) if int(dataset[i]["structure"]["doc"].max()) == 2][:2]
    assert len(three) == 2, "the fixture data should have 3-document clusters"
    sample = dataset.collater([dataset[i] for i in three])
    net_input = sample["net_input"]
    layout = filler.encoder.page_builder(net_input["src_tokens"], net_input["src_doc_ids"])
    bos, eos = task.source_dictionary.bos(), task.source_dictionary.eos()
    pad = task.source_dictionary.pad()
    for page in layout.tokens[:, 3:].reshape(-1, layout.page_length).tolist():
        assert [t for t in page if t != pad] == [bos] + dot_ids + [eos]
    assert layout.filler_mask[:, 3:].all() and not layout.filler_mask[:, :3].any()
    with torch.no_grad():
        masked_logits, masked_extra = masked(**net_input)
        filler_logits, filler_extra = filler(**net_input)
    assert masked_extra["page_weights"][0].shape[-1] == 3
    weights = filler_extra["page_weights"][0]
    assert weights.shape[-1] == 7
    assert (weights[:, :, 3:] > 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]))
    assert (filler_logits - masked_logits).abs().max() > 1e-3

    # The same clusters with documents 4-7 given as the text "." and masking.
    rows = []
    for row in range(2):
        length = int(net_input["src_lengths"][row])
        tokens = net_input["src_tokens"][row, : length - 1]
        doc_ids = net_input["src_doc_ids"][row, : length - 1]
        for extra_doc in range(3, 7):
            tokens = torch.cat([tokens, torch.tensor([bos] + dot_ids)])
            doc_ids = torch.cat([doc_ids, torch.full((1 + len(dot_ids),), extra_doc)])
        rows.append((torch.cat([tokens, torch.tensor([eos])]), torch.cat([doc_ids, torch.tensor([6])])))
    width = max(len(t) for t, _ in rows)
    dotted = {
        "src_tokens": torch.stack([torch.nn.functional.pad(t, (0, width - len(t)), value=pad) for t, _ in rows]),
        "src_doc_ids": torch.stack([torch.nn.functional.pad(d, (0, width - len(d)), value=-1) for _, d in rows]),
        "prev_output_tokens": net_input["prev_output_tokens"],
    }
    dotted["src_lengths"] = dotted["src_tokens"].ne(pad).sum(1)
    with torch.no_grad():
        dotted_logits, dotted_extra = masked(**dotted)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(dotted_logits, filler_logits)
    torch.testing.assert_close(dotted_extra["page_weights"][0], weights, atol=1e-6, rtol=1e-5)

    # The authors' PageSum.forward on these pages: BART encoder on [B * P, L] page rows, decoder on
    # repeat_interleave(P) copies, lin -> softmax over all P pages, weighted hidden sum, then lm_head.
    from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase

    lin = filler.decoder.page_confidence  # the authors' ``lin = nn.Linear(config.d_model, 1)``, with bias
    assert lin.weight.shape == (1, filler.decoder.output_embed_dim) and lin.bias.shape == (1,)
    prev = net_input["prev_output_tokens"]
    with torch.no_grad():
        rows = layout.tokens.view(-1, layout.page_length)
        encoder_out = TransformerEncoderBase.forward(filler.encoder, rows)
        hidden, _ = TransformerDecoderBase.extract_features(filler.decoder, prev.repeat_interleave(7, 0), encoder_out)
        hidden = hidden.view(2, 7, prev.size(1), -1).transpose(1, 2)  # [B, T, P, d]
        s = torch.softmax(lin(hidden), dim=2)  # [B, T, P, 1]
        authors_logits = filler.decoder.output_layer((hidden * s).sum(2))
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(filler_logits, authors_logits)
    torch.testing.assert_close(weights, s.squeeze(-1), atol=1e-6, rtol=1e-5)


def permute_documents(net_input, example, order):
    """The example's source with its documents in ``order`` (other rows kept)."""
    tokens = net_input["src_tokens"][example]
    doc = net_input["src_doc_ids"][example]
    blocks = [torch.nonzero(doc == d).flatten() for d in range(int(doc.max()) + 1)]
    blocks[-1] = blocks[-1][tokens[blocks[-1]] != EOS]
    eos_position = torch.nonzero(tokens == EOS).flatten()
    positions = torch.cat([blocks[d] for d in order] + [eos_position])
    permuted = {k: v.clone() for k, v in net_input.items()}
    for key in ("src_tokens", "src_para_ids", "src_sent_ids"):
        permuted[key][example, : len(positions)] = net_input[key][example, positions]
    new_doc = torch.cat(
        [torch.full((len(blocks[d]),), i) for i, d in enumerate(order)] + [torch.tensor([len(order) - 1])]
    )
    permuted["src_doc_ids"][example, : len(positions)] = new_doc
    # para/sent ids must stay non-decreasing: renumber them by rank
    for key in ("src_para_ids", "src_sent_ids"):
        row = permuted[key][example, : len(positions)]
        starts = torch.ones_like(row, dtype=torch.bool)
        starts[1:] = row[1:] != row[:-1]
        permuted[key][example, : len(positions)] = starts.long().cumsum(0) - 1
    return permuted


def test_permuting_pages_does_not_change_the_output(data_bin, valid_batch):
    _, model = build(data_bin, extra=["--locality", "document", "--num-pages", "8"])
    _, sample = valid_batch
    net_input = sample["net_input"]
    num_docs = int(net_input["src_doc_ids"][0].max()) + 1
    assert num_docs >= 3
    order = list(reversed(range(num_docs)))
    permuted = permute_documents(net_input, 0, order)
    assert not torch.equal(permuted["src_tokens"], net_input["src_tokens"])
    with torch.no_grad():
        logits, extra = model(**net_input)
        permuted_logits, permuted_extra = model(**permuted)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(permuted_logits, logits)
    weights = extra["page_weights"][0][0, :, :num_docs]
    torch.testing.assert_close(
        permuted_extra["page_weights"][0][0, :, :num_docs], weights[:, order], atol=1e-6, rtol=1e-5
    )


@pytest.mark.parametrize("extra_args", [["--locality", "discourse"], ["--locality", "document", "--global-decoding"]])
def test_incremental_decoding_equals_full_decoding_with_reordering(data_bin, valid_batch, extra_args):
    _, model = build(data_bin, extra=extra_args)
    _, sample = valid_batch
    net_input = sample["net_input"]
    prev = net_input["prev_output_tokens"][:, :8]
    encoder_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
    new_order = torch.tensor([2, 0, 3, 3, 1])  # a beam-search style reordering, with a repeat
    with torch.no_grad():
        encoder_out = model.encoder(**encoder_input)
        full, _ = model.decoder(prev[new_order], encoder_out=model.encoder.reorder_encoder_out(encoder_out, new_order))
        state = {}
        steps = []
        for step in range(8):
            if step == 4:
                model.decoder.reorder_incremental_state_scripting(state, new_order)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
            tokens = prev[:, : step + 1] if step < 4 else prev[new_order, : step + 1]
            out, _ = model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)
            steps.append(out if step >= 4 else out[new_order])
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(torch.cat(steps, dim=1), full)


def test_batched_beam_search_equals_one_example_at_a_time(data_bin, valid_batch):
    task, model = build(data_bin, extra=["--locality", "discourse", "--num-pages", "6"])
    dataset, _ = valid_batch
    torch.manual_seed(1)
    with torch.no_grad():  # a sharper, non-degenerate model for distinct hypotheses
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    generator = SequenceGenerator(
        [model], task.target_dictionary, beam_size=4, max_len_b=12, min_len=3, len_penalty=2.0, no_repeat_ngram_size=3
    )
    indices = [0, 3, 5]
    batch = dataset.collater([dataset[i] for i in indices])
    hypos = task.inference_step(generator, [model], batch)
    for row, index in enumerate(indices):
        single = task.inference_step(generator, [model], dataset.collater([dataset[index]]))[0]
        for batched_hypo, single_hypo in zip(hypos[row], single):
            assert torch.equal(batched_hypo["tokens"], single_hypo["tokens"])
            assert abs(float(batched_hypo["score"]) - float(single_hypo["score"])) < 1e-4


def test_training_reduces_the_loss(data_bin, valid_batch):
    _, model = build(data_bin, extra=["--locality", "spatial", "--num-pages", "3"])
    _, sample = valid_batch
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        logits, _ = model(**sample["net_input"])
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), sample["target"], ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] * 0.9
    assert model.decoder.page_confidence.weight.grad.abs().sum() > 0


# --------------------------------------------------------- fairseq CLIs


@pytest.fixture(scope="module")
def pagesum_checkpoint(workdir, data_bin, bart_checkpoint):
    """fairseq-train restoring the BART checkpoint into PageSum (2 updates)."""
    save_dir = os.path.join(workdir, "pagesum")
    output = fairseq_cli(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "pagesum_bart_tiny",
            "--locality",
            "discourse",
            "--num-pages",
            "4",
            "--page-overflow",
            "merge",
            "--max-source-positions",
            "4096",
            "--restore-file",
            bart_checkpoint,
            "--reset-optimizer",
            "--reset-dataloader",
            "--reset-meters",
            "--reset-lr-scheduler",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "2",
            "--batch-size",
            "4",
            "--max-update",
            "2",
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--no-progress-bar",
            "--cpu",
            "--seed",
            "1",
            "--log-interval",
            "1",
        ],
    )
    assert "Loaded checkpoint" in output and "newly initialized" in output
    # the page counts reach fairseq's metrics: every log interval, and summed
    # over the epoch in its end-of-epoch lines (training and validation)
    epoch_ends = [line for line in output.splitlines() if " | train | " in line or " | valid | " in line]
    assert len(epoch_ends) == 2, output[-3000:]
    for line in epoch_ends:
        assert all(
            f"page_{name} " in line for name in ("dropped_units", "dropped_tokens", "merged_units", "cut_tokens")
        ), line
    assert any(" | train_inner | " in line and "page_merged_units" in line for line in output.splitlines())
    return os.path.join(save_dir, "checkpoint_last.pt")


def test_train_from_bart_and_generate(workdir, data_bin, pagesum_checkpoint):
    generated = generate_in_process(
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--path",
            pagesum_checkpoint,
            "--gen-subset",
            "valid",
            "--batch-size",
            "4",
            "--beam",
            "4",
            "--lenpen",
            "2.0",
            "--max-len-b",
            "10",
            "--min-len",
            "2",
            "--no-repeat-ngram-size",
            "3",
            "--cpu",
        ],
        results_dir=os.path.join(workdir, "generate"),
    )
    hypotheses = [line for line in generated.splitlines() if line.startswith("H-")]
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == list(range(8))


def test_generation_reports_the_page_cuts_once_at_the_end(workdir, data_bin, pagesum_checkpoint, caplog):
    """fairseq-generate on clusters that overflow 4 pages of 16 tokens: one
    warning when generation ends, with the totals of every example encoded
    (the forward passes only add to a device counter)."""
    import logging

    from mdsfair.models.pagesum_bart import PAGE_STATISTICS

    task, model = build(
        data_bin,
        extra=["--locality", "discourse", "--num-pages", "4", "--page-overflow", "merge", "--page-tokens", "16"],
    )
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    net_input = dataset.collater([dataset[i] for i in range(len(dataset))])["net_input"]
    layout = model.encoder.page_builder(
        net_input["src_tokens"], net_input["src_doc_ids"], net_input["src_para_ids"], net_input["src_sent_ids"]
    )
    expected = {name: int(getattr(layout, name).sum()) for name in PAGE_STATISTICS}
    assert expected["cut_tokens"] > 0 and expected["merged_units"] > 0
    with caplog.at_level(logging.INFO, logger="mdsfair.models.pagesum_bart"):
        generate_in_process(
            [
                data_bin,
                "--user-dir",
                USER_DIR,
                "--task",
                "multidoc_summarization",
                "--path",
                pagesum_checkpoint,
                "--gen-subset",
                "valid",
                "--batch-size",
                "3",
                "--beam",
                "2",
                "--max-len-b",
                "6",
                "--cpu",
                "--model-overrides",
                "{'page_tokens': 16}",
            ],
            results_dir=os.path.join(workdir, "generate_cut"),
        )
        reports = [r for r in caplog.records if r.getMessage().startswith("PageSum pages over")]
        assert len(reports) == 1 and reports[0].levelname == "WARNING"
    counts = ", ".join(f"{expected[name]:,} {name.replace('_', ' ')}" for name in PAGE_STATISTICS)
    assert (
        reports[0]
        .getMessage()
        .startswith(
            f"PageSum pages over the 8 examples this encoder encoded: {counts} ("
            "locality discourse, --num-pages 4, --page-tokens 16"
        )
    )


def read_page_importance(out_dir, examples, num_pages=4):
    records = [json.loads(line) for line in open(os.path.join(out_dir, "page_importance.jsonl"))]
    assert [r["example"] for r in records] == examples
    for record in records:
        weights = torch.tensor(record["weights"])
        assert weights.shape == (len(record["summary_tokens"]), num_pages)
        torch.testing.assert_close(weights.sum(-1), torch.ones(len(weights)), atol=1e-5, rtol=0)
        assert os.path.getsize(os.path.join(out_dir, f"page_importance_valid_{record['example']}.png")) > 1000
    return records


def test_empty_pages_is_read_from_the_checkpoint_cfg(workdir, data_bin, pagesum_checkpoint):
    """The model config field ``empty_pages`` decides at load time (an
    importer of the authors' checkpoints sets it to "filler"); checkpoints
    saved before the field existed load with masking."""
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(pagesum_checkpoint)
    assert state["cfg"].model.empty_pages == "mask"
    loaded = {}
    for value in ("filler", None):
        if value is None:
            del state["cfg"].model.empty_pages
        else:
            state["cfg"].model.empty_pages = value
        path = os.path.join(workdir, f"empty_pages_{value}.pt")
        torch.save(state, path)
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_bin})
        loaded[value] = models[0].encoder.page_builder
    assert loaded["filler"].empty_pages == "filler" and loaded["filler"].filler_tokens
    assert loaded[None].empty_pages == "mask" and loaded[None].filler_tokens is None


def test_page_importance_of_references(workdir, data_bin, pagesum_checkpoint, caplog):
    from mdsfair.evaluation.page_importance import cli_main

    out_dir = os.path.join(workdir, "importance")
    caplog.set_level(logging.DEBUG)  # as fairseq's import leaves the root logger
    cli_main(
        [
            "--checkpoint",
            pagesum_checkpoint,
            "--data",
            data_bin,
            "--split",
            "valid",
            "--examples",
            "0,2",
            "--output-dir",
            out_dir,
            "--cpu",
        ]
    )
    # drawing the heatmaps logs none of matplotlib's font search ("findfont: ...")
    assert not [record.getMessage() for record in caplog.records if record.name.startswith("matplotlib")]
    task, _ = build(data_bin)
    task.load_dataset("valid")
    for record in read_page_importance(out_dir, [0, 2]):
        assert record["summary"] == "reference"
        reference = task.datasets["valid"][record["example"]]["target"]
        assert record["summary_tokens"] == [task.target_dictionary[t] for t in reference.tolist()]


def test_page_importance_from_generation_replays_the_decoding_steps(workdir, data_bin, pagesum_checkpoint):
    """--from-generation: the summary is the beam search's best hypothesis and
    the weights are those the decoder computed at each incremental step."""
    from fairseq import checkpoint_utils

    from mdsfair.evaluation.page_importance import cli_main

    out_dir = os.path.join(workdir, "importance_generated")
    cli_main(
        [
            "--checkpoint",
            pagesum_checkpoint,
            "--data",
            data_bin,
            "--split",
            "valid",
            "--examples",
            "1,3",
            "--output-dir",
            out_dir,
            "--cpu",
            "--from-generation",
            "--beam",
            "3",
            "--max-len-b",
            "8",
            "--min-len",
            "2",
        ]
    )
    records = read_page_importance(out_dir, [1, 3])
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [pagesum_checkpoint], arg_overrides={"data": data_bin}
    )
    model = models[0].eval()
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    sample = dataset.collater([dataset[1], dataset[3]])
    generator = use_vectorized_ngram_blocker(
        SequenceGenerator(  # the blocker the CLI's task generator has
            [model],
            task.target_dictionary,
            beam_size=3,
            max_len_b=8,
            min_len=2,
            len_penalty=2.0,
            no_repeat_ngram_size=3,
        )
    )
    hypos = task.inference_step(generator, [model], sample)
    net_input = task._sample_for(model, sample)["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(**{k: v for k, v in net_input.items() if k != "prev_output_tokens"})
    for row, record in enumerate(records):
        summary = hypos[row][0]["tokens"]
        assert record["summary"] == "generated"
        assert record["summary_tokens"] == [task.target_dictionary[t] for t in summary.tolist()]
        # Replay the generation step by step with the incremental state.
        example_out = model.encoder.reorder_encoder_out(encoder_out, torch.tensor([row]))
        prev = torch.cat([torch.tensor([EOS]), summary[:-1]]).unsqueeze(0)
        state, step_weights = {}, []
        with torch.no_grad():
            for step in range(prev.size(1)):
                _, extra = model.decoder(prev[:, : step + 1], encoder_out=example_out, incremental_state=state)
                step_weights.append(extra["page_weights"][0][0, -1])
        torch.testing.assert_close(torch.tensor(record["weights"]), torch.stack(step_weights), atol=1e-5, rtol=0)

    with pytest.raises(SystemExit):
        cli_main(
            [
                "--checkpoint",
                pagesum_checkpoint,
                "--data",
                data_bin,
                "--output-dir",
                out_dir,
                "--from-generation",
                "--summaries",
                os.path.join(out_dir, "page_importance.jsonl"),
            ]
        )


def test_hub_entry_loads_pagesum_checkpoints_only(data_bin, pagesum_checkpoint, caplog):
    """torch.hub entry ``pagesum_bart`` summarizes raw clusters with a
    checkpoint trained from BART (its generation equals the task's generator,
    at any batch size, in the model-contract suite) and reports the page
    totals of each call when it ends; the ``dape_transformer`` entry refuses
    it."""
    import logging

    hub = torch.hub.load(
        REPO_ROOT,
        "pagesum_bart",
        model_dir=os.path.dirname(pagesum_checkpoint),
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=data_bin,
        source="local",
    )
    raw = [
        json.loads(line)
        for line in open(os.path.join(os.path.dirname(data_bin), "raw", "valid.jsonl"), encoding="utf-8")
    ]
    clusters = [cluster["documents"] for cluster in raw[:2]]
    generation = dict(beam=2, lenpen=2.0, max_len_b=8, min_len=3, no_repeat_ngram_size=3)
    with caplog.at_level(logging.INFO, logger="mdsfair.models.pagesum_bart"):
        hypotheses = hub.generate(clusters, batch_size=2, **generation)
        reports = [r.getMessage() for r in caplog.records if r.name == "mdsfair.models.pagesum_bart"]
        assert len(reports) == 1 and reports[0].startswith("PageSum pages over the 2 examples this encoder encoded: ")
    assert [len(hypos) for hypos in hypotheses] == [2, 2]
    summaries = hub.summarize(clusters, batch_size=2, **generation)
    assert summaries == [hub.decode(hypos[0]["tokens"]) for hypos in hypotheses]
    with pytest.raises(ValueError, match="holds a 'pagesum_bart' model"):
        torch.hub.load(
            REPO_ROOT,
            "dape_transformer",
            model_dir=os.path.dirname(pagesum_checkpoint),
            checkpoint_file="checkpoint_last.pt",
            data_name_or_path=data_bin,
            source="local",
        )
