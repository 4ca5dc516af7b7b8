"""Tests of the DAPE transformer (Ma et al., 2022): document-aware positional
encoding (Eq. 1-4), the dependency relation mask (Eq. 5-11), arcs aligned to
subwords, ablations, training and decoding."""

import argparse
import json
import os

import numpy as np
import pytest
import torch
from fairseq import options, tasks
from fairseq.models.transformer import TransformerModel
from fairseq.modules import MultiheadAttention, SinusoidalPositionalEmbedding

from mdsfair.data.dependency_relations import DEPENDENCY_RELATIONS
from mdsfair.data.indexed import NumpyMMapDataset
from mdsfair.modules.dependency_attention import (
    DependencyGuidedMultiheadAttention,
    DependencyRelationEncoder,
    arithmetic_relation_order,
    arithmetic_relation_weights,
    build_dependency_mask,
)
from mdsfair.modules.document_positional_encoding import (
    DOC_POSITION_FUNCTIONS,
    DocumentAwarePositionalEncoding,
    positions_within_documents,
)
from mdsfair.preprocess.producers.dependency_arcs import DependencyArcAligner, align_sentence
from tests.utils import SHARED_DATA, USER_DIR, make_tiny_data_bin

REL = {name: i for i, name in enumerate(DEPENDENCY_RELATIONS)}


# ------------------------------------------------ document-aware positions


@pytest.mark.parametrize("function", ["sin", "cos", "sin-cos", "scaled-sin-cos"])
def test_document_encoding_satisfies_protocol(function):
    """Section III-A: unique per document, bounded, not larger than the token
    sinusoids (|.| <= 1), for the functions of Table IV."""
    encoding = DocumentAwarePositionalEncoding(16, padding_idx=1, function=function, alpha=1.0)
    doc_ids = torch.arange(64).unsqueeze(0)
    values = encoding.document_encoding(doc_ids)[0]  # [64, 16]
    assert values.abs().max() <= 1.0
    distances = (values[:, None].double() - values[None].double()).norm(dim=-1) + torch.eye(64) * 1e3
    assert distances.min() > 1e-5, "two documents share an encoding"
    token = SinusoidalPositionalEmbedding.get_embedding(1000, 16, 1)
    assert values.abs().max() <= token.abs().max() + 1e-6


def test_table_v_functions_break_the_protocol():
    doc_ids = torch.arange(8).unsqueeze(0)
    same = DocumentAwarePositionalEncoding(4, 1, function="same").document_encoding(doc_ids)[0]
    assert torch.equal(same, torch.ones_like(same)), "SameEncoding gives every document one value"
    linear = DocumentAwarePositionalEncoding(4, 1, function="linear", linear_slope=10.0).document_encoding(doc_ids)[0]
    assert torch.allclose(linear[:, 0], 10.0 * torch.arange(8).float()) and linear.max() > 1.0  # unbounded
    random = DocumentAwarePositionalEncoding(4, 1, function="random")
    values = random.document_encoding(doc_ids)[0, :, 0]
    assert values.abs().max() <= 1.0 and torch.equal(values, random.random_values[:8])
    assert "random_values" in random.state_dict(), "the random table must be saved with the model"
    with pytest.raises(ValueError):
        DocumentAwarePositionalEncoding(4, 1, function="tan")
    assert set(DOC_POSITION_FUNCTIONS) == {"sin", "cos", "sin-cos", "scaled-sin-cos", "linear", "same", "random"}


def test_sin_cos_alternates_over_dimensions():
    values = DocumentAwarePositionalEncoding(6, 1, function="scaled-sin-cos").document_encoding(torch.tensor([[3]]))[
        0, 0
    ]
    expected = torch.tensor([np.sin(0.3), np.cos(0.3)] * 3, dtype=torch.float)
    assert torch.allclose(values, expected)


