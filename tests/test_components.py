"""Systems as components (issue 31): the component registry, side inputs
declared by components, refusals, the combinations, and the ARCHITECTURE.md
walk-through: a toy attention registered inside the test combines with the
existing components and passes the model contract's checks."""

import copy

import pytest
import torch

from tests import model_contract as contract
from tests.tolerances import assert_close_in_dtype


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return contract.make_contract_data(str(tmp_path_factory.mktemp("components")))


def test_every_role_has_the_documented_components():
    from mdsfair.modules.components import component_names

    contract.mdsfair_architectures()  # registers mdsfair
    assert set(component_names("encoder_self_attention")) >= {"full", "document", "longformer"}
    assert set(component_names("encoder_positions")) >= {"learned", "sinusoidal", "document-restart"}
    assert set(component_names("cross_attention")) >= {"full", "document-scaled", "sparse"}


def test_presets_choose_their_components():
    from argparse import Namespace

    from fairseq.models import ARCH_CONFIG_REGISTRY

    contract.mdsfair_architectures()
    expected = {
        "hierencdec_bart_base": ("document", "document-restart", "document-scaled"),
        "led_base": ("longformer", "learned", "full"),
        "primera": ("longformer", "learned", "full"),
        "sparse_bart_base": ("full", "learned", "sparse"),
        "multidoc_bart_base": ("full", "learned", "full"),
        "primera_hierencdec": ("longformer", "document-restart", "document-scaled"),
        "led_sparse": ("longformer", "learned", "sparse"),
        "hierencdec_sparse": ("document", "document-restart", "sparse"),
        "dape_transformer": ("dependency", "document-aware", "full"),
    }
    for arch, components in expected.items():
        args = Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        assert (args.encoder_self_attention, args.encoder_positions, args.cross_attention) == components, arch
    args = Namespace(no_hierarchical_encoder=True, no_position_restart=True, no_hierarchical_decoder=True)
    ARCH_CONFIG_REGISTRY["hierencdec_bart_base"](args)
    assert (args.encoder_self_attention, args.encoder_positions, args.cross_attention) == ("full", "learned", "full")
    args = Namespace(no_hierarchical_encoder=True, encoder_self_attention="longformer")
    with pytest.raises(ValueError, match="--encoder-self-attention longformer contradicts --no-hierarchical-encoder"):
        ARCH_CONFIG_REGISTRY["hierencdec_bart_base"](args)


def test_dapes_components_combine_with_barts(data):
    """DAPE's dependency-guided attention and document-aware positions on
    BART's skeleton with HierEncDec's cross-attention: the arcs and documents
    are handed over, and each component changes the output."""
    flags = (
        "--encoder-self-attention",
        "dependency",
        "--encoder-positions",
        "document-aware",
        "--cross-attention",
        "document-scaled",
    )
    built = contract.ContractModel("multidoc_bart_tiny", data, *flags)
    model = built.build_model().eval()
    assert set(model.side_inputs()) == {"src_doc_ids", "src_dep_head", "src_dep_rel", "src_dep_word"}
    sample = built.batch("valid", [0, 1], model)
    assert {"src_dep_head", "src_dep_rel", "src_doc_ids"} <= set(sample["net_input"])
    with torch.no_grad():
        combined = model(**sample["net_input"])[0]
    plain = contract.ContractModel("multidoc_bart_tiny", data, "--cross-attention", "document-scaled")
    plain_model = plain.build_model().eval()
    plain_model.load_state_dict(model.state_dict(), strict=False)  # the shared weights
    with torch.no_grad():
        reference = plain_model(**plain.batch("valid", [0, 1], plain_model)["net_input"])[0]
    assert torch.isfinite(combined).all() and not torch.allclose(combined, reference, atol=1e-4)


def test_dependency_arcs_out_of_range_are_refused_by_the_batch_check(data):
    built = contract.ContractModel("multidoc_bart_tiny", data, "--encoder-self-attention", "dependency")
    model = built.build_model().eval()
    net_input = dict(built.batch("valid", [0, 1], model)["net_input"])
    length = net_input["src_tokens"].size(1)
    relations, heads = net_input["src_dep_rel"].clone(), net_input["src_dep_head"].clone()
    relations[0, 1] = 45  # one past the 45 relations
    heads[1, 0] = length
    with torch.no_grad():
        model(**net_input)
        with pytest.raises(
            ValueError, match=rf"^src_dep_rel \[2, {length}\] holds 45 at example 0, position 1: -1 for none, else"
        ):
            model(**{**net_input, "src_dep_rel": relations})
        with pytest.raises(
            ValueError,
            match=rf"^src_dep_head \[2, {length}\] holds {length} at example 1, position 0: -1 for none, else a",
        ):
            model(**{**net_input, "src_dep_head": heads})


