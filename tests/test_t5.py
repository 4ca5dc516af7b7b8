"""T5 v1.1 (``t5_v1_1``, :mod:`mdsfair.models.t5`) against Hugging Face's
``T5ForConditionalGeneration``: a tiny random model and a tiny SentencePiece
model saved as the Hub stores them, imported with ``mdsfair-import hf-t5``,
give the same teacher-forced logits in float64 on a padded batch, the same
greedy and beam-search outputs, and the same token ids on real text; the
relative position buckets follow the paper's rule; incremental decoding
equals the full pass; the model contract's checks run on ``t5_v1_1_tiny``."""

import glob
import json
import os

import pytest
import torch

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.tolerances import assert_close_in_dtype

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

SHARED_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")

#: A few lines to train the tiny SentencePiece model on.
TRAINING_LINES = [
    "The committee approved the new budget for the coming year.",
    "Researchers reported that the model summarizes several documents at once.",
    "Reviewers asked the authors to compare against stronger baselines.",
    "The city council met on Tuesday to discuss public transport.",
    "A summary should keep the facts that every source agrees on.",
    "Prices rose by 3 percent in March, the agency said.",
] * 4


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A tiny T5 v1.1 (gated GELU, untied lm_head, 4 unnamed embedding rows)
    with random weights, its spiece.model and tokenizer files."""
    folder = str(tmp_path_factory.mktemp("hf_t5"))
    spm_prefix = os.path.join(folder, "spiece")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_LINES),
        model_prefix=spm_prefix,
        vocab_size=80,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        minloglevel=2,
    )
    # loaded from a folder holding only spiece.model, as the Hub's v1.1 folders were made
    tokenizer = transformers.T5Tokenizer.from_pretrained(folder, extra_ids=100)
    tokenizer.save_pretrained(folder)
    config = transformers.T5Config(
        vocab_size=184,  # 80 pieces + 100 sentinels + 4 unnamed rows
        d_model=32,
        d_ff=64,
        d_kv=8,
        num_heads=4,
        num_layers=2,
        num_decoder_layers=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        dropout_rate=0.0,
        layer_norm_epsilon=1e-6,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config)
    with torch.no_grad():
        for parameter in model.parameters():  # layer norms away from 1, a spread of logits
            parameter.add_(0.2 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def imported(hf_folder, tmp_path_factory):
    from fairseq import checkpoint_utils

    from mdsfair.importers.hf_t5 import import_hf_t5

    out_dir = str(tmp_path_factory.mktemp("imported_t5"))
    summary = import_hf_t5(hf_folder, out_dir, overwrite=True)
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": out_dir}
    )
    return summary, models[0].double().eval(), task, out_dir


@pytest.fixture(scope="module")
def hf_model(hf_folder):
    return transformers.T5ForConditionalGeneration.from_pretrained(hf_folder).double().eval()


def padded_batch():
    """Two Hugging Face sources of different lengths, right-padded with 0, and their mask."""
    generator = torch.Generator().manual_seed(1)
    lengths = [23, 15]
    ids = torch.zeros(2, max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(3, 180, (length - 1,), generator=generator)
        ids[row, length - 1] = 1
    return ids, ids.ne(0).long()


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
    ids, mask = padded_batch()
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
    left = torch.ones_like(ids)  # fairseq's <pad>
    for row, length in enumerate(mask.sum(1).tolist()):
        left[row, ids.size(1) - length :] = ids[row, :length] + 1
    with torch.no_grad():
        left_logits, _ = model(left, mask.sum(1), prev_output_tokens)
    assert_close_in_dtype(left_logits, logits)


def fairseq_hypotheses(model, task, ids, mask, beam: int, max_len: int):
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_a=0, max_len_b=max_len,
                                  min_len=0)  # fmt: skip
    sample = {"net_input": {"src_tokens": ids + 1, "src_lengths": mask.sum(1)}}
    with torch.no_grad():
        results = generator.generate([model], sample)
    return [(result[0]["tokens"] - 1).tolist() for result in results]


class FairseqLengthLimit(transformers.LogitsProcessor):
    """fairseq's rule at its length limit, for Hugging Face's generate: after
    ``max_len`` tokens only ``</s>`` remains, with its own log-probability
    (Hugging Face's ``forced_eos_token_id`` gives it 0)."""

    def __init__(self, max_len: int, eos: int):
        self.max_len, self.eos = max_len, eos

    def __call__(self, input_ids, scores):
        if input_ids.size(1) - 1 < self.max_len:  # without the start token
            return scores
        limited = torch.full_like(scores, -float("inf"))
        limited[:, self.eos] = scores[:, self.eos]
        return limited


def hf_hypotheses(hf_model, ids, mask, beam: int, max_len: int):
    with torch.no_grad():
        output = hf_model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=beam,
            do_sample=False,
            max_new_tokens=max_len + 1,
            early_stopping=True,
            length_penalty=1.0,
            suppress_tokens=[0],  # fairseq's generators never produce <pad>
            logits_processor=transformers.LogitsProcessorList([FairseqLengthLimit(max_len, eos=1)]),
        )
    hypotheses = []
    for row in output[:, 1:].tolist():  # without the start token
        hypotheses.append(row[: row.index(1) + 1] if 1 in row else row)
    return hypotheses


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_equal_hugging_face(imported, hf_model, beam):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch()
    max_len = 12
    ours = fairseq_hypotheses(model, task, ids, mask, beam, max_len)
    theirs = hf_hypotheses(hf_model, ids, mask, beam, max_len)
    assert ours == theirs


def test_incremental_decoding_equals_the_full_pass(imported):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch()
    tokens = torch.tensor([[2, 6, 10, 34, 41], [2, 8, 13, 2, 1]])
    with torch.no_grad():
        encoder_out = model.encoder(ids + 1, mask.sum(1))
        full, _ = model.decoder(tokens, encoder_out)
        state = {}
        steps = [model.decoder(tokens[:, : step + 1], encoder_out, incremental_state=state)[0]
                 for step in range(tokens.size(1))]  # fmt: skip
    assert_close_in_dtype(torch.cat(steps, dim=1), full)


def real_lines():
    files = sorted(glob.glob(os.path.join(SHARED_DATA, "multi_xscience", "jsonl", "*.jsonl")))
    if not files:
        pytest.skip(f"{SHARED_DATA}/multi_xscience is not there")
    with open(files[0]) as handle:
        clusters = [json.loads(line) for _index, line in zip(range(3), handle)]
    return [cluster["summary"] for cluster in clusters] + [cluster["documents"][0][:500] for cluster in clusters]


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


def copy_of(hf_folder: str, tmp_path, config_edit=None, drop_tensor=None) -> str:
    import shutil

    from safetensors.torch import load_file, save_file

    folder = str(tmp_path / "hf_copy")
    shutil.copytree(hf_folder, folder)
    if config_edit:
        path = os.path.join(folder, "config.json")
        config = json.load(open(path))
        config.update(config_edit)
        json.dump(config, open(path, "w"))
    if drop_tensor:
        path = os.path.join(folder, "model.safetensors")
        state = load_file(path)
        del state[drop_tensor]
        save_file(state, path)
    return folder


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
