"""T5 v1.1 as the component model (issue 44, "the backbone itself a set of
components"): the registered ``t5_v1_1`` architectures are the component
model on T5's backbone (equal to Hugging Face's on imported weights:
``tests/test_t5.py``), so HierEncDec's document attention and
document-scaled cross-attention run on an imported T5 (its contract, a
falling loss, generation through the hub); heads of a width of their own
(``--attention-head-dim``, T5 v1.1 small's shape) equal Hugging Face's and
are refused for the components that cannot take them; what cannot run on
T5's backbone is refused with the reason; training is Hugging Face's
(dropout after each stack's final norm, the decoder start row trained); a
checkpoint of the former T5 model loads to the same logits."""

import argparse
import inspect
import os
import re

import pytest
import torch
from fairseq.modules import MultiheadAttention

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.hf_t5_family import fairseq_hypotheses, hf_hypotheses, imported_model, padded_batch, real_lines, transformers
from tests.t5_family_checks import assert_contract_and_training, t5_backbone_data, t5_family
from tests.t5_fixtures import tiny_hf_t5
from tests.tolerances import assert_close_in_dtype


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return t5_backbone_data(tmp_path_factory, "t5_backbone")


@pytest.fixture(scope="module")
def imported_t5(tmp_path_factory):
    """The tiny Hugging Face T5 v1.1 (tests/t5_fixtures.py) imported with ``mdsfair-import hf-t5``: its folder."""
    from mdsfair.importers.hf_t5 import import_hf_t5

    root = tmp_path_factory.mktemp("imported_t5_backbone")
    import_hf_t5(tiny_hf_t5(str(root / "hf")), str(root / "imported"))
    return str(root / "imported")


def test_bart_keeps_its_backbone_and_the_flags_say_t5s():
    from mdsfair.modules.components import BackboneConfig

    assert BackboneConfig.of(argparse.Namespace()).is_barts  # a checkpoint without the flags is BART's
    t5 = BackboneConfig.of(argparse.Namespace(normalization="rmsnorm", linear_biases="off", attention_scaling="none"))
    assert not t5.is_barts and not t5.linear_bias and t5.feed_forward == "fairseq" and t5.rms_norm_eps == 1e-6
    assert t5.attention_width(32, 4) == 32 and not t5.stack_output_dropout  # unset: d_model / heads, no dropout


@pytest.mark.parametrize("incremental", [False, True])
def test_biased_self_attention_is_fairseqs_computation(incremental):
    """On BART's backbone and one ``[T, S]`` mask it computes fairseq's
    attention (float32 both: fairseq's softmax is float32), full and step by
    step with fairseq's cache; a mask per head is a different mask per head."""
    from mdsfair.modules.biased_self_attention import biased_self_attention

    torch.manual_seed(0)
    attention = MultiheadAttention(16, 4, self_attention=True).eval()
    x = torch.randn(5, 2, 16)
    future = torch.triu(torch.full((5, 5), float("-inf")), 1)
    with torch.no_grad():
        expected, _ = attention(x, x, x, attn_mask=future, need_weights=False)
        if incremental:
            state, steps = {}, []
            for step in range(5):
                out, _ = biased_self_attention(attention, x[step : step + 1], incremental_state=state)
                steps.append(out)
            actual = torch.cat(steps)
        else:
            actual, _ = biased_self_attention(attention, x, attn_mask=future)
    assert_close_in_dtype(actual, expected)  # float32, two computations: tolerance from the dtype
    per_head = future.expand(2 * 4, 5, 5).clone()
    per_head[1::4] = 0.0  # head 1 of every row sees the future
    with torch.no_grad():
        mixed, _ = biased_self_attention(attention, x, attn_mask=per_head)
    assert not torch.allclose(mixed, expected)


