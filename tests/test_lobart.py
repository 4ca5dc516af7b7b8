"""LoBART (Manakul & Gales, ACL 2021): local encoder attention without global
tokens, positions extended as the authors' code does, and the architectures
(alone and with the sparse decoder)."""

import os

import pytest
import torch

from mdsfair.modules.longformer_attention import LongformerSelfAttention
from mdsfair.modules.segment_positions import tile_position_table
from mdsfair.modules.self_attention_components import global_attention_mask
from tests.utils import (
    USER_DIR,
    fairseq_cli,
    generation_command,
    hypothesis_lines,
    model_on_dictionary,
    paper_text,
    short_training,
    toy_dictionary,
)


def naive_local_attention(attention: LongformerSelfAttention, x, padding):
    """Each query over the non-padding keys within ``w / 2`` of it, one
    position at a time (float64)."""
    length, batch_size, dim = x.shape
    heads, head_dim, half = attention.num_heads, attention.head_dim, attention.one_sided_window
    out = torch.zeros_like(x)
    for b in range(batch_size):
        q = attention.q_proj(x[:, b]).view(length, heads, head_dim) * head_dim**-0.5
        k = attention.k_proj(x[:, b]).view(length, heads, head_dim)
        v = attention.v_proj(x[:, b]).view(length, heads, head_dim)
        rows = []
        for i in range(length):
            keys = [j for j in range(max(0, i - half), min(length, i + half + 1)) if not padding[b, j]]
            if padding[b, i] or not keys:
                rows.append(torch.zeros(dim, dtype=x.dtype))
                continue
            scores = torch.einsum("hd,khd->hk", q[i], k[keys])
            rows.append(torch.einsum("hk,khd->hd", scores.softmax(-1), v[keys]).reshape(dim))
        out[:, b] = attention.out_proj(torch.stack(rows))
    return out


@pytest.mark.parametrize("implementation", ["fused", "banded"])
@pytest.mark.parametrize("window,length", [(2, 7), (4, 13), (8, 5), (6, 20)])
def test_local_attention_equals_a_naive_window(implementation, window, length):
    torch.manual_seed(0)
    attention = LongformerSelfAttention(16, 4, window, implementation=implementation, global_projections=False)
    attention = attention.double().eval()
    x = torch.randn(length, 2, 16, dtype=torch.double)
    padding = torch.zeros(2, length, dtype=torch.bool)
    padding[1, length - 2 :] = True  # right padding in the second row
    tokens = torch.where(padding, 1, 5)
    global_mask = global_attention_mask(tokens, 1, "none")
    assert not global_mask.any()
    got = attention(x, padding, global_mask)
    expected = naive_local_attention(attention, x, padding)
    real = ~padding.t()
    torch.testing.assert_close(got[real], expected[real], rtol=1e-10, atol=1e-10)


def test_local_attention_has_bart_projections_only():
    attention = LongformerSelfAttention(16, 4, 4, global_projections=False)
    names = {name.split(".")[0] for name, _ in attention.named_parameters()}
    assert names == {"q_proj", "k_proj", "v_proj", "out_proj"}


def authors_expanded_positions(weight: torch.Tensor) -> torch.Tensor:
    """potsawee/longsum0 models/localattn.py:362-388, expand_learned_embed_positions
    with multiple=4, cut=8 (train/train_abssum.py:43 calls it with
    multiple=xspan=4 and cut=xspan*2): 1026 * 4 - 8 = 4096 rows."""
    new = torch.empty(1026 * 4 - 8, weight.size(1), dtype=weight.dtype)
    new[:1026] = weight
    new[1026 : 1026 * 2] = torch.flip(weight, dims=[0])
    new[1026 * 2 : 1026 * 3] = weight
    new[1026 * 3 : 1026 * 4 - 8] = torch.flip(weight, dims=[0])[:-8]
    return new


