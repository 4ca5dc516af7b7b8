"""T5 v1.1 (``t5_v1_1``, :mod:`mdsfair.models.t5`) against Hugging Face's
``T5ForConditionalGeneration``: a tiny random model and a tiny SentencePiece
model saved as the Hub stores them, imported with ``mdsfair-import hf-t5``,
give the same teacher-forced logits in float64 on a padded batch, the same
greedy and beam-search outputs, and the same token ids on real text; the
relative position buckets follow the paper's rule; incremental decoding
equals the full pass; the model contract's checks run on ``t5_v1_1_tiny``."""

import json
import os

import pytest
import torch

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.hf_t5_family import (
    copy_of,
    fairseq_hypotheses,
    hf_hypotheses,
    imported_model,
    left_padded,
    padded_batch,
    real_lines,
    sentencepiece,
    transformers,
)
from tests.t5_fixtures import tiny_hf_t5
from tests.tolerances import assert_close_in_dtype


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A tiny T5 v1.1 (gated GELU, 4 unnamed embedding rows) with random
    weights, its spiece.model and tokenizer files; saved by transformers 5,
    which ties lm_head to shared (tests/t5_fixtures.py)."""
    return tiny_hf_t5(str(tmp_path_factory.mktemp("hf_t5")), own_lm_head=False)


@pytest.fixture(scope="module")
def imported(hf_folder, tmp_path_factory):
    from mdsfair.importers.hf_t5 import import_hf_t5

    return imported_model(import_hf_t5, hf_folder, str(tmp_path_factory.mktemp("imported_t5")))


@pytest.fixture(scope="module")
def hf_model(hf_folder):
    return transformers.T5ForConditionalGeneration.from_pretrained(hf_folder).double().eval()


#: the lengths of the two sources of the padded batch
LENGTHS = [23, 15]


def test_relative_position_buckets_follow_the_paper():
    """Exact offsets below half the buckets, logarithmic bins up to
    max_distance, right-hand offsets in the upper half (bidirectional), the
    future in bucket 0 (causal)."""
    from mdsfair.modules.t5_layers import relative_position_bucket

    offsets = torch.tensor([0, -1, -7, -8, -12, -127, -128, -1000, 1, 7, 1000])
    bidirectional = relative_position_bucket(offsets, True, 32, 128).tolist()
    assert bidirectional[:3] == [0, 1, 7] and bidirectional[8:10] == [17, 23]
    assert 8 <= bidirectional[3] <= bidirectional[4] <= bidirectional[5] == bidirectional[6] == bidirectional[7] == 15
    assert bidirectional[10] == 31
    causal = relative_position_bucket(offsets, False, 32, 128).tolist()
    assert causal[:3] == [0, 1, 7] and causal[7] == 31 and causal[8:] == [0, 0, 0]


def test_the_import_writes_a_t5_checkpoint_and_dictionary(imported, hf_folder):
    summary, model, task, out_dir = imported
    dictionary = task.target_dictionary
    assert summary["arch"] == "t5_v1_1_base"  # no released size: the base architecture with every size as a flag
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()) == (0, 1, 2, 3)
    hf_tokenizer = transformers.T5Tokenizer.from_pretrained(hf_folder)
    for token in ("<extra_id_0>", "<extra_id_99>", "<pad>", "</s>", "<unk>"):
        assert dictionary.index(token) == hf_tokenizer.convert_tokens_to_ids(token) + 1, token
    assert len(dictionary) == 184 + 1 and dictionary[184] == "madeupword0003"
    assert os.path.isfile(os.path.join(out_dir, "spm.model"))
    assert json.load(open(os.path.join(out_dir, "mdsfair.json")))["subword"]["type"] == "sentencepiece"


def test_teacher_forced_logits_equal_hugging_face_in_float64(imported, hf_model):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    targets = torch.tensor([[5, 9, 33, 40, 1, 0], [7, 12, 1, 0, 0, 0]])
    decoder_input = torch.cat([torch.zeros(2, 1, dtype=torch.long), targets[:, :-1]], dim=1)
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        prev_output_tokens = decoder_input + 1
        prev_output_tokens[:, 0] = task.target_dictionary.eos()  # fairseq's collater starts targets with </s>
        logits, _ = model(ids + 1, mask.sum(1), prev_output_tokens)
    assert_close_in_dtype(logits[..., 1:], expected)
    # fairseq's <s> (no T5 token): e^-100 times the least likely token's probability
    probabilities = torch.softmax(logits, -1)
    assert torch.all(probabilities[..., 0] <= torch.exp(torch.tensor(-99.0)) * probabilities[..., 1:].min(-1).values)
    # the source left-padded, as fairseq's data sets pad it: relative positions are unchanged
    with torch.no_grad():
        left_logits, _ = model(left_padded(ids, mask), mask.sum(1), prev_output_tokens)
    assert_close_in_dtype(left_logits, logits)


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_equal_hugging_face(imported, hf_model, beam):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    max_len = 12
    ours = fairseq_hypotheses(model, task, ids, mask, beam, max_len)
    theirs = hf_hypotheses(hf_model, ids, mask, beam, max_len)
    assert ours == theirs


def test_incremental_decoding_equals_the_full_pass(imported):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    tokens = torch.tensor([[2, 6, 10, 34, 41], [2, 8, 13, 2, 1]])
    with torch.no_grad():
        encoder_out = model.encoder(ids + 1, mask.sum(1))
        full, _ = model.decoder(tokens, encoder_out)
        state = {}
        steps = [model.decoder(tokens[:, : step + 1], encoder_out, incremental_state=state)[0]
                 for step in range(tokens.size(1))]  # fmt: skip
    assert_close_in_dtype(torch.cat(steps, dim=1), full)


def test_imported_dictionary_maps_ids_as_the_hugging_face_tokenizer(imported, hf_folder):
    _summary, _model, task, out_dir = imported
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(out_dir, "spm.model"))
    hf_tokenizer = transformers.T5Tokenizer.from_pretrained(hf_folder)
    dictionary = task.target_dictionary
    for text in real_lines() + ["a <extra_id_0> sentinel"]:
        expected = hf_tokenizer(text).input_ids
        pieces = []
        for part in text.split("<extra_id_0>"):
            pieces += processor.encode(part, out_type=str) + ["<extra_id_0>"]
        ours = [dictionary.index(piece) - 1 for piece in pieces[:-1]] + [dictionary.eos() - 1]
        assert ours == expected, text[:80]


def test_the_contract_checks_on_t5_v1_1_tiny_in_float64(tmp_path_factory, tmp_path):
    data = contract.make_contract_data(str(tmp_path_factory.mktemp("t5_contract")))
    checks.check_the_contract_in_float64("t5_v1_1_tiny", data, str(tmp_path / "checkpoint.pt"))


def test_the_command_imports_again_with_overwrite(hf_folder, tmp_path, capsys):
    from mdsfair.importers.cli import import_main

    out_dir = str(tmp_path / "t5")
    assert import_main(["hf-t5", hf_folder, out_dir]) == 0
    assert f"wrote {out_dir}/model.pt (--arch t5_v1_1_base)" in capsys.readouterr().out
    assert import_main(["hf-t5", hf_folder, out_dir]) == 1  # the folder is taken
    assert import_main(["hf-t5", hf_folder, out_dir, "--overwrite"]) == 0
    assert sorted(os.listdir(out_dir)) == ["dict.txt", "mdsfair.json", "model.pt", "spm.model"]


@pytest.mark.parametrize(
    "config_edit, drop_tensor, expected",
    [
        ({"scale_decoder_outputs": True}, None, "config.json: the decoder output is scaled by d_model ** -0.5"),
        ({"feed_forward_proj": "gated-silu"}, None, "feed_forward_proj 'gated-silu'"),
        ({"d_ff": 128}, None, "does not match config.json's sizes"),
        (None, "decoder.block.1.layer.2.layer_norm.weight", "no tensor 'decoder.block.1.layer.2.layer_norm.weight'"),
    ],
)
def test_the_command_refuses_what_t5_v1_1_is_not(hf_folder, tmp_path, capsys, config_edit, drop_tensor, expected):
    from mdsfair.importers.cli import import_main

    source = copy_of(hf_folder, tmp_path, config_edit, drop_tensor)
    out_dir = str(tmp_path / "t5")
    assert import_main(["hf-t5", source, out_dir]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("mdsfair-import hf-t5: error: ") and expected in error and "\n" not in error
    assert not os.path.exists(os.path.join(out_dir, "model.pt"))


def test_the_hub_encodes_a_cluster_as_the_hugging_face_tokenizer(imported, hf_folder):
    """The hub on the imported folder (its spm.model, dict.txt and manifest)
    gives a one-document cluster T5's ids, one place up, without </s> (the
    data set appends it)."""
    import mdsfair
    from mdsfair.models.t5 import T5Model

    _summary, _model, _task, out_dir = imported
    mdsfair.register()
    hub = T5Model.from_pretrained(out_dir, checkpoint_file="model.pt")
    hf_tokenizer = transformers.T5Tokenizer.from_pretrained(hf_folder)
    for text in real_lines():
        tokens = hub.encode_cluster({"id": "t5", "documents": [text], "summary": ""}).tokens.tolist()
        assert tokens == [index + 1 for index in hf_tokenizer(text).input_ids[:-1]], text[:80]