def test_side_inputs_are_declared_handed_over_and_checked_by_name(data):
    built = contract.ContractModel("hierencdec_sparse_tiny", data)
    model = built.build_model().eval()
    assert model.side_inputs() == {"src_doc_ids": False, "src_sent_ids": True}
    sample = built.batch("valid", [0, 1], model)
    assert set(sample["net_input"]) == {
        "src_tokens",
        "src_lengths",
        "prev_output_tokens",
        "src_doc_ids",
        "src_sent_ids",
    }
    net_input = dict(sample["net_input"])
    with torch.no_grad():
        model(**net_input)
        with pytest.raises(ValueError, match="src_para_ids not declared by any component"):
            model(**net_input, src_para_ids=net_input["src_doc_ids"])
        with pytest.raises(ValueError, match=r"src_sent_ids \[2, \d+\] is not aligned to src_tokens \[2, \d+\]"):
            model(**{**net_input, "src_sent_ids": net_input["src_sent_ids"][:, :-1]})
        # the values, read with the encoder's other checks of the batch, before any layer runs
        split_sentence = net_input["src_sent_ids"].clone()
        split_sentence[0, 1] = split_sentence[0].max() + 1
        with pytest.raises(
            ValueError,
            match=r"^src_sent_ids \[2, \d+\] must be non-decreasing runs along each example \(one run per sentence\), "
            r"but example 0 goes from \d+ to \d+ at position 2$",
        ):
            model(**{**net_input, "src_sent_ids": split_sentence})
        no_document = net_input["src_doc_ids"].clone()
        no_document[1, 1] = -1
        with pytest.raises(
            ValueError,
            match=r"^src_doc_ids \[2, \d+\] is negative at a non-pad token of src_tokens \[2, \d+\] "
            r"\(example 1, position 1: -1\); every source token needs a document$",
        ):
            model(**{**net_input, "src_doc_ids": no_document})
        net_input.pop("src_sent_ids")
        with pytest.raises(ValueError, match=r"missing side input src_sent_ids \(needed by .*sparse"):
            model(**net_input)
    # a stock model declares nothing: the task hands it the base inputs only
    led = contract.ContractModel("led_tiny", data)
    assert set(led.batch("valid", [0], led.build_model())["net_input"]) == {
        "src_tokens",
        "src_lengths",
        "prev_output_tokens",
    }


def test_combinations_that_cannot_work_are_refused_with_the_reason(data):
    with pytest.raises(ValueError, match="document-scaled cannot be combined with .*longformer.*opens none with <s>"):
        contract.ContractModel(
            "multidoc_bart_tiny",
            data,
            "--encoder-self-attention",
            "longformer",
            "--global-attention",
            "doc-sep",
            "--cross-attention",
            "document-scaled",
            "--attention-window",
            "8",
        ).build_model()
    with pytest.raises(ValueError, match="not a registered component; choose one of"):
        from mdsfair.modules.components import component_class

        component_class("cross_attention", "no-such-attention")


def test_a_primera_import_restores_into_primera_hierencdec(data):
    """No new parameters: every tensor of a PRIMERA-shaped (led) model is one
    of primera_hierencdec's, with the same shape."""
    primera = contract.ContractModel("led_tiny", data, "--max-encoder-positions", "1024")
    combined = contract.ContractModel("primera_hierencdec_tiny", data, "--max-encoder-positions", "1024")
    led_state = primera.build_model().state_dict()
    model = combined.build_model()
    assert {k: tuple(v.shape) for k, v in led_state.items()} == {
        k: tuple(v.shape) for k, v in model.state_dict().items()
    }
    model.load_state_dict(led_state)


def test_led_sparse_restores_an_led_checkpoint_creating_the_approximator(data):
    led = contract.ContractModel("led_tiny", data).build_model()
    built = contract.ContractModel("led_sparse_tiny", data)
    model = built.build_model()
    state = copy.deepcopy(led.state_dict())
    model.upgrade_state_dict_named(state, "")
    model.load_state_dict(state)
    layer = model.decoder.layers[0].encoder_attn
    assert torch.equal(layer.sentence_attention.sentence_query_proj.weight, layer.q_proj.weight)
    assert set(model.approximator_parameter_names()) <= set(state)


# ----------------------------------------------------- the walk-through


