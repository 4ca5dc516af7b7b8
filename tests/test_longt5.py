"""LongT5 (``longt5``, :mod:`mdsfair.models.longt5`; its encoder attention,
:mod:`mdsfair.modules.longt5_attention`) against Hugging Face's
``LongT5ForConditionalGeneration``, local and transient-global: tiny random
models with a tiny SentencePiece model saved as the Hub stores them,
imported with ``mdsfair-import hf-longt5``, give the same teacher-forced
logits in float64 on a padded batch of sources 10 local blocks and 10
global blocks long (radius 3, global blocks of 4), the same greedy and
beam-4 outputs, the same logits when fairseq pads the sources on the left;
the attention equals the paper's per-token definition (Guo et al. 2022,
Sec. 2.1.1-2.1.2); the softmax precision is the one the module states;
incremental decoding equals the full pass; the contract's checks run on
``longt5_tiny`` (transient-global) and ``longt5_local_tiny``; the
architectures are the releases'; the recipe's settings are the HierEncDec
paper's."""

import contextlib
import os
import re

import pytest
import torch
from torch import nn

from mdsfair.modules import longt5_attention
from tests import contract_checks as checks
from tests import model_contract as contract
from tests.hf_t5_family import (
    copy_of,
    fairseq_hypotheses,
    hf_hypotheses,
    imported_model,
    left_padded,
    padded_batch,
    transformers,
)
from tests.t5_fixtures import tiny_hf_t5
from tests.tolerances import assert_close_in_dtype
from tests.utils import REPO_ROOT, paper_text

#: sources of 40 and 27 tokens: 10 and 7 local blocks of 4 (radius 3), 10
#: global blocks and 6 with a trailing block of 3 merged into the sixth
LENGTHS = [40, 27]
ATTENTIONS = ["local", "transient-global"]


@pytest.fixture(scope="module", params=ATTENTIONS)
def hf_folder(request, tmp_path_factory):
    """A tiny LongT5 (gated GELU, output tied to ``shared``, 4 unnamed
    embedding rows) with random weights, its spiece.model and tokenizer
    files (tests/t5_fixtures.py). Global blocks of 4 (a power of two: Hugging
    Face counts the block of each token by summing 1 / k in floating point)."""
    return tiny_hf_t5(str(tmp_path_factory.mktemp("hf_longt5")), longt5_attention=request.param)


@pytest.fixture(scope="module")
def imported(hf_folder, tmp_path_factory):
    from mdsfair.importers.hf_longt5 import import_hf_longt5

    return imported_model(import_hf_longt5, hf_folder, str(tmp_path_factory.mktemp("imported_longt5")))


@pytest.fixture(scope="module")
def hf_model(hf_folder):
    return transformers.LongT5ForConditionalGeneration.from_pretrained(hf_folder).double().eval()


@contextlib.contextmanager
def hf_softmax_in_float64():
    """Hugging Face's LongT5 with its encoder softmax in float64: its
    ``softmax(scores.float())`` keeps a float64 tensor as it is (every other
    ``.float()`` is unchanged), so that both models compute in float64."""
    to_float32 = torch.Tensor.float

    def float_keeping_float64(tensor, *args, **kwargs):
        return tensor if tensor.dtype == torch.float64 else to_float32(tensor, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "float", float_keeping_float64)
        yield


def teacher_forced(model, task, hf_model, ids, mask, hf_in_float64: bool):
    """mdsfair's logits (fairseq's ``</s>`` first, fairseq's ids) and Hugging
    Face's (``hf_in_float64``: :func:`hf_softmax_in_float64`), on the same targets."""
    targets = torch.tensor([[5, 9, 33, 40, 1, 0], [7, 12, 1, 0, 0, 0]])
    decoder_input = torch.cat([torch.zeros(2, 1, dtype=torch.long), targets[:, :-1]], dim=1)
    prev_output_tokens = decoder_input + 1
    prev_output_tokens[:, 0] = task.target_dictionary.eos()  # fairseq's collater starts targets with </s>
    with torch.no_grad():
        with hf_softmax_in_float64() if hf_in_float64 else contextlib.nullcontext():
            expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        logits, _ = model(ids + 1, mask.sum(1), prev_output_tokens)
        left_logits, _ = model(left_padded(ids, mask), mask.sum(1), prev_output_tokens)
    return logits, left_logits, expected


