"""The side inputs of a batch: their one table (``mdsfair/data/side_inputs.py``),
its collation, the one check of a batch, the documented copy of the table, and
the typed source context the decoder reads (``mdsfair/modules/source_structure.py``)."""

import os
import re

import pytest
import torch

from mdsfair.data.manifest import STRUCTURE_STREAMS
from mdsfair.data.side_data import SideDataSpec
from mdsfair.data.side_inputs import (
    PARAGRAPH_MATRIX,
    SIDE_INPUTS,
    STRUCTURE_INPUTS,
    TOKEN_ALIGNED,
    check_side_inputs,
    collate_side_inputs,
    side_input_of_side_data,
    side_input_table,
)
from mdsfair.modules.source_structure import SourceContext

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_table_names_every_structure_stream_and_spells_its_keys():
    assert tuple(side_input.stream for side_input in STRUCTURE_INPUTS) == STRUCTURE_STREAMS
    with open(os.path.join(REPO_ROOT, "mdsfair/data/side_inputs.py"), encoding="utf-8") as handle:
        source = handle.read()
    for name in SIDE_INPUTS:  # a search for the key finds the row that makes it
        assert f'"{name}"' in source, name


def test_the_data_contract_holds_the_table():
    with open(os.path.join(REPO_ROOT, "docs/data_contract.md"), encoding="utf-8") as handle:
        page = handle.read()
    documented = re.search(r"<!-- side-inputs:table -->\n\n(.*?)\n\n<!-- /side-inputs:table -->", page, re.S)
    assert documented is not None and documented.group(1) == side_input_table()


def test_collation_pads_each_stream_with_its_value():
    structures = [
        {"doc": torch.tensor([0, 0, 1]), "para": torch.tensor([0, 1, 2]), "sent": torch.tensor([0, 1, 2])},
        {"doc": torch.tensor([0]), "para": torch.tensor([0]), "sent": torch.tensor([0])},
    ]
    specs = [
        SideDataSpec("dep_rel", "token", "int8"),
        SideDataSpec("graph_similarity", "paragraph_matrix", "float64"),
        SideDataSpec("topics", "token", "int32"),  # a producer of a user's own
    ]
    side_data = [
        {"dep_rel": torch.tensor([4, 5, 6]), "graph_similarity": torch.ones(3, 3), "topics": torch.tensor([1, 2, 3])},
        {"dep_rel": torch.tensor([7]), "graph_similarity": torch.ones(1, 1), "topics": torch.tensor([9])},
    ]
    collated = collate_side_inputs(structures, side_data, specs)
    assert list(collated) == [
        "src_doc_ids",
        "src_para_ids",
        "src_sent_ids",
        "src_dep_rel",
        "src_graph_similarity",
        "src_topics",
    ]
    assert collated["src_doc_ids"].tolist() == [[0, 0, 1], [0, -1, -1]]
    assert collated["src_dep_rel"].tolist() == [[4, 5, 6], [7, -1, -1]]
    assert collated["src_graph_similarity"][1].tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert collated["src_topics"].tolist() == [[1, 2, 3], [9, -1, -1]]
    assert side_input_of_side_data(specs[2]).shape == TOKEN_ALIGNED
    assert side_input_of_side_data(SideDataSpec("links", "paragraph_matrix", "float64")).shape == PARAGRAPH_MATRIX