@pytest.fixture()
def toy_attention():
    """ARCHITECTURE.md's walk-through: a new encoder self-attention kind is
    one module plus one registration. The toy attends to the token itself
    and its left neighbour only (a window of 2, causal), through fairseq's
    attention module so BART's parameter names stay."""
    from fairseq.modules import MultiheadAttention

    from mdsfair.modules.components import register_component, unregister_component
    from mdsfair.modules.self_attention_components import SelfAttentionComponent, fairseq_self_attention

    contract.mdsfair_architectures()

    @register_component("encoder_self_attention", "toy-left-neighbour")
    class LeftNeighbourAttention(SelfAttentionComponent):
        def build(self, layer, embed_dim, cfg):
            return fairseq_self_attention(MultiheadAttention, layer, embed_dim, cfg)

        def prepare(self, encoder, structure):
            length = structure.src_tokens.size(1)
            offset = torch.arange(length).unsqueeze(0) - torch.arange(length).unsqueeze(1)  # key - query
            return ~offset.le(0) | offset.lt(-1)  # True = masked

        def attend(self, attention, x, padding_mask, context, layer_index):
            mask = torch.zeros(context.shape, dtype=x.dtype, device=x.device).masked_fill(
                context.to(x.device), float("-inf")
            )
            return attention(
                query=x, key=x, value=x, key_padding_mask=padding_mask, attn_mask=mask, need_weights=False
            )[0]

    yield LeftNeighbourAttention
    unregister_component("encoder_self_attention", "toy-left-neighbour")


def test_a_toy_component_combines_and_passes_the_contract(data, toy_attention, tmp_path):
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    flags = (
        "--encoder-self-attention",
        "toy-left-neighbour",
        "--encoder-positions",
        "document-restart",
        "--cross-attention",
        "document-scaled",
    )
    built = contract.ContractModel("multidoc_bart_tiny", data, *flags)
    model = built.build_model().eval()
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    indices = built.shortest("valid", 3)
    sample = built.batch("valid", indices)
    # the toy really runs: the first source token sees only itself, unlike full attention
    assert isinstance(model.encoder.self_attention_component, toy_attention)

    # incremental beam search = full teacher-forced scores (the contract's check)
    gen_cfg = copy.deepcopy(built.cfg.generation)
    gen_cfg.beam, gen_cfg.max_len_b, gen_cfg.min_len, gen_cfg.max_len_a = 2, 6, 2, 0
    with torch.no_grad():
        hypotheses = built.task.inference_step(built.task.build_generator([model], gen_cfg), [model], sample)
    forwarded = built.batch("valid", indices, model)
    eos, pad = built.task.target_dictionary.eos(), built.task.source_dictionary.pad()
    for row, beams in enumerate(hypotheses):
        alone = contract.unpadded_example(forwarded, row, pad)
        for hypothesis in beams:
            with torch.no_grad():
                full = contract.teacher_forced_scores(model, alone, hypothesis["tokens"], eos)
            assert torch.allclose(full, hypothesis["positional_scores"], atol=1e-4), row

    # padding and batch composition do not change an example's output
    with torch.no_grad():
        batched = model(**forwarded["net_input"])[0]
        for row in range(len(indices)):
            alone = contract.unpadded_example(forwarded, row, pad)
            prev = forwarded["net_input"]["prev_output_tokens"][row : row + 1]
            single = model(**alone, prev_output_tokens=prev)[0]
            # float32, two computations: tolerance from dtype and scale (tests/tolerances.py)
            assert_close_in_dtype(single[0], batched[row])

    # a training step's loss falls, and the save / load round trip is exact
    model.train()
    trainer = Trainer(built.cfg, built.task, model, built.build_criterion())
    train = built.batch("train", [0, 1, 2, 3])
    losses = [trainer.train_step([train])["loss"] for _ in range(4)]
    assert losses[-1] < losses[0], losses
    path = str(tmp_path / "checkpoint.pt")
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(path, {"train_iterator": {"epoch": 1}, "val_loss": None})
    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([path], task=built.task)
    assert cfg.model.encoder_self_attention == "toy-left-neighbour"
    for name, value in model.state_dict().items():
        assert torch.equal(value, models[0].state_dict()[name]), name


# ----------------------------------------- the sparse decoder's training stages


def _moved(before, model):
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())}


