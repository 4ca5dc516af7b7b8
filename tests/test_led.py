"""LED / PRIMERA (``mdsfair/models/led.py``) and Longformer self-attention
(``mdsfair/modules/longformer_attention.py``).

* the banded attention equals a dense masked reference (test-only, below)
  for every window 2..16, lengths that are not multiples of the window,
  padding, global tokens at the start, middle and next to padding;
* its largest intermediate tensor is O(n * w), never n x n (a
  ``TorchDispatchMode`` records every tensor an op makes; the same probe
  catches the dense reference);
* float16 / bfloat16 run and stay close to float32;
* the model equals Hugging Face's own ``LEDForConditionalGeneration`` (tiny
  random configuration built here, weights copied with
  :func:`mdsfair.modules.led_parameter_map.led_state_dict_from_hf`): teacher-forced logits
  to 1e-5 for right- and left-padded batches, ``first``, ``doc-sep`` and
  ``documents`` global attention, windows 4..16, one per layer (Hugging Face
  pads to the largest window only, so a layer's window must divide it; Hugging Face's own
  ``_sliding_chunks_query_key_matmul`` fails for window 2, where its slice
  ``1 - window_overlap:`` is ``0:``; window 2 is checked against the dense
  reference, :func:`test_hugging_face_fails_at_window_2` keeps the fact); and the best beam equals
  Hugging Face's ``generate`` (beam 4, length penalty, min/max length,
  ``no_repeat_ngram_size`` 3) on 4 sources.
"""

import argparse

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mdsfair.models.led import LEDModel
from mdsfair.modules.led_parameter_map import led_state_dict_from_hf
from mdsfair.modules.longformer_attention import IMPLEMENTATIONS, LongformerSelfAttention
from mdsfair.modules.self_attention_components import global_attention_mask, parse_attention_window
from tests.import_fixtures import import_transformers
from tests.tolerances import assert_close_in_dtype

# ------------------------------------------------------------- attention


def dense_reference(attention: LongformerSelfAttention, x, padding, is_global):
    """Longformer attention as one masked T x T softmax (test only): a local
    query sees keys within w/2 that are neither padding nor global, plus every
    global key (local projections); a global query sees every non-padding key
    through the global projections; padding queries output zero before the
    output projection."""
    length, batch_size, dim = x.shape
    hidden = x.transpose(0, 1)
    positions = torch.arange(length)
    band = (positions[:, None] - positions[None, :]).abs() <= attention.one_sided_window
    allowed = (band[None] & ~(padding | is_global)[:, None, :]) | is_global[:, None, :]
    query = attention.heads(attention.q_proj(hidden) * attention.scaling)
    key, value = attention.heads(attention.k_proj(hidden)), attention.heads(attention.v_proj(hidden))
    local = (query @ key.transpose(-1, -2)).masked_fill(~allowed[:, None], float("-inf")).softmax(-1).nan_to_num(
        0.0
    ) @ value
    global_query = attention.heads(attention.q_global_proj(hidden) * attention.scaling)
    global_key = attention.heads(attention.k_global_proj(hidden))
    global_value = attention.heads(attention.v_global_proj(hidden))
    scores = (global_query @ global_key.transpose(-1, -2)).masked_fill(padding[:, None, None, :], float("-inf"))
    output = torch.where(is_global[:, None, :, None], scores.softmax(-1) @ global_value, local)
    output = output.masked_fill(padding[:, None, :, None], 0.0).transpose(1, 2).reshape(batch_size, length, dim)
    return attention.out_proj(output).transpose(0, 1)


