"""Fidelity of ``sparse_bart`` to Manakul & Gales (2021) and to the authors'
code (``potsawee/encdec_attn_sparse``): every test checks a number or a rule
stated by the paper or computed the way their code computes it."""

import math
import os
import re
import shlex
import warnings

import pytest
import torch
import torch.nn.functional as F

from mdsfair.criterions.sparse_kl import sentence_kl_per_token
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sentence_approximator import (
    SentenceEncoder,
    SentenceLevelAttention,
    model_free_sentence_keys,
)
from mdsfair.modules.sentence_saliency import sentence_layout
from mdsfair.modules.sparse_cross_attention import SentenceContext, SparseCrossAttention
from tests.sparse_fixtures import ROW_SOURCES, batch, build, model_free_sentence_log_scores, random_sentence_ids
from tests.utils import REPO_ROOT, make_tiny_data_bin, scheduler_from

AUTHORS_EPS = 1e-8  # their ``eps`` of train_KL.py / train_integrated.py


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("fidelity")), train=8, valid=4, test=4, vocab_size=300)


def authors_kl(exact, approx_log, temperature=0.5):
    """One layer's KL as train_integrated.py computes it for its batch of 1:
    ``KLDivLoss(reduction='mean')(log(rnn_att + eps).view(-1, N),
    softmax(log(exact + eps) / T).view(-1, N))`` on ``[H, T, N]`` tensors."""
    num_sentences = exact.size(-1)
    teacher = torch.softmax(torch.log(exact + AUTHORS_EPS) / temperature, dim=-1)
    student = approx_log.exp()
    with warnings.catch_warnings():
        # the authors' reduction on purpose; torch notes that 'mean' is not 'batchmean'
        warnings.filterwarnings("ignore", message="reduction: 'mean' divides the total loss", category=UserWarning)
        return torch.nn.KLDivLoss(reduction="mean")(
            torch.log(student + AUTHORS_EPS).reshape(-1, num_sentences), teacher.reshape(-1, num_sentences)
        )


# ------------------------------------------------- 1. Eq. 13: KL gradient into theta_dec


@pytest.mark.parametrize("detach", [False, True])
def test_kl_gradient_reaches_word_level_attention_unless_detached(data_bin, detach):
    """Eq. 13 updates theta_dec with lambda * grad L_KL, and alpha^s depends on
    the word-level cross-attention: by default the last layer's q/k
    projections (which reach the KL only through alpha^s) get a nonzero KL
    gradient; with --kl-detach-teacher exactly none."""
    _, task, model, criterion = build(data_bin, *(["--kl-detach-teacher"] if detach else []))
    assert criterion.kl_detach_teacher is detach
    model.train()
    sample = batch(task, model)  # three examples with different sentence counts: padded sentence slots
    _, extra = model(**sample["net_input"])
    kl, _ = criterion.sentence_losses(extra["sentence_attention"], sample["target"].ne(criterion.padding_idx))
    kl.backward()
    last = model.decoder.layers[-1].encoder_attn
    for projection in (last.q_proj, last.k_proj):
        gradient = projection.weight.grad
        if detach:
            assert gradient is None or gradient.abs().sum() == 0
        else:
            assert gradient.abs().sum() > 0
    # the approximator and the decoder below (through the sentence queries) get it either way
    assert last.sentence_attention.sentence_key_proj.weight.grad.abs().sum() > 0
    assert model.decoder.layers[0].fc1.weight.grad.abs().sum() > 0
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            assert torch.isfinite(parameter.grad).all(), name


