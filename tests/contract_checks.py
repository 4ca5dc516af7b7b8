"""The model contract's checks, one function each, shared by its two suites:
``tests/test_model_contract.py`` runs them over every registered mdsfair
architecture, ``tests/test_component_contract.py`` over every registered
component (each choice of each role, the other roles at their defaults).

Each check takes a :class:`tests.model_contract.ContractModel` (the task,
its batches) and a model built from it, in the dtype the suite chose, and
asserts; the comparisons of two computations use
:func:`close_in_model_dtype`.
"""

import copy
from typing import Dict, Sequence

import torch

from tests import model_contract as contract
from tests.tolerances import close_in_dtype, tolerance

#: A float64 model is not float64 throughout: fairseq's attention softmax
#: (``fairseq.utils.softmax``, ``dtype=torch.float32``, on the path of
#: every cross-attention and of every incremental step) and its gelu
#: (``F.gelu(x.float())``) compute in float32 (see
#: ``tests/test_golden_outputs.py``). Two computations of a float64 model
#: therefore agree to float32 round-off of those operations only: measured
#: below 0.1 float32 ulp of the largest logit (an incremental step against
#: the full pass, 8e-9 at 1.65); 16 ulps leave room for another CPU's
#: vector units, far below a real defect (a cache or encoder row that is not
#: reordered moves logits by 1e-2).
FLOAT64_MODEL_FLOAT32_ULPS = 16