def attention_inputs(length, batch_size=3, dim=16, dtype=torch.double, seed=0):
    """Row 0: global first and last token; row 1: right padding, a global
    token in the middle and one right before the padding; row 2: left padding,
    global first real token; so globals sit at the start, middle and next to padding."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(length, batch_size, dim, generator=generator, dtype=dtype)
    padding = torch.zeros(batch_size, length, dtype=torch.bool)
    is_global = torch.zeros(batch_size, length, dtype=torch.bool)
    cut = max(1, length // 3)
    if length > 3:
        padding[1, length - cut :] = True
        padding[2, :cut] = True
    is_global[0, 0] = is_global[0, length - 1] = True
    is_global[1, length // 2] = True
    is_global[1, max(0, length - cut - 1)] = True
    is_global[2, cut if length > 3 else 0] = True
    return x, padding, is_global & ~padding


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("window", [2, 4, 6, 8, 10, 16])
@pytest.mark.parametrize("length", [1, 3, 7, 13, 37])
def test_banded_attention_equals_dense_reference(window, length, implementation):
    torch.manual_seed(window)
    attention = LongformerSelfAttention(16, 2, window, implementation=implementation).double()
    x, padding, is_global = attention_inputs(length)
    expected = dense_reference(attention, x, padding, is_global)
    torch.testing.assert_close(attention(x, padding, is_global), expected, atol=1e-12, rtol=1e-12)
    # without global tokens and padding
    torch.testing.assert_close(
        attention(x),
        dense_reference(attention, x, torch.zeros_like(padding), torch.zeros_like(padding)),
        atol=1e-12,
        rtol=1e-12,
    )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_window_semantics_each_side_sees_half_the_window(implementation):
    """Window 4: token 10's output depends on tokens 8..12 and no other (a
    gradient probe), Hugging Face's attention_window meaning."""
    attention = LongformerSelfAttention(8, 1, 4, implementation=implementation).double()
    x = torch.randn(24, 1, 8, dtype=torch.double, requires_grad=True)
    attention(x)[10].sum().backward()
    touched = x.grad.abs().sum(dim=(1, 2)).nonzero().flatten().tolist()
    assert touched == [8, 9, 10, 11, 12]


def test_attention_window_must_be_even_and_positive():
    with pytest.raises(ValueError, match="positive even"):
        LongformerSelfAttention(8, 2, 3)
    with pytest.raises(ValueError, match="positive even"):
        LongformerSelfAttention(8, 2, 0)
    assert parse_attention_window("4", 3) == [4, 4, 4]
    assert parse_attention_window("2,4", 2) == [2, 4]
    with pytest.raises(ValueError, match="3 windows for 2 encoder layers"):
        parse_attention_window("2,4,6", 2)
    with pytest.raises(ValueError, match="even"):
        parse_attention_window("2,5", 2)


