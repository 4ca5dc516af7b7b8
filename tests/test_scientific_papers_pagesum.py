"""arXiv/PubMed end to end: ``mdsfair-convert scientific_papers`` -> ``mdsfair-preprocess`` -> PageSum's
section pages (issue 23.1).

The converter makes every section of a Cohan et al. (2018) paper one contract
document, its name as the first paragraph, so that PageSum's discourse
locality with ``--discourse-unit section`` has one page per section holding
"section name + content" (Liu et al. 2022, Sec. 5.3; the ``arxiv-section``
setting has 8 pages). These tests write papers in the release's JSONL layout,
run both commands, build the tiny ``pagesum_bart`` model through the
multidoc_summarization task and check the pages it builds: no training.
"""

import json
import random

import pytest
import torch
from fairseq import options, tasks

from mdsfair.preprocess.binarize import run as preprocess
from mdsfair.preprocess.converters import cli_main as convert_cli
from mdsfair.preprocess.subword import load_encoder_from_manifest
from tests.utils import USER_DIR

WORDS = (
    "spectrum gap model coupling energy state field lattice phase order density matrix operator wave "
    "patients trial dose outcome cohort risk gene protein cell tissue signal noise sample method"
).split()
SECTION_NAMES = (
    "introduction",
    "related work",
    "methods",
    "results",
    "discussion",
    "conclusion",
    "appendix a",
    "appendix b",
    "appendix c",
)
NUM_PAGES = 8  # PageSum's arxiv-section setting


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + " ."


def paper(rng, article_id, num_sections, empty_section=None):
    """One paper as a line of the release's train.txt / val.txt / test.txt (long-summarization README)."""
    names = list(SECTION_NAMES[:num_sections])
    sections = [[sentence(rng) for _ in range(rng.randint(1, 3))] for _ in names]
    if empty_section is not None:
        sections[empty_section] = []
    return {
        "article_id": article_id,
        "abstract_text": [f"<S> {sentence(rng)} </S>", f"<S> {sentence(rng)} </S>"],
        "article_text": [s for section in sections for s in section],
        "section_names": names,
        "sections": sections,
        "labels": None,
    }


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Papers in the release layout, converted per split into raw/{train,valid,test}.jsonl and preprocessed
    into a data-bin; returns (data-bin path, the valid split's converted clusters, its papers)."""
    root = tmp_path_factory.mktemp("scientific_papers")
    rng = random.Random(0)
    release = root / "arxiv-dataset"
    release.mkdir()
    splits = {
        # (every section name in training, so the subword model has all their characters)
        "train": [paper(rng, f"tr{i}", rng.randint(2, 5)) for i in range(15)] + [paper(rng, "tr15", 9)],
        # valid: a 4-section paper, one whose empty "methods" section the converter drops (so the sections
        # after it move up a page), and one of 9 sections: one more than the 8 pages.
        "val": [paper(rng, "va0", 4), paper(rng, "va1", 5, empty_section=2), paper(rng, "va2", 9)],
        "test": [paper(rng, "te0", 3)],
    }
    raw = root / "raw"
    raw.mkdir()
    for split, papers in splits.items():
        (release / f"{split}.txt").write_text("".join(json.dumps(p) + "\n" for p in papers), encoding="utf-8")
        output = raw / ("valid.jsonl" if split == "val" else f"{split}.jsonl")
        assert (
            convert_cli(["scientific_papers", str(release / f"{split}.txt"), "-o", str(output), "--split", split]) == 0
        )
    data_bin = root / "data-bin"
    preprocess(["--input-dir", str(raw), "--destdir", str(data_bin), "--vocab-size", "120", "--no-progress-bar"])
    with open(raw / "valid.jsonl", encoding="utf-8") as handle:
        clusters = [json.loads(line) for line in handle]
    return str(data_bin), clusters, splits["val"]


def build_pagesum(data_bin, discourse_unit):
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
            "pagesum_bart_tiny",
            "--locality",
            "discourse",
            "--discourse-unit",
            discourse_unit,
            "--num-pages",
            str(NUM_PAGES),
            "--max-source-positions",
            "4096",
            "--dropout",
            "0",
        ],
    )
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args).eval()
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    return task, model, dataset.collater([dataset[i] for i in range(len(dataset))])


