"""Hierarchical Transformer (Liu & Lapata 2019): modules against slow
loop-over-paragraphs references, masking, graph heads (Eq. 24), ablations,
incremental decoding, training, and fairseq-train / fairseq-generate."""

import math
import os
import re

import pytest
import torch
import torch.nn.functional as F
from fairseq import options, tasks
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from mdsfair.models.hiertransformer import DEFAULTS, HierarchicalTransformerModel
from mdsfair.modules.inter_paragraph_attention import InterParagraphAttention, row_normalise_graph
from mdsfair.modules.multi_head_pooling import MultiHeadPooling
from mdsfair.modules.paragraph_blocks import ParagraphBlocks
from mdsfair.modules.sinusoidal import ParagraphTokenPositionalEncoding, SinusoidalPositions, sinusoidal_encoding
from tests.hiersumm_reference import export_to_hiersumm_layout, hiersumm_positions, ref_decoder, ref_log_probs
from tests.utils import (
    REPO_ROOT,
    USER_DIR,
    fairseq_cli,
    generate_in_process,
    hypothesis_lines,
    make_tiny_data_bin,
    short_training,
)

# ------------------------------------------------------------------ helpers


class ToyTask:
    """What ``build_model`` reads from a task: the shared dictionary."""

    def __init__(self, size=40):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for i in range(size):
            self.source_dictionary.add_symbol(f"w{i}")


def build_model(*extra, task=None, seed=0):
    task = task or ToyTask()
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            "dummy-data",
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "hiertransformer_tiny",
            "--dropout",
            "0",
            *extra,
        ],
    )
    torch.manual_seed(seed)
    return HierarchicalTransformerModel.build_model(args, task).eval()


def toy_batch(pad=1, graph=False):
    """Two examples: 3 paragraphs (lengths 3, 1, 4) and 2 (lengths 2, 5)."""
    para = torch.tensor([[0, 0, 0, 1, 2, 2, 2, 2], [0, 0, 1, 1, 1, 1, 1, -1]])
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18, 19, pad]])
    batch = {"src_tokens": tokens, "src_lengths": torch.tensor([8, 7]), "src_para_ids": para}
    if graph:
        g = torch.zeros(2, 3, 3)
        g[0] = torch.tensor([[0.0, 0.5, 0.3], [0.5, 0.0, 0.0], [0.3, 0.0, 0.0]])
        g[1, :2, :2] = torch.tensor([[0.0, 0.8], [0.8, 0.0]])
        batch["src_graph_similarity"] = g
    return batch


def single(batch, index):
    """Example ``index`` of a toy batch alone, padding removed."""
    length = int(batch["src_lengths"][index])
    out = {k: v[index : index + 1, :length] for k, v in batch.items() if k in ("src_tokens", "src_para_ids")}
    out["src_lengths"] = batch["src_lengths"][index : index + 1]
    if "src_graph_similarity" in batch:
        count = int(batch["src_para_ids"][index].max()) + 1
        out["src_graph_similarity"] = batch["src_graph_similarity"][index : index + 1, :count, :count]
    return out


def encode(model, batch):
    return model.encoder(**batch)["encoder_out"][0].transpose(0, 1)  # [B, T, d]


# ------------------------------------------------------------- the modules


def test_sinusoidal_encoding_follows_eq_7_8_and_eq_9_layout():
    positions = torch.tensor([0, 3, 7])
    encoding = sinusoidal_encoding(positions, 8)
    for row, p in enumerate(positions.tolist()):
        for i in range(4):
            assert encoding[row, 2 * i].item() == pytest.approx(math.sin(p / 10000 ** (2 * i / 8)), abs=1e-6)
            assert encoding[row, 2 * i + 1].item() == pytest.approx(math.cos(p / 10000 ** (2 * i / 8)), abs=1e-6)
    rank, token = torch.tensor([2]), torch.tensor([5])
    paper = ParagraphTokenPositionalEncoding(16)(rank, token)
    assert torch.allclose(paper, torch.cat([sinusoidal_encoding(rank, 8), sinusoidal_encoding(token, 8)], -1))
    hiersumm = ParagraphTokenPositionalEncoding(16, token_position_first=True)(rank, token)
    assert torch.allclose(hiersumm, torch.cat([sinusoidal_encoding(token, 8), sinusoidal_encoding(rank, 8)], -1))
    no_pp = ParagraphTokenPositionalEncoding(16, paragraph_position=False)
    assert torch.allclose(no_pp(rank, token), sinusoidal_encoding(token, 16))
    assert torch.allclose(no_pp(rank + 3, token), no_pp(rank, token))