@pytest.mark.parametrize("arch", ["led_sparse_tiny", "hierencdec_sparse_tiny"])
def test_sparse_training_stages_work_behind_other_encoders(data, arch):
    """As for sparse_bart (tests/test_sparse_bart.py): the KL-only stage
    trains the approximator alone and lowers the KL loss; the interleaved
    stage alternates the decoder (Eq. 13) and the approximator (Eq. 14),
    the encoder frozen."""
    from fairseq.trainer import Trainer

    kl_only = contract.ContractModel(
        arch, data, "--sparse-training-stage", "kl-only", "--optimizer", "adam", "--lr", "1e-2"
    )
    model = kl_only.build_model()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(model.approximator_parameter_names())
    trainer = Trainer(kl_only.cfg, kl_only.task, model, kl_only.build_criterion())
    sample = kl_only.batch("train", [0, 1], model)
    kls = [float(trainer.train_step([sample])["kl_loss"]) for _ in range(8)]
    assert kls[-1] < 0.6 * kls[0], kls

    interleaved = contract.ContractModel(arch, data, "--sparse-training-stage", "interleaved")
    model = interleaved.build_model()
    trainer = Trainer(interleaved.cfg, interleaved.task, model, interleaved.build_criterion())
    approximator = set(model.approximator_parameter_names())
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert any(n.startswith("encoder.layers") for n in frozen)
    sample = interleaved.batch("train", [0, 1, 2], model)
    for update in range(2):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        trainer.train_step([sample])
        moved = _moved(before, model)
        assert not moved & frozen
        if update == 0:
            assert moved and not moved & approximator
        else:
            assert moved == approximator


# ------------------------------------------------ the commands, end to end


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["primera_hierencdec_tiny", "led_sparse_tiny", "hierencdec_sparse_tiny"])
def test_combinations_train_generate_and_serve(data, arch, tmp_path):
    """fairseq-train (two updates), fairseq-generate on the test split, and
    the hub entry of the arch's family on raw clusters, each in its own process
    or as a user loads it."""
    import json
    import os

    from tests.utils import REPO_ROOT, USER_DIR, fairseq_cli, hypothesis_lines, short_training

    save_dir = str(tmp_path / "checkpoints")
    fairseq_cli(
        "fairseq_cli.train",
        [
            data["data-bin"],
            "--user-dir",
            USER_DIR,
            *contract.train_args(arch),
            *short_training(save_dir, updates=2, max_tokens=4096),
        ],
    )
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    output = fairseq_cli(
        "fairseq_cli.generate",
        [
            data["data-bin"],
            "--user-dir",
            USER_DIR,
            "--task",
            contract.family(arch).task_args[1],
            "--path",
            checkpoint,
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--max-len-b",
            "8",
            "--min-len",
            "2",
            "--batch-size",
            "2",
            "--cpu",
            "--max-source-positions",
            "512",
        ],
    )
    assert len(hypothesis_lines(output)) == 4

    hub = torch.hub.load(
        REPO_ROOT,
        contract.model_name(arch),
        model_dir=save_dir,
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=data["data-bin"],
        source="local",
    )
    raw = [json.loads(line) for line in open(os.path.join(data["raw"], "test.jsonl"), encoding="utf-8")]
    summaries = hub.summarize([cluster["documents"] for cluster in raw[:2]], beam=2, max_len_b=8, min_len=2)
    assert len(summaries) == 2 and all(isinstance(summary, str) for summary in summaries)


def test_an_led_checkpoint_restores_into_led_sparse_with_fairseq_train(data, tmp_path):
    """fairseq-train's --restore-file path (in process): an LED checkpoint
    restores into led_sparse once --allow-arch-change says the change is
    meant (mdsfair refuses it otherwise, naming the changed components); the
    approximator is created from LED's cross-attention."""
    from fairseq.trainer import Trainer

    from mdsfair.checkpoints.architecture_change import ArchitectureChangeError
    from tests.import_fixtures import restore_with_trainer

    led = contract.ContractModel("led_tiny", data)
    model = led.build_model()
    trainer = Trainer(led.cfg, led.task, model, led.build_criterion())
    path = str(tmp_path / "led.pt")
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(path, {"train_iterator": {"epoch": 1}, "val_loss": None})
    flags = [
        *contract.tiny_flags("led_sparse_tiny"),
        "--top-r",
        "3",
        "--max-source-positions",
        "512",
        "--max-target-positions",
        "256",
    ]
    sparse_task = ("multidoc_summarization_sparse", ("--criterion", "sparse_kl"))
    with pytest.raises(ArchitectureChangeError, match="--cross-attention 'full' in the checkpoint, 'sparse' now"):
        restore_with_trainer(data["data-bin"], path, "led_sparse_tiny", flags, str(tmp_path / "a"), *sparse_task)
    restored = restore_with_trainer(
        data["data-bin"], path, "led_sparse_tiny", [*flags, "--allow-arch-change"], str(tmp_path / "b"), *sparse_task
    ).model
    for name, value in model.state_dict().items():
        assert torch.equal(restored.state_dict()[name], value), name
    layer = restored.decoder.layers[0].encoder_attn
    assert torch.equal(layer.sentence_attention.sentence_key_proj.weight, layer.k_proj.weight)