def test_positions_restart_per_document():
    doc_ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 1, 1, 1, 1, -1, -1]])
    got = positions_within_documents(doc_ids)
    assert got[0].tolist() == [0, 1, 2, 0, 1, 0, 1, 2] and got[1, :6].tolist() == [0, 1, 0, 1, 2, 3]


def test_equation_2_against_a_loop_reference():
    """Pos = alpha * Stack(sin(k)) + f_token(i), i restarting per document, zero-free at padding."""
    dim, pad = 8, 1
    embed_positions = SinusoidalPositionalEmbedding(dim, pad, init_size=16)
    tokens = torch.tensor([[5, 6, 7, 8, 9, 10], [5, 6, 7, pad, pad, pad]])
    doc_ids = torch.tensor([[0, 0, 1, 1, 1, 2], [0, 1, 1, -1, -1, -1]])
    module = DocumentAwarePositionalEncoding(dim, pad, function="sin", alpha=0.1)
    got = module(tokens, doc_ids, embed_positions)
    table = SinusoidalPositionalEmbedding.get_embedding(64, dim, pad)
    for b in range(2):
        for t in range(6):
            if tokens[b, t] == pad:
                assert torch.all(got[b, t] == 0)
                continue
            k = int(doc_ids[b, t])
            i = int((doc_ids[b, :t] == k).sum())
            expected = 0.1 * np.sin(k) * torch.ones(dim) + table[pad + 1 + i]
            assert torch.allclose(got[b, t], expected, atol=1e-6), (b, t)
    stream = DocumentAwarePositionalEncoding(dim, pad, alpha=0.0, token_positions="stream")
    assert torch.allclose(stream(tokens, doc_ids, embed_positions), embed_positions(tokens))


# ------------------------------------------------------ dependency mask


def hand_built_parse():
    """'the cat sat .' + padding; cat <-det- the, sat ROOT, cat -nsubj-> sat, . -punct-> sat."""
    head = torch.tensor([[1, 2, 2, 2, -1], [1, 1, -1, -1, -1]])
    rel = torch.tensor(
        [
            [REL["det"], REL["nsubj"], REL["ROOT"], REL["punct"], -1],
            [REL["amod"], REL["ROOT"], -1, -1, -1],
        ]
    )
    return head, rel


def test_dependency_mask_is_equation_6_on_a_hand_built_parse():
    head, rel = hand_built_parse()
    weights = torch.randn(len(DEPENDENCY_RELATIONS))
    for direction in ("dependent-to-head", "head-to-dependent", "both"):
        mask = build_dependency_mask(weights, head, rel, direction=direction)
        expected = torch.zeros(2, 5, 5)
        for b in range(2):
            for i in range(5):
                if head[b, i] < 0:
                    continue
                j, m = int(head[b, i]), weights[rel[b, i]]
                if direction in ("dependent-to-head", "both"):
                    expected[b, i, j] = m
                if direction in ("head-to-dependent", "both"):
                    expected[b, j, i] = m
        assert torch.allclose(mask, expected), direction
    no_arc = build_dependency_mask(weights, head, rel, no_arc_weight=torch.tensor(0.25))
    assert no_arc[0, 0, 3] == 0.25 and no_arc[0, 0, 1] == weights[REL["det"]]


def test_all_subword_pairs_widen_arcs_to_the_head_word():
    # words: [un ##happy] [cat] ; "unhappy" -amod-> "cat" (head = first subword 2), cat ROOT
    head = torch.tensor([[2, 2, 2]])
    rel = torch.tensor([[REL["amod"], REL["amod"], REL["ROOT"]]])
    word = torch.tensor([[0, 0, 2]])
    weights = torch.arange(len(DEPENDENCY_RELATIONS), dtype=torch.float) + 1
    mask = build_dependency_mask(weights, head, rel, word, direction="dependent-to-head")
    amod, root = weights[REL["amod"]], weights[REL["ROOT"]]
    assert torch.equal(mask[0], torch.tensor([[0, 0, amod], [0, 0, amod], [0, 0, root]]))
    # a two-subword head word: every dependent subword x every head subword
    head = torch.tensor([[1, 1, 1]])
    rel = torch.tensor([[REL["det"], REL["ROOT"], REL["ROOT"]]])
    word = torch.tensor([[0, 1, 1]])
    mask = build_dependency_mask(weights, head, rel, word, direction="both")
    det, root = weights[REL["det"]], weights[REL["ROOT"]]
    assert torch.equal(mask[0], torch.tensor([[0, det, det], [det, root, root], [det, root, root]]))