def test_paragraph_blocks_match_loop_reference():
    batch = toy_batch()
    mask = batch["src_tokens"].ne(1)
    blocks = ParagraphBlocks.from_paragraph_ids(batch["src_para_ids"], mask)
    assert (blocks.num_blocks, blocks.block_length, blocks.num_paragraphs) == (5, 5, 3)
    assert blocks.block_batch.tolist() == [0, 0, 0, 1, 1]
    assert blocks.block_paragraph.tolist() == [0, 1, 2, 0, 1]
    assert blocks.position_in_block.tolist() == [[0, 1, 2, 0, 0, 1, 2, 3], [0, 1, 0, 1, 2, 3, 4, 0]]
    x = torch.randn(2, 8, 3)
    block_view = blocks.to_blocks(x)
    for b in range(2):
        for p in range(int(batch["src_para_ids"][b].max()) + 1):
            tokens = x[b][(batch["src_para_ids"][b] == p) & mask[b]]
            n = [i for i in range(5) if blocks.block_batch[i] == b and blocks.block_paragraph[i] == p][0]
            assert torch.equal(block_view[n, : len(tokens)], tokens)
            assert blocks.block_padding_mask()[n].tolist() == [False] * len(tokens) + [True] * (5 - len(tokens))
    assert torch.equal(blocks.to_flat(block_view), x * mask.unsqueeze(-1))
    assert blocks.paragraph_mask().tolist() == [[True, True, True], [True, True, False]]


def test_the_encoder_refuses_paragraph_ids_that_are_not_runs():
    """The batch check (``check_side_inputs``) runs in the encoder, before the
    paragraph blocks are built."""
    model = build_model()
    split = toy_batch()
    split["src_para_ids"] = torch.tensor([[0, 0, 0, 1, 0, 2, 2, 2], [0, 0, 1, 1, 1, 1, 1, -1]])
    with pytest.raises(ValueError) as refused:
        encode(model, split)
    assert refused.value.args[0] == (
        "src_para_ids [2, 8] must be non-decreasing runs along each example (one run per paragraph), but "
        "example 0 goes from 1 to 0 at position 4"
    )
    negative = toy_batch()
    negative["src_para_ids"][1, 3] = -1
    with pytest.raises(ValueError) as refused:
        encode(model, negative)
    assert refused.value.args[0].splitlines() == [
        "src_para_ids [2, 8] is negative at a non-pad token of src_tokens [2, 8] (example 1, position 3: -1); "
        "every source token needs a paragraph",
        "src_para_ids [2, 8] must be non-decreasing runs along each example (one run per paragraph), but "
        "example 1 goes from 1 to -1 at position 3",
    ]


@pytest.mark.parametrize("head_projection", [True, False])
def test_multi_head_pooling_matches_loop_reference(head_projection):
    torch.manual_seed(0)
    pooling = MultiHeadPooling(12, 3, head_projection=head_projection).eval()
    x = torch.randn(4, 6, 12)
    lengths = [6, 2, 4, 0]  # the last block is empty
    padding = torch.arange(6).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    out = pooling(x, padding)
    assert torch.isfinite(out).all()
    for n, length in enumerate(lengths):
        for z in range(3):
            if length == 0:
                expected = torch.zeros(4)
            else:
                tokens = x[n, :length]
                a = tokens @ pooling.score_proj.weight[z] + pooling.score_proj.bias[z]  # Eq. 13
                b = (tokens @ pooling.value_proj.weight.T + pooling.value_proj.bias)[:, 4 * z : 4 * z + 4]  # Eq. 14
                weights = torch.exp(a) / torch.exp(a).sum()  # Eq. 15
                expected = (weights.unsqueeze(1) * b).sum(0)
            if head_projection:
                expected = expected @ pooling.head_proj.weight[z] + pooling.head_proj.bias[z]
            expected = pooling.head_layer_norm(expected)  # Eq. 16
            assert torch.allclose(out[n, z], expected, atol=1e-5)


@pytest.mark.parametrize("shared", [False, True])
def test_inter_paragraph_attention_matches_loop_reference(shared):
    torch.manual_seed(0)
    attention = InterParagraphAttention(3, 4, shared_across_heads=shared).eval()
    heads = torch.randn(2, 4, 3, 4)
    paragraph_mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    context, _ = attention(heads, paragraph_mask)
    for b in range(2):
        real = int(paragraph_mask[b].sum())
        for z in range(3):
            w = 0 if shared else z
            q = heads[b, :real, z] @ attention.query_proj.weight[w] + attention.query_proj.bias[w]  # Eq. 17
            k = heads[b, :real, z] @ attention.key_proj.weight[w] + attention.key_proj.bias[w]  # Eq. 18
            v = heads[b, :real, z] @ attention.value_proj.weight[w] + attention.value_proj.bias[w]  # Eq. 19
            for i in range(real):
                scores = torch.stack([q[i] @ k[j] for j in range(real)]) / 2.0  # sqrt(d_head)
                weights = torch.exp(scores) / torch.exp(scores).sum()  # Eq. 20
                expected = sum(weights[j] * v[j] for j in range(real))
                assert torch.allclose(context[b, i, z], expected, atol=1e-5)
    if shared:
        assert attention.query_proj.weight.shape == (1, 4, 4)