def test_one_check_names_every_failure_with_its_shapes():
    src_tokens = torch.ones(2, 5, dtype=torch.long)
    padding_mask = src_tokens.eq(0)

    def check(given, declared, *readers):
        check_side_inputs(src_tokens, given, declared, *readers, padding_mask=padding_mask)

    declared = {"src_doc_ids": False, "src_sent_ids": True, "src_graph_similarity": False}
    aligned = torch.zeros(2, 5, dtype=torch.long)
    check({"src_sent_ids": aligned}, declared, "the model")
    with pytest.raises(ValueError, match=r"^side input src_para_ids not declared by any component of this model"):
        check({"src_sent_ids": aligned, "src_para_ids": aligned}, declared, "the model")
    with pytest.raises(ValueError, match=r"^missing side input src_sent_ids \(needed by sparse"):
        check({}, declared, "the model", {"src_sent_ids": ["sparse"]})
    with pytest.raises(ValueError, match=r"^src_doc_ids \[2, 4\] is not aligned to src_tokens \[2, 5\]"):
        check({"src_sent_ids": aligned, "src_doc_ids": aligned[:, :4]}, declared, "m")
    with pytest.raises(ValueError, match=r"^src_graph_similarity \[2, 3, 4\] is not \[B, P, P\]"):
        check({"src_sent_ids": aligned, "src_graph_similarity": torch.zeros(2, 3, 4)}, declared, "m")
    with pytest.raises(ValueError, match=r"^src_sent_ids \[2, 5\] is float32, not integer \(int64 in the data"):
        check({"src_sent_ids": aligned.float()}, declared, "m")
    with pytest.raises(ValueError) as refused:  # every failure of the batch, one message each
        check({"src_doc_ids": aligned[:1]}, declared, "the model")
    missing, misaligned = refused.value.args[0].splitlines()
    assert missing.startswith("missing side input src_sent_ids (needed by the model;")
    assert misaligned.startswith("src_doc_ids [1, 5] is not aligned to src_tokens [2, 5]")


def test_a_missing_side_data_input_names_the_stream_that_makes_it():
    src_tokens = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError) as refused:
        check_side_inputs(
            src_tokens,
            {},
            {"src_graph_discourse": True},
            "hiertransformer --graph discourse",
            padding_mask=src_tokens.eq(0),
        )
    assert refused.value.args[0] == (
        "missing side input src_graph_discourse (needed by hiertransformer --graph discourse; the "
        "multidoc_summarization task makes it from an mdsfair data-bin preprocessed with mdsfair-preprocess "
        "--side-data graph_discourse, docs/data_contract.md)"
    )


PAD = 1
#: two sources, the second one token shorter (padding at its end)
SOURCES = torch.tensor([[0, 5, 6, 7, 2], [0, 8, 9, 2, PAD]])
#: their paragraphs: -1 at padding
PARAGRAPHS = torch.tensor([[0, 0, 1, 2, 2], [0, 0, 1, 1, -1]])


def refusal(given, declared=None):
    """The message of the one check of a batch of :data:`SOURCES`, read at once."""
    declared = declared or {name: False for name in given}
    with pytest.raises(ValueError) as refused:
        check_side_inputs(SOURCES, given, declared, "the model", padding_mask=SOURCES.eq(PAD))
    return refused.value.args[0]


def test_structure_ids_are_runs_of_non_negative_ids_at_the_real_tokens():
    for name in ("src_doc_ids", "src_para_ids", "src_sent_ids"):
        check_side_inputs(SOURCES, {name: PARAGRAPHS}, {name: True}, "m", padding_mask=SOURCES.eq(PAD))
    negative = PARAGRAPHS.clone()
    negative[1, 2] = -1
    assert refusal({"src_para_ids": negative}).splitlines() == [
        "src_para_ids [2, 5] is negative at a non-pad token of src_tokens [2, 5] (example 1, position 2: -1); "
        "every source token needs a paragraph",
        "src_para_ids [2, 5] must be non-decreasing runs along each example (one run per paragraph), but "
        "example 1 goes from 0 to -1 at position 2",
    ]
    split = PARAGRAPHS.clone()
    split[0, 3] = 0  # paragraph 0, then 1, then 0 again
    assert refusal({"src_doc_ids": split}) == (
        "src_doc_ids [2, 5] must be non-decreasing runs along each example (one run per document), but "
        "example 0 goes from 1 to 0 at position 3"
    )
    # padding holds no unit: a negative id (the data contract's -1)
    padded = PARAGRAPHS.clone()
    padded[1, 4] = -7
    check_side_inputs(SOURCES, {"src_sent_ids": padded}, {"src_sent_ids": True}, "m", padding_mask=SOURCES.eq(PAD))
    padded[1, 4] = 1
    assert refusal({"src_sent_ids": padded}) == (
        "src_sent_ids [2, 5] holds 1 at padding of src_tokens [2, 5] (example 1, position 4); the data contract "
        "pads it with -1"
    )