def test_relation_encoder_is_a_lookup_of_the_mlp_on_one_hot_vectors():
    torch.manual_seed(0)
    encoder = DependencyRelationEncoder("mlp", hidden_dim=8)
    head, rel = hand_built_parse()
    mask = encoder(head, rel)
    one_hot = torch.nn.functional.one_hot(torch.tensor(REL["nsubj"]), len(DEPENDENCY_RELATIONS)).float()
    first, act, second = encoder.relation_encoder
    m = second(act(first(one_hot)))  # Eq. 7, F_depEnc(v_rel)
    assert torch.allclose(mask[0, 1, 2], m.squeeze()) and torch.allclose(mask[0, 2, 1], m.squeeze())
    mask.sum().backward()
    assert first.weight.grad is not None and first.weight.grad.abs().sum() > 0
    root_first = arithmetic_relation_weights(arithmetic_relation_order("arithmetic-root"))
    assert root_first[REL["ROOT"]] == 1.0 and sorted(root_first.tolist())[0] == pytest.approx(1 / 45)
    core = arithmetic_relation_weights(arithmetic_relation_order("arithmetic-core"))
    assert core[REL["nsubj"]] == 1.0 and core[REL["xcomp"]] == pytest.approx(38 / 45)


def test_guided_attention_is_equation_9():
    torch.manual_seed(0)
    dim, heads, T, B = 16, 4, 5, 2
    attention = DependencyGuidedMultiheadAttention(dim, heads, self_attention=True).eval()
    plain = MultiheadAttention(dim, heads, self_attention=True).eval()
    plain.load_state_dict(attention.state_dict())
    x = torch.randn(T, B, dim)
    padding = torch.tensor([[False] * 5, [False, False, True, True, True]])
    mask = torch.randn(B, T, T)
    out, _ = attention(x, x, x, key_padding_mask=padding, dependency_mask=mask)
    # reference: per example and head, A~ = M * A + A, out = A~ V (Eq. 8-11)
    q = (attention.q_proj(x) * attention.scaling).view(T, B, heads, -1)
    k = attention.k_proj(x).view(T, B, heads, -1)
    v = attention.v_proj(x).view(T, B, heads, -1)
    reference = torch.zeros(T, B, heads, dim // heads)
    for b in range(B):
        for h in range(heads):
            scores = q[:, b, h] @ k[:, b, h].T
            scores[:, padding[b]] = float("-inf")
            a = scores.softmax(-1)
            reference[:, b, h] = (mask[b] * a + a) @ v[:, b, h]
    reference = attention.out_proj(reference.reshape(T, B, dim))
    assert torch.allclose(out, reference, atol=1e-5)
    # a zero mask is fairseq's attention; no mask is fairseq's code path
    zero, _ = attention(x, x, x, key_padding_mask=padding, dependency_mask=torch.zeros(B, T, T))
    expected, _ = plain(x, x, x, key_padding_mask=padding)
    assert torch.allclose(zero, expected, atol=1e-5)
    assert torch.equal(attention(x, x, x, key_padding_mask=padding)[0], expected)
    on_values = DependencyGuidedMultiheadAttention(dim, heads, self_attention=True, mask_on="values").eval()
    on_values.load_state_dict(attention.state_dict())
    out_v, _ = on_values(x, x, x, key_padding_mask=padding, dependency_mask=mask)
    masked = mask.masked_fill(padding[:, None, :], 0)
    extra = torch.einsum("bij,jbhd->ibhd", masked, v).reshape(T, B, dim)
    assert torch.allclose(out_v, expected + extra @ attention.out_proj.weight.T, atol=1e-5)


# ------------------------------------------------------- subword alignment


def test_alignment_of_subwords_to_spacy_tokens():
    sentence = "The dog, U.S.-based, barked."
    # SentencePiece-like pieces; "dog," is one piece although spaCy splits "dog" ","
    texts = [" The", " dog,", " U", ".", "S", ".-", "based", ",", " bark", "ed", "."]
    word_ids = np.array([0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3])
    spacy_tokens = ["The", "dog", ",", "U.S.-based", ",", "barked", "."]
    starts, position = [], 0
    for token in spacy_tokens:
        position = sentence.index(token, position)
        starts.append(position)
        position += len(token)
    token_of_subword, anchor = align_sentence(sentence, texts, word_ids, starts)
    assert token_of_subword.tolist() == [0, 1, 3, 3, 3, 3, 3, 4, 5, 5, 6]
    # the first "," has no subword of its own: merged into the word of "dog,"
    assert anchor.tolist() == [0, 1, 1, 2, 7, 8, 10]
    # characters changed by normalization -> whitespace-word fallback
    token_of_subword, anchor = align_sentence(sentence, [" Th", "e"] + texts[1:], np.r_[0, word_ids], starts)
    assert token_of_subword[:3].tolist() == [0, 0, 1]


def test_cluster_alignment_equals_sentence_alignment():
    """The vectorized alignment of a whole cluster equals the per-sentence
    reference on random subword segmentations: by characters, with pieces
    that carry no character, with normalization-changed characters (the
    whitespace-word fallback), and with sentences of one token."""
    import spacy

    from mdsfair.preprocess.producers.dependency_arcs import align_cluster
    from mdsfair.preprocess.subword import non_space_length

    tokenizer = spacy.blank("en").tokenizer
    rng = np.random.RandomState(0)
    base = [
        "The dog, U.S.-based, barked.",
        "It's 3.5 km (2 mi) long!",
        "Go.",
        "“Quoted” words — and an em dash…",
        "Dr. Smith met J. Doe at 5 p.m.",
        "naïve café résumé",
        "x",
        "A  B",
    ]
    for trial in range(30):
        sentences = [base[i] for i in rng.randint(0, len(base), size=rng.randint(1, 7))]
        texts_per_sentence, word_ids_per_sentence = [], []
        for sentence in sentences:
            texts, word_ids, word = [], [], -1
            for w, piece_word in enumerate(sentence.split(" ")):
                cuts = sorted(set(rng.randint(0, len(piece_word) + 1, size=rng.randint(0, 3)).tolist()))
                bounds = [0] + [c for c in cuts if 0 < c < len(piece_word)] + [len(piece_word)]
                pieces = [piece_word[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
                pieces[0] = " " + pieces[0]
                if rng.rand() < 0.15:  # a piece with no character of its own
                    pieces.insert(0, " ")
                for piece in pieces:
                    word += int(not texts or piece.startswith(" "))
                    texts.append(piece)
                    word_ids.append(word)
            if rng.rand() < 0.2:  # normalization changed the characters: fallback alignment
                texts[-1] = texts[-1] + "."
            texts_per_sentence.append(texts)
            word_ids_per_sentence.append(np.array(word_ids))
        token_starts = [np.array([t.idx for t in tokenizer(s)]) for s in sentences]
        token_of_subword, anchor, aligned = align_cluster(
            sentences,
            np.array([len(t) for t in texts_per_sentence]),
            np.array([non_space_length(p) for t in texts_per_sentence for p in t]),
            np.concatenate(word_ids_per_sentence),
            token_starts,
        )
        assert aligned.all()
        sub_base = tok_base = 0
        for sentence, texts, word_ids, starts in zip(
            sentences, texts_per_sentence, word_ids_per_sentence, token_starts
        ):
            expected_tokens, expected_anchor = align_sentence(sentence, texts, word_ids, starts.tolist())
            n_sub, n_tok = len(texts), len(starts)
            assert (token_of_subword[sub_base : sub_base + n_sub] - tok_base).tolist() == expected_tokens.tolist()
            assert (anchor[tok_base : tok_base + n_tok] - sub_base).tolist() == expected_anchor.tolist()
            sub_base, tok_base = sub_base + n_sub, tok_base + n_tok


def test_parse_in_a_memory_zone_is_the_same_and_keeps_no_new_word(monkeypatch):
    """Past VOCABULARY_KEPT lexemes a cluster is parsed in spaCy's memory zone:
    the same heads and labels, and the words it saw first are not kept."""
    from mdsfair.preprocess.producers import dependency_arcs

    aligner = DependencyArcAligner(argparse.Namespace())
    sentences = ["Zorblaxian quintrels vexed the glimwort yesterday.", "It slept in Vlorpton."]
    monkeypatch.setattr(dependency_arcs, "VOCABULARY_KEPT", 0)
    before = len(aligner.nlp.vocab.strings)
    in_zone = aligner.parse(sentences)
    assert len(aligner.nlp.vocab.strings) == before
    monkeypatch.setattr(dependency_arcs, "VOCABULARY_KEPT", 10**9)
    kept = aligner.parse(sentences)
    assert len(aligner.nlp.vocab.strings) > before
    for zoned, plain in zip(in_zone[0], kept[0]):
        assert zoned.tolist() == plain.tolist()
    assert in_zone[1].tolist() == kept[1].tolist() and in_zone[2].tolist() == kept[2].tolist()
    assert kept[2][kept[1] == np.arange(len(kept[1]))].tolist() == [REL["ROOT"]] * 2


@pytest.fixture(scope="module")
def real_clusters(tmp_path_factory):
    """The first 6 clusters of the real PeerSum validation split (reviews of
    papers), split by the rule splitter; where ../shared/data is not present,
    40 mdsfair-synth clusters (short ones: 40 make a stream of many batches)."""
    from mdsfair.preprocess.structure import SentenceSplitter, read_clusters
    from mdsfair.preprocess.synthetic_clusters import generate_clusters

    path = os.path.join(SHARED_DATA, "peersum_sample", "jsonl", "valid.jsonl")
    count = 6
    if not os.path.exists(path):
        path = str(tmp_path_factory.mktemp("synth") / "train.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for cluster in generate_clusters(40, seed=3):
                f.write(json.dumps(cluster) + "\n")
        count = 40
    clusters = []
    for cluster in read_clusters(path, SentenceSplitter("rule"), require_summary=False):
        clusters.append(cluster)
        if len(clusters) == count:
            return clusters
    raise AssertionError(f"{path}: fewer than {count} clusters")


def test_numpy_gemm_parses_like_spacys_blis(real_clusters):
    """--spacy-gemm numpy (the default) runs tok2vec and the parser on
    numpy's BLAS: every layer is switched, and real PeerSum sentences get the
    same tokens, heads and labels as with thinc's default blis."""
    from spacy.attrs import DEP, HEAD, IDX
    from thinc.api import NumpyOps

    from mdsfair.preprocess.producers.dependency_arcs import load_parser

    numpy_nlp, blis_nlp = load_parser(gemm="numpy"), load_parser(gemm="blis")
    for nlp, uses_blis in ((numpy_nlp, False), (blis_nlp, True)):
        for component in ("tok2vec", "parser"):
            layers = list(nlp.get_pipe(component).model.walk())
            assert layers and all(isinstance(layer.ops, NumpyOps) for layer in layers)
            assert {layer.ops.use_blis for layer in layers} == {uses_blis}
    sentences = [s for cluster in real_clusters for d in cluster.documents for p in d for s in p][:400]
    assert sum(len(s.split()) for s in sentences) > 3000  # PeerSum: 6,920
    for with_numpy, with_blis in zip(numpy_nlp.pipe(sentences), blis_nlp.pipe(sentences)):
        assert (with_numpy.to_array([IDX, HEAD, DEP]) == with_blis.to_array([IDX, HEAD, DEP])).all(), with_numpy.text
    with pytest.raises(ValueError, match="--spacy-gemm"):
        load_parser(gemm="mkl")


def pieces_of_four_characters(cluster):
    """An EncodedCluster of ``cluster`` whose subwords are its whitespace
    words cut into pieces of at most four characters."""
    from mdsfair.preprocess.pipeline import EncodedCluster

    sentences = [s for d in cluster.documents for p in d for s in p]
    sent_ids, word_ids, chars = [], [], []
    for i, sentence in enumerate(sentences):
        for w, word in enumerate(sentence.split()):
            for start in range(0, len(word), 4):
                sent_ids.append(i)
                word_ids.append(w)
                chars.append(len(word[start : start + 4]))
    n = len(sent_ids)
    return EncodedCluster(
        id=cluster.id,
        tokens=np.arange(n),
        doc_ids=np.zeros(n, int),
        para_ids=np.zeros(n, int),
        sent_ids=np.array(sent_ids),
        word_ids=np.array(word_ids),
        symbol_chars=np.array(chars),
        target=np.zeros(1, int),
        summary="x",
        num_documents=len(cluster.documents),
        num_paragraphs=sum(map(len, cluster.documents)),
        num_sentences=len(sentences),
    )


def test_a_chunk_parsed_as_one_stream_gives_the_arcs_of_one_parse_per_cluster(real_clusters):
    """expect() parses the sentences of the clusters announced next as one
    nlp.pipe stream; each cluster gets the arcs it gets on its own, also when
    the clusters do not come in the announced order or one is skipped."""
    encoded = {cluster.id: pieces_of_four_characters(cluster) for cluster in real_clusters}
    args = argparse.Namespace(dep_subword_arcs="all-subwords", side_data=["dep_head", "dep_rel", "dep_word"])
    one_by_one = DependencyArcAligner(args)
    expected = {c.id: one_by_one.arcs(c, encoded[c.id]) for c in real_clusters}

    streamed = DependencyArcAligner(args)
    calls = []
    original_pipe = streamed.nlp.pipe
    streamed.nlp.pipe = lambda texts, **kw: (calls.append(1), original_pipe(texts, **kw))[1]
    try:
        streamed.expect(real_clusters)
        streamed.expect(real_clusters)  # a second producer of the same aligner: the same stream
        for cluster in real_clusters:
            got = streamed.arcs(cluster, encoded[cluster.id])
            for name in ("dep_head", "dep_rel", "dep_word"):
                assert got[name].tolist() == expected[cluster.id][name].tolist(), (cluster.id, name)
        assert len(calls) == 1, "one stream for the whole chunk"
        # announced 0..5 but asked for 2, 3, 1: the stream is dropped, each is parsed on its own
        streamed.expect(list(real_clusters))
        for cluster in (real_clusters[2], real_clusters[3], real_clusters[1]):
            got = streamed.arcs(cluster, encoded[cluster.id])
            assert got["dep_head"].tolist() == expected[cluster.id]["dep_head"].tolist()
    finally:
        del streamed.nlp.pipe
    assert sum(int((expected[c.id]["dep_head"] >= 0).sum()) for c in real_clusters) > 5000


@pytest.fixture(scope="module")
def parsed_cluster():
    from mdsfair.preprocess.pipeline import EncodedCluster
    from mdsfair.preprocess.structure import ClusterStructure

    sentences = [["The old cat sat on the mat.", "It slept."], ["Dogs bark loudly."]]
    pieces = {
        "The old cat sat on the mat.": ["▁The", "▁ol", "d", "▁cat", "▁sat", "▁on", "▁the", "▁mat", "."],
        "It slept.": ["▁It", "▁sle", "pt", "."],
        "Dogs bark loudly.": ["▁Dog", "s", "▁bark", "▁loud", "ly", "."],
    }
    documents = [[sentences[0]], [sentences[1]]]
    flat = [s for doc in sentences for s in doc]
    symbols = [pieces[s] for s in flat]
    n = sum(len(s) for s in symbols)
    cluster = ClusterStructure(id="c0", documents=documents, summary="x", summary_sentences=["x"])
    encoded = EncodedCluster(
        id="c0",
        tokens=np.arange(n),
        doc_ids=np.zeros(n, int),
        para_ids=np.zeros(n, int),
        sent_ids=np.repeat(np.arange(len(symbols)), [len(s) for s in symbols]),
        word_ids=np.concatenate([np.cumsum([p.startswith("▁") for p in s]) - 1 for s in symbols]),
        symbol_chars=np.array([len(p.replace("▁", "")) for s in symbols for p in s]),
        target=np.zeros(1, int),
        summary="x",
        num_documents=2,
        num_paragraphs=2,
        num_sentences=3,
    )
    first = DependencyArcAligner(argparse.Namespace(dep_subword_arcs="first-subword")).arcs(cluster, encoded)
    every = DependencyArcAligner(
        argparse.Namespace(dep_subword_arcs="all-subwords", side_data=["dep_head", "dep_rel", "dep_word"])
    ).arcs(cluster, encoded)
    return first, every


def test_producer_arcs_on_a_fixture(parsed_cluster):
    first, every = parsed_cluster
    head, rel, word = first["dep_head"], first["dep_rel"], first["dep_word"]
    # "The old cat sat on the mat ." = subwords 0 | 1 2 | 3 | 4 | 5 | 6 | 7 | 8
    assert word[:9].tolist() == [0, 1, 1, 3, 4, 5, 6, 7, 8]
    assert (head[4], rel[4]) == (4, REL["ROOT"])  # sat: ROOT points to itself
    assert (head[3], rel[3]) == (4, REL["nsubj"])  # cat -> sat
    assert (head[1], rel[1]) == (3, REL["amod"]) and head[2] == -1  # only the first subword of "old"
    assert (head[7], rel[7]) == (5, REL["pobj"])  # mat -> on
    # second sentence is offset in the stream: "It slept ." = 9 | 10 11 | 12
    assert (head[9], rel[9]) == (10, REL["nsubj"]) and (head[10], rel[10]) == (10, REL["ROOT"])
    # every subword of the dependent word carries the arc in all-subwords mode
    assert (every["dep_head"][2], every["dep_rel"][2]) == (3, REL["amod"])
    assert (every["dep_head"][11], every["dep_rel"][11]) == (10, REL["ROOT"])
    assert np.array_equal(every["dep_word"], word)
    with pytest.raises(ValueError, match="dep_word"):
        DependencyArcAligner(argparse.Namespace(dep_subword_arcs="all-subwords", side_data=["dep_head", "dep_rel"]))


# ------------------------------------------------------------ the model


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("dape"))
    return make_tiny_data_bin(work, train=12, valid=2, test=4, extra_args=["--side-data", "dep_head", "dep_rel"])


def build(data_bin, arch="dape_transformer_tiny", extra=()):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--arch",
            arch,
            "--max-source-positions",
            "384",
            "--max-documents",
            "2",
            "--dropout",
            "0",
            *extra,
        ],
    )
    task = tasks.setup_task(args)
    task.load_dataset("train")
    torch.manual_seed(1)
    return task, task.build_model(args), args


def first_batch(task, size=3):
    """The ``size`` shortest training examples (different lengths: padding)."""
    dataset = task.datasets["train"]
    return dataset.collater([dataset[int(i)] for i in np.argsort(dataset.src_sizes, kind="stable")[:size]])


def test_both_features_off_equals_plain_transformer(data_bin):
    task, model, _ = build(data_bin, extra=["--no-doc-positions", "--no-dependency-encoding"])
    _, plain, _ = build(
        data_bin,
        arch="transformer",
        extra=[
            "--encoder-layers",
            "2",
            "--decoder-layers",
            "2",
            "--encoder-embed-dim",
            "32",
            "--decoder-embed-dim",
            "32",
            "--encoder-ffn-embed-dim",
            "64",
            "--decoder-ffn-embed-dim",
            "64",
            "--encoder-attention-heads",
            "4",
            "--decoder-attention-heads",
            "4",
            "--share-all-embeddings",
        ],
    )
    assert isinstance(plain, TransformerModel) and type(plain).__name__ == "TransformerModel"
    assert set(model.state_dict()) == set(plain.state_dict())
    plain.load_state_dict(model.state_dict())
    model.eval(), plain.eval()
    net_input = first_batch(task)["net_input"]
    assert net_input["src_tokens"].size(0) > 1 and net_input["src_tokens"].eq(task.dictionary.pad()).any()
    # with both features off the model reads no side input; the task hands it none (handing it the
    # arcs is refused by name: tests/test_components.py)
    ours = model(**task._sample_for(model, {"net_input": net_input})["net_input"])[0]
    theirs = plain(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])[0]
    assert torch.allclose(ours, theirs, atol=1e-6)
    # the full model differs (both features change the encoder)
    _, full, _ = build(data_bin)
    full.load_state_dict(model.state_dict(), strict=False)
    full.eval()
    assert not torch.allclose(
        full(**{k: v for k, v in net_input.items() if k not in ("src_para_ids", "src_sent_ids")})[0], theirs
    )


