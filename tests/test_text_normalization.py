"""Text normalisation (issue 34 item 2): separators keep words apart, and a
data-bin for an imported tokenizer gives the BPE the text its checkpoint's
own pipeline gives it."""
import json
import os

import numpy as np
import pytest

from mdsfair.data.indexed import NumpyMMapDataset
from mdsfair.text import rouge_tokens

# Every white-space character clean_text used to delete: form feed, vertical
# tab and the information separators U+001C-U+001F.
SEPARATED_DOCUMENT = ("Line one\x0bline two. The page ends.\x0cNext page\x1cstarts here.\x1dGroup\x1erecord\x1funit "
                      "words stay apart.")
SEPARATED_SUMMARY = "Line one\x0cline two.\x0bThe page\x1cends\x1dhere\x1ein\x1fwords."
PLAIN = ["The council approved the budget on Tuesday.", "Critics said it cuts too much from schools.",
         "A storm hit the coast overnight.", "Thousands of homes lost power and roads were closed."]


def write_split(path, clusters):
    with open(path, "w", encoding="utf-8") as f:
        for cluster in clusters:
            f.write(json.dumps(cluster, ensure_ascii=False) + "\n")


def read_manifest(data_bin):
    with open(os.path.join(data_bin, "mdsfair.json"), encoding="utf-8") as f:
        return json.load(f)


def stored(data_bin, split, name):
    data = NumpyMMapDataset(os.path.join(data_bin, f"{split}.{name}"))
    return [np.asarray(data[i]).tolist() for i in range(len(data))]


def test_separators_become_spaces_in_source_summary_and_references(tmp_path):
    """Form feed, vertical tab and U+001C-U+001F glued the words either side
    together ("page.Next") in the stored source and in summary.txt, which
    mdsfair-rouge reads as the references, while mdsfair-baseline and ROUGE
    split on them: now they are spaces, and the words are the raw text's."""
    from fairseq.data import Dictionary

    from mdsfair.preprocess.binarize import run
    from mdsfair.preprocess.subword import SentencePieceEncoder

    raw = tmp_path / "raw"
    raw.mkdir()
    clusters = [{"id": "sep", "documents": [SEPARATED_DOCUMENT, PLAIN[0]], "summary": SEPARATED_SUMMARY}]
    clusters += [{"id": f"p{i}", "documents": PLAIN[i:] + PLAIN[:i], "summary": PLAIN[i]} for i in range(4)]
    write_split(raw / "train.jsonl", clusters)
    dest = str(tmp_path / "bin")
    run(["--input-dir", str(raw), "--destdir", dest, "--vocab-size", "300", "--no-progress-bar"])
    summary_line = open(os.path.join(dest, "train.summary.txt"), encoding="utf-8").read().split("\n")[0]
    assert summary_line.split() == SEPARATED_SUMMARY.split()
    assert rouge_tokens(summary_line) == rouge_tokens(SEPARATED_SUMMARY)
    # the stored source and target, decoded, have the raw text's words
    dictionary = Dictionary.load(os.path.join(dest, "dict.txt"))
    encoder = SentencePieceEncoder(os.path.join(dest, "spm.model"))
    source = encoder.decode([dictionary[i] for i in stored(dest, "train", "source")[0]])
    target = encoder.decode([dictionary[i] for i in stored(dest, "train", "target")[0]])
    assert source.split() == (SEPARATED_DOCUMENT + " " + PLAIN[0]).split()
    assert target.split() == SEPARATED_SUMMARY.split()
    # the ROUGE references mdsfair-rouge reads for this data-bin's split
    from mdsfair.evaluation.inputs import read_lines

    assert read_lines(os.path.join(dest, "train.summary.txt"))[0].split() == SEPARATED_SUMMARY.split()


def test_clean_text_turns_every_whitespace_character_but_the_line_break_into_a_space():
    from mdsfair.preprocess.structure import clean_text

    spaces = [chr(i) for i in range(0x110000) if chr(i).isspace() and chr(i) not in "\n\r"]
    for space in spaces:
        assert clean_text(f"a{space}b") == "a b", hex(ord(space))
    assert clean_text("a\r\nb\rc") == "a\nb\nc"
    assert clean_text("a\u200bb\ufeffc\x07d") == "abcd"  # zero-width and control characters still go
