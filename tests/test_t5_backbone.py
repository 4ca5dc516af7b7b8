"""T5 v1.1 as a backbone of the component model (issue 44, "Backbone
components"): the backbone flags (``--normalization rmsnorm``,
``--feed-forward gated-gelu``, ``--linear-biases off``, ``--attention-scaling
none``, ``--untie-output-embedding``) and ``--encoder-positions
t5-relative-bias`` make the component model compute what mdsfair's T5 model
(``mdsfair/models/t5.py``, equal to Hugging Face's, ``tests/test_t5.py``)
computes, on its weights renamed; HierEncDec's document attention and
document-scaled cross-attention then run on it."""

import argparse

import pytest
import torch
from fairseq.modules import MultiheadAttention

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.t5_shaped_models import (
    assert_contract_and_training,
    assert_same_hypotheses,
    assert_same_teacher_forced_logits,
    load_t5_weights,
    mdsfair_t5,
    t5_backbone_data,
    t5_shaped,
)
from tests.tolerances import assert_close_in_dtype


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return t5_backbone_data(tmp_path_factory, "t5_backbone")


def test_bart_keeps_its_backbone_and_the_flags_say_t5s():
    from mdsfair.modules.components import BackboneConfig

    assert BackboneConfig.of(argparse.Namespace()).is_barts  # a checkpoint without the flags is BART's
    t5 = BackboneConfig.of(argparse.Namespace(normalization="rmsnorm", linear_biases="off", attention_scaling="none"))
    assert not t5.is_barts and not t5.linear_bias and t5.feed_forward == "fairseq" and t5.rms_norm_eps == 1e-6


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


def test_t5_shaped_component_model_equals_mdsfairs_t5_in_float64(data):
    """The proof: T5 v1.1's choices on the component model, with the weights
    of mdsfair's T5 copied by name, give its teacher-forced logits (a padded
    batch of three) and its greedy and beam hypotheses (the task's
    static-shape generator, whose fast decoder modules fall back to the
    reference under a per-head mask, and fairseq's)."""
    built, component = t5_shaped(data)
    t5 = mdsfair_t5(built.task)
    checks.perturb_parameters(t5, seed=3, scale=0.1)
    load_t5_weights(component, t5)
    component, t5 = component.double().eval(), t5.double().eval()
    assert type(component.encoder.layers[0].final_layer_norm).__name__ == "T5LayerNorm"
    assert component.encoder.embed_positions is None and component.decoder.embed_positions is None
    assert component.decoder.output_projection.weight is not component.decoder.embed_tokens.weight

    sample = built.batch("valid", [0, 1, 2], component)
    assert_same_teacher_forced_logits(built, sample, t5, component)
    assert_same_hypotheses(built, sample, t5, component)


def test_the_seeds_methods_run_on_the_t5_backbone(data):
    """HierEncDec's document attention (the relative bias over the document
    rule) and document-scaled cross-attention (Eq. 3-5) on T5's backbone:
    incremental beam search gives the full forward's scores (the model
    contract's check), padding and batch composition change no example's
    output, a training step's loss is finite and falls."""
    built, model = t5_shaped(data, "--encoder-self-attention", "document", "--cross-attention", "document-scaled")
    checks.perturb_parameters(model, seed=1)
    model.eval()
    assert model.encoder.self_attention_component.name == "document"
    assert model.encoder.layers[0].self_attn.q_proj.bias is None and model.encoder.layers[0].self_attn.scaling == 1.0
    assert_contract_and_training(built, model)


def test_document_attention_with_the_bias_is_full_attention_within_one_document(data):
    """The relative bias enters the document rule as it enters full
    attention: on sources of one document each, ``document`` computes what
    ``full`` computes (same weights, float64)."""
    _, full = t5_shaped(data)
    built, document = t5_shaped(data, "--encoder-self-attention", "document")
    document.load_state_dict(full.state_dict())
    full, document = full.double().eval(), document.double().eval()
    bos, pad = built.task.source_dictionary.bos(), built.task.source_dictionary.pad()
    tokens = torch.tensor([[bos, 10, 11, 12, 13, 2], [pad, pad, bos, 20, 21, 2]])
    with torch.no_grad():
        expected = full.encoder(tokens, torch.tensor([6, 4]))["encoder_out"][0]
        actual = document.encoder(tokens, torch.tensor([6, 4]))["encoder_out"][0]
    torch.testing.assert_close(actual[:, 0], expected[:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(actual[2:, 1], expected[2:, 1], rtol=1e-12, atol=1e-12)


def test_components_that_cannot_run_on_t5s_backbone_are_refused(data):
    """A self-attention that takes no bias per head under the relative bias;
    a component that builds BART's attention on T5's backbone."""
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
        t5_shaped(data, "--cross-attention", "hepos")


def test_the_whole_models_gradients_under_activation_checkpointing(data):
    """The decoder's causal relative bias, a function of the trainable
    table computed once per pass, reaches every checkpointed decoder layer
    (as the encoder's reaches every encoder layer): a training step's
    gradients under ``--checkpoint-activations`` are those without (float64,
    one computation recomputed: equal to rounding)."""
    gradients = []
    for extra in ((), ("--checkpoint-activations",)):
        built, model = t5_shaped(data, *extra)
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