def test_the_import_writes_a_longt5_checkpoint(imported, hf_folder):
    summary, model, task, _out_dir = imported
    assert summary["arch"] == "longt5_tglobal_base"  # no released size: every size and setting as a flag
    attention = transformers.LongT5Config.from_pretrained(hf_folder).encoder_attention_type
    flags = summary["arch_flags"]
    assert flags[flags.index("--encoder-self-attention") + 1] == attention
    assert "--share-decoder-input-output-embed" in flags
    assert model.decoder.output_projection.weight is model.encoder.embed_tokens.weight
    kinds = {type(layer.self_attn) for layer in model.encoder.layers}
    expected = {
        "local": longt5_attention.LocalSelfAttention,
        "transient-global": longt5_attention.TransientGlobalSelfAttention,
    }
    assert kinds == {expected[attention]}
    assert (task.target_dictionary.pad(), task.target_dictionary.eos()) == (1, 2)


def test_teacher_forced_logits_equal_hugging_face_in_float64(imported, hf_model):
    """Hugging Face's encoder softmax in float64 too: the same logits within
    float64's tolerance; the sources left-padded, as fairseq's data sets pad
    them, give the same logits (the encoder reads them right-padded)."""
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    logits, left_logits, expected = teacher_forced(model, task, hf_model, ids, mask, hf_in_float64=True)
    assert_close_in_dtype(logits[..., 1:], expected)
    assert_close_in_dtype(left_logits, logits)


