"""PEGASUS (``pegasus``, :mod:`mdsfair.models.pegasus`) against Hugging
Face's ``PegasusForConditionalGeneration``: a tiny random model and a tiny
SentencePiece model saved as the Hub stores them, imported with
``mdsfair-import hf-pegasus``, give the same teacher-forced logits in float64
on a padded batch, the same greedy and beam-search outputs, and the same
token ids on real text; exported back with ``mdsfair-export hf-pegasus``,
Hugging Face loads the same model; incremental decoding equals the full
pass; the model contract runs on ``pegasus_tiny`` and on its combinations
with the seeds' components, and the position components PEGASUS cannot use
are refused with the reason."""

import json
import os

import pytest
import torch

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.hf_t5_family import hf_hypotheses, real_lines
from tests.tolerances import assert_close_in_dtype

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

#: A few lines to train the tiny SentencePiece model on (real text then meets unknown characters).
TRAINING_LINES = [
    "The storm closed schools across the region on Monday, officials said.",
    "Several reports describe the same event from different sides.",
    "The minister announced a plan to rebuild the damaged bridges.",
    "Residents were asked to stay at home until the roads reopen.",
    "A summary keeps what the articles agree on and drops the rest.",
] * 4
#: SentencePiece pieces of the tiny model.
PIECES = 72
#: The pieces after PEGASUS's 103 special ids, and 3 unnamed embedding rows.
VOCAB_ROWS = PIECES + 103 + 3


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A tiny PEGASUS with random weights, its spiece.model and tokenizer files."""
    folder = str(tmp_path_factory.mktemp("hf_pegasus"))
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_LINES),
        model_prefix=os.path.join(folder, "spiece"),
        vocab_size=PIECES,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        minloglevel=2,
    )
    transformers.PegasusTokenizer.from_pretrained(folder).save_pretrained(folder)
    config = transformers.PegasusConfig(
        vocab_size=VOCAB_ROWS,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="relu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        forced_eos_token_id=None,
    )
    torch.manual_seed(0)
    model = transformers.PegasusForConditionalGeneration(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:  # layer norms away from 1, a spread of logits
                parameter.add_(0.2 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def imported(hf_folder, tmp_path_factory):
    from fairseq import checkpoint_utils

    from mdsfair.importers.hf_pegasus import import_hf_pegasus

    out_dir = str(tmp_path_factory.mktemp("imported_pegasus"))
    summary = import_hf_pegasus(hf_folder, out_dir, overwrite=True)
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(out_dir, "model.pt")], arg_overrides={"data": out_dir}
    )
    return summary, models[0].double().eval(), task, out_dir


@pytest.fixture(scope="module")
def hf_model(hf_folder):
    return transformers.PegasusForConditionalGeneration.from_pretrained(hf_folder).double().eval()


def to_fairseq(ids: torch.Tensor) -> torch.Tensor:
    from mdsfair.importers.hf_pegasus import fairseq_index

    return ids.clone().apply_(fairseq_index)


def fairseq_rows() -> torch.Tensor:
    """The fairseq index of every Hugging Face id, in id order."""
    return to_fairseq(torch.arange(VOCAB_ROWS))


def to_hf(tokens) -> list:
    order = fairseq_rows().tolist()
    return [order.index(token) for token in tokens]


def padded_batch():
    """Two Hugging Face sources of different lengths, right-padded with 0
    (tokens from the pieces, <unk> 105 and <mask_1> 2 among them), and their mask."""
    generator = torch.Generator().manual_seed(1)
    lengths = [23, 15]
    ids = torch.zeros(2, max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(103, VOCAB_ROWS, (length - 1,), generator=generator)
        ids[row, length - 1] = 1
    ids[0, 3], ids[1, 2] = 2, 105
    return ids, ids.ne(0).long()


def test_the_import_writes_a_pegasus_checkpoint_and_dictionary(imported, hf_folder):
    summary, _model, task, out_dir = imported
    dictionary = task.target_dictionary
    assert summary["arch"] == "pegasus_large"  # the sizes as flags
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()) == (0, 1, 2, 3)
    assert dictionary[4] == "<mask_2>" and dictionary[5] == "<unk_2>" and dictionary[105] == "<unk_102>"
    assert dictionary[106] == "<mask_1>"  # exchanged with <unk> (Hugging Face id 105)
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(out_dir, "spm.model"))
    assert dictionary.index(processor.id_to_piece(3)) == 3 + 103 + 1  # piece i at id i + 103, one place up
    assert len(dictionary) == VOCAB_ROWS + 1 and dictionary[VOCAB_ROWS] == "madeupword0002"
    assert json.load(open(os.path.join(out_dir, "mdsfair.json")))["subword"]["type"] == "sentencepiece"


def test_teacher_forced_logits_equal_hugging_face_in_float64(imported, hf_model):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch()
    targets = torch.tensor([[110, 140, 133, 2, 1, 0], [170, 105, 1, 0, 0, 0]])
    decoder_input = torch.cat([torch.zeros(2, 1, dtype=torch.long), targets[:, :-1]], dim=1)
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        prev_output_tokens = to_fairseq(decoder_input)
        prev_output_tokens[:, 0] = task.target_dictionary.eos()  # fairseq's collater starts targets with </s>
        logits, _ = model(to_fairseq(ids), mask.sum(1), prev_output_tokens)
    rows = fairseq_rows()
    # float64 models; fairseq's cross-attention takes its softmax in float32 (contract_checks.close_in_model_dtype)
    for row, length in enumerate(targets.ne(0).sum(1).tolist()):  # the positions that read no padding
        assert checks.close_in_model_dtype(logits[row, :length, rows], expected[row, :length])
    # fairseq's <s> (no PEGASUS token): e^-100 times the least likely token's probability
    probabilities = torch.softmax(logits, -1)
    assert torch.all(probabilities[..., 0] <= torch.exp(torch.tensor(-99.0)) * probabilities[..., 1:].min(-1).values)
    # the source left-padded, as fairseq's data sets pad it: the positions count the tokens, not the padding
    left = torch.ones_like(ids)  # fairseq's <pad>
    for row, length in enumerate(mask.sum(1).tolist()):
        left[row, ids.size(1) - length :] = to_fairseq(ids[row, :length])
    with torch.no_grad():
        left_logits, _ = model(left, mask.sum(1), prev_output_tokens)
    assert checks.close_in_model_dtype(left_logits, logits)


def fairseq_hypotheses(model, task, ids, mask, beam: int, max_len: int):
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_a=0, max_len_b=max_len,
                                  min_len=0)  # fmt: skip
    sample = {"net_input": {"src_tokens": to_fairseq(ids), "src_lengths": mask.sum(1)}}
    with torch.no_grad():
        results = generator.generate([model], sample)
    return [to_hf(result[0]["tokens"].tolist()) for result in results]


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_equal_hugging_face(imported, hf_model, beam):
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch()
    max_len = 12
    ours = fairseq_hypotheses(model, task, ids, mask, beam, max_len)
    assert ours == hf_hypotheses(hf_model, ids, mask, beam, max_len)


def test_incremental_decoding_equals_the_full_pass(imported):
    _summary, model, _task, _out_dir = imported
    ids, mask = padded_batch()
    tokens = torch.tensor([[2, 106, 120, 134, 141], [2, 108, 3, 2, 1]])
    with torch.no_grad():
        encoder_out = model.encoder(to_fairseq(ids), mask.sum(1))
        full, _ = model.decoder(tokens, encoder_out)
        state = {}
        steps = [model.decoder(tokens[:, : step + 1], encoder_out, incremental_state=state)[0]
                 for step in range(tokens.size(1))]  # fmt: skip
    incremental = torch.cat(steps, dim=1)  # (a step's self-attention softmax is fairseq's float32 one)
    assert checks.close_in_model_dtype(incremental[:, :4], full[:, :4])
    assert checks.close_in_model_dtype(incremental[0], full[0])  # (row 1's last token is padding)


def test_the_hub_encodes_a_cluster_as_the_hugging_face_tokenizer(imported, hf_folder):
    """The hub on the imported folder (its spm.model, dict.txt and manifest)
    gives a one-document cluster PEGASUS's ids in the dictionary's order
    (unknown characters PEGASUS's <unk>), without </s> (the data set appends it)."""
    import mdsfair
    from mdsfair.models.pegasus import PegasusModel

    _summary, _model, _task, out_dir = imported
    mdsfair.register()
    hub = PegasusModel.from_pretrained(out_dir, checkpoint_file="model.pt")
    hf_tokenizer = transformers.PegasusTokenizer.from_pretrained(hf_folder)
    unknown = 0
    for text in real_lines():
        expected = hf_tokenizer(text).input_ids
        assert expected[-1] == 1
        tokens = hub.encode_cluster({"id": "pegasus", "documents": [text], "summary": ""}).tokens.tolist()
        assert to_hf(tokens) == expected[:-1], text[:80]
        unknown += expected.count(105)
    assert unknown > 0  # the tiny vocabulary meets characters it does not know


def test_export_round_trip_loads_in_hugging_face_with_the_same_logits(imported, hf_folder, hf_model, tmp_path):
    from mdsfair.importers.cli import export_main

    _summary, _model, _task, out_dir = imported
    exported = str(tmp_path / "exported")
    assert export_main(["hf-pegasus", os.path.join(out_dir, "model.pt"), os.path.join(out_dir, "dict.txt"),
                        exported]) == 0  # fmt: skip
    reloaded = transformers.PegasusForConditionalGeneration.from_pretrained(exported).double().eval()
    ids, mask = padded_batch()
    decoder_input = torch.tensor([[0, 110, 140, 2], [0, 170, 105, 1]])
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        actual = reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
    assert_close_in_dtype(actual, expected)  # (the position tables: float32 sinusoids computed twice)
    original = transformers.PegasusTokenizer.from_pretrained(hf_folder)
    tokenizer = transformers.PegasusTokenizer.from_pretrained(exported)
    for text in TRAINING_LINES[:5] + ["a line with characters it has never seen: 42 [0] éß"]:
        assert tokenizer(text).input_ids == original(text).input_ids


def test_the_command_refuses_a_model_that_is_not_pegasus(hf_folder, tmp_path, capsys):
    import shutil

    from mdsfair.importers.cli import import_main

    source = str(tmp_path / "not_pegasus")
    shutil.copytree(hf_folder, source)
    path = os.path.join(source, "config.json")
    config = json.load(open(path))
    config["decoder_start_token_id"] = 1
    json.dump(config, open(path, "w"))
    out_dir = str(tmp_path / "out")
    assert import_main(["hf-pegasus", source, out_dir]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("mdsfair-import hf-pegasus: error: ") and "decoder_start_token_id=1" in error
    assert not os.path.exists(os.path.join(out_dir, "model.pt"))


@pytest.fixture(scope="module")
def contract_data(tmp_path_factory):
    return contract.make_contract_data(str(tmp_path_factory.mktemp("pegasus_contract")))


def test_the_contract_checks_on_pegasus_tiny_in_float64(contract_data, tmp_path):
    checks.check_the_contract_in_float64("pegasus_tiny", contract_data, str(tmp_path / "checkpoint.pt"))


@pytest.mark.parametrize(
    "flags, family",
    [
        (("--encoder-self-attention", "document", "--cross-attention", "document-scaled"), contract.SUMMARIZER),
        (("--cross-attention", "sparse"), contract.SPARSE_SUMMARIZER),
    ],
    ids=["hierencdec-attention", "sparse-cross-attention"],
)
def test_the_seeds_components_combine_with_pegasus(contract_data, flags, family):
    """HierEncDec's document attention with its document-scaled
    cross-attention, and the sparse cross-attention (trained with its KL
    task), on PEGASUS: padding and batch composition change no output, and a
    beam search scores every hypothesis as the full pass does."""
    built = contract.ContractModel("pegasus_tiny", contract_data, *flags, model_family=family)
    model = built.build_model().double().eval()
    checks.perturb_parameters(model, seed=0)
    checks.check_forward_shapes_padding_and_batch_composition(built, model)
    checks.check_incremental_beam_search_equals_full_decoding(built, model)


@pytest.mark.parametrize("positions", ["document-restart", "learned", "document-aware", "sinusoidal"])
def test_position_components_pegasus_cannot_use_are_refused(contract_data, positions):
    built = contract.ContractModel("pegasus_tiny", contract_data, "--encoder-positions", positions)
    with pytest.raises(ValueError, match=f"--encoder-positions {positions} cannot be used with the pegasus"):
        built.build_model()
