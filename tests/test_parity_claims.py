"""Sentences of the code and documents that say mdsfair does something as a
paper or the authors' code does, checked against that source where no other
test does: the paper's text (``../shared/papers``, :func:`tests.utils.paper_text`)
or the authors' repository, read from a local snapshot
(:func:`tests.utils.authors_source`). Their repositories state no licence,
so nothing of them is copied here: the tests look for the lines the claims
cite, and are skipped where there is no snapshot. Claims of a system that
its own test file checks stay there (``tests/test_efficient_encoders.py``,
``tests/test_content_selection.py``, ...).
"""

import inspect
import math
import os

import pytest

from tests.utils import REPO_ROOT, authors_source, model_on_dictionary, paper_text, toy_dictionary


def authors_file(repository: str, path: str) -> str:
    """``path`` in the snapshot of ``OWNER/NAME``, its whitespace runs made one space."""
    return " ".join(authors_source(repository, path).split())


# ------------------------------------------------------- LoBART's content selection (potsawee/longsum0)


def test_the_selector_initialises_as_the_authors_param_init():
    """``mdsfair/models/content_selector.py``: "As the authors' ``param_init``: Xavier-normal matrices,
    zero biases". Their ``models/hiermodel.py``, and the selector's parameters: every bias zero, every
    matrix with the standard deviation of a Xavier-normal draw (``sqrt(2 / (fan_in + fan_out))``; torch's
    own GRU and linear initializations are uniform with other widths and biases)."""
    hiermodel = authors_file("potsawee/longsum0", "models/hiermodel.py")
    assert "if p.dim() > 1: nn.init.xavier_normal_(p)" in hiermodel
    assert "if 'bias' in name: nn.init.zeros_(p)" in hiermodel
    model = model_on_dictionary("lobart_mcs", toy_dictionary())
    matrices = 0
    for name, parameter in model.named_parameters():
        if "bias" in name:
            assert not parameter.detach().any(), name
        elif parameter.dim() > 1 and parameter.numel() >= 16384:
            fan_out, fan_in = parameter.shape
            xavier = math.sqrt(2.0 / (fan_in + fan_out))
            assert float(parameter.detach().std()) == pytest.approx(xavier, rel=0.05), name
            matrices += 1
    assert matrices >= 4


def test_the_labels_and_the_oracle_follow_the_authors_scripts():
    """``mdsfair/preprocess/content_selection.py``: a sentence is labelled when its ROUGE-2 recall is above
    0, else the three longest sentences, as ``data/create_extractive_label.py``; the oracle without
    padding keeps only the sentences of positive recall, else the three longest, as
    ``traintime_select/oracle_select_nopad.py`` (``preprocess/rank.py``'s comment too); and the labels
    of the whole input (``mdsfair/tasks/content_selection.py``): the script labels every sentence of
    the transcription. ``tests/test_content_selection.py`` checks mdsfair's functions on hand cases."""
    labels = authors_file("potsawee/longsum0", "data/create_extractive_label.py")
    assert "if scores[i] > 0.0: count_nonzero_rouge2recall += 1" in labels
    assert "keep_idx = rouge2recall_generate(sentences, reference)" in labels
    longest_three = "keep_idx = np.argsort(sent_lengths)[::-1][:3].tolist()"
    assert longest_three in labels
    oracle = authors_file("potsawee/longsum0", "traintime_select/oracle_select_nopad.py")
    assert "rank = np.argsort(scores)[::-1][:num_postive] # only consider positive ones" in oracle
    assert longest_three in oracle


def test_the_selection_scores_are_the_authors_inference_modes():
    """``mdsfair/preprocess/rank.py``: ``mcs``, ``attention`` and ``extraction`` are the authors'
    ``--inference_mode mcs|attn|ext`` (``decode/inference_hiermodel.py``): ``mcs`` is the square root of
    the product of the two rank-normalised scores (mdsfair's ``mcs_scores``, checked on a hand case in
    ``tests/test_content_selection.py``)."""
    inference = authors_file("potsawee/longsum0", "decode/inference_hiermodel.py")
    assert "if inference_mode in ['ext', 'mcs']:" in inference
    assert "ext_score = compute_ranking_score(ext_output)" in inference
    assert "attn_score = compute_ranking_score(attention)" in inference
    assert (
        "# taking geometric mean --- (simple mean works too!) total_score = np.sqrt(attn_score * ext_score)"
        in inference
    )
    assert "elif inference_mode == 'ext': total_score = ext_score" in inference
    assert "elif inference_mode == 'attn': total_score = attn_score" in inference


def test_the_lobart_recipe_takes_the_authors_settings():
    """``examples/lobart/README.md``: the window of the authors' ``LocalSelfAttention`` (Hugging Face's
    Longformer attention "with global attention removed", ``one_sided_attention_window_size =
    attention_window // 2``: the window counts both sides, as ``--attention-window`` does); training
    starts from BART-large-CNN as their ``conf/bart_arxiv_v0.txt``; the decoding command takes the
    defaults of their ``decode/decode_abssum.py`` (beam 4, at most 200 and at least 50 tokens, no
    repeated trigram)."""
    local = authors_file("potsawee/longsum0", "models/localattn.py")
    assert "currently global attention is removed" in local
    assert "self.one_sided_attention_window_size = attention_window // 2" in local
    assert "bart_weights = facebook/bart-large-cnn" in authors_file("potsawee/longsum0", "conf/bart_arxiv_v0.txt")
    decode = authors_file("potsawee/longsum0", "decode/decode_abssum.py")
    for flag, default in (("num_beams", 4), ("max_length", 200), ("min_length", 50), ("no_repeat_ngram_size", 3)):
        assert f"parser.add_argument('--{flag}', type=int, default={default})" in decode
    with open(os.path.join(REPO_ROOT, "examples", "lobart", "README.md"), encoding="utf-8") as handle:
        recipe = " ".join(handle.read().split())
    assert "--beam 4 --max-len-b 200 --min-len 50 --no-repeat-ngram-size 3" in recipe