def test_dependency_pointers_stay_in_the_source_and_relations_in_the_inventory():
    from mdsfair.data.dependency_relations import DEPENDENCY_RELATIONS

    heads = torch.tensor([[1, 1, -1, 1, -1], [2, 2, 2, -1, -1]])
    relations = torch.tensor([[3, 0, -1, 44, -1], [0, 5, 5, -1, -1]])
    given = {"src_dep_head": heads, "src_dep_rel": relations, "src_dep_word": heads}
    check_side_inputs(SOURCES, given, dict.fromkeys(given, False), "m", padding_mask=SOURCES.eq(PAD))
    beyond = heads.clone()
    beyond[1, 3] = 5
    assert refusal({"src_dep_head": beyond}) == (
        "src_dep_head [2, 5] holds 5 at example 1, position 3: -1 for none, else a position below the 5 tokens "
        "of src_tokens [2, 5]"
    )
    below_none = heads.clone()
    below_none[0, 0] = -2
    assert refusal({"src_dep_word": below_none}).startswith("src_dep_word [2, 5] holds -2 at example 0, position 0")
    unknown = relations.clone()
    unknown[0, 1] = len(DEPENDENCY_RELATIONS)
    assert refusal({"src_dep_rel": unknown}) == (
        f"src_dep_rel [2, 5] holds {len(DEPENDENCY_RELATIONS)} at example 0, position 1: -1 for none, else an id "
        f"below {len(DEPENDENCY_RELATIONS)} (the relations of mdsfair.data.dependency_relations)"
    )


def test_a_paragraph_graph_covers_the_paragraphs_of_the_tokens():
    covering = torch.zeros(2, 3, 3)
    given = {"src_para_ids": PARAGRAPHS, "src_graph_similarity": covering}
    check_side_inputs(SOURCES, given, dict.fromkeys(given, False), "m", padding_mask=SOURCES.eq(PAD))
    assert refusal({"src_para_ids": PARAGRAPHS, "src_graph_similarity": covering[:, :2, :2]}) == (
        "src_graph_similarity [2, 2, 2] has 2 paragraph rows, but example 0 of src_para_ids [2, 5] has 3 "
        "paragraphs: expected [B, P, P] with P >= 3"
    )
    # without paragraph ids there is nothing to cover
    check_side_inputs(
        SOURCES,
        {"src_graph_similarity": covering[:, :2, :2]},
        {"src_graph_similarity": True},
        "m",
        padding_mask=SOURCES.eq(PAD),
    )


def test_every_value_failure_is_named_and_the_checks_can_wait_for_one_read():
    split, beyond = PARAGRAPHS.clone(), PARAGRAPHS.clone()
    split[0, 3] = 0
    beyond[1, 0] = 9
    given = {"src_sent_ids": split, "src_dep_head": beyond}
    lines = refusal(given).splitlines()
    assert [line.split(" ")[0] for line in lines] == ["src_sent_ids", "src_dep_head"]
    pending = []
    check_side_inputs(SOURCES, given, dict.fromkeys(given, False), "m", padding_mask=SOURCES.eq(PAD), pending=pending)
    failed = [bool(flag) for flag, _ in pending]  # the encoder reads them with its other checks
    assert failed == [False, True, True]  # misplaced (negative or at padding), decreasing, outside
    assert [message() for flag, message in pending if bool(flag)] == lines


def test_the_source_context_reorders_every_tensor_with_the_hypotheses():
    context = SourceContext(document_ids=torch.tensor([[0, 0, 1], [0, 1, 1]]), sentence_states=torch.randn(2, 4, 3))
    order = torch.tensor([1, 1, 0])
    reordered = context.index_select(order)
    assert torch.equal(reordered.document_ids, context.document_ids[order])
    assert torch.equal(reordered.sentence_states, context.sentence_states[order])
    assert reordered.sentence_ids is None and reordered.sentence_padding_mask is None


def test_the_sparse_context_reorders_rows_not_sources():
    from mdsfair.modules.cross_attention_components import SparseSourceContext
    from mdsfair.modules.sentence_saliency import sentence_layout

    sentence_ids = torch.tensor([[0, 0, 1, 1, 2], [0, 1, 1, -1, -1]])
    context = SparseSourceContext(sentence_ids=sentence_ids, layout=sentence_layout(sentence_ids))
    expanded = context.index_select(torch.tensor([0, 0, 1, 1]))
    reordered = expanded.index_select(torch.tensor([2, 3, 0]))
    assert reordered.sentence_ids is sentence_ids  # one copy per source
    assert reordered.hypothesis_source_index.tolist() == [1, 1, 0]
    assert reordered.rows_context().rows.source_index.tolist() == [1, 1, 0]