class LargestTensor(TorchDispatchMode):
    """Records the element count of the largest tensor any op returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(output):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return output


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_memory_is_linear_in_length_never_n_by_n(implementation):
    """n = 2,048, window 16, batch 3, 2 heads of 8: every tensor the banded
    attention makes is O(B * n * (w + d)) elements (far below B * n^2 = 12.6M),
    and doubling n at most doubles it. The same probe sees the dense reference's n x n
    scores, so it can fail."""
    attention = LongformerSelfAttention(16, 2, 16, implementation=implementation).float()

    def largest(length, function):
        x, padding, is_global = attention_inputs(length, dtype=torch.float)
        with torch.no_grad(), LargestTensor() as probe:
            function(attention, x, padding, is_global)
        return probe.largest

    def banded(module, x, padding, is_global):
        return module(x, padding, is_global)

    short, long = largest(1024, banded), largest(2048, banded)
    assert long <= 2 * short + 64
    assert long < 3 * 2048 * 2048 / 8, long
    assert largest(2048, dense_reference) >= 3 * 2048 * 2048


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_runs_and_is_close_to_float32(dtype, implementation):
    torch.manual_seed(0)
    attention = LongformerSelfAttention(16, 2, 6, implementation=implementation)
    x, padding, is_global = attention_inputs(29, dtype=torch.float)
    expected = attention(x, padding, is_global)
    got = attention.to(dtype)(x.to(dtype), padding, is_global)
    assert got.dtype == dtype and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), expected, atol=0.05, rtol=0.05)


# ----------------------------------------------------- against Hugging Face

VOCAB = 64
SEPARATOR = VOCAB - 1  # "<doc-sep>" in the dictionary below


@pytest.fixture(scope="module")
def transformers():
    return import_transformers()


class StubTask:
    """What ``LEDModel.build_model`` reads of a task."""

    def __init__(self, dictionary):
        self.source_dictionary = self.target_dictionary = dictionary

    def document_separator(self):
        return self.source_dictionary.index("<doc-sep>")


def led_dictionary():
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for index in range(len(dictionary), VOCAB - 1):
        dictionary.add_symbol(f"w{index}")
    assert dictionary.add_symbol("<doc-sep>") == SEPARATOR
    return dictionary


def hf_and_ours(transformers, windows, global_attention="first", seed=0, eos_boost=1.0):
    """A tiny random Hugging Face LED and our model with its weights
    (``eos_boost`` scales the </s> embedding row, which the tied output
    projection shares, so that random models end their summaries)."""
    config = transformers.LEDConfig(
        vocab_size=VOCAB,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_encoder_position_embeddings=96,
        max_decoder_position_embeddings=40,
        attention_window=list(windows),
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_function="gelu",
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_bos_token_id=None,
    )
    torch.manual_seed(seed)
    hf = transformers.LEDForConditionalGeneration(config).eval()
    with torch.no_grad():  # larger than HF's init (std 0.02) so that every part moves the logits
        for name, parameter in hf.named_parameters():
            if "layer_norm" not in name and "layernorm" not in name:
                parameter.normal_(0, 0.3)
        hf.led.shared.weight[2] *= eos_boost
    args = argparse.Namespace(
        arch="led_tiny",
        task="multidoc_summarization",
        attention_window=",".join(map(str, windows)),
        global_attention=global_attention,
        max_encoder_positions=96,
        max_source_positions=96,
        max_target_positions=40,
        encoder_layers=2,
        decoder_layers=2,
        encoder_embed_dim=16,
        decoder_embed_dim=16,
        encoder_ffn_embed_dim=32,
        decoder_ffn_embed_dim=32,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        relu_dropout=0.0,
    )
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY["led_tiny"](args)
    model = LEDModel.build_model(args, StubTask(led_dictionary())).eval()
    mapped = led_state_dict_from_hf(hf.state_dict())
    own = model.state_dict()
    assert set(own) - set(mapped) == {"encoder.version", "decoder.version"}
    assert not set(mapped) - set(own)
    own.update(mapped)
    model.load_state_dict(own)
    return hf, model


def source_batch(lengths, separators=(), seed=1, left_pad=False):
    """Sources ``<s> ... </s>`` of the given lengths, right- (HF) and
    optionally left-padded (fairseq), with ``<doc-sep>`` at ``separators``
    (``(row, position)``)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    right = torch.full((len(lengths), width), 1, dtype=torch.long)
    for row, length in enumerate(lengths):
        right[row, :length] = torch.randint(4, SEPARATOR, (length,), generator=generator)
        right[row, 0], right[row, length - 1] = 0, 2
    for row, position in separators:
        right[row, position] = SEPARATOR
    mask = right.ne(1).long()
    if not left_pad:
        return right, mask, right
    left = torch.full_like(right, 1)
    for row, length in enumerate(lengths):
        left[row, width - length :] = right[row, :length]
    return right, mask, left


def target_batch(lengths, seed=2):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.full((len(lengths), max(lengths)), 1, dtype=torch.long)
    for row, length in enumerate(lengths):
        labels[row, :length] = torch.randint(4, SEPARATOR, (length,), generator=generator)
        labels[row, length - 1] = 2
    decoder_input = torch.cat([torch.full((len(lengths), 1), 2), labels[:, :-1]], dim=1)
    decoder_input = decoder_input.masked_fill(decoder_input.eq(1), 1)
    return labels, decoder_input