# ------------------------------------------------------------------- SummPip (mingzi151/SummPip)


def test_summpip_settings_are_the_authors_calls():
    """``mdsfair/evaluation/summpip.py`` and ``docs/evaluation.md``: a cluster with no more sentences than
    clusters is its own summary; ``rbf-rows`` hands the adjacency rows to scikit-learn's default (RBF)
    affinity, as their ``summarizer.py`` calls ``SpectralClustering``; the nearest neighbours are those of
    gensim's ``most_similar`` called without ``topn``, as their ``sentence_graph.py`` calls it."""
    from sklearn.cluster import SpectralClustering

    summarizer = authors_file("mingzi151/SummPip", "summarizer.py")
    assert 'if num_sents <= self.nb_clusters: summary_list.append(" ".join(sentences_list))' in summarizer
    assert "SpectralClustering(n_clusters = self.nb_clusters, random_state = self.seed).fit(X)" in summarizer
    assert inspect.signature(SpectralClustering).parameters["affinity"].default == "rbf"
    sentence_graph = authors_file("mingzi151/SummPip", "sentence_graph.py")
    assert "nn = word_vectors.most_similar(positive=[noun])" in sentence_graph


def test_summpips_nearest_neighbours_are_gensims_most_similar_default():
    """``NEAREST_NEIGHBOURS`` (``mdsfair/evaluation/summpip.py``) is the default ``topn`` of gensim's
    ``KeyedVectors.most_similar`` (``gensim/models/keyedvectors.py``), which the authors' call leaves unset
    (:func:`test_summpip_settings_are_the_authors_calls`)."""
    import ast

    from mdsfair.evaluation.summpip import NEAREST_NEIGHBOURS

    module = ast.parse(authors_source("piskvorky/gensim", "gensim/models/keyedvectors.py"))
    keyed_vectors = next(node for node in module.body if isinstance(node, ast.ClassDef) and node.name == "KeyedVectors")
    most_similar = next(
        node for node in keyed_vectors.body if isinstance(node, ast.FunctionDef) and node.name == "most_similar"
    )
    parameters = most_similar.args
    names = [parameter.arg for parameter in parameters.args]
    defaults = dict(zip(names[len(names) - len(parameters.defaults) :], parameters.defaults))
    assert ast.literal_eval(defaults["topn"]) == NEAREST_NEIGHBOURS


# ------------------------------------------------------------------------- LED (Hugging Face)


def test_led_global_attention_first_is_hugging_faces_summarization_example():
    """``examples/led/README.md`` and ``global_attention_mask``: ``--global-attention first`` marks the
    first real token, as the summarization example of Hugging Face's ``modeling_led.py`` sets
    ``global_attention_mask[:, 0] = 1`` (on a right-padded source, the same token)."""
    import torch
    from transformers.models.led import modeling_led

    from mdsfair.modules.self_attention_components import global_attention_mask

    example = " ".join(inspect.getsource(modeling_led).split())
    assert (
        ">>> # Global attention on the first token (cf. Beltagy et al. 2020) >>> global_attention_mask = "
        "torch.zeros_like(inputs) >>> global_attention_mask[:, 0] = 1"
    ) in example
    right_padded = torch.tensor([[0, 5, 6, 2], [0, 5, 2, 1]])
    assert global_attention_mask(right_padded, 1, "first").long().tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]


@pytest.mark.parametrize("dim", [16, 17])
def test_pegasus_positions_are_hugging_faces_float32_values_in_a_float64_model(dim):
    """``mdsfair/modules/sinusoidal.py``: PEGASUS's table "as Hugging Face's
    ``PegasusSinusoidalPositionalEmbedding`` lays them out", "float32 values, as Hugging Face's, also in a
    float64 model": its ``create_weight`` on a float64 embedding and mdsfair's table moved to float64."""
    import torch
    from transformers.models.pegasus.modeling_pegasus import PegasusSinusoidalPositionalEmbedding

    from mdsfair.modules.sinusoidal import HalvesSinusoidalPositions

    expected = PegasusSinusoidalPositionalEmbedding(40, dim).double().create_weight()
    assert expected.dtype == torch.float64 and torch.equal(expected, expected.float().double())
    table = HalvesSinusoidalPositions(40, dim, padding_idx=1).double().table
    assert table.dtype == torch.float64 and torch.equal(table, table.float().double())
    torch.testing.assert_close(table, expected, rtol=0, atol=torch.finfo(torch.float32).eps)


# ------------------------------------------------------- the sparse decoder (Manakul & Gales 2021)


def test_the_kl_weight_is_the_papers():
    """``mdsfair/criterions/sparse_kl.py``: "the scale on which the paper tuned lambda = 0.2" (App. A.5)."""
    from mdsfair.criterions.sparse_kl import SparseKLCriterionConfig

    assert "For integrated training, we set λ in LI to 0.2." in paper_text("sparse-encdec-attention-manakul2021.txt")
    assert SparseKLCriterionConfig().kl_weight == 0.2
