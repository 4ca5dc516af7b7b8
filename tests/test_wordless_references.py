"""A reference that is only punctuation scores 0 in every ROUGE: each such
cluster is warned about with its line, by the official and the fast scorer."""

import logging

import pytest

from mdsfair.evaluation.file_scoring import score_files, warn_wordless_references


def test_only_punctuation_and_symbols_count_as_wordless():
    references = [["The vote passed."], ["... !!! --"], ["Zürich 2023"], ["«»"], ["Перевод"], ["_ _"]]
    assert warn_wordless_references(references, "refs.txt") == 3


@pytest.mark.parametrize("fast", [True, False])
def test_punctuation_reference_is_warned_per_cluster(tmp_path, caplog, fast):
    hyp = tmp_path / "hyp.txt"
    ref = tmp_path / "ref.txt"
    hyp.write_text("the council approved the budget .\nthe storm hit the coast .\nprices rose again .\n")
    ref.write_text("the council approved the budget .\n... !!!\nprices rose again this week .\n")
    with caplog.at_level(logging.WARNING, logger="mdsfair.evaluation.rouge"):
        result = score_files(str(hyp), [str(ref)], fast=fast)
    warnings = [r.getMessage() for r in caplog.records if "has no word" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{ref}:2: cluster 1:") and "'... !!!'" in warnings[0] and "scores 0" in warnings[0]
    assert result["info"]["wordless_references"] == 1