@pytest.mark.parametrize("windows", [(4, 4), (6, 6), (4, 8), (16, 8)])
@pytest.mark.parametrize("left_pad", [False, True])
def test_teacher_forced_logits_equal_hugging_face_first(transformers, windows, left_pad):
    """Source lengths 23, 9, 31 (not multiples of any window), batch 3 with
    padding; global attention on the first token."""
    hf, model = hf_and_ours(transformers, windows)
    right, mask, ours_source = source_batch([23, 9, 31], left_pad=left_pad)
    labels, decoder_input = target_batch([7, 11, 5])
    global_mask = torch.zeros_like(right)
    global_mask[:, 0] = 1
    assert global_attention_mask(ours_source, 1, "first").long().sum(1).tolist() == [1, 1, 1]
    with torch.no_grad():
        expected = hf(
            input_ids=right, attention_mask=mask, global_attention_mask=global_mask, decoder_input_ids=decoder_input
        ).logits
        logits, _ = model(ours_source, mask.sum(1), decoder_input)
    real = labels.ne(1)
    assert expected[real].std() > 0.5  # the comparison is not between near-constant logits
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])
    # --longformer-attention banded computes the same
    for module in model.modules():
        if isinstance(module, LongformerSelfAttention):
            assert module.implementation == "fused"
            module.implementation = "banded"
    with torch.no_grad():
        banded, _ = model(ours_source, mask.sum(1), decoder_input)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(banded[real], expected[real])


@pytest.mark.parametrize("windows", [(4, 12), (6, 6), (8, 16)])
def test_teacher_forced_logits_equal_hugging_face_doc_sep(transformers, windows):
    """``doc-sep``: the first token and every <doc-sep> are global: in the
    middle, right before </s> and padding, and two in a row."""
    hf, model = hf_and_ours(transformers, windows, "doc-sep")
    separators = [(0, 8), (0, 15), (0, 21), (1, 4), (1, 7), (1, 8), (2, 17), (2, 29)]
    right, mask, _ = source_batch([23, 10, 31], separators)
    labels, decoder_input = target_batch([7, 11, 5])
    global_mask = (right.eq(SEPARATOR) | torch.arange(right.size(1)).eq(0)).long() * mask
    ours_mask = global_attention_mask(right, 1, "doc-sep", SEPARATOR)
    assert ours_mask.long().equal(global_mask) and global_mask.sum().item() == 11
    with torch.no_grad():
        expected = hf(
            input_ids=right, attention_mask=mask, global_attention_mask=global_mask, decoder_input_ids=decoder_input
        ).logits
        logits, _ = model(right, mask.sum(1), decoder_input)
        # the same model with only the first token global computes something else
        model.encoder.self_attention_component.global_attention = "first"
        first_only, _ = model(right, mask.sum(1), decoder_input)
    real = labels.ne(1)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])
    assert (first_only[real] - expected[real]).abs().max() > 1e-2


def test_teacher_forced_logits_equal_hugging_face_documents(transformers):
    """``documents``: the first token of every document of ``src_doc_ids``
    (left-padded here, -1 at padding)."""
    hf, model = hf_and_ours(transformers, (4, 4), "documents")
    right, mask, left = source_batch([23, 10, 31], left_pad=True)
    starts = {0: [0, 6, 14], 1: [0, 3], 2: [0, 20]}
    doc_ids = torch.full_like(left, -1)
    global_mask = torch.zeros_like(right)
    width = right.size(1)
    for row, length in enumerate([23, 10, 31]):
        ids = torch.zeros(length, dtype=torch.long)
        for start in starts[row][1:]:
            ids[start:] += 1
        doc_ids[row, width - length :] = ids
        global_mask[row, starts[row]] = 1
    labels, decoder_input = target_batch([7, 11, 5])
    assert global_attention_mask(left, 1, "documents", src_doc_ids=doc_ids).sum().item() == 7
    with torch.no_grad():
        expected = hf(
            input_ids=right, attention_mask=mask, global_attention_mask=global_mask, decoder_input_ids=decoder_input
        ).logits
        logits, _ = model(left, mask.sum(1), decoder_input, src_doc_ids=doc_ids)
    real = labels.ne(1)
    # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
    assert_close_in_dtype(logits[real], expected[real])
    with pytest.raises(ValueError, match="src_doc_ids"):
        model(left, mask.sum(1), decoder_input)


def test_hugging_face_fails_at_window_2(transformers):
    """Why the comparisons with Hugging Face start at window 4."""
    hf, _ = hf_and_ours(transformers, (2, 2))
    right, mask, _ = source_batch([23, 9])
    with pytest.raises(RuntimeError):
        hf(input_ids=right, attention_mask=mask, decoder_input_ids=right[:, :3])