def test_kl_gradient_equals_authors_loss_gradient(data_bin):
    """Batch 1: the gradient of the default L_KL (teacher not detached) with
    respect to the word-level and decoder parameters is the gradient of the
    authors' sum over layers of KLDivLoss(reduction='mean')."""
    _, task, model, criterion = build(data_bin)
    model.train()
    sample = batch(task, model, (1,))
    _, extra = model(**sample["net_input"])
    layers = extra["sentence_attention"]
    target_mask = sample["target"].ne(criterion.padding_idx)
    ours = criterion.sentence_losses(layers, target_mask)[0] / sample["ntokens"]
    real = layers[0].sentence_mask[0]
    theirs = sum(authors_kl(layer.exact[0][..., real], layer.approx_log[0][..., real]) for layer in layers)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    last = model.decoder.layers[-1].encoder_attn
    parameters = [
        last.k_proj.weight,
        last.q_proj.weight,
        model.decoder.layers[0].fc1.weight,
        last.sentence_attention.sentence_query_proj.weight,
    ]
    our_gradients = torch.autograd.grad(ours, parameters, retain_graph=True)
    their_gradients = torch.autograd.grad(theirs, parameters)
    for ours_gradient, their_gradient in zip(our_gradients, their_gradients):
        assert their_gradient.abs().sum() > 0
        torch.testing.assert_close(ours_gradient, their_gradient, rtol=1e-4, atol=1e-9)


# ----------------------------------------------------------------- 2. KL scale


def random_saliencies(num_sentences, heads=4, steps=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    exact = torch.randn(1, heads, steps, num_sentences, generator=generator).mul(2).softmax(-1)
    approx_log = torch.randn(1, heads, steps, num_sentences, generator=generator).log_softmax(-1)
    return exact, approx_log


def test_kl_reductions_differ_by_the_sentence_count_and_default_is_the_authors():
    exact, approx_log = random_saliencies(7)
    mask = torch.ones(1, 7, dtype=torch.bool)
    summed = sentence_kl_per_token(exact, approx_log, mask, 0.5, reduction="sum-over-sentences").double().sum()
    default = sentence_kl_per_token(exact, approx_log, mask, 0.5).double().sum()
    assert abs(float(summed / default) - 7.0) < 1e-6
    # the default, per target token (fairseq divides the token sum by the token count), is the authors' number
    theirs = authors_kl(exact[0], approx_log[0])
    torch.testing.assert_close(default.float() / exact.size(2), theirs, rtol=1e-5, atol=0)
    # batch > 1 with padded sentence slots: every example is divided by its own sentence count
    short_exact, short_log = random_saliencies(4, seed=1)
    padded_exact = torch.cat([exact, F.pad(short_exact, (0, 3))])
    padded_log = torch.cat([approx_log, F.pad(short_log, (0, 3), value=float("-inf"))])
    padded_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    per_token = sentence_kl_per_token(padded_exact, padded_log, padded_mask, 0.5)
    torch.testing.assert_close(
        per_token.sum(-1) / exact.size(2),
        torch.stack([theirs, authors_kl(short_exact[0], short_log[0])]),
        rtol=1e-5,
        atol=0,
    )


def test_criterion_defaults_are_the_papers(data_bin):
    _, _, _, criterion = build(data_bin)
    assert criterion.kl_reduction == "mean-over-sentences" and not criterion.kl_detach_teacher
    assert criterion.kl_weight == 0.2 and criterion.kl_temperature == 0.5  # App. A.5
    assert criterion.eps == 0.0  # the authors' CrossEntropyLoss: no label smoothing


# -------------------------------------------------------- 3. scheduled "mix"


def test_mix_draw_is_shared_by_all_layers_and_follows_the_schedule(data_bin, monkeypatch):
    """Sec. 4.3: exact with probability max(0, 1 - update/N), one draw per
    forward pass that all (here 4) layers share."""
    _, task, model, _ = build(
        data_bin, "--sentence-selection", "mix", "--mix-decay-updates", "10", "--decoder-layers", "4"
    )
    model.train()
    assert len(model.decoder.layers) == 4
    sample = batch(task, model, (0, 1))
    decisions = []
    resolve = SparseCrossAttention.effective_selection

    def recording(self, mix_draw=None):
        assert (mix_draw is not None) == self.training  # in training the decoder hands every layer its draw
        decisions[-1].append(resolve(self, mix_draw))
        return decisions[-1][-1]

    monkeypatch.setattr(SparseCrossAttention, "effective_selection", recording)
    net_input = sample["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"], net_input["src_sent_ids"])
    prev_output_tokens = net_input["prev_output_tokens"][:, :3]

    def decode_forwards(count):
        decisions.clear()
        with torch.no_grad():
            for _ in range(count):
                decisions.append([])
                model.decoder(prev_output_tokens, encoder_out=encoder_out)

    torch.manual_seed(3)
    for num_updates, expected, forwards in ((0, 1.0, 8), (2, 0.8, 80), (5, 0.5, 80), (10, 0.0, 8), (14, 0.0, 8)):
        model.set_num_updates(num_updates)
        decode_forwards(forwards)
        assert all(len(step) == 4 and len(set(step)) == 1 for step in decisions)
        ideal = sum(step[0] == "ideal" for step in decisions) / forwards
        bound = 4 * math.sqrt(expected * (1 - expected) / forwards)  # 4 sigma of a binomial fraction
        assert abs(ideal - expected) <= bound, (num_updates, ideal)
        if 0 < expected < 1:
            assert {step[0] for step in decisions} == {"ideal", "approx"}
    model.eval()
    decode_forwards(1)
    assert decisions[-1] == ["approx"] * 4  # evaluation and generation rank by the approximation