def test_graph_head_equals_eq_24():
    torch.manual_seed(0)
    attention = InterParagraphAttention(3, 4).eval()
    heads = torch.randn(2, 3, 3, 4)
    paragraph_mask = torch.tensor([[True, True, True], [True, True, False]])
    graph = toy_batch(graph=True)["src_graph_similarity"]
    graph[1, 0, 2] = 5.0  # an edge to a missing paragraph must be ignored
    context, weights = attention(heads, paragraph_mask, graph=graph, graph_heads=2)
    learned, learned_weights = attention(heads, paragraph_mask)
    value = attention.value_proj(heads)
    for b in range(2):
        for i in range(int(paragraph_mask[b].sum())):
            row = graph[b, i] * paragraph_mask[b]
            expected_weights = row / row.sum()
            for z in (0, 1):
                assert torch.allclose(weights[b, z, i], expected_weights)
                expected = sum(expected_weights[j] * value[b, j, z] for j in range(3))
                assert torch.allclose(context[b, i, z], expected, atol=1e-6)
    assert torch.allclose(context[:, :, 2], learned[:, :, 2])  # the third head stays learned
    assert torch.allclose(weights[:, 2], learned_weights[:, 2])
    isolated = torch.zeros(1, 2, 2)
    assert torch.equal(row_normalise_graph(isolated, torch.ones(1, 2, dtype=torch.bool)), isolated)


# ---------------------------------------------------------- the encoder


def test_padding_and_missing_paragraphs_do_not_change_graph_heads():
    """With graph heads (Eq. 24) over a padded [B, P, P] graph; the default
    and pre-LN (hiersumm) layers are in the model-contract suite."""
    model = build_model("--graph", "similarity", "--graph-heads", "2")
    batch = toy_batch(graph=True)
    together = encode(model, batch)
    for index in range(2):
        alone = encode(model, single(batch, index))
        length = alone.size(1)
        assert torch.allclose(together[index, :length], alone[0], atol=1e-5)
    assert torch.equal(together[1, 7], torch.zeros(32))  # padding is zeroed


def test_empty_paragraph_ids_are_masked():
    """A paragraph index with no token (a gap) is masked everywhere: without
    paragraph positions, ids 0,0,2,2 encode exactly like 0,0,1,1."""
    model = build_model("--no-paragraph-position")
    tokens = torch.tensor([[5, 6, 7, 8]])
    gap = encode(model, {"src_tokens": tokens, "src_para_ids": torch.tensor([[0, 0, 2, 2]])})
    dense = encode(model, {"src_tokens": tokens, "src_para_ids": torch.tensor([[0, 0, 1, 1]])})
    assert torch.isfinite(gap).all()
    assert torch.allclose(gap, dense, atol=1e-6)


def test_ablation_flags_change_what_they_claim():
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10]])
    para = torch.tensor([[0, 0, 0, 1, 1, 1]])
    changed_second = torch.tensor([[5, 6, 7, 20, 21, 22]])

    # w/o GT: no global layer, paragraph 0 cannot see paragraph 1's words.
    no_global = build_model("--global-layers", "0")
    assert len(no_global.encoder.global_layers) == 0
    a = encode(no_global, {"src_tokens": tokens, "src_para_ids": para})
    b = encode(no_global, {"src_tokens": changed_second, "src_para_ids": para})
    assert torch.allclose(a[0, :3], b[0, :3], atol=1e-6)
    full = build_model()
    a = encode(full, {"src_tokens": tokens, "src_para_ids": para})
    b = encode(full, {"src_tokens": changed_second, "src_para_ids": para})
    assert not torch.allclose(a[0, :3], b[0, :3], atol=1e-4)

    # w/o PP: the paragraph rank no longer enters; with it, it does.
    swapped = {"src_tokens": torch.tensor([[8, 9, 10, 5, 6, 7]]), "src_para_ids": para}
    cases = ((["--global-layers", "0", "--no-paragraph-position"], False), (["--global-layers", "0"], True))
    for flags, rank_matters in cases:
        model = build_model(*flags)
        original = encode(model, {"src_tokens": tokens, "src_para_ids": para})
        moved = encode(model, swapped)
        assert torch.allclose(original[0, :3], moved[0, 3:], atol=1e-6) != rank_matters

    # w/o MP: one pooling head of dimension d.
    one_head = build_model("--global-heads", "1")
    layer = one_head.encoder.global_layers[0]
    assert layer.pooling.score_proj.out_features == 1 and layer.pooling.head_dim == 32

    # the hiersumm variants
    hiersumm = build_model(
        "--encoder-normalize-before", "--shared-inter-paragraph-attention", "--no-pooling-head-projection"
    )
    layer = hiersumm.encoder.global_layers[0]
    assert layer.pooling_layer_norm is not None and hiersumm.encoder.layer_norm is not None
    assert layer.pooling.head_proj is None
    assert layer.inter_paragraph_attention.query_proj.weight.shape[0] == 1