@pytest.mark.parametrize("incremental", [False, True])
def test_the_cross_attention_on_t5s_backbone_is_fairseqs_computation(incremental):
    """Without biases (T5's backbone) the decoder's attention over the
    encoder runs its own computation: fairseq's (float32 both), the source's
    keys and values computed once and kept in the cache, the per-head weights
    in fairseq's layout."""
    from mdsfair.modules.biased_self_attention import EncoderDecoderAttention

    torch.manual_seed(0)
    attention = EncoderDecoderAttention(16, 4, kdim=16, vdim=16, bias=False, encoder_decoder_attention=True).eval()
    query, source = torch.randn(3, 2, 16), torch.randn(6, 2, 16)
    padding = torch.tensor([[False] * 6, [True, True] + [False] * 4])
    call = dict(key=source, value=source, key_padding_mask=padding, static_kv=True, need_head_weights=True)
    with torch.no_grad():
        expected, expected_weights = MultiheadAttention.forward(attention, query, **call)
        if incremental:
            state = {}
            steps = [attention(query[step : step + 1], incremental_state=state, **call) for step in range(3)]
            assert state and all(value.size(2) == 6 for value in attention._get_input_buffer(state).values())
            actual, weights = torch.cat([s[0] for s in steps]), torch.cat([s[1] for s in steps], dim=2)
        else:
            actual, weights = attention(query, **call)
    assert_close_in_dtype(actual, expected)
    assert_close_in_dtype(weights, expected_weights)


def test_the_registered_t5_is_the_component_model_on_t5s_backbone(data):
    from mdsfair.models.component_model import ComponentBARTModel

    _built, model = t5_family(data)
    assert isinstance(model, ComponentBARTModel)
    layer = model.encoder.layers[0]
    assert type(layer.final_layer_norm).__name__ == "T5LayerNorm" and layer.self_attn.q_proj.bias is None
    assert layer.self_attn.scaling == 1.0 and model.encoder.layernorm_embedding is None
    assert model.encoder.embed_positions is None and model.decoder.embed_positions is None
    assert model.decoder.output_projection.weight is not model.decoder.embed_tokens.weight  # v1.1 unties it


def test_the_seeds_methods_run_on_the_t5_backbone(data):
    """HierEncDec's document attention (the relative bias over the document
    rule) and document-scaled cross-attention (Eq. 3-5) on ``t5_v1_1_tiny``:
    incremental beam search gives the full forward's scores (the model
    contract's check), padding and batch composition change no example's
    output, a training step's loss is finite and falls."""
    built, model = t5_family(data, "t5_v1_1_tiny", "--encoder-self-attention", "document", "--cross-attention",
                             "document-scaled")  # fmt: skip
    checks.perturb_parameters(model, seed=1)
    model.eval()
    assert model.encoder.self_attention_component.name == "document"
    assert model.encoder.layers[0].self_attn.q_proj.bias is None and model.encoder.layers[0].self_attn.scaling == 1.0
    assert_contract_and_training(built, model)