def test_missing_dependency_arcs_is_a_clear_error(data_bin):
    task, model, _ = build(data_bin)
    net_input = first_batch(task)["net_input"]
    with pytest.raises(ValueError, match="--side-data dep_head dep_rel"):
        model(
            net_input["src_tokens"],
            net_input["src_lengths"],
            net_input["prev_output_tokens"],
            src_doc_ids=net_input["src_doc_ids"],
        )


def test_training_loss_falls_and_the_relation_encoder_learns(data_bin):
    task, model, args = build(data_bin)
    batch = first_batch(task, size=4)
    net_input = {k: v for k, v in batch["net_input"].items() if k not in ("src_para_ids", "src_sent_ids")}
    assert (net_input["src_dep_head"] >= 0).any() and (net_input["src_dep_rel"] >= 0).any()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.998))
    losses = []
    for _ in range(6):
        logits = model(**net_input)[0]
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)), batch["target"].view(-1), ignore_index=task.dictionary.pad()
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses
    relation_encoder = model.encoder.dependency_encoder.relation_encoder
    assert relation_encoder[0].weight.grad.abs().sum() > 0, "F_depEnc gets no gradient"


def test_hub_pipeline_parses_raw_clusters_into_the_stored_arcs(data_bin):
    """The hub encodes a raw cluster with the pipeline rebuilt from the
    data-bin manifest: it parses the raw text and aligns the arcs exactly as
    preprocessing did (hub == fairseq-generate on the outputs is in the
    model-contract suite)."""
    from mdsfair.data.manifest import read_manifest
    from mdsfair.preprocess.pipeline import ClusterEncoder

    task, _, _ = build(data_bin)
    encoder = ClusterEncoder.from_data_bin(data_bin, read_manifest(data_bin), task.source_dictionary)
    raw_dir = os.path.join(os.path.dirname(data_bin), "raw")
    raw_test = [json.loads(line) for line in open(os.path.join(raw_dir, "test.jsonl"), encoding="utf-8")]
    stored = {name: NumpyMMapDataset(os.path.join(data_bin, f"test.{name}")) for name in ("dep_head", "dep_rel")}
    assert len(raw_test) == len(stored["dep_head"]) == 4
    for i, cluster in enumerate(raw_test):
        encoded = encoder.encode(cluster, i)
        assert (encoded.side_data["dep_head"] >= 0).any()
        for name, arrays in stored.items():
            np.testing.assert_array_equal(encoded.side_data[name], arrays[i])