# ------------------------------------------------- 4. model-free approximator


def hand_made_model_free_attention(top_r=1):
    """Two heads of dimension 1 and three one-token sentences. The query is
    0, so phi(q) = 1 and each head's score of sentence i is phi(k_i): head A
    (10, 9, ~0), head B (0.1, 1, 0.1)."""
    module = SparseCrossAttention(2, 2, top_r=top_r, selection="approx", approximator="model-free").eval()
    with torch.no_grad():
        module.q_proj.weight.zero_()
        module.q_proj.bias.zero_()
        module.k_proj.weight.copy_(torch.eye(2))
        module.k_proj.bias.zero_()
    tenth = math.log(0.1)
    key = torch.tensor([[9.0, tenth], [8.0, 0.0], [-20.0, tenth]]).unsqueeze(1)  # [N = 3, B = 1, C = 2]
    ids = torch.tensor([[0, 1, 2]])
    context = SentenceContext(ids, sentence_layout(ids), None, HypothesisRows.identity(1, ids.device))
    return module, torch.zeros(1, 1, 2), key, ids.lt(0), context


def test_model_free_ranks_by_raw_scores_averaged_over_heads():
    """App. D drops Z_m and App. A.4 averages over heads before top-r (the
    authors' decoding: topk(phi_prod.mean(dim=[0, 1]))): raw means (5.05,
    5.0, 0.05) keep sentence 0, whereas per-head normalized means (0.30,
    0.65, 0.04) would keep sentence 1."""
    module, query, key, padding, context = hand_made_model_free_attention()
    sentence_keys = model_free_sentence_keys(module.k_proj(key), context.src_sent_ids, 3, 2)
    queries = module._split_heads(module.q_proj(query) * module.scaling)
    normalized_first = model_free_sentence_log_scores(queries, sentence_keys, context.layout.sentence_mask)
    torch.testing.assert_close(
        normalized_first.exp().mean(1)[0, 0], torch.tensor([0.3048, 0.6535, 0.0417]), atol=1e-4, rtol=0
    )
    assert int(normalized_first.exp().mean(1).argmax()) == 1
    _, teacher_forced = module(query, key, padding, context)
    assert teacher_forced.selection[0, 0].tolist() == [True, False, False]
    _, generated = module(query, key, padding, context, incremental_state={})
    assert generated.selection[0, 0].tolist() == [True, False, False]