def test_hugging_faces_float32_softmax_is_float32_close(imported, hf_model):
    """Hugging Face as it is (its encoder softmax in float32) against
    mdsfair's float64 model: within float32's tolerance, not float64's."""
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    logits, _left_logits, expected = teacher_forced(model, task, hf_model, ids, mask, hf_in_float64=False)
    assert_close_in_dtype(logits[..., 1:].float(), expected.float())
    assert not torch.allclose(logits[..., 1:], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_equal_hugging_face(imported, hf_model, beam):
    """Hugging Face's encoder softmax in float64 too (:func:`hf_softmax_in_float64`)."""
    _summary, model, task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    max_len = 12
    with hf_softmax_in_float64():
        expected = hf_hypotheses(hf_model, ids, mask, beam, max_len)
    assert fairseq_hypotheses(model, task, ids, mask, beam, max_len) == expected


def test_incremental_decoding_equals_the_full_pass(imported):
    _summary, model, _task, _out_dir = imported
    ids, mask = padded_batch(LENGTHS)
    tokens = torch.tensor([[2, 6, 10, 34, 41], [2, 8, 13, 2, 1]])
    with torch.no_grad():
        encoder_out = model.encoder(left_padded(ids, mask), mask.sum(1))
        full, _ = model.decoder(tokens, encoder_out)
        state = {}
        steps = [model.decoder(tokens[:, : step + 1], encoder_out, incremental_state=state)[0]
                 for step in range(tokens.size(1))]  # fmt: skip
    assert_close_in_dtype(torch.cat(steps, dim=1), full)


def per_token_attention(attention, table, x, length, radius, block_size):
    """The paper's definition, one query at a time (float64): token ``i``
    attends to the tokens ``j`` with ``|i - j| <= radius`` (bias of bucket
    ``j - i``) and, with ``block_size``, to global token ``g`` of every full
    block of ``block_size`` (the trailing partial block merged into the last
    full one), the layer-normed sum of its states (bias of bucket ``g -
    block(i)``). ``x`` ``[T, C]``: one source of ``length`` tokens."""
    from mdsfair.modules.t5_layers import relative_position_bucket

    heads, head_dim = attention.heads, attention.head_dim
    query = attention.q_proj(x).view(-1, heads, head_dim)
    key, value = attention.k_proj(x).view(-1, heads, head_dim), attention.v_proj(x).view(-1, heads, head_dim)
    full_blocks = length // block_size if block_size else 0
    block = [min(i // block_size, full_blocks - 1) for i in range(length)] if block_size else []
    if full_blocks:
        sums = torch.stack([x[[i for i in range(length) if block[i] == g]].sum(0) for g in range(full_blocks)])
        global_states = attention.global_input_layer_norm(sums)
        key = torch.cat([key, attention.k_proj(global_states).view(-1, heads, head_dim)])
        value = torch.cat([value, attention.v_proj(global_states).view(-1, heads, head_dim)])
    out = []
    for i in range(length):
        near = [j for j in range(length) if abs(i - j) <= radius]
        offsets = torch.tensor([j - i for j in near] + [g - block[i] for g in range(full_blocks)])
        keys = near + [x.size(0) + g for g in range(full_blocks)]
        tables = [table.relative_attention_bias] * len(near)
        tables += [table.global_relative_attention_bias] * full_blocks if full_blocks else []
        bias = torch.stack([tables[k](relative_position_bucket(offsets[k : k + 1], True, 8, 16))[0]
                            for k in range(len(keys))])  # fmt: skip
        scores = torch.einsum("hd,khd->hk", query[i], key[keys]) + bias.T
        out.append(torch.einsum("hk,khd->hd", torch.softmax(scores, -1), value[keys]).reshape(-1))
    return attention.out_proj(torch.stack(out))


class BiasTables(nn.Module):
    """An encoder stack's bias tables (8 buckets up to distance 16; the
    global tokens' table with global blocks), called on a right-padded
    batch's padding mask for its blocked bias
    (:func:`~mdsfair.modules.longt5_attention.blocked_attention_bias`, radius 3)."""

    def __init__(self, global_block_size: int):
        super().__init__()
        self.global_block_size = global_block_size
        self.relative_attention_bias = nn.Embedding(8, 2)
        self.global_relative_attention_bias = nn.Embedding(8, 2) if global_block_size else None

    def forward(self, padding_mask, states_dtype):
        return longt5_attention.blocked_attention_bias(
            padding_mask, states_dtype, self.relative_attention_bias, self.global_relative_attention_bias,
            8, 16, 3, self.global_block_size,
        )  # fmt: skip


def attention_and_bias_tables(kind: str, global_block_size: int, dtype: torch.dtype):
    """One encoder layer's attention of ``kind`` and the stack's bias tables
    (d 16, 2 heads of 4, radius 3, 8 buckets up to distance 16)."""
    if kind == "transient-global":
        attention = longt5_attention.TransientGlobalSelfAttention(16, 2, 4, 0.0, 3, 1e-6)
    else:
        attention, global_block_size = longt5_attention.LocalSelfAttention(16, 2, 4, 0.0, 3), 0
    return attention.to(dtype), BiasTables(global_block_size).to(dtype)


@pytest.mark.parametrize("attention_kind", ATTENTIONS)
def test_the_attention_is_the_papers_per_token_definition(attention_kind):
    """Sec. 2.1.1 and 2.1.2 one query at a time against the blocked,
    batched module on a right-padded batch of 27 and 19 tokens (radius 3,
    global blocks of 5: trailing partial blocks of 2 and 4), in float64."""
    torch.manual_seed(0)
    attention, table = attention_and_bias_tables(attention_kind, global_block_size=5, dtype=torch.float64)
    with torch.no_grad():
        for parameter in [*attention.parameters(), *table.parameters()]:
            parameter.add_(0.3 * torch.randn_like(parameter))
    lengths = [27, 19]
    x = torch.randn(2, max(lengths), 16, dtype=torch.float64)
    padding = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]
    block_size = 5 if attention_kind == "transient-global" else 0
    with torch.no_grad():
        batched = attention(x, table(padding, x.dtype))
        for row, length in enumerate(lengths):
            expected = per_token_attention(attention, table, x[row, :length], length, 3, block_size)
            assert_close_in_dtype(batched[row, :length], expected)


@pytest.mark.parametrize("dtype, softmax_dtype", [(torch.float64, torch.float64), (torch.float32, torch.float32),
                                                  (torch.bfloat16, torch.float32)])  # fmt: skip
def test_the_softmax_runs_in_float32_for_half_precision_and_in_the_models_dtype_otherwise(
    monkeypatch, dtype, softmax_dtype
):
    """What the module docstring states: the softmax (with the biases and
    masks) in float32 for bfloat16, in the model's dtype otherwise; padded
    queries stay finite in bfloat16 (the masks' -1e10 is added in float32)."""
    attention, table = attention_and_bias_tables("transient-global", global_block_size=4, dtype=dtype)
    seen = []
    softmax = torch.nn.functional.softmax

    def recording_softmax(scores, *args, **kwargs):
        seen.append(scores.dtype)
        return softmax(scores, *args, **kwargs)

    monkeypatch.setattr(longt5_attention.F, "softmax", recording_softmax)
    padding = torch.arange(21)[None, :] >= torch.tensor([21, 9])[:, None]
    with torch.no_grad():
        output = attention(torch.randn(2, 21, 16).to(dtype), table(padding, dtype))
    assert seen == [softmax_dtype] and output.dtype == dtype and torch.isfinite(output).all()


@pytest.mark.parametrize("arch", ["longt5_tiny", "longt5_local_tiny"])
def test_the_contract_checks_in_float64(arch, tmp_path_factory, tmp_path):
    data = contract.make_contract_data(str(tmp_path_factory.mktemp("longt5_contract")))
    checks.check_the_contract_in_float64(arch, data, str(tmp_path / "checkpoint.pt"))


#: config.json of google/long-t5-tglobal-base, -tglobal-large and -local-base on the Hub (their sizes and attention)
RELEASE_CONFIGS = {
    "longt5_tglobal_base": {"d_model": 768, "d_ff": 2048, "num_heads": 12, "num_layers": 12, "num_decoder_layers": 12,
                            "encoder_attention_type": "transient-global"},
    "longt5_tglobal_large": {"d_model": 1024, "d_ff": 2816, "num_heads": 16, "num_layers": 24,
                             "num_decoder_layers": 24, "encoder_attention_type": "transient-global"},
    "longt5_local_base": {"d_model": 768, "d_ff": 2048, "num_heads": 12, "num_layers": 12, "num_decoder_layers": 12,
                          "encoder_attention_type": "local"},
}  # fmt: skip


@pytest.mark.parametrize("arch", sorted(RELEASE_CONFIGS))
def test_the_architectures_are_the_releases_config_values(arch):
    """The sizes and attention of each release, d_kv 64, radius 127, global
    blocks of 16, the output tied to the embedding, 16,384 source tokens; the
    import names the architecture of each release's configuration."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    from mdsfair.importers.hf_longt5 import longt5_architecture_flags

    release = RELEASE_CONFIGS[arch]
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    names = ("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads", "encoder_layers",
             "decoder_layers", "encoder_self_attention")  # fmt: skip
    assert tuple(getattr(args, name) for name in names) == tuple(release.values())
    assert (args.attention_head_dim, args.local_radius, args.global_block_size) == (64, 127, 16)
    assert args.share_decoder_input_output_embed and args.max_source_positions == 16384
    config = {**release, "d_kv": 64, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
              "feed_forward_proj": "gated-gelu", "layer_norm_epsilon": 1e-6, "dropout_rate": 0.1, "local_radius": 127,
              "global_block_size": 16}  # fmt: skip
    assert longt5_architecture_flags(config)[0] == arch


def test_the_command_imports_and_names_the_release_architecture(hf_folder, tmp_path, capsys):
    from mdsfair.importers.cli import import_main

    out_dir = str(tmp_path / "longt5")
    assert import_main(["hf-longt5", hf_folder, out_dir]) == 0
    assert f"wrote {out_dir}/model.pt (--arch longt5_tglobal_base)" in capsys.readouterr().out
    assert sorted(os.listdir(out_dir)) == ["dict.txt", "mdsfair.json", "model.pt", "spm.model"]


@pytest.mark.parametrize(
    "config_edit, drop_tensor, expected",
    [
        ({"scale_decoder_outputs": True}, None, "config.json: the decoder output is scaled by d_model ** -0.5"),
        ({"encoder_attention_type": "sliding"}, None, "encoder_attention_type 'sliding'"),
        ({"model_type": "t5"}, None, "model_type is 't5', not 'longt5'"),
        (None, "encoder.block.1.layer.0.{module}.q.weight", "no tensor 'encoder.block.1.layer.0.{module}.q.weight'"),
    ],
)
def test_the_command_refuses_what_longt5_is_not(hf_folder, tmp_path, capsys, config_edit, drop_tensor, expected):
    from mdsfair.importers.cli import import_main
    from mdsfair.importers.hf_longt5 import ENCODER_ATTENTION_MODULES

    module = ENCODER_ATTENTION_MODULES[transformers.LongT5Config.from_pretrained(hf_folder).encoder_attention_type]
    drop_tensor = drop_tensor and drop_tensor.format(module=module)
    source = copy_of(hf_folder, tmp_path, config_edit, drop_tensor)
    out_dir = str(tmp_path / "longt5")
    assert import_main(["hf-longt5", source, out_dir]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("mdsfair-import hf-longt5: error: ") and "\n" not in error
    assert expected.format(module=module) in error
    assert not os.path.exists(os.path.join(out_dir, "model.pt"))


def test_an_lm_head_other_than_the_embedding_is_refused(hf_folder, tmp_path, capsys):
    from safetensors.torch import load_file

    from mdsfair.importers.cli import import_main

    shared = load_file(os.path.join(hf_folder, "model.safetensors"))["shared.weight"]
    source = copy_of(hf_folder, tmp_path, tensor_edit={"lm_head.weight": shared + 1})
    assert import_main(["hf-longt5", source, str(tmp_path / "longt5")]) == 1
    assert "lm_head.weight differs from shared.weight" in capsys.readouterr().err


def test_the_recipe_has_the_hierencdec_papers_settings():
    """examples/longt5/README.md: HierEncDec's Sec. 5.3 (source 4,096 and
    target 1,024 tokens; Adam, lr 5e-5, betas 0.9 and 0.999, no warm-up or
    weight decay) and its Table 1 row for LongT5-base."""
    text = paper_text("hierencdec-shen2023.txt")
    assert "we use source and target truncation of 4096 and 1024 respectively for all experiments" in text
    assert "a learning rate of 5e-5, and use the Adam optimizer with $\\beta_1 = 0.9$ and $\\beta_2 = 0.999$" in text
    assert "We do not use any warm-up or weight decay." in text
    with open(os.path.join(REPO_ROOT, "examples", "longt5", "README.md")) as handle:
        recipe = handle.read()
    for flag in ("--max-source-positions 4096", "--max-target-positions 1024", "--optimizer adam",
                 "--adam-betas '(0.9,0.999)'", "--lr 5e-5", "--lr-scheduler fixed", "--weight-decay 0.0"):  # fmt: skip
        assert flag in recipe, flag
    row = re.search(r"LongT5-base \(Guo et al\., 2022\)((?: \d+\.\d/\d+\.\d){10})", text).group(1).split()
    quoted = re.search(r"\| LongT5-base \(Table 1\) \|((?: [\d./]+ \|){10})", recipe).group(1)
    assert [cell.strip() for cell in quoted.split("|") if cell.strip()] == row
