"""LongT5 on the component model (issue 44, "The T5 family as backbones"):
``--encoder-self-attention local`` and ``transient-global``
(:mod:`mdsfair.modules.longt5_components`) on T5 v1.1's backbone flags and
``--encoder-positions t5-relative-bias`` compute what mdsfair's LongT5 model
(``mdsfair/models/t5.py``, equal to Hugging Face's, ``tests/test_longt5.py``)
computes, on its weights renamed; document-scaled cross-attention then runs
on it."""

import pytest
import torch

from tests import contract_checks as checks
from tests.t5_shaped_models import (
    T5_BACKBONE_FLAGS,
    assert_contract_and_training,
    assert_same_hypotheses,
    assert_same_teacher_forced_logits,
    load_t5_weights,
    mdsfair_t5,
    t5_backbone_data,
    t5_shaped,
)

#: the component model's flags of mdsfair's LongT5 tiny architectures (radius 3, global blocks of 4)
LONGT5_TINY_FLAGS = {
    "longt5_tiny": ("--encoder-self-attention", "transient-global", "--local-radius", "3", "--global-block-size", "4"),
    "longt5_local_tiny": ("--encoder-self-attention", "local", "--local-radius", "3"),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return t5_backbone_data(tmp_path_factory, "longt5_backbone")


def longt5_shaped(data, *flags):
    """The component model with LongT5's output layer (the token embedding, unscaled)."""
    return t5_shaped(data, *flags, backbone=T5_BACKBONE_FLAGS)


@pytest.mark.parametrize("arch", sorted(LONGT5_TINY_FLAGS))
def test_longt5_shaped_component_model_equals_mdsfairs_longt5_in_float64(data, arch):
    """The proof: LongT5's choices on the component model, with the weights
    of mdsfair's LongT5 copied by name, give its teacher-forced logits (a
    padded batch of three sources of many blocks, padded on the right as the
    task pads them and on the left) and its greedy and beam hypotheses."""
    built, component = longt5_shaped(data, *LONGT5_TINY_FLAGS[arch])
    longt5 = mdsfair_t5(built.task, arch)
    checks.perturb_parameters(longt5, seed=3, scale=0.1)
    load_t5_weights(component, longt5)
    component, longt5 = component.double().eval(), longt5.double().eval()
    assert type(component.encoder.layers[0].self_attn) is type(longt5.encoder.layers[0].self_attn)
    assert component.decoder.output_projection.weight is component.decoder.embed_tokens.weight

    sample = built.batch("valid", [0, 1, 2], component)
    net_input = sample["net_input"]
    assert net_input["src_lengths"].min() > 3 * 4  # every source spans more than three blocks of 4
    expected, real = assert_same_teacher_forced_logits(built, sample, longt5, component)
    # the blocks start at a row's first token: the same sources padded on the left give the same logits
    tokens, pad = net_input["src_tokens"], built.task.source_dictionary.pad()
    left_padded = tokens.gather(1, torch.argsort(tokens.ne(pad).long(), dim=1, stable=True))
    assert left_padded[:, 0].eq(pad).any() and not left_padded[:, -1].eq(pad).any()
    with torch.no_grad():
        from_left, _ = component(left_padded, net_input["src_lengths"], net_input["prev_output_tokens"])
    assert checks.close_in_model_dtype(from_left[real], expected[real])
    assert_same_hypotheses(built, sample, longt5, component)


def test_the_blocked_attention_reads_no_dense_bias_and_the_global_table_is_the_encoders(data):
    """The encoder computes no ``[B * H, T, T]`` bias for LongT5's attention;
    the global tokens' table is the encoder's, the local one the position
    component's."""
    built, model = longt5_shaped(data, *LONGT5_TINY_FLAGS["longt5_tiny"])
    names = dict(model.named_parameters())
    assert "encoder.global_relative_position_bias.weight" in names
    assert "encoder.relative_position_bias.relative_attention_bias.weight" in names
    assert "encoder.layers.0.self_attn.global_input_layer_norm.weight" in names
    calls = []
    position = model.encoder.position_component
    original = position.attention_bias
    position.attention_bias = lambda *args: calls.append(args) or original(*args)
    sample = built.batch("valid", [0, 1], model)
    with torch.no_grad():
        model.eval()(**sample["net_input"])
    assert not calls


def test_document_scaled_cross_attention_runs_on_longt5(data):
    """HierEncDec's document-scaled cross-attention (Eq. 3-5) over LongT5's
    transient-global encoder: incremental beam search gives the full
    forward's scores, padding and batch composition change no example's
    output, a training step's loss is finite and falls."""
    built, model = longt5_shaped(data, *LONGT5_TINY_FLAGS["longt5_tiny"], "--cross-attention", "document-scaled")
    checks.perturb_parameters(model, seed=1)
    model.eval()
    assert model.encoder.self_attention_component.name == "transient-global"
    assert_contract_and_training(built, model)


@pytest.mark.parametrize("attention", ["local", "transient-global"])
def test_longt5_attention_is_refused_on_barts_backbone(data, attention):
    """LongT5's attention is T5's: refused with BART's positions, and on
    BART's biased, scaled attention."""
    from tests import model_contract as contract

    with pytest.raises(ValueError, match="it needs --encoder-positions t5-relative-bias"):
        contract.ContractModel("multidoc_bart_tiny", data, "--encoder-self-attention", attention).build_model()
    with pytest.raises(ValueError, match="it needs T5's backbone: --linear-biases off --attention-scaling none"):
        contract.ContractModel(
            "multidoc_bart_tiny", data, "--encoder-positions", "t5-relative-bias", "--encoder-self-attention", attention
        ).build_model()


def test_the_encoders_gradients_under_activation_checkpointing(data):
    """The blocked bias, a function of the trainable tables, reaches every
    checkpointed encoder layer as a recorded input: the tables' and the
    layers' gradients under ``--checkpoint-activations`` are those without
    (float64, one computation recomputed: equal to rounding)."""
    flags = LONGT5_TINY_FLAGS["longt5_tiny"]
    gradients = []
    for extra in ((), ("--checkpoint-activations",)):
        built, model = longt5_shaped(data, *flags, *extra)
        model = model.double().train()
        net_input = built.batch("train", [0, 1], model)["net_input"]
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
        encoder_out["encoder_out"][0].pow(2).sum().backward()
        gradients.append({name: p.grad for name, p in model.encoder.named_parameters() if p.grad is not None})
    without, checkpointed = gradients
    assert "relative_position_bias.relative_attention_bias.weight" in without
    assert "global_relative_position_bias.weight" in without
    assert checkpointed.keys() == without.keys()
    for name, gradient in without.items():
        torch.testing.assert_close(checkpointed[name], gradient, rtol=1e-12, atol=1e-12, msg=name)