@pytest.mark.parametrize("share", [False, True])
def test_model_free_selection_equals_authors_decode(share):
    """On random weights and sources, the selection of every row is the
    authors' expA_decode_modelfree: phi = elu + 1 on the scaled queries and the
    keys, phi_sent_k = phi_k^T @ boundary, phi_prod = phi_q @ phi_sent_k,
    topk(phi_prod.mean(dim=[0, 1])), the mean over heads (and, with their
    shared selection, over the beam rows of the source)."""
    torch.manual_seed(0)
    ids = random_sentence_ids(bsz=2)
    module = SparseCrossAttention(16, 4, top_r=2, approximator="model-free", share_selection_across_beams=share)
    module = module.eval()
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    rows = HypothesisRows.from_source_index(ROW_SOURCES, 2)
    context = SentenceContext(ids, sentence_layout(ids), None, rows)
    query, key = torch.randn(1, 4, 16), torch.randn(ids.size(1), 2, 16)
    _, attention = module(query, key, ids.lt(0), context, incremental_state={})
    for source in range(2):
        length = int(ids[source].ge(0).sum())
        num_sentences = int(ids[source].max()) + 1
        boundary = F.one_hot(ids[source, :length], num_sentences).float()  # [N, N1], their boundary matrix
        k = module.k_proj(key[:length, source]).view(length, 4, 4).transpose(0, 1)  # [H, N, d_h]
        phi_sent_k = torch.bmm((F.elu(k) + 1).transpose(1, 2), boundary.expand(4, -1, -1))
        source_rows = (ROW_SOURCES == source).nonzero().view(-1).tolist()
        products = []
        for row in source_rows:
            q = (module.q_proj(query[:, row]) * module.scaling).view(1, 4, 4).transpose(0, 1)  # [H, 1, d_h]
            products.append(torch.bmm(F.elu(q) + 1, phi_sent_k))  # [H, 1, N1]
        for index, row in enumerate(source_rows):
            phi_prod = torch.cat(products) if share else products[index]  # their dim 0: beams x heads
            expected = torch.topk(phi_prod.mean(dim=[0, 1]), k=2)[-1]
            assert sorted(attention.selection[row, 0].nonzero().view(-1).tolist()) == sorted(expected.tolist())


# -------------------------------------------- 5. the recipe's learning rate


def readme_training_commands():
    path = os.path.join(REPO_ROOT, "examples", "sparse_decoder", "README.md")
    with open(path) as handle:
        text = handle.read()
    blocks = re.findall(r"```\n(fairseq-train .*?)```", text, flags=re.S)
    commands = [shlex.split(block.replace("\\\n", " ")) for block in blocks]
    return [command[1:] for command in commands if "--lr" in command]


def test_recipe_learning_rate_is_appendix_a3_schedule():
    """App. A.3: lr = 0.002 * min(s^-0.5, s * 20000^-1.5), peak 1.41e-5 at
    s = 20,000. fairseq's inverse_sqrt scheduler built from each training
    command of the recipe gives exactly that after s updates; with
    --warmup-updates 10000 it gives the authors' code, whose step counts
    examples (two per update): 0.002 * min((2s)^-0.5, 2s * 20000^-1.5)."""
    commands = readme_training_commands()
    assert len(commands) == 2  # KL-only and integrated
    updates = [1, 10, 1000, 19999, 20000, 20001, 50000, 10**6]
    for argv in commands:
        scheduler = scheduler_from(argv)
        for s in updates:
            expected = 0.002 * min(s**-0.5, s * 20000**-1.5)
            assert scheduler.step_update(s) == pytest.approx(expected, rel=1e-12, abs=0)
        assert scheduler.step_update(20000) == pytest.approx(1.4142e-5, rel=1e-4)
        warmup = argv.index("--warmup-updates")
        authors = scheduler_from(argv[: warmup + 1] + ["10000"] + argv[warmup + 2 :])
        for s in updates:
            expected = 0.002 * min((2 * s) ** -0.5, 2 * s * 20000**-1.5)
            assert authors.step_update(s) == pytest.approx(expected, rel=1e-12, abs=0)