def test_post_ln_global_layer_follows_eq_21_to_23():
    model = build_model()
    layer = model.encoder.global_layers[0]
    batch = toy_batch()
    blocks = ParagraphBlocks.from_paragraph_ids(batch["src_para_ids"], batch["src_tokens"].ne(1))
    x = torch.randn(blocks.num_blocks, blocks.block_length, 32)
    padding = blocks.block_padding_mask()
    out = layer(x, padding, blocks)
    context = layer.paragraph_context(x, padding, blocks, None)  # c_i, Eq. 21
    g = layer.fc2(torch.relu(layer.fc1(x + context.unsqueeze(1))))  # Eq. 22
    assert torch.allclose(out, layer.final_layer_norm(g + x), atol=1e-5)  # Eq. 23


def test_missing_graph_side_data_is_a_clear_error():
    model = build_model("--graph", "discourse")
    assert model.side_inputs() == {"src_para_ids": True, "src_graph_similarity": False, "src_graph_discourse": True}
    with pytest.raises(
        ValueError,
        match=r"^missing side input src_graph_discourse \(needed by hiertransformer --graph discourse; .* "
        r"mdsfair-preprocess --side-data graph_discourse",
    ):
        encode(model, toy_batch())
    with pytest.raises(ValueError, match=r"missing side input src_para_ids \(needed by hiertransformer"):
        model.encoder(src_tokens=toy_batch()["src_tokens"])


def test_a_graph_with_fewer_rows_than_paragraphs_is_refused():
    model = build_model("--graph", "similarity")
    batch = toy_batch(graph=True)
    encode(model, batch)
    batch["src_graph_similarity"] = batch["src_graph_similarity"][:, :2, :2]
    with pytest.raises(ValueError) as refused:
        encode(model, batch)
    assert refused.value.args[0] == (
        "src_graph_similarity [2, 2, 2] has 2 paragraph rows, but example 0 of src_para_ids [2, 8] has 3 "
        "paragraphs: expected [B, P, P] with P >= 3"
    )


# ---------------------------------------------------------- decoding


def test_sequence_generator_scores_equal_full_decoding():
    """Beam search (incremental decoding, reordered encoder states, batch 2)
    gives every hypothesis the scores that one full forward pass gives it."""
    task = ToyTask()
    model = build_model("--graph", "similarity", task=task)
    assert_beam_scores_equal_full_decoding(model, task, toy_batch(graph=True), atol=1e-4)


def assert_beam_scores_equal_full_decoding(model, task, batch, atol):
    """Every hypothesis of a beam search (beam 3, batch 2) has the positional
    scores that one teacher-forced forward pass over its tokens gives."""
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=6, min_len=3)
    hypotheses = generator.forward({"net_input": batch})
    eos = task.target_dictionary.eos()
    for index, beams in enumerate(hypotheses):
        for hypothesis in beams:
            target = hypothesis["tokens"].unsqueeze(0)
            prev = torch.cat([target.new_tensor([[eos]]), target[:, :-1]], dim=1)
            logits = model(**single(batch, index), prev_output_tokens=prev)[0]
            full = F.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)[0]
            assert torch.allclose(full, hypothesis["positional_scores"], atol=atol)


def to_blocks(batch, pad=1):
    """The flat toy batch as the hiersumm code's ``src [B, n_blocks, n_tokens]``."""
    tokens, para = batch["src_tokens"], batch["src_para_ids"]
    rows = [
        [tokens[b][(para[b] == p) & tokens[b].ne(pad)].tolist() for p in range(int(para[b].max()) + 1)]
        for b in range(tokens.size(0))
    ]
    blocks = max(len(r) for r in rows)
    width = max(len(p) for r in rows for p in r)
    src = torch.full((len(rows), blocks, width), pad)
    for b, r in enumerate(rows):
        for p, ids in enumerate(r):
            src[b, p, : len(ids)] = torch.tensor(ids)
    return src