def close_in_model_dtype(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two computations of a model's output agree: a float32 model
    within :func:`tests.tolerances.close_in_dtype`; a float64 model within
    :data:`FLOAT64_MODEL_FLOAT32_ULPS` float32 ulps of the largest value."""
    if expected.dtype == torch.float64:
        atol, rtol = tolerance(expected.float(), FLOAT64_MODEL_FLOAT32_ULPS)
        return torch.allclose(actual, expected, atol=atol, rtol=rtol)
    return close_in_dtype(actual, expected)


def perturb_parameters(model, seed: int, scale: float = 0.05) -> None:
    """Seeded noise on every parameter: a sharper model than the
    initialization, whose beams hold distinct hypotheses."""
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator) * scale
            parameter.add_(noise.to(device=parameter.device, dtype=parameter.dtype))


def check_forward_shapes_padding_and_batch_composition(built_model: contract.ContractModel, model) -> None:
    """Output shapes and finite outputs; every example's outputs are those
    it gets alone (no padding) and in a batch of another composition and
    order. ``model`` is in evaluation mode."""
    if built_model.family is contract.CONTENT_SELECTOR:
        check_content_selector_batch_composition(built_model, model)
        return
    indices = built_model.shortest("valid", 3)
    sample = built_model.batch("valid", indices, model)
    arch = built_model.arch
    if not built_model.family.generates:
        scores = model(**sample["net_input"])
        assert scores.shape == sample["target"].shape and torch.isfinite(scores).all()
        other = built_model.batch("valid", indices[::-1][:2], model)
        reordered = model(**other["net_input"])
        clusters = sample["net_input"]["paragraph_cluster"]
        first = scores[clusters == 2]
        assert torch.allclose(reordered[other["net_input"]["paragraph_cluster"] == 0], first, atol=1e-5)
        return
    pad = built_model.task.target_dictionary.pad()
    with torch.no_grad():
        logits, extra = model(**sample["net_input"])
    batch_size, target_length = sample["target"].shape
    assert logits.shape == (batch_size, target_length, len(built_model.task.target_dictionary))
    assert isinstance(extra, dict) and torch.isfinite(logits).all()
    assert sample["net_input"]["src_tokens"].eq(pad).any(), "the batch must hold padding"
    # another composition and order: examples 2 and 0 only
    other = built_model.batch("valid", [indices[2], indices[0]], model)
    with torch.no_grad():
        other_logits = model(**other["net_input"])[0]
    for row, original in ((0, 2), (1, 0)):
        real = other["target"][row].ne(pad)
        length = int(real.sum())
        assert close_in_model_dtype(other_logits[row, :length], logits[original, :length]), arch
    # each example alone, without source or target padding
    for index in range(batch_size):
        length = int(sample["target"][index].ne(pad).sum())
        alone = contract.unpadded_example(sample, index, built_model.task.source_dictionary.pad())
        prev = sample["net_input"]["prev_output_tokens"][index : index + 1, :length]
        with torch.no_grad():
            alone_logits = model(**alone, prev_output_tokens=prev)[0]
        assert close_in_model_dtype(alone_logits[0], logits[index, :length]), (arch, index)


def check_content_selector_batch_composition(built_model: contract.ContractModel, model) -> None:
    """LoBART's content selector: finite outputs of the right shapes, and
    every cluster's summary logits, sentence attention and extractive logits
    in a padded batch are those it gets alone."""
    indices = built_model.shortest("valid", 3)
    sample = built_model.batch("valid", indices, model)
    with torch.no_grad():
        logits, extra = model(**sample["net_input"])
    sentences = sample["net_input"]["sentence_tokens"].ne(built_model.task.source_dictionary.pad()).any(-1)
    assert logits.shape[:2] == sample["target"].shape and torch.isfinite(logits).all()
    assert extra["extraction_logits"].shape == sentences.shape
    assert extra["sentence_attention"].shape == (*sample["target"].shape, sentences.size(1))
    for row, index in enumerate(indices):
        alone = built_model.batch("valid", [index], model)
        with torch.no_grad():
            alone_logits, alone_extra = model(**alone["net_input"])
        steps, count = alone["target"].size(1), alone["net_input"]["sentence_tokens"].size(1)
        assert close_in_model_dtype(logits[row, :steps], alone_logits[0]), (built_model.arch, row)
        attention = extra["sentence_attention"][row, :steps, :count]
        assert close_in_model_dtype(attention, alone_extra["sentence_attention"][0]), (built_model.arch, row)
        extraction = extra["extraction_logits"][row, :count]
        assert close_in_model_dtype(extraction, alone_extra["extraction_logits"][0]), (built_model.arch, row)


def check_incremental_beam_search_equals_full_decoding(built_model: contract.ContractModel, model) -> None:
    """Beam search (the task's generator: incremental states, reordered
    encoder outputs, batch 3) gives every hypothesis the scores one full
    forward pass gives it. ``model`` is in evaluation mode, perturbed
    (:func:`perturb_parameters`)."""
    arch = built_model.arch
    indices = built_model.shortest("valid", 3)
    sample = built_model.batch("valid", indices)
    gen_cfg = copy.deepcopy(built_model.cfg.generation)
    gen_cfg.beam, gen_cfg.max_len_b, gen_cfg.min_len, gen_cfg.max_len_a = 3, 8, 3, 0
    generator = built_model.task.build_generator([model], gen_cfg)
    with torch.no_grad():
        hypotheses = built_model.task.inference_step(generator, [model], sample)
    eos = built_model.task.target_dictionary.eos()
    pad = built_model.task.source_dictionary.pad()
    forwarded = built_model.batch("valid", indices, model)
    compared = 0
    for row, beams in enumerate(hypotheses):
        alone = contract.unpadded_example(forwarded, row, pad)
        for hypothesis in beams:
            with torch.no_grad():
                full = contract.teacher_forced_scores(model, alone, hypothesis["tokens"], eos)
            # positional scores are float32 whatever the model's dtype (fairseq's get_normalized_probs)
            assert torch.allclose(full, hypothesis["positional_scores"], atol=1e-4), (arch, row)
            compared += 1
    assert compared == 3 * 3


def beam_reorders(sources: int, beam: int) -> Dict[str, torch.Tensor]:
    """The three reorderings beam search applies to its rows (``new_order``:
    row ``i`` continues what row ``new_order[i]`` held): ``expand`` every
    source to ``beam`` rows; ``within`` its beams (the rows of a source in
    reverse, the first source's last row chosen twice, as when two
    continuations of one hypothesis win); ``drop`` the first source
    (finished, its rows leave the batch)."""
    within = torch.arange(sources * beam).view(sources, beam).flip(1)
    within[0] = within[0, 0]
    return {
        "expand": torch.arange(sources).repeat_interleave(beam),
        "within": within.reshape(-1),
        "drop": torch.arange(beam, sources * beam),
    }


def check_reordered_incremental_decoding_equals_full_decoding(
    model, net_input: Dict[str, torch.Tensor], steps: int = 8, beam: int = 2, reorder_at: Sequence[int] = (2, 5)
) -> None:
    """Incremental decoding, with the encoder output and the decoder's
    caches reordered as beam search reorders them
    (``encoder.reorder_encoder_out``, ``decoder.reorder_incremental_state_scripting``:
    :func:`beam_reorders`' ``within`` at step ``reorder_at[0]``, ``drop`` at
    ``reorder_at[1]``), gives every row the logits one full forward pass
    gives its source and hypothesis. Each source's ``beam`` rows decode
    different hypotheses (seeded tokens after ``</s>``), so a cache or an
    encoder entry left in its old order changes the logits. ``model`` is in
    evaluation mode; ``net_input`` a batch of several sources."""
    dictionary = model.decoder.dictionary
    sources = net_input["src_tokens"].size(0)
    orders = beam_reorders(sources, beam)
    rows = orders["expand"].to(net_input["src_tokens"].device)
    generator = torch.Generator().manual_seed(0)
    hypotheses = torch.randint(dictionary.nspecial, len(dictionary), (sources * beam, steps), generator=generator)
    hypotheses[:, 0] = dictionary.eos()
    hypotheses = hypotheses.to(rows.device)
    expanded = {
        name: value.index_select(0, rows) if torch.is_tensor(value) and value.dim() > 0 else value
        for name, value in net_input.items()
        if name != "prev_output_tokens"
    }
    with torch.no_grad():
        full = model(**expanded, prev_output_tokens=hypotheses)[0]
        encoder_out = model.encoder.forward_torchscript(
            {name: value for name, value in net_input.items() if name != "prev_output_tokens"}
        )
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, rows)
        rows = torch.arange(sources * beam, device=rows.device)  # each row's hypothesis (a row of ``full``)
        incremental_state: Dict[str, Dict[str, torch.Tensor]] = {}
        decoded = []
        for step in range(steps):
            if step in reorder_at:
                new_order = orders["within" if step == reorder_at[0] else "drop"].to(rows.device)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
                model.decoder.reorder_incremental_state_scripting(incremental_state, new_order)
                rows = rows.index_select(0, new_order)
                decoded = [logits.index_select(0, new_order) for logits in decoded]
            prefix = hypotheses.index_select(0, rows)[:, : step + 1]
            decoded.append(
                model.decoder(prefix, encoder_out=encoder_out, incremental_state=incremental_state)[0][:, -1]
            )
    incremental = torch.stack(decoded, dim=1)
    expected = full.index_select(0, rows)
    assert incremental.shape == expected.shape, (incremental.shape, expected.shape)
    difference = (incremental - expected).abs().max().item()
    assert close_in_model_dtype(incremental, expected), f"incremental logits differ by {difference:.3g}"


def check_every_parameter_gets_a_gradient(model, criterion, sample) -> None:
    """One backward pass of the training loss reaches every trainable
    parameter: each has a gradient, not all zero (a parameter outside the
    loss's graph, or one whose every use is masked out, fails)."""
    model.zero_grad(set_to_none=True)
    loss, _, _ = criterion(model, sample)
    loss.backward()
    without = [
        name
        for name, parameter in model.named_parameters()
        if parameter.requires_grad and (parameter.grad is None or not parameter.grad.ne(0).any())
    ]
    assert torch.isfinite(loss), loss
    assert not without, f"no gradient reaches {len(without)} parameter(s): {', '.join(without)}"


def check_save_and_load_round_trip(built_model: contract.ContractModel, model, path: str) -> None:
    """Saved by fairseq's Trainer as fairseq-train saves it and loaded by
    fairseq's checkpoint loader: the same class, architecture, state
    (every tensor, in order) and outputs."""
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    trainer = Trainer(built_model.cfg, built_model.task, model, built_model.build_criterion())
    trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(path, {"train_iterator": {"epoch": 1}, "val_loss": None})
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], task=built_model.task)
    loaded = models[0].to(contract.test_device()).eval()
    assert type(loaded) is type(model) and cfg.model.arch == built_model.arch
    original_state, loaded_state = model.state_dict(), loaded.state_dict()
    assert list(original_state) == list(loaded_state)
    for name, value in original_state.items():
        assert torch.equal(value, loaded_state[name]), name
    model.eval()
    sample = built_model.batch("valid", built_model.shortest("valid", 2), model)
    with torch.no_grad():
        expected, actual = model(**sample["net_input"]), loaded(**sample["net_input"])
    expected = expected[0] if isinstance(expected, tuple) else expected
    actual = actual[0] if isinstance(actual, tuple) else actual
    assert torch.equal(expected, actual)


def check_the_contract_in_float64(arch: str, data: Dict[str, str], path: str) -> None:
    """Every check above on ``arch`` at its tiny sizes, a model's own test
    suite's run of the contract: the comparisons in float64 with perturbed
    parameters, the gradients and the save/load round trip (to ``path``) at
    the suite's dtype."""
    built_model = contract.ContractModel(arch, data)
    model = built_model.build_model().double().eval()
    perturb_parameters(model, seed=0)
    check_forward_shapes_padding_and_batch_composition(built_model, model)
    check_incremental_beam_search_equals_full_decoding(built_model, model)
    sample = built_model.batch("valid", built_model.shortest("valid", 3), model)
    check_reordered_incremental_decoding_equals_full_decoding(model, sample["net_input"])
    trained = built_model.build_model().train()
    check_every_parameter_gets_a_gradient(
        trained, built_model.build_criterion(), built_model.batch("train", [0, 1, 2, 3], trained)
    )
    check_save_and_load_round_trip(built_model, built_model.build_model(), path)