def test_fairseq_sets_the_rate_of_update_s_plus_1_from_s(data_bin):
    """What the recipe relies on in fairseq's trainer: the scheduler is
    stepped with 0 when the trainer builds it and with s after update s, so
    update 1 runs at lr(0) = 0 (parameters unchanged) and update 2 at lr(1)."""
    from fairseq.trainer import Trainer

    peak = 0.002 * 20000**-0.5
    cfg, task, model, criterion = build(
        data_bin, "--lr", repr(peak), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "20000", stage="joint"
    )
    trainer = Trainer(cfg, task, model, criterion)
    sample = batch(task, model)
    assert trainer.get_lr() == 0.0
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.train_step([sample])
    assert all(torch.equal(before[name], p.detach()) for name, p in model.named_parameters())
    assert trainer.get_lr() == pytest.approx(0.002 * 20000**-1.5, rel=1e-12)
    trainer.train_step([sample])
    assert any(not torch.equal(before[name], p.detach()) for name, p in model.named_parameters())
    assert trainer.get_lr() == pytest.approx(0.002 * 2 * 20000**-1.5, rel=1e-12)


# ------------------------------------------- 6. other statements about the authors' code


def test_sentence_encoder_equals_authors_sent_level_nn():
    """Their SentLevelNN (expC): per sentence, the GRU's output sequence, the
    forward half at the last token and the backward half at the first,
    concatenated, through Linear(2d -> d)."""
    torch.manual_seed(0)
    ids = random_sentence_ids()
    encoder = SentenceEncoder(8, 8).eval()
    states = torch.randn(3, ids.size(1), 8)
    ours = encoder(states, sentence_layout(ids))
    for b in range(3):
        for sentence in range(int(ids[b].max()) + 1):
            positions = (ids[b] == sentence).nonzero().view(-1)
            h_this_sent = states[b : b + 1, positions]
            rnn_output = encoder.gru(h_this_sent)[0].view(1, len(positions), 2, -1)
            fw_output, bw_output = rnn_output[:, -1, 0, :], rnn_output[:, 0, 1, :]
            theirs = encoder.output_proj(torch.cat([fw_output, bw_output], dim=-1))[0]
            torch.testing.assert_close(ours[b, sentence], theirs, atol=1e-5, rtol=1e-5)


def test_sentence_encoder_initialization_is_authors():
    """Their sent_nn_init: Xavier-normal matrices, zero biases."""
    torch.manual_seed(0)
    encoder = SentenceEncoder(64, 64)
    for name, parameter in encoder.named_parameters():
        if parameter.dim() == 1:
            assert parameter.abs().sum() == 0, name
        else:
            fan_out, fan_in = parameter.shape
            expected = math.sqrt(2.0 / (fan_in + fan_out))
            assert abs(float(parameter.detach().std()) / expected - 1) < 0.05, name


def test_sentence_keys_split_heads_unlike_authors_reshape():
    """Eq. 9 per head: head h of sentence i is its slice h of y_i W^K. The
    authors' ``sent_k.reshape(H, -1, d_h)`` (no transpose) mixes sentences
    into heads; we do not follow it."""
    torch.manual_seed(0)
    attention = SentenceLevelAttention(8, 8, 2)
    states = torch.randn(1, 3, 8)
    keys = attention.project_sentences(states)  # [1, H, S, d_h]
    projected = attention.sentence_key_proj(states)[0]  # [S, C]
    for head in range(2):
        torch.testing.assert_close(keys[0, head], projected[:, head * 4 : (head + 1) * 4])
    assert not torch.equal(keys[0], projected.reshape(2, -1, 4))


def test_trained_parameters_against_authors(data_bin):
    """The authors' integrated training freezes everything but decoder.layers
    and the sentence encoder; ours trains the decoder (theta_dec of the
    paper), which also holds its learned positions and embedding layer norm.
    The encoder and the shared embeddings are frozen in both."""
    _, _, model, _ = build(data_bin)
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    beyond_authors = {name for name in trainable if not name.startswith("decoder.layers.")} - set(
        model.approximator_parameter_names()
    )
    assert beyond_authors == {
        "decoder.embed_positions.weight",
        "decoder.layernorm_embedding.weight",
        "decoder.layernorm_embedding.bias",
    }
    assert not any(name.startswith("encoder.") and "sentence_encoder" not in name for name in trainable)
    assert "encoder.embed_tokens.weight" not in trainable and "decoder.embed_tokens.weight" not in trainable