HIERSUMM_TINY = [
    "--arch",
    "hiertransformer_hiersumm",
    "--encoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--local-layers",
    "2",
    "--decoder-layers",
    "2",
]


def randomize_(model, seed=3):
    """Random values in every parameter (biases and LayerNorms included), so
    that no mapping error hides behind a zero or a one."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model


def test_decoder_positions_follow_eq_7_8_from_position_zero():
    d = 16
    table = SinusoidalPositions(d)(torch.zeros(2, 40, dtype=torch.long))
    assert table.shape == (2, 40, d) and torch.equal(table[0], table[1])
    for pos, i in ((0, 0), (1, 0), (3, 2), (17, 5), (39, 7)):
        angle = pos / 10000 ** (2 * i / d)
        assert table[0, pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[0, pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert torch.equal(table[0], hiersumm_positions(40, d))  # their table, bit for bit
    # incremental decoding asks for the last position of the prefix only
    last = SinusoidalPositions(d)(torch.zeros(3, 18, dtype=torch.long), incremental_state={})
    assert last.shape == (3, 1, d) and torch.equal(last[0, 0], table[0, 17])
    # fairseq's own table differs: sines then cosines, from position 2
    from fairseq.modules import SinusoidalPositionalEmbedding

    fairseq_table = SinusoidalPositionalEmbedding(d, padding_idx=1, init_size=64)(torch.full((1, 3), 5))
    assert fairseq_table[0, 0, 0].item() == pytest.approx(math.sin(2.0), abs=1e-6)
    assert not torch.allclose(fairseq_table[0], table[0, :3])


def test_hiersumm_arch_sets_the_authors_decoder():
    model = build_model(*HIERSUMM_TINY)
    decoder = model.decoder
    assert isinstance(decoder.embed_positions, SinusoidalPositions)
    assert decoder.output_projection.bias is not None
    assert decoder.output_projection.weight is decoder.embed_tokens.weight is model.encoder.embed_tokens.weight
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 2 * 3 + 1 + 2 * 3 + 1 and {m.eps for m in norms} == {1e-6}
    assert decoder.start_symbol == ToyTask().source_dictionary.bos()
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            "dummy-data",
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "hiertransformer_hiersumm",
        ],
    )
    assert (args.dropout, args.attention_dropout, args.activation_dropout) == (0.1, 0.1, 0.1)
    paper = build_model()
    assert paper.decoder.output_projection.bias is None and paper.decoder.start_symbol is None
    assert {m.eps for m in paper.modules() if isinstance(m, torch.nn.LayerNorm)} == {1e-5}


def test_hiersumm_arch_equals_the_authors_model_written_from_their_equations():
    """Encoder, decoder and generator on the same weights: log-probabilities
    equal the reference to 1e-6 (float64), batch 2 with padding in both
    the source and the target."""
    model = randomize_(build_model(*HIERSUMM_TINY)).double()
    batch = toy_batch()
    sd = export_to_hiersumm_layout(model)
    prev = torch.tensor([[2, 9, 10, 11, 12], [2, 13, 14, 1, 1]])  # fairseq's </s> start, pad at the end
    ours = F.log_softmax(model(**batch, prev_output_tokens=prev)[0], dim=-1)
    tgt = prev.clone()
    tgt[:, 0] = 0  # the authors' targets start with <S> = our <s>

    class Opt:
        heads, inter_heads, enc_layers, dec_layers, inter_layers = 4, 4, 4, 2, [2, 3]

    theirs = ref_log_probs(to_blocks(batch), tgt, sd, Opt, pad=1)
    real = tgt.ne(1)
    assert torch.allclose(ours[real], theirs[real], atol=1e-6)
    # the decoder alone, on our encoder's memory
    encoder_out = model.encoder(**batch)
    memory = encoder_out["encoder_out"][0].transpose(0, 1)
    decoder_only = ref_decoder(tgt, memory, encoder_out["encoder_padding_mask"][0], sd, 4, 2, pad=1)
    assert torch.allclose(ours[real], decoder_only[real], atol=1e-6)
    # and the difference is not vacuous: fairseq's positions or no bias would not match
    without_bias = F.log_softmax(model.decoder.extract_features(prev, encoder_out)[0] @ sd["generator.0.weight"].T, -1)
    assert not torch.allclose(without_bias[real], theirs[real], atol=1e-3)


def test_no_source_special_tokens_equals_removing_them():
    """Masking <s> / </s> in the encoder gives the states that a source without
    them gives: a paragraph's first word keeps position 0."""
    model = build_model("--no-source-special-tokens")
    plain = {"src_tokens": torch.tensor([[5, 6, 7, 8, 9]]), "src_para_ids": torch.tensor([[0, 0, 1, 1, 1]])}
    special = {
        "src_tokens": torch.tensor([[0, 5, 6, 0, 7, 8, 9, 2]]),
        "src_para_ids": torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]]),
    }
    a = encode(model, plain)
    b = encode(model, special)
    kept = torch.tensor([1, 2, 4, 5, 6])
    assert torch.allclose(a[0], b[0, kept], atol=1e-5)
    assert torch.equal(b[0, [0, 3, 7]], torch.zeros(3, 32))
    mask = model.encoder(**special)["encoder_padding_mask"][0]
    assert mask.tolist() == [[True, False, False, True, False, False, False, True]]
    keeps = encode(build_model(), special)
    assert not torch.allclose(keeps[0, kept], a[0], atol=1e-3)


