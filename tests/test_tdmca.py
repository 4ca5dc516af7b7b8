"""T-DMCA (Liu et al. 2018): its two attentions against naive per-position
oracles of the paper's rules (the authors' tensor2tensor code is TF1 and does
not run here), incremental decoding against the full pass, the decoder-only
packing through the task, training and fairseq-generate. The model contract
(``tests/test_model_contract.py``) runs ``tdmca`` and ``tdmca_tiny`` too; this
file runs the contract's checks on ``tdmca_tiny`` as well, in float64."""

import math
import os

import pytest
import torch

from mdsfair.modules.local_attention import CausalLocalSelfAttention
from mdsfair.modules.memory_compressed_attention import CausalMemoryCompressedSelfAttention
from tests import contract_checks as checks
from tests import model_contract as contract
from tests.tolerances import assert_close_in_dtype
from tests.utils import (
    USER_DIR,
    fairseq_cli,
    generation_command,
    hypothesis_lines,
    model_on_dictionary,
    short_training,
    toy_dictionary,
)


def heads_of(x, module, projection):
    """``projection(x)`` ``[N, D]`` as ``[heads, N, d]``."""
    return projection(x).view(x.size(0), module.num_heads, module.head_dim).transpose(0, 1)


def local_attention_oracle(module: CausalLocalSelfAttention, x):
    """One query at a time: softmax over the keys j <= i of the query's block
    and the previous one (tensor2tensor's masked_local_attention_1d)."""
    q, k, v = (heads_of(x, module, p) for p in (module.q_proj, module.k_proj, module.v_proj))
    block = module.block_length or x.size(0) + 1  # None: full causal attention, one block
    outputs = []
    for i in range(x.size(0)):
        keys = [j for j in range(i + 1) if j // block >= i // block - 1]
        scores = torch.einsum("hd,hkd->hk", q[:, i], k[:, keys]) / math.sqrt(module.head_dim)
        outputs.append(torch.einsum("hk,hkd->hd", torch.softmax(scores, dim=-1), v[:, keys]).reshape(-1))
    return module.out_proj(torch.stack(outputs))


def memory_compressed_oracle(module: CausalMemoryCompressedSelfAttention, x):
    """One query at a time: slot m = sum_r W_r K_{cm+r} + b over the
    projected keys (values alike), visible when cm + c - 1 <= i, plus a null
    logit 0 with a zero value (mesh-tensorflow's extra_logit)."""
    c = module.compression
    keys, values = module.k_proj(x), module.v_proj(x)

    def slot(convolution, projected, m):
        weight, bias = convolution.weight, convolution.bias  # [D_out, D_in, c]
        return bias + sum(weight[:, :, r] @ projected[c * m + r] for r in range(c))

    q = heads_of(x, module, module.q_proj)
    outputs = []
    for i in range(x.size(0)):
        visible = [m for m in range(x.size(0) // c) if c * m + c - 1 <= i]
        head_output = torch.zeros(module.num_heads, module.head_dim, dtype=x.dtype)
        if visible:
            k = torch.stack([slot(module.k_compression, keys, m) for m in visible]).view(
                len(visible), module.num_heads, module.head_dim
            )
            v = torch.stack([slot(module.v_compression, values, m) for m in visible]).view(
                len(visible), module.num_heads, module.head_dim
            )
            scores = torch.einsum("hd,mhd->hm", q[:, i], k) / math.sqrt(module.head_dim)
            scores = torch.cat([scores, scores.new_zeros(module.num_heads, 1)], dim=-1)
            weights = torch.softmax(scores, dim=-1)[:, :-1]
            head_output = torch.einsum("hm,mhd->hd", weights, v)
        outputs.append(head_output.reshape(-1))
    return module.out_proj(torch.stack(outputs))


@pytest.mark.parametrize("length", [1, 5, 8, 13, 20])
@pytest.mark.parametrize("block_length", [4, None], ids=["blocks-of-4", "full"])
def test_local_attention_is_the_block_rule(length, block_length):
    torch.manual_seed(0)
    module = CausalLocalSelfAttention(12, 3, block_length=block_length).double().eval()
    x = torch.randn(2, length, 12, dtype=torch.float64)
    with torch.no_grad():
        full = module(x)
        for row in range(2):
            torch.testing.assert_close(full[row], local_attention_oracle(module, x[row]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("length", [1, 2, 3, 7, 12, 14])
@pytest.mark.parametrize("compression", [1, 3])
def test_memory_compressed_attention_is_the_strided_convolution_rule(length, compression):
    torch.manual_seed(0)
    module = CausalMemoryCompressedSelfAttention(12, 3, compression=compression).double().eval()
    x = torch.randn(2, length, 12, dtype=torch.float64)
    with torch.no_grad():
        full = module(x)
        for row in range(2):
            oracle = memory_compressed_oracle(module, x[row])
            torch.testing.assert_close(full[row], oracle, rtol=0, atol=1e-12)


def test_the_first_compressed_queries_see_nothing_and_output_the_bias():
    """Positions 0 and 1 precede the first complete window (c = 3): the null
    logit takes all the weight, so their output is out_proj's bias."""
    torch.manual_seed(0)
    module = CausalMemoryCompressedSelfAttention(12, 3, compression=3).double().eval()
    with torch.no_grad():
        output = module(torch.randn(1, 6, 12, dtype=torch.float64))
    torch.testing.assert_close(output[0, :2], module.out_proj.bias.expand(2, -1), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["local", "full", "memory-compressed"])
def test_steps_equal_the_full_pass_with_rows_of_different_lengths(kind):
    """Rows whose first pass covers 5 and 9 positions, then steps at
    per-row positions: the outputs of the full pass over each row."""
    torch.manual_seed(0)
    if kind != "memory-compressed":
        module = CausalLocalSelfAttention(12, 3, block_length=4 if kind == "local" else None).double().eval()
    else:
        module = CausalMemoryCompressedSelfAttention(12, 3, compression=3).double().eval()
    lengths, steps = torch.tensor([5, 9]), 7
    x = torch.randn(2, 9 + steps, 12, dtype=torch.float64)
    with torch.no_grad():
        cache = {}
        module(x[:, :9], cache=cache, lengths=lengths)
        for step in range(steps):
            position = lengths + step
            new = torch.stack([x[row, position[row]] for row in range(2)]).unsqueeze(1)
            output = module.step(new, position, cache)
            for row in range(2):
                p = int(position[row])
                expected = module(x[row : row + 1, : p + 1])[0, p]
                torch.testing.assert_close(output[row, 0], expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ the model


def build(arch: str, dictionary, **flags):
    """The model of ``arch`` on ``dictionary`` (float64, eval mode), its
    parameters perturbed so that the outputs differ across positions."""
    model = model_on_dictionary(arch, dictionary, **flags)
    checks.perturb_parameters(model, seed=0, scale=0.2)
    return model


def toy_batch(dictionary, lengths=(11, 6), target_length=9, seed=1):
    """Right-padded sources of ``lengths`` ending in ``</s>`` and teacher-forced targets."""
    generator = torch.Generator().manual_seed(seed)
    first_word, vocabulary = dictionary.nspecial, len(dictionary)
    src_tokens = torch.full((len(lengths), max(lengths)), dictionary.pad())
    for row, length in enumerate(lengths):
        src_tokens[row, : length - 1] = torch.randint(first_word, vocabulary, (length - 1,), generator=generator)
        src_tokens[row, length - 1] = dictionary.eos()
    target = torch.randint(first_word, vocabulary, (len(lengths), target_length), generator=generator)
    target[:, -1] = dictionary.eos()
    prev_output_tokens = torch.cat([target.new_full((len(lengths), 1), dictionary.eos()), target[:, :-1]], dim=1)
    return src_tokens, torch.tensor(lengths), prev_output_tokens, target


def test_the_paper_layer_pattern_block_and_compression():
    dictionary = toy_dictionary()
    model = build("tdmca", dictionary)
    kinds = "".join(
        "L" if isinstance(layer.self_attn, CausalLocalSelfAttention) else "M" for layer in model.decoder.layers
    )
    assert kinds == "LMLML"
    local, compressed = model.decoder.layers[0].self_attn, model.decoder.layers[1].self_attn
    assert local.block_length == 256
    assert compressed.k_compression.kernel_size == compressed.k_compression.stride == (3,)
    assert compressed.v_compression.kernel_size == compressed.v_compression.stride == (3,)
    assert (model.decoder.embed_dim, local.num_heads, model.decoder.layers[0].fc1.out_features) == (512, 8, 2048)
    assert not list(model.encoder.parameters())


def test_the_decoder_reads_source_then_summary_as_one_causal_sequence():
    """The summary outputs are those of one language model over
    ``[source ; </s> ; summary]`` (a row alone, unpadded); a later summary
    token changes no earlier output; padding and the other row change nothing."""
    dictionary = toy_dictionary()
    model = build("tdmca_tiny", dictionary)
    src_tokens, src_lengths, prev_output_tokens, _ = toy_batch(dictionary)
    with torch.no_grad():
        batch_logits = model(src_tokens, src_lengths, prev_output_tokens)[0]
        for row in range(2):
            length = int(src_lengths[row])
            sequence = torch.cat([src_tokens[row, :length], prev_output_tokens[row]]).unsqueeze(0)
            positions = torch.arange(sequence.size(1)).unsqueeze(0)
            x = model.decoder.embed(sequence, positions)
            for layer in model.decoder.layers:
                x = layer(x)
            language_model = model.decoder.output_layer(model.decoder.layer_norm(x))[0, length:]
            assert_close_in_dtype(batch_logits[row], language_model)
        changed = prev_output_tokens.clone()
        changed[:, 5] = dictionary.nspecial + 3
        changed_logits = model(src_tokens, src_lengths, changed)[0]
        assert torch.equal(changed_logits[:, :5], batch_logits[:, :5])
        assert not torch.allclose(changed_logits[:, 5:], batch_logits[:, 5:])


def test_incremental_decoding_with_reordering_equals_full_decoding():
    dictionary = toy_dictionary()
    model = build("tdmca_tiny", dictionary)
    src_tokens, src_lengths, prev_output_tokens, _ = toy_batch(dictionary)
    net_input = {"src_tokens": src_tokens, "src_lengths": src_lengths}
    checks.check_reordered_incremental_decoding_equals_full_decoding(model, net_input, steps=12)


def test_the_pattern_takes_three_letters_and_refuses_others():
    from mdsfair.models.tdmca import layer_pattern

    assert layer_pattern("lmlml") == "LMLML"
    dictionary = toy_dictionary()
    decoder = build("tdmca_tiny", dictionary, layer_pattern="FMF").decoder
    assert [layer.self_attn.block_length for layer in decoder.layers[::2]] == [None, None]
    with pytest.raises(ValueError, match=r"L \(local\), M \(memory-compressed\) and F"):
        layer_pattern("LXL")


# ------------------------------------------------------------ the contract


def test_the_contract_checks_in_float64(contract_data, tmp_path):
    built_model = contract.ContractModel("tdmca_tiny", contract_data)
    model = built_model.build_model().double().eval()
    checks.perturb_parameters(model, seed=0)
    checks.check_forward_shapes_padding_and_batch_composition(built_model, model)
    checks.check_incremental_beam_search_equals_full_decoding(built_model, model)
    sample = built_model.batch("valid", built_model.shortest("valid", 3), model)
    checks.check_reordered_incremental_decoding_equals_full_decoding(model, sample["net_input"])
    trained = built_model.build_model().train()
    checks.check_every_parameter_gets_a_gradient(
        trained, built_model.build_criterion(), built_model.batch("train", [0, 1, 2, 3], trained)
    )
    checks.check_save_and_load_round_trip(built_model, built_model.build_model(), str(tmp_path / "checkpoint.pt"))


def test_the_static_generator_gives_the_beams_of_fairseqs_generator(contract_data):
    """The task's default generator (the static-shape beam search, which
    keeps finished sources as padding and never reorders the encoder output)
    and fairseq's give the same n-best lists, in float64."""
    from mdsfair.generation.static_decoding import StaticShapeSequenceGenerator

    built_model = contract.ContractModel("tdmca_tiny", contract_data)
    model = built_model.build_model().double().eval()
    checks.perturb_parameters(model, seed=2, scale=0.2)
    task, sample = built_model.task, built_model.batch("test", [0, 1, 2, 3], model)
    generation = built_model.cfg.generation
    generation.beam, generation.max_len_a, generation.max_len_b, generation.min_len = 3, 0, 10, 2
    beams = {}
    for static in (True, False):
        task.cfg.static_decoding, task.cfg.fairseq_generator = static, not static
        generator = task.build_generator([model], generation)
        assert isinstance(generator, StaticShapeSequenceGenerator) == static
        with torch.no_grad():
            beams[static] = task.inference_step(generator, [model], sample)
    task.cfg.static_decoding = task.cfg.fairseq_generator = False
    for ours, theirs in zip(beams[True], beams[False]):
        assert [h["tokens"].tolist() for h in ours] == [h["tokens"].tolist() for h in theirs]
        for mine, reference in zip(ours, theirs):
            assert mine["score"].item() == pytest.approx(reference["score"].item(), abs=1e-5)
    assert any(len(hypotheses[0]["tokens"]) > 2 for hypotheses in beams[True])


@pytest.mark.slow
def test_trains_and_generates_through_the_task_and_loads_through_the_hub(tmp_path, tiny_data):
    data_bin = tiny_data["data-bin"]
    save_dir = str(tmp_path / "checkpoints")
    task = [data_bin, "--user-dir", USER_DIR, "--task", "multidoc_summarization"]
    task += ["--max-source-positions", "400", "--max-target-positions", "100"]
    log = fairseq_cli(
        "fairseq_cli.train",
        task
        + ["--arch", "tdmca_tiny", "--criterion", "label_smoothed_cross_entropy"]
        + short_training(save_dir, updates=2)
        + ["--log-format", "simple"],
    )
    assert "done training" in log
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    output = fairseq_cli(
        "fairseq_cli.generate", generation_command(data_bin, checkpoint, "--user-dir", USER_DIR, beam=2)
    )
    assert len(hypothesis_lines(output)) == 4

    import json

    import mdsfair
    from mdsfair.models.tdmca import TDMCAModel

    mdsfair.register()
    hub = TDMCAModel.from_pretrained(save_dir, checkpoint_file="checkpoint_last.pt", data_name_or_path=data_bin)
    clusters = [json.loads(line) for line in open(os.path.join(tiny_data["raw"], "test.jsonl"))]
    summaries = hub.summarize(clusters[:2], beam=2, max_len_b=8)
    assert len(summaries) == 2 and all(isinstance(summary, str) for summary in summaries)


# ------------------------------------------------------------ the benchmark


def test_the_benchmark_measures_both_systems_and_records_the_ratios(tmp_path, capsys):
    """benchmarks/tdmca.py at toy size: a row per system and length and one
    of tdmca / full ratios, the device named, a results file of its command."""
    import json

    from benchmarks import results, tdmca

    out = tmp_path / "tdmca.json"
    toy = ["--lengths", "64", "--dim", "32", "--heads", "4", "--block-length", "16", "--target-tokens", "8"]
    tdmca.main([*toy, "--steps", "1", "--vocab-size", "100", "--json", str(out)])
    record = json.loads(out.read_text())
    assert results.problems(record) == [] and record["device"]
    assert [row["system"] for row in record["rows"]] == ["tdmca", "full", "tdmca / full"]
    ratios = record["rows"][2]
    assert ratios["memory_ratio"] == pytest.approx(record["rows"][0]["peak_mib"] / record["rows"][1]["peak_mib"])
    printed = capsys.readouterr().out
    assert printed.startswith("device: ") and "tdmca" in printed and "x" in printed


# ------------------------------------------------------------ the papers


def test_the_sizes_and_the_table_row_are_the_hierarchical_transformer_papers():
    """The recipe's sizes and its WikiSum row as Liu & Lapata 2019 state them
    (Sec. 4 and Table 2), and the tdmca architecture's sizes."""
    from tests.utils import paper_text

    text = paper_text("hiertransformer-liu-lapata2019.txt")
    assert "The model has 5 layers as in Liu et al. (2018). Its hidden size is 512" in text
    assert "feed-forward hidden size is 2, 048" in text
    assert "truncated to 3,000 tokens" in text
    assert "T-DMCA (3000 tokens) 40.77 25.60 34.90" in text
    assert "T-DMCA is the best performing model of Liu et al. (2018)" in " ".join(text.split())
    model = build("tdmca", toy_dictionary())
    assert len(model.decoder.layers) == 5 and model.decoder.embed_dim == 512
    assert model.decoder.layers[0].fc1.out_features == 2048
    readme = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "tdmca", "README.md")).read()
    assert "40.77 / 25.60 / 34.90" in readme and "--max-source-positions 3000" in readme


#: A local snapshot of tensor2tensor, the authors' code (``fetch github:tensorflow/tensor2tensor``).
TENSOR2TENSOR_REPO = os.environ.get("TENSOR2TENSOR_REPO", "/work/.mirror/tensorflow+tensor2tensor/repo")


def tensor2tensor_source(path):
    """The text of ``path`` in the tensor2tensor snapshot, its whitespace runs made single spaces."""
    import subprocess

    if not os.path.isdir(TENSOR2TENSOR_REPO):
        pytest.skip(f"no snapshot of tensorflow/tensor2tensor at {TENSOR2TENSOR_REPO} (TENSOR2TENSOR_REPO)")
    text = subprocess.run(
        ["git", f"--git-dir={TENSOR2TENSOR_REPO}", "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout
    return " ".join(text.split())


def test_the_pattern_block_and_compression_are_the_authors_tensor2tensor_settings():
    """The authors' code, tensor2tensor: ``transformer_moe_prepend_8k`` (decoder-only over prepended
    inputs) sets ``layer_types = "locm/redm/locm-moe/redm/locm"`` (``locm``: masked local attention,
    ``redm``: masked memory-compressed attention), ``common_attention.py`` sets
    ``attention_loc_block_length`` 256 and ``attention_red_factor`` 3, and ``conv_elems_1d``
    compresses with ``kernel_size=(1, factor), strides=(1, factor)``: the tdmca architecture's
    pattern (without the mixture of experts), block and convolution."""
    moe = tensor2tensor_source("tensor2tensor/models/research/transformer_moe.py")
    settings = moe[moe.index("def transformer_moe_prepend_8k") :]
    settings = settings[: settings.index("return hparams")]
    assert 'hparams.layer_types = "locm/redm/locm-moe/redm/locm"' in settings
    assert '"loc/red/loc/red": Alternate between local and memory compressed attention' in moe
    attention = tensor2tensor_source("tensor2tensor/layers/common_attention.py")
    assert 'hparams.add_hparam("attention_loc_block_length", 256)' in attention
    assert 'hparams.add_hparam("attention_red_factor", 3)' in attention
    assert 'hparams.add_hparam("attention_red_type", "conv")' in attention
    assert "kernel_size=(1, factor), strides=(1, factor)" in attention
    assert "locm=local_attention_masked_fn," in attention and "redm=compressed_attention_masked_fn," in attention

    letters = {"locm": "L", "redm": "M"}
    pattern = "".join(letters[kind.split("-")[0]] for kind in "locm/redm/locm-moe/redm/locm".split("/"))
    model = build("tdmca", toy_dictionary())
    kinds = "".join(
        "L" if isinstance(layer.self_attn, CausalLocalSelfAttention) else "M" for layer in model.decoder.layers
    )
    assert kinds == pattern == "LMLML"
    assert model.decoder.layers[0].self_attn.block_length == 256
    compression = model.decoder.layers[1].self_attn.k_compression
    assert compression.kernel_size == compression.stride == (3,)