def test_led_state_dict_from_hf_refuses_bias_and_foreign_weights(transformers):
    hf, _ = hf_and_ours(transformers, (4, 4))
    state = hf.state_dict()
    state["final_logits_bias"] = torch.ones_like(state["final_logits_bias"])
    with pytest.raises(ValueError, match="final_logits_bias"):
        led_state_dict_from_hf(state)
    state = hf.state_dict()
    state["led.pooler.weight"] = torch.zeros(2)
    with pytest.raises(ValueError, match="led.pooler.weight"):
        led_state_dict_from_hf(state)


@pytest.mark.parametrize("lenpen", [1.0, 2.0])
def test_best_beam_equals_hugging_face_generate(transformers, lenpen):
    """Beam 4, the same length penalty, min/max length and
    no_repeat_ngram_size 3 on 4 sources (right padding, global first token).
    As tests/test_import_hf_bart.py aligns them: fairseq's decoder starts
    with </s> = HF's decoder_start_token_id; HF's forced BOS is off (fairseq
    has none); fairseq counts lengths without the start token and with </s>
    (min_len = HF min_length - 1, max_len_b = HF max_length - 2); HF never
    emits <pad>, which fairseq forbids."""
    from fairseq.sequence_generator import SequenceGenerator

    from mdsfair.generation.sequence_generator import use_vectorized_ngram_blocker

    hf, model = hf_and_ours(transformers, (4, 8), seed=3, eos_boost=2.0)
    right, mask, _ = source_batch([23, 9, 31, 17], seed=5)
    min_len, max_len = 4, 30

    def beam_search(no_repeat_ngram_size):
        generator = use_vectorized_ngram_blocker(
            SequenceGenerator(
                [model],
                model.decoder.dictionary,
                beam_size=4,
                max_len_a=0,
                max_len_b=max_len,
                min_len=min_len,
                len_penalty=lenpen,
                no_repeat_ngram_size=no_repeat_ngram_size,
            )
        )
        return generator.generate([model], {"net_input": {"src_tokens": right, "src_lengths": mask.sum(1)}})

    ours = beam_search(3)
    global_mask = torch.zeros_like(right)
    global_mask[:, 0] = 1
    theirs = hf.generate(
        input_ids=right,
        attention_mask=mask,
        global_attention_mask=global_mask,
        num_beams=4,
        length_penalty=lenpen,
        min_length=min_len + 1,
        max_length=max_len + 2,
        early_stopping=True,
        no_repeat_ngram_size=3,
        suppress_tokens=[1],
        do_sample=False,
        forced_bos_token_id=None,
        forced_eos_token_id=2,
        return_dict_in_generate=True,
        output_scores=True,
    )
    lengths = []
    for index, hypotheses in enumerate(ours):
        expected = theirs.sequences[index].tolist()[1:]
        expected = expected[: expected.index(2) + 1] if 2 in expected else expected
        assert hypotheses[0]["tokens"].tolist() == expected
        # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
        assert_close_in_dtype(hypotheses[0]["score"], theirs.sequences_scores[index])
        lengths.append(len(expected))
    assert len(set(map(tuple, theirs.sequences.tolist()))) > 1  # not one summary for every source
    assert max(lengths) < max_len + 1, lengths  # the summaries end by themselves
    unblocked = beam_search(0)
    assert any(a[0]["tokens"].tolist() != b[0]["tokens"].tolist() for a, b in zip(ours, unblocked))


# ------------------------------------------------- fairseq-train / generate / hub


