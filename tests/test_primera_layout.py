"""PRIMERA's per-document truncation (mdsfair/data/primera_layout.py)
against a copy of the authors' arithmetic in allenai/PRIMER
script/dataloader.py (SummarizationDataset.__getitem__,
join_method "concat_start_wdoc_global")."""
import json
import os
import tempfile

import pytest

from mdsfair.data.primera_layout import primera_truncation
from tests.import_fixtures import TEXTS, hf_tokenizer, write_tokenizer


def authors_join(tokenizer, all_docs, max_input_len, mask_num, docsep_token_id):
    """The authors' loop, copied: each document encoded with
    max_length=(max_input_len - mask_num) // len(all_docs), [1:-1], then
    <doc-sep>; <s> ... </s> around the whole."""
    input_ids = [tokenizer.mask_token_id] * mask_num if mask_num > 0 else []
    for doc in all_docs:
        input_ids.extend(
            tokenizer.encode(doc, truncation=True, max_length=(max_input_len - mask_num) // len(all_docs))[1:-1]
        )
        input_ids.append(docsep_token_id)
    return [tokenizer.bos_token_id] + input_ids + [tokenizer.eos_token_id]


def test_example_lengths_by_hand():
    # budget 4096, 3 documents: share 1365, 1363 content tokens each; the
    # short one's unused 1263 tokens are not given to the others.
    out = primera_truncation([5000, 100, 1400], 4096)
    assert out["share"] == 1365
    assert out["kept"] == [1363, 100, 1363]
    assert out["cut"] == [3637, 0, 37]
    assert out["source_length"] == 2 + 1364 + 101 + 1364
    # a single long document: one token over the budget, as the authors' layout
    assert primera_truncation([10_000], 4096)["source_length"] == 4097
    assert primera_truncation([10, 10], 4096, mask_num=5)["share"] == 2045
    with pytest.raises(ValueError, match="no content token"):
        primera_truncation([3] * 2000, 4096)


@pytest.mark.parametrize("max_input_len,mask_num", [(16, 0), (23, 0), (40, 0), (41, 5), (300, 0)])
def test_equals_authors_loop_with_a_real_tokenizer(max_input_len, mask_num):
    with tempfile.TemporaryDirectory() as directory:
        write_tokenizer(directory)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump({"model_type": "led"}, f)  # AutoTokenizer picks LED's (BART's) byte-level BPE
        tokenizer = hf_tokenizer(directory)
        tokenizer.add_special_tokens({"additional_special_tokens": ["<doc-sep>"]})
        docsep = tokenizer.convert_tokens_to_ids("<doc-sep>")
        docs = [TEXTS[0] + " " + TEXTS[1], TEXTS[2], TEXTS[3] + " " + TEXTS[4] + " " + TEXTS[5]]
        theirs = authors_join(tokenizer, docs, max_input_len, mask_num, docsep)
        full = [tokenizer.encode(doc)[1:-1] for doc in docs]
        ours = primera_truncation([len(ids) for ids in full], max_input_len, mask_num)
        assert ours["source_length"] == len(theirs)
        # rebuild the joined source from the full encodings and our kept counts
        rebuilt = [tokenizer.bos_token_id] + [tokenizer.mask_token_id] * mask_num
        for ids, kept in zip(full, ours["kept"]):
            rebuilt += ids[:kept] + [docsep]
        rebuilt.append(tokenizer.eos_token_id)
        assert rebuilt == theirs
        assert sum(ours["cut"]) == sum(len(ids) for ids in full) - sum(ours["kept"])
        if max_input_len < 100:
            assert sum(ours["cut"]) > 0  # the case exercises truncation