def test_mirror_tiling_copies_the_positions_as_the_authors_code():
    weight = torch.randn(1026, 3, dtype=torch.double)  # BART's 1,024 positions + 2 offset rows
    authors = authors_expanded_positions(weight)
    ours = tile_position_table(weight, 4098, padding_idx=1, method="mirror")  # 4,096 positions + 2
    assert ours.size(0) == 4098
    assert torch.equal(ours[: authors.size(0)], authors)
    # the second copy is the first reversed: position 1,024 (row 1,026) reads BART's last row
    assert torch.equal(ours[1026], weight[1025]) and torch.equal(ours[2051], weight[0])


def test_lobart_restores_a_bart_state_dict_and_mirrors_its_positions():
    dictionary = toy_dictionary()
    bart = model_on_dictionary("multidoc_bart_tiny", dictionary, max_source_positions=64)
    lobart = model_on_dictionary("lobart_tiny", dictionary, task="multidoc_summarization")
    assert lobart.args.global_attention == "none" and lobart.args.position_tiling == "mirror"
    assert set(bart.state_dict()) == set(lobart.state_dict())
    state = bart.state_dict()
    loaded = state["encoder.embed_positions.weight"].clone()
    lobart.load_state_dict(state, strict=True, model_cfg=None)
    table = lobart.encoder.embed_positions.weight
    assert table.size(0) > loaded.size(0)
    assert torch.equal(table, tile_position_table(loaded, table.size(0), 1, method="mirror"))


@pytest.mark.parametrize("arch", ["lobart_4k", "lobart_4k_sparse"])
def test_published_presets(arch):
    """The sizes the sparse decoder paper gives LoBART (its Sec. 2), on BART-large."""
    text = paper_text("sparse-encdec-attention-manakul2021.txt")
    assert "BART’s maximum input length is 1024, while that of LoBART is 4096 with attention width of 1024" in text
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    import mdsfair

    mdsfair.register()
    import argparse

    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    args = parser.parse_args([])
    ARCH_CONFIG_REGISTRY[arch](args)
    assert (args.encoder_layers, args.encoder_embed_dim, args.encoder_attention_heads) == (12, 1024, 16)
    assert (args.max_encoder_positions, args.attention_window, args.global_attention) == (4096, "1024", "none")
    assert args.encoder_self_attention == "longformer" and args.position_tiling == "mirror"
    assert args.cross_attention == ("sparse" if arch.endswith("sparse") else "full")


def test_benchmark_measures_local_and_full_attention_at_toy_size(capsys):
    from benchmarks import lobart as benchmark

    benchmark.main(["--lengths", "32,64", "--window", "8", "--target-tokens", "8", "--steps", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    measured = {(row[0], row[1]) for row in rows if row and row[0] in benchmark.SYSTEMS and "skipped" not in row}
    assert measured == {(system, length) for system in benchmark.SYSTEMS for length in ("32", "64")}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["lobart_tiny", "lobart_4k_sparse_tiny"])
def test_trains_and_generates_through_the_task(tmp_path, tiny_data, arch):
    """A few updates of fairseq-train and fairseq-generate on a tiny data-bin,
    LoBART alone and with the sparse decoder (its KL task)."""
    data_bin = tiny_data["data-bin"]
    save_dir = str(tmp_path / "checkpoints")
    sparse = arch.endswith("sparse_tiny")
    task = ["--task", "multidoc_summarization_sparse", "--criterion", "sparse_kl"] if sparse else []
    task = task or ["--task", "multidoc_summarization", "--criterion", "label_smoothed_cross_entropy"]
    log = fairseq_cli(
        "fairseq_cli.train",
        [data_bin, "--user-dir", USER_DIR, "--arch", arch] + task + short_training(save_dir, updates=2),
    )
    assert "done training" in log
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    output = fairseq_cli(
        "fairseq_cli.generate", generation_command(data_bin, checkpoint, "--user-dir", USER_DIR, beam=2)
    )
    assert len(hypothesis_lines(output)) == 4