@pytest.fixture(scope="module")
def primera_run(tmp_path_factory, contract_data):
    """``fairseq-train --arch primera`` (tiny dims, window 8,
    ``--checkpoint-activations``) for 2 updates on the contract's data-bin,
    whose dictionary has ``<doc-sep>``."""
    import os

    from tests.model_contract import tiny_flags
    from tests.utils import USER_DIR, fairseq_cli

    work = tmp_path_factory.mktemp("primera")
    data_bin = contract_data["data-bin"]
    save_dir = str(work / "checkpoints")
    output = fairseq_cli(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "primera",
            *tiny_flags("primera"),
            "--attention-window",
            "8",
            "--max-source-positions",
            "256",
            "--max-target-positions",
            "128",
            "--checkpoint-activations",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
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
    assert "done training" in output
    return {"data_bin": data_bin, "checkpoint": os.path.join(save_dir, "checkpoint_last.pt"), "work": str(work)}


def test_primera_trains_and_its_checkpoint_keeps_the_layout_and_global_attention(primera_run):
    state = torch.load(primera_run["checkpoint"], map_location="cpu", weights_only=False)
    model_cfg, task_cfg = state["cfg"]["model"], state["cfg"]["task"]
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert model_cfg.arch == "primera" and model_cfg.global_attention == "doc-sep"
    assert model_cfg.attention_window == "8" and model_cfg.max_encoder_positions == 4096
    assert model_cfg.checkpoint_activations
    assert task_cfg["source_layout"] == "primera"
    assert any(key.endswith("self_attn.q_global_proj.weight") for key in state["model"])


def test_generate_and_hub_decode_with_the_trained_global_attention(primera_run):
    """``fairseq-generate --path`` summarizes every valid cluster; the hub
    entry ``led`` rebuilds the model with the checkpoint's doc-sep global
    attention and the dictionary's <doc-sep> id."""
    import os

    from tests.utils import REPO_ROOT, USER_DIR, generate_in_process

    generated = generate_in_process(
        [
            primera_run["data_bin"],
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--source-layout",
            "primera",
            "--path",
            primera_run["checkpoint"],
            "--gen-subset",
            "valid",
            "--batch-size",
            "4",
            "--beam",
            "2",
            "--max-len-b",
            "8",
            "--min-len",
            "2",
            "--no-repeat-ngram-size",
            "3",
            "--cpu",
        ],
        results_dir=os.path.join(primera_run["work"], "generate"),
    )
    hypotheses = [line for line in generated.splitlines() if line.startswith("H-")]
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == [0, 1, 2, 3]

    hub = torch.hub.load(
        REPO_ROOT,
        "led",
        model_dir=os.path.dirname(primera_run["checkpoint"]),
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=primera_run["data_bin"],
        source="local",
    )
    encoder = hub.models[0].encoder
    assert (
        encoder.self_attention_component.global_attention == "doc-sep"
        and encoder.self_attention_component.windows == [8, 8]
    )
    assert (
        encoder.self_attention_component.document_separator
        == hub.task.source_dictionary.index("<doc-sep>")
        != hub.task.source_dictionary.unk()
    )


PRIMERA_GENERATE = [
    "--task",
    "multidoc_summarization",
    "--gen-subset",
    "valid",
    "--batch-size",
    "4",
    "--beam",
    "2",
    "--max-len-b",
    "8",
    "--min-len",
    "2",
    "--cpu",
    "--max-source-positions",
    "40",
]


def test_primera_checkpoint_on_a_data_bin_without_primera_layout_is_refused(primera_run, tmp_path):
    """fairseq-generate builds its task from its own command line: a doc-sep
    (PRIMERA) checkpoint on a data-bin that records no PRIMERA layout, with
    no --source-layout, stops at once naming the flags to add (it decoded
    with no <doc-sep> and only <s> global, without a word)."""

    from tests.utils import USER_DIR, generate_in_process

    with pytest.raises(
        ValueError,
        match=r"--global-attention doc-sep.*source layout is 'documents'.*Add "
        r"--source-layout primera --per-document-budget.*mdsfair-preprocess "
        r"--source-layout primera",
    ):
        generate_in_process(
            [primera_run["data_bin"], "--user-dir", USER_DIR, "--path", primera_run["checkpoint"], *PRIMERA_GENERATE],
            results_dir=str(tmp_path / "refused"),
        )


def test_primera_data_bin_decodes_as_the_task_flags_do(primera_run, contract_data, tmp_path):
    """A data-bin written with mdsfair-preprocess --source-layout primera
    (the dictionary's <doc-sep> recorded) gives fairseq-generate PRIMERA's
    layout and per-document truncation without task flags: the same sources,
    and hypotheses as --source-layout primera --per-document-budget, and
    not those of the old data-bin with --source-layout primera alone
    (no per-document truncation)."""
    import os

    from mdsfair.preprocess.binarize import run
    from mdsfair.preprocess.subword import SPM_MODEL_NAME
    from tests.utils import USER_DIR, generate_in_process

    plain = primera_run["data_bin"]
    data_bin = str(tmp_path / "primera-bin")
    run(
        [
            "--input-dir",
            contract_data["raw"],
            "--destdir",
            data_bin,
            "--spm-model",
            os.path.join(plain, SPM_MODEL_NAME),
            "--dict",
            os.path.join(plain, "dict.txt"),
            "--source-layout",
            "primera",
            "--no-progress-bar",
        ]
    )

    def generate(name, *flags, data=data_bin):
        text = generate_in_process(
            [data, "--user-dir", USER_DIR, "--path", primera_run["checkpoint"], *PRIMERA_GENERATE, *flags],
            results_dir=str(tmp_path / name),
        )
        return sorted(line for line in text.splitlines() if line[:2] in ("S-", "H-"))

    recorded = generate("recorded")
    assert recorded == generate("flags", "--source-layout", "primera", "--per-document-budget")
    sources = [line for line in recorded if line.startswith("S-")]
    assert len(sources) == 4 and all(line.count("<doc-sep>") == 2 for line in sources)
    assert recorded != generate("layout-only", "--source-layout", "primera", data=plain)  # the recorded budget cuts
    with pytest.raises(ValueError, match=r"--source-layout documents contradicts the layout 'primera'"):
        generate("conflict", "--source-layout", "documents")


def test_position_budget_is_checked_against_the_encoder_table(transformers):
    """The task's --max-source-positions may not exceed
    --max-encoder-positions; a longer source is refused, not cut."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = argparse.Namespace(task="multidoc_summarization", max_source_positions=200, max_encoder_positions=96)
    ARCH_CONFIG_REGISTRY["led_tiny"](args)
    with pytest.raises(ValueError, match="--max-source-positions 200 exceeds .*--max-encoder-positions 96"):
        LEDModel.build_model(args, StubTask(led_dictionary()))
    _, model = hf_and_ours(transformers, (4, 4))
    too_long = torch.full((1, 97), 5)
    with pytest.raises(ValueError, match="97 tokens exceeds the encoder's 96 positions"):
        model.encoder(too_long)


@pytest.mark.parametrize(
    "arch, flags, expected",
    [
        ("led_tiny", ("--global-attention", "documents"), "documents"),
        ("primera", ("--attention-window", "8"), "doc-sep"),
    ],
)
def test_global_tokens_of_a_task_batch(contract_data, arch, flags, expected):
    """On batches of the multidoc_summarization task: ``documents`` makes the
    first token of every document global (from the batch's src_doc_ids),
    the primera architecture (PRIMERA's layout) <s> and every <doc-sep>, one
    per document; the encoder's global mask is the one its layers receive."""
    from tests import model_contract

    built = model_contract.ContractModel(arch, contract_data, *flags)
    model = built.build_model().eval()
    sample = built.batch("valid", [0, 1, 2, 3], model)
    net_input = sample["net_input"]
    tokens, doc_ids = net_input["src_tokens"], built.batch("valid", [0, 1, 2, 3])["net_input"]["src_doc_ids"]
    assert model.encoder.self_attention_component.global_attention == expected
    received = []
    hook = model.encoder.layers[0].register_forward_pre_hook(lambda module, args: received.append(args[2]))
    with torch.no_grad():
        model(**net_input)
    hook.remove()
    mask = received[0]
    real = tokens.ne(built.task.source_dictionary.pad())
    documents = torch.tensor([len(set(ids[ids >= 0].tolist())) for ids in doc_ids])
    if expected == "documents":
        assert mask.sum(1).equal(documents)
        starts = real & doc_ids.ne(torch.cat([doc_ids.new_full((len(doc_ids), 1), -1), doc_ids[:, :-1]], 1))
        assert mask.equal(starts)
    else:
        separator = built.task.document_separator()
        assert mask.sum(1).equal(documents + 1)
        assert mask.equal(real & (tokens.eq(separator) | tokens.eq(built.task.source_dictionary.bos())))
    assert not (mask & ~real).any() and mask[:, 0].all()