def test_the_seeds_methods_run_on_an_imported_t5(imported_t5):
    """An imported T5 v1.1 loaded through the hub with HierEncDec's document
    attention and document-scaled cross-attention: the imported weights in
    place, a summary generated, and four training steps on a cluster give a
    falling loss."""
    import mdsfair
    from mdsfair.models.t5 import T5Model

    mdsfair.register()
    hub = T5Model.from_pretrained(imported_t5, checkpoint_file="model.pt", encoder_self_attention="document",
                                  cross_attention="document-scaled")  # fmt: skip
    model = hub.models[0]
    assert model.encoder.self_attention_component.name == "document"
    assert model.decoder.cross_attention_component.name == "document-scaled"
    imported = torch.load(os.path.join(imported_t5, "model.pt"), weights_only=False)["model"]
    assert torch.equal(
        model.encoder.layers[0].self_attn.q_proj.weight, imported["encoder.layers.0.self_attn.q_proj.weight"]
    )
    lines = real_lines()
    summaries = hub.summarize([[lines[3], lines[4]]], beam=2, max_len_b=8)
    assert len(summaries) == 1 and isinstance(summaries[0], str)

    cluster = hub.encode_cluster({"id": "t5", "documents": [lines[3], lines[4]], "summary": lines[0]})
    dictionary = hub.task.target_dictionary
    tokens = torch.as_tensor(cluster.tokens[:200], dtype=torch.long)
    source = torch.cat([torch.tensor([dictionary.bos()]), tokens, torch.tensor([dictionary.eos()])])[None]
    target = torch.tensor([[5, 9, 33, 40, 17, dictionary.eos()]])
    prev_output_tokens = torch.cat([torch.tensor([[dictionary.eos()]]), target[:, :-1]], dim=1)
    from fairseq import checkpoint_utils  # a model of its own: the hub's is made fast for generation

    overrides = {"data": imported_t5, "encoder_self_attention": "document", "cross_attention": "document-scaled"}
    model = checkpoint_utils.load_model_ensemble([os.path.join(imported_t5, "model.pt")], overrides)[0][0].train()
    assert model.encoder.self_attention_component.name == "document"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        logits, _ = model(source, torch.tensor([source.size(1)]), prev_output_tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses


def test_document_attention_with_the_bias_is_full_attention_within_one_document(data):
    """The relative bias enters the document rule as it enters full
    attention: on sources of one document each, ``document`` computes what
    ``full`` computes (same weights, float64)."""
    _, full = t5_family(data)
    built, document = t5_family(data, "t5_v1_1_tiny", "--encoder-self-attention", "document")
    document.load_state_dict(full.state_dict())
    full, document = full.double().eval(), document.double().eval()
    bos, pad = built.task.source_dictionary.bos(), built.task.source_dictionary.pad()
    tokens = torch.tensor([[bos, 10, 11, 12, 13, 2], [pad, pad, bos, 20, 21, 2]])
    with torch.no_grad():
        expected = full.encoder(tokens, torch.tensor([6, 4]))["encoder_out"][0]
        actual = document.encoder(tokens, torch.tensor([6, 4]))["encoder_out"][0]
    torch.testing.assert_close(actual[:, 0], expected[:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(actual[2:, 1], expected[2:, 1], rtol=1e-12, atol=1e-12)


def test_what_cannot_run_on_t5s_backbone_is_refused(data):
    """A self-attention that takes no bias per head under the relative bias;
    a component that builds BART's attention on T5's backbone (HEPOS); a
    position component other than T5's relative
    bias under a T5 architecture (HierEncDec's restarted positions would read
    a table T5 has not)."""
    with pytest.raises(ValueError, match="takes no bias per head"):
        contract.ContractModel(
            "multidoc_bart_tiny",
            data,
            "--encoder-positions",
            "t5-relative-bias",
            "--encoder-self-attention",
            "longformer",
        ).build_model()
    with pytest.raises(ValueError, match="--cross-attention hepos builds BART's attention"):
        t5_family(data, "t5_v1_1_tiny", "--cross-attention", "hepos")
    with pytest.raises(ValueError, match="--encoder-positions document-restart cannot be used with the t5_v1_1_tiny"):
        t5_family(data, "t5_v1_1_tiny", "--encoder-positions", "document-restart")


def test_heads_of_their_own_width_equal_hugging_face_in_float64(tmp_path):
    """T5 v1.1 small's shape (6 heads of 64 on d_model 512): here 4 heads of
    12 on d_model 32, imported, give Hugging Face's teacher-forced logits in
    float64 and its greedy and beam-4 outputs."""
    from mdsfair.importers.hf_t5 import import_hf_t5

    hf_dir = tiny_hf_t5(str(tmp_path / "hf"), d_kv=12)
    summary, model, task, _out_dir = imported_model(import_hf_t5, hf_dir, str(tmp_path / "imported"))
    flags = summary["arch_flags"]
    assert flags[flags.index("--attention-head-dim") + 1] == "12"
    for layer in model.decoder.layers:
        for attention in (layer.self_attn, layer.encoder_attn):
            assert tuple(attention.q_proj.weight.shape) == (48, 32) and tuple(attention.out_proj.weight.shape) == (
                32,
                48,
            )
    hf_model = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir).double().eval()
    ids, mask = padded_batch([23, 15])
    targets = torch.tensor([[5, 9, 33, 40, 1, 0], [7, 12, 1, 0, 0, 0]])
    decoder_input = torch.cat([torch.zeros(2, 1, dtype=torch.long), targets[:, :-1]], dim=1)
    prev_output_tokens = decoder_input + 1
    prev_output_tokens[:, 0] = task.target_dictionary.eos()
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
        logits, _ = model(ids + 1, mask.sum(1), prev_output_tokens)
    assert_close_in_dtype(logits[..., 1:], expected)
    for beam in (1, 4):
        assert fairseq_hypotheses(model, task, ids, mask, beam, 12) == hf_hypotheses(hf_model, ids, mask, beam, 12)


@pytest.mark.parametrize(
    "arch, flags, refused",
    [
        ("t5_v1_1_tiny", ("--encoder-self-attention", "document"), "--encoder-self-attention document"),
        ("t5_v1_1_tiny", ("--cross-attention", "document-scaled"), "--cross-attention document-scaled"),
        ("t5_v1_1_tiny", ("--cross-attention", "sparse"), "--cross-attention sparse"),
        ("longt5_tiny", (), "--encoder-self-attention transient-global"),
        ("multidoc_bart_tiny", (), "--encoder-positions learned"),
    ],
)
def test_heads_of_their_own_width_are_refused_where_a_component_cannot_take_them(data, arch, flags, refused):
    """Document attention, the document-scaled and sparse cross-attentions
    (the sparse one's approximator reads the model's width), LongT5's
    blocked attentions and the decoder of learned positions (whose
    generation speed-up computes heads of d_model / heads): refused when the
    model is built, naming the component and the widths."""
    with pytest.raises(ValueError, match=f"{refused} takes heads of d_model / heads, and --encoder-attention-heads 4 x "
                                         "--attention-head-dim 12 != --encoder-embed-dim 32"):  # fmt: skip
        contract.ContractModel(arch, data, "--attention-head-dim", "12", *flags).build_model()
    contract.ContractModel(arch, data, "--attention-head-dim", "8", *flags).build_model()  # 4 x 8 = 32: accepted


def test_the_whole_models_gradients_under_activation_checkpointing(data):
    """The decoder's causal relative bias, a function of the trainable
    table computed once per pass, reaches every checkpointed decoder layer
    (as the encoder's reaches every encoder layer): a training step's
    gradients under ``--checkpoint-activations`` are those without (float64,
    one computation recomputed: equal to rounding)."""
    gradients = []
    for extra in ((), ("--checkpoint-activations",)):
        built, model = t5_family(data, "t5_v1_1_tiny", *extra)
        model = model.double().train()
        net_input = built.batch("train", [0, 1], model)["net_input"]
        logits = model(**net_input)[0]
        logits.pow(2).mean().backward()
        gradients.append({name: p.grad for name, p in model.named_parameters() if p.grad is not None})
    without, checkpointed = gradients
    assert "decoder.relative_position_bias.relative_attention_bias.weight" in without
    assert checkpointed.keys() == without.keys()
    for name, gradient in without.items():
        torch.testing.assert_close(checkpointed[name], gradient, rtol=1e-12, atol=1e-12, msg=name)


def test_each_stack_applies_dropout_after_its_final_layer_norm(data):
    """Hugging Face's ``T5Stack`` applies its dropout to the final layer
    norm's output; so do both stacks of the T5 architectures in training
    (``--stack-output-dropout``: exact zeros at about half the features
    under p = 0.5; none without it)."""
    from transformers.models.t5.modeling_t5 import T5Stack

    source = inspect.getsource(T5Stack.forward)
    assert re.search(r"self\.final_layer_norm\(hidden_states\)\s*\n\s*hidden_states = self\.dropout\(hidden_states\)",
                     source)  # fmt: skip
    from fairseq.modules import FairseqDropout

    zeros = {}
    for on in (False, True):
        built, model = t5_family(data)
        net_input = built.batch("train", [0, 1], model)["net_input"]
        model.train()
        for module in model.modules():  # only the stacks' own dropout, p = 0.5
            if isinstance(module, FairseqDropout):
                module.p = 0.0
        for stack in (model.encoder, model.decoder):
            stack.dropout_module.p, stack.stack_output_dropout = 0.5, on
        torch.manual_seed(0)
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
        real = ~encoder_out["encoder_padding_mask"][0].transpose(0, 1)
        features, _ = model.decoder(net_input["prev_output_tokens"], encoder_out, features_only=True)
        zeros[on] = (encoder_out["encoder_out"][0][real].eq(0).float().mean(), features.eq(0).float().mean())
    assert all(0.3 < fraction < 0.7 for fraction in zeros[True]) and all(f == 0 for f in zeros[False]), zeros
    _built, registered = t5_family(data)
    assert registered.encoder.stack_output_dropout and registered.decoder.stack_output_dropout  # T5's preset


def test_the_decoder_start_row_trains(data):
    """T5's decoder starts from ``<pad>``, whose embedding row Hugging Face
    trains: after a backward pass its gradient is not zero (fairseq's
    ``Embedding(padding_idx=pad)`` would give it none)."""
    built, model = t5_family(data)
    model.train()
    pad = built.task.target_dictionary.pad()
    assert model.decoder.start_index == pad
    loss, _sample_size, _log = built.build_criterion()(model, built.batch("train", [0, 1], model))
    loss.backward()
    assert model.decoder.embed_tokens.weight.grad[pad].abs().sum() > 0


#: The former T5 model's parameter names, by this model's: its feed-forward in ``ffn``, its stacks'
#: tables in ``position_bias`` (LongT5's global table inside it), no ``version`` of the stacks.
def former_name(name: str) -> str:
    name = re.sub(r"^((?:en|de)coder\.layers\.\d+\.)(fc1|fc2|fc_gate)\.", r"\1ffn.\2.", name)
    name = name.replace(
        "encoder.global_relative_position_bias.", "encoder.position_bias.global_relative_attention_bias."
    )
    return re.sub(r"^((?:en|de)coder)\.relative_position_bias\.", r"\1.position_bias.", name)


#: The flags of the component model the former T5 model did not have.
NEW_FLAGS = ("encoder_positions", "cross_attention", "normalization", "rms_norm_eps", "feed_forward",
             "linear_biases", "attention_scaling", "untie_output_embedding", "stack_output_dropout",
             "attention_dropout", "activation_dropout")  # fmt: skip


def test_a_checkpoint_of_the_former_t5_model_loads_to_the_same_logits(data, tmp_path):
    """A checkpoint in the former T5 model's layout (its parameter names,
    its flags: ``--t5-feed-forward``, ``--layer-norm-eps``, one
    ``--dropout``) loads as the component model: the same logits in float64,
    its one dropout on the attention and feed-forward too."""
    from fairseq import checkpoint_utils

    from mdsfair.importers.fairseq_bart import checkpoint_state, training_namespace

    built, model = t5_family(data)
    checks.perturb_parameters(model, seed=2)
    former_state = {former_name(name): value for name, value in model.state_dict().items()
                    if not name.endswith(".version")}  # fmt: skip
    assert "encoder.layers.0.ffn.fc_gate.weight" in former_state
    assert "decoder.position_bias.relative_attention_bias.weight" in former_state
    args = training_namespace("t5_v1_1_tiny", ["--dropout", "0.2"], data=built.data_dir)
    state = checkpoint_state(args, former_state)
    saved = vars(state["cfg"]["model"])  # a legacy model's configuration: its namespace
    for name in NEW_FLAGS:
        saved.pop(name, None)
    saved.update(t5_feed_forward="gated-gelu", layer_norm_eps=1e-6, share_decoder_input_output_embed=False)
    path = str(tmp_path / "former_t5.pt")
    torch.save(state, path)
    models, cfg, _task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": built.data_dir})
    loaded = models[0]
    assert (cfg.model.attention_dropout, cfg.model.activation_dropout, cfg.model.feed_forward) == (
        0.2,
        0.2,
        "gated-gelu",
    )
    assert loaded.encoder.layer_norm is not None and loaded.decoder.layer_norm is not None
    net_input = built.batch("valid", [0, 1, 2], model)["net_input"]
    with torch.no_grad():
        expected, _ = model.double().eval()(**net_input)
        actual, _ = loaded.double().eval()(**net_input)
    assert torch.equal(actual, expected)


def initialisation_std(name: str, d_model: int, d_kv: int, heads: int, d_ff: int):
    """The standard deviation Hugging Face's ``T5PreTrainedModel._init_weights``
    gives a parameter (``initializer_factor`` 1), by its name in this model
    or in Hugging Face's (``shared``, ``lm_head``, ``q``/``k``/``v``/``o``,
    ``wi_0``/``wi_1``/``wo``); None for a norm's weight (constant 1), and a
    KeyError for a parameter of neither."""
    kinds = [
        (r"(embed_tokens|output_projection|shared|lm_head)\.weight$", 1.0),
        (r"\.(q_proj|q)\.weight$", (d_model * d_kv) ** -0.5),
        (r"\.(k_proj|v_proj|k|v)\.weight$", d_model**-0.5),
        (r"\.(out_proj|o)\.weight$", (heads * d_kv) ** -0.5),
        (r"\.(fc1|fc_gate|wi_0|wi_1)\.weight$", d_model**-0.5),
        (r"\.(fc2|wo)\.weight$", d_ff**-0.5),
        (r"(relative_attention_bias|global_relative_position_bias)\.weight$", d_model**-0.5),
        (r"(layer_norm|global_input_layer_norm)\.weight$", None),
    ]
    for pattern, std in kinds:
        if re.search(pattern, name):
            return pattern, std
    raise KeyError(name)


def assert_initialised_as_t5(named_parameters, d_model: int, d_kv: int, heads: int, d_ff: int) -> None:
    """Every parameter, pooled by kind, has the mean 0 and the standard
    deviation of :func:`initialisation_std`, within 5 standard errors of
    ``n`` draws (the sample std's is ``sigma / sqrt(2 (n - 1))``, the mean's
    ``sigma / sqrt(n)``); norms' weights are exactly 1."""
    pooled = {}
    for name, parameter in named_parameters:
        pattern, std = initialisation_std(name, d_model, d_kv, heads, d_ff)
        if std is None:
            assert torch.equal(parameter, torch.ones_like(parameter)), name
            continue
        pooled.setdefault((pattern, std), []).append(parameter.detach().double().flatten())
    assert len(pooled) == 7, sorted(pooled)
    for (pattern, std), values in pooled.items():
        draws = torch.cat(values)
        n = draws.numel()
        assert abs(draws.std().item() - std) < 5 * std / (2 * (n - 1)) ** 0.5, (pattern, draws.std().item(), std, n)
        assert abs(draws.mean().item()) < 5 * std / n**0.5, (pattern, draws.mean().item(), std, n)


@pytest.mark.parametrize("arch", ["t5_v1_1_tiny", "longt5_tiny"])
def test_a_t5_trained_from_scratch_starts_from_hugging_faces_initialisation(data, arch):
    """T5 v1.1 and LongT5 built from scratch draw each parameter with the
    standard deviation of Hugging Face's ``_init_weights`` (factor 1: the
    embedding and untied output layer 1, the query ``(d_model d_kv)^-0.5``,
    key and value ``d_model^-0.5``, output ``(heads d_kv)^-0.5``, the
    feed-forward's ``d_model^-0.5`` and ``d_ff^-0.5``, the bias tables
    ``d_model^-0.5``), not BART's 0.02; the same formula holds for
    Hugging Face's own T5 of the tiny dimensions (d 32, 4 heads of 8, d_ff 64)."""
    _built, model = t5_family(data, arch)
    dimensions = dict(d_model=32, d_kv=8, heads=4, d_ff=64)
    assert model.encoder.layers[0].fc2.in_features == dimensions["d_ff"]
    assert model.encoder.layers[0].self_attn.head_dim == dimensions["d_kv"]
    assert_initialised_as_t5(model.named_parameters(), **dimensions)
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=176, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
                                   tie_word_embeddings=False)  # fmt: skip
    assert_initialised_as_t5(transformers.T5ForConditionalGeneration(config).named_parameters(), **dimensions)