def page_texts(task, layout, example):
    """The text of every page of ``example`` the decoder combines, decoded with the data's subword model."""
    dictionary = task.source_dictionary
    encoder = load_encoder_from_manifest(task.data_dir, task.manifest["subword"])
    specials = {dictionary.bos(), dictionary.eos(), dictionary.pad()}
    texts = []
    for page, used in zip(layout.tokens[example].tolist(), layout.page_mask[example].tolist()):
        if used:
            texts.append(encoder.decode([dictionary[t] for t in page if t not in specials]))
    return texts


def structure(sample):
    net_input = sample["net_input"]
    return {key: net_input[key] for key in ("src_tokens", "src_doc_ids", "src_para_ids", "src_sent_ids")}


def test_converter_gives_one_titled_document_per_nonempty_section(converted):
    _, clusters, _ = converted
    assert [c["id"] for c in clusters] == ["va0", "va1", "va2"]
    assert [len(c["documents"]) for c in clusters] == [4, 4, 9]
    assert [d.split("\n\n")[0] for d in clusters[1]["documents"]] == [
        "introduction",
        "related work",
        "results",
        "discussion",
    ]  # "methods" was empty
    assert all(len(d.split("\n\n")) == 2 for c in clusters for d in c["documents"])


def test_section_pages_follow_the_converted_sections(converted):
    """Page i of a paper is its i-th section, "name content" in that order; every token of a page belongs
    to that section (src_doc_ids); a 9th section past the 8 pages is dropped and counted, nothing else."""
    data_bin, clusters, papers = converted
    task, model, sample = build_pagesum(data_bin, "section")
    layout = model.encoder.page_builder(**structure(sample))
    doc_ids = sample["net_input"]["src_doc_ids"]
    for example, sample_id in enumerate(sample["id"].tolist()):
        # The release's sections, read straight from the paper (an empty one has no page).
        source = papers[sample_id]
        assert clusters[sample_id]["id"] == source["article_id"]
        sections = [
            " ".join([name] + sentences)
            for name, sentences in zip(source["section_names"], source["sections"])
            if sentences
        ]
        assert page_texts(task, layout, example) == sections[:NUM_PAGES], source["article_id"]
        for page in range(int(layout.page_mask[example].sum())):
            positions = layout.source_position[example, page]
            assert set(doc_ids[example, positions[positions >= 0]].tolist()) == {page}
    by_id = {clusters[i]["id"]: row for row, i in enumerate(sample["id"].tolist())}
    assert layout.page_mask.sum(1)[[by_id["va0"], by_id["va1"], by_id["va2"]]].tolist() == [4, 4, 8]
    assert layout.dropped_units.tolist() == [1 if row == by_id["va2"] else 0 for row in range(3)]
    dictionary = task.source_dictionary
    tokens = sample["net_input"]["src_tokens"][by_id["va2"]]
    content = tokens.ne(dictionary.bos()) & tokens.ne(dictionary.eos()) & tokens.ne(dictionary.pad())
    ninth_section_tokens = int((content & doc_ids[by_id["va2"]].eq(8)).sum())
    assert int(layout.dropped_tokens[by_id["va2"]]) == ninth_section_tokens > 0
    assert layout.cut_tokens.tolist() == [0, 0, 0] and layout.merged_units.tolist() == [0, 0, 0]
    # The encoder builds the same pages in its forward: one row per page, the same mask.
    with torch.no_grad():
        encoder_out = model.encoder(**{k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"})
    assert torch.equal(encoder_out["page_mask"][0], layout.page_mask)
    assert encoder_out["encoder_out"][0].shape[1] == 3 * layout.num_pages


def test_paragraph_pages_split_the_name_from_its_section(converted):
    """With --discourse-unit paragraph the same data gives the section name a page of its own: the name is
    a paragraph of the section document, which only the section unit keeps with its content."""
    data_bin, clusters, _ = converted
    task, model, sample = build_pagesum(data_bin, "paragraph")
    layout = model.encoder.page_builder(**structure(sample))
    row = sample["id"].tolist().index(0)
    paragraphs = [p for document in clusters[0]["documents"] for p in document.split("\n\n")]
    assert (
        page_texts(task, layout, row)
        == paragraphs[:NUM_PAGES]
        == [
            "introduction",
            paragraphs[1],
            "related work",
            paragraphs[3],
            "methods",
            paragraphs[5],
            "results",
            paragraphs[7],
        ]
    )