# ------------------------------------------------------- data-bin fixtures


@pytest.fixture(scope="module")
def graph_data_bin(tmp_path_factory):
    return make_tiny_data_bin(
        str(tmp_path_factory.mktemp("hiertransformer")),
        train=12,
        valid=4,
        test=4,
        vocab_size=300,
        extra_args=["--side-data", "graph_similarity", "graph_discourse"],
    )


TRAIN_ARGS = [
    "--user-dir",
    USER_DIR,
    "--task",
    "multidoc_summarization",
    "--arch",
    "hiertransformer_tiny",
    "--max-source-positions",
    "256",
    "--max-paragraphs",
    "24",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
]


def test_tiny_model_training_loss_falls(graph_data_bin):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [graph_data_bin, *TRAIN_ARGS, "--graph", "discourse", "--dropout", "0"])
    task = tasks.setup_task(args)
    task.load_dataset("train")
    torch.manual_seed(1)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[i] for i in range(2)])
    assert sample["net_input"]["src_graph_discourse"].shape[0] == 2
    sample = task._sample_for(model, sample)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        loss, sample_size, _ = criterion(model, sample)
        (loss / sample_size).backward()
        optimizer.step()
        losses.append(loss.item() / sample_size)
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.slow
def test_fairseq_train_and_generate_with_similarity_graph(graph_data_bin, tmp_path):
    save_dir = str(tmp_path / "checkpoints")
    fairseq_cli(
        "fairseq_cli.train",
        [
            graph_data_bin,
            *TRAIN_ARGS,
            "--graph",
            "similarity",
            *short_training(save_dir, max_tokens=2000),
        ],
    )
    output = generate_in_process(  # fairseq-generate's main, without a second interpreter start
        [
            graph_data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--gen-subset",
            "test",
            "--path",
            os.path.join(save_dir, "checkpoint_last.pt"),
            "--max-source-positions",
            "600",
            "--max-paragraphs",
            "40",
            "--beam",
            "5",
            "--lenpen",
            "0.4",
            "--max-len-b",
            "8",
            "--batch-size",
            "4",
            "--cpu",
        ],
        results_dir=str(tmp_path / "generate"),
    )
    hypotheses = hypothesis_lines(output)
    assert len(hypotheses) == 4

    # torch.hub: raw clusters -> the same preprocessing (graph side data included) -> summaries
    import json

    summarizer = torch.hub.load(
        REPO_ROOT,
        "hiertransformer",
        model_dir=save_dir,
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=graph_data_bin,
        source="local",
        max_source_positions=600,
        max_paragraphs=40,
    )
    raw_test = os.path.join(os.path.dirname(graph_data_bin), "raw", "test.jsonl")
    clusters = [json.loads(line) for line in open(raw_test, encoding="utf-8")][:3]
    assert summarizer.encode_cluster(clusters[0]).side_data["graph_similarity"].size > 0
    batched = summarizer.summarize(clusters, beam=5, lenpen=0.4, max_len_b=8, batch_size=3)
    single = [summarizer.summarize([c], beam=5, lenpen=0.4, max_len_b=8, batch_size=1)[0] for c in clusters]
    assert batched == single and all(isinstance(s, str) for s in batched)


def test_architectures_set_the_paper_and_hiersumm_configurations():
    def arch_args(arch):
        return options.parse_args_and_arch(
            options.get_training_parser(),
            ["dummy-data", "--user-dir", USER_DIR, "--task", "multidoc_summarization", "--arch", arch],
        )

    paper = arch_args("hiertransformer")
    assert (paper.encoder_embed_dim, paper.encoder_attention_heads, paper.encoder_ffn_embed_dim) == (256, 8, 1024)
    assert (paper.local_layers, paper.global_layers, paper.global_heads, paper.dropout) == (5, 2, 8, 0.1)
    assert paper.share_all_embeddings and not paper.encoder_normalize_before and paper.graph == "none"
    hiersumm = arch_args("hiertransformer_hiersumm")
    assert (hiersumm.local_layers, hiersumm.global_layers, hiersumm.decoder_layers) == (6, 2, 1)
    assert hiersumm.encoder_normalize_before and hiersumm.shared_inter_paragraph_attention
    assert hiersumm.no_pooling_head_projection and hiersumm.token_position_first


def test_readme_flag_table_states_the_defaults_of_the_models_table():
    """examples/hiertransformer/README.md's flag table writes the paper's
    values as the defaults; they are those of ``DEFAULTS``, the table that
    --help and the architectures read."""
    readme = open(os.path.join(REPO_ROOT, "examples", "hiertransformer", "README.md"), encoding="utf-8").read()
    assert f"| `--local-layers {DEFAULTS['local_layers']} --global-layers {DEFAULTS['global_layers']}` |" in readme
    assert f"`--graph-heads {DEFAULTS['graph_heads']}` |" in readme
    epsilon = re.search(r"epsilon of every LayerNorm: (\S+) \(fairseq, default\)", readme)
    assert epsilon and float(epsilon.group(1)) == DEFAULTS["layernorm_eps"]
    assert "fairseq's `</s>` (default)" in readme and DEFAULTS["decoder_start_symbol"] == "eos"


# ------------------------------------------------------- the recipe's schedule

PAPER_PEAK_LR = "0.0013975424859373686"  # 2 * 256^-0.5 * 8000^-0.5 (Section 4: lr 2, warmup 8,000, d 256)


def test_recipe_flags_reproduce_the_papers_noam_schedule():
    """examples/hiertransformer/README.md trains with fairseq's inverse_sqrt
    scheduler; with its flags the rate at every update number s equals
    Section 4's Noam schedule 2 * d^-0.5 * min(s^-0.5, s * 8000^-1.5)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim import build_optimizer
    from fairseq.optim.lr_scheduler import build_lr_scheduler

    readme = open(os.path.join(REPO_ROOT, "examples", "hiertransformer", "README.md"), encoding="utf-8").read()
    flags = [
        "--lr",
        PAPER_PEAK_LR,
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "8000",
        "--warmup-init-lr",
        "0",
    ]
    assert " ".join(flags) in readme
    # the authors' code: Adam (0.9, 0.998) with eps 1e-9, default lr 3 (hiersumm src/abstractive/optimizer.py,
    # src/train_abstractive.py)
    assert "--adam-betas '(0.9,0.998)' --adam-eps 1e-9" in readme
    assert "--lr 0.002096313728906053" in readme and 3 * 256**-0.5 * 8000**-0.5 == 0.002096313728906053
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            "dummy-data",
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "hiertransformer_tiny",
            "--optimizer",
            "adam",
            "--adam-betas",
            "(0.9,0.998)",
            *flags,
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    optimizer = build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    scheduler = build_lr_scheduler(cfg.lr_scheduler, optimizer)
    for step in (1, 2, 100, 4000, 7999, 8000, 8001, 20000, 100000, 500000):
        noam = 2 * 256**-0.5 * min(step**-0.5, step * 8000**-1.5)
        assert scheduler.step_update(step) == pytest.approx(noam, rel=1e-12)
        assert optimizer.get_lr() == pytest.approx(noam, rel=1e-12)
    assert max(2 * 256**-0.5 * min(s**-0.5, s * 8000**-1.5) for s in range(1, 20000)) == pytest.approx(
        1.40e-3, abs=5e-6
    )


# --------------------------------------------------- the title as the summarizer's input


@pytest.fixture(scope="module")
def titled_data_bins(tmp_path_factory):
    """The same raw clusters preprocessed with and without --title-document;
    split 'pair' holds two clusters that differ only in their title."""
    import json

    from mdsfair.preprocess.binarize import run
    from tests.utils import make_synthetic_jsonl

    work = tmp_path_factory.mktemp("titled")
    raw = make_synthetic_jsonl(str(work / "raw"), train=12, valid=2, test=2)
    cluster = {
        "id": "a",
        "title": "Lake Ontario ferry",
        "summary": "The ferry crosses the lake.",
        "documents": ["The ferry leaves at noon.\n\nIt carries cars and bikes.", "Tickets cost ten dollars."],
    }
    with open(os.path.join(raw, "pair.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(cluster) + "\n")
        f.write(json.dumps({**cluster, "id": "b", "title": "Toronto island airport"}) + "\n")
    bins = {}
    for name, extra in (("plain", []), ("titled", ["--title-document"])):
        dest = str(work / name)
        run(["--input-dir", raw, "--destdir", dest, "--vocab-size", "300", "--no-progress-bar", *extra])
        bins[name] = dest
    return bins


def load_split(data_bin, split, *extra):
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            "hiertransformer_tiny",
            "--dropout",
            "0",
            *extra,
        ],
    )
    task = tasks.setup_task(args)
    task.load_dataset(split)
    dataset = task.datasets[split]
    return task, args, dataset.collater([dataset[i] for i in range(len(dataset))])


def test_title_document_puts_the_title_first_as_its_own_paragraph(titled_data_bins):
    from mdsfair.preprocess.subword import SentencePieceEncoder

    _, _, plain = load_split(titled_data_bins["plain"], "pair")
    task, _, titled = load_split(titled_data_bins["titled"], "pair")
    encoder = SentencePieceEncoder(os.path.join(titled_data_bins["titled"], "spm.model"))
    title = [task.source_dictionary.index(s) for s in encoder.encode("Lake Ontario ferry")]
    n = len(title)
    plain_input, titled_input = plain["net_input"], titled["net_input"]
    bos, eos = task.source_dictionary.bos(), task.source_dictionary.eos()
    # example "a": <s> title | <s> the old stream, every structure id one higher
    row = titled_input["src_tokens"][0]
    assert row[: n + 1].tolist() == [bos] + title
    old_length = int(plain_input["src_lengths"][0])
    assert torch.equal(row[n + 1 : n + 1 + old_length], plain_input["src_tokens"][0, :old_length])
    for key in ("src_doc_ids", "src_para_ids", "src_sent_ids"):
        assert titled_input[key][0, : n + 1].tolist() == [0] * (n + 1)
        assert torch.equal(titled_input[key][0, n + 1 : n + 1 + old_length], plain_input[key][0, :old_length] + 1)
    assert int(titled_input["src_lengths"][0]) == old_length + n + 1
    assert row[old_length + n].item() == eos
    # the manifest records it, and the hub's encoder encodes a raw cluster the same way
    from mdsfair.data.manifest import read_manifest
    from mdsfair.preprocess.pipeline import ClusterEncoder

    manifest = read_manifest(titled_data_bins["titled"])
    assert manifest["title_document"] is True and read_manifest(titled_data_bins["plain"])["title_document"] is False
    hub = ClusterEncoder.from_data_bin(titled_data_bins["titled"], manifest, task.source_dictionary)
    encoded = hub.encode(
        {
            "title": "Lake Ontario ferry",
            "documents": ["The ferry leaves at noon.\n\nIt carries cars and bikes.", "Tickets cost ten dollars."],
        }
    )
    stored = task.datasets["pair"].source[0]
    assert list(encoded.tokens) == list(stored) and encoded.para_ids[:n].tolist() == [0] * n
    with pytest.raises(Exception, match="title"):
        hub.encode({"documents": ["No title here."]})


def test_the_title_reaches_the_encoder_through_the_global_layers(titled_data_bins):
    """Two clusters that differ only in their title: with --title-document the
    encoder states of the (same) paragraphs differ, through the global layers
    only (the title is its own block); without it the inputs are identical."""
    _, args, titled = load_split(titled_data_bins["titled"], "pair")
    task, _, plain = load_split(titled_data_bins["plain"], "pair")
    torch.manual_seed(0)
    model = task.build_model(args).eval()
    assert torch.equal(plain["net_input"]["src_tokens"][0], plain["net_input"]["src_tokens"][1])
    states = encode(model, {k: plain["net_input"][k] for k in ("src_tokens", "src_para_ids")})
    assert torch.allclose(states[0], states[1])

    def paragraph_states(model, batch):
        inputs = {k: batch["net_input"][k] for k in ("src_tokens", "src_para_ids")}
        out = encode(model, inputs)
        is_title = batch["net_input"]["src_para_ids"].eq(0)
        return [out[b][~is_title[b] & inputs["src_tokens"][b].ne(1)] for b in range(2)]

    a, b = paragraph_states(model, titled)
    assert a.shape == b.shape and not torch.allclose(a, b, atol=1e-4)
    no_global = load_split(titled_data_bins["titled"], "pair", "--global-layers", "0")
    torch.manual_seed(0)
    local_only = no_global[0].build_model(no_global[1]).eval()
    a, b = paragraph_states(local_only, titled)
    assert torch.allclose(a, b, atol=1e-6)


def test_max_paragraphs_counts_the_title_paragraph(titled_data_bins):
    _, _, titled = load_split(titled_data_bins["titled"], "pair", "--max-paragraphs", "2")
    para = titled["net_input"]["src_para_ids"][0]
    assert para.max().item() == 1 and para.eq(0).sum().item() > 1  # the title (with its <s>) and one paragraph
