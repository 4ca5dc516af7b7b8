"""BERTScore (Zhang et al., "BERTScore: Evaluating Text Generation with
BERT", ICLR 2020) of hypotheses against their references, computed by the
``bert-score`` package.

Each token of the hypothesis ``x_hat`` and of the reference ``x`` is
embedded by one layer of a pre-trained encoder; with unit-normalized
embeddings, greedy matching by cosine similarity gives (Zhang et al.,
Sec. 3, without idf weighting)

    R = 1/|x| sum_{x_i in x} max_{x_hat_j in x_hat} x_i^T x_hat_j
    P = 1/|x_hat| sum_{x_hat_j in x_hat} max_{x_i in x} x_i^T x_hat_j
    F = 2 P R / (P + R)

where the sums run over the tokens other than the model's ``<s>`` and
``</s>`` (``[CLS]``, ``[SEP]``: weight 0 in bert-score) and each maximum over
every token of the other text, those two included (bert-score's matching).
The numbers are ``bert_score.score``'s, called with the model folder and
layer: mdsfair does not re-implement them. With several references, each of
``P``, ``R`` and ``F`` is its best over the references (bert-score's rule);
an empty hypothesis scores 0 (bert-score's rule, with a warning it prints).
The library encodes a text up to the tokenizer's ``model_max_length``
(512 tokens for RoBERTa) and truncates it there. The corpus score is the
mean over clusters, as the ROUGE columns' is.

The model. DAPE (Ma et al. 2022) reports BERTScore ("BS", Tables I and II)
without naming its model, layer, idf weighting or rescaling; its values
(0.80 to 0.85 in every row) are in the range of raw scores, which baseline
rescaling would move towards 0. mdsfair's
default is bert-score's own for English text (``lang="en"``):
``roberta-large`` (:data:`DEFAULT_MODEL`) at layer 17, the layer bert-score's
table (``bert_score.utils.model2layers``) gives it; no idf weighting and no
baseline rescaling, bert-score's defaults. Another encoder is any local
Hugging Face model folder; its layer comes from the same table when its id
or folder name is in it, else it must be given.
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from mdsfair.evaluation.local_models import ModelMetricError, import_package, local_model_folder, model_layer_count

#: bert-score's model for English (``bert_score.utils.lang2model["en"]``).
DEFAULT_MODEL = "roberta-large"


def default_layer(model: str) -> Optional[int]:
    """bert-score's layer for ``model`` (its table ``model2layers``), looked
    up by the name as given and by the folder's last component; ``None``
    when the table has neither."""
    from bert_score.utils import model2layers

    for key in (model, os.path.basename(os.path.normpath(model))):
        if key in model2layers:
            return model2layers[key]
    return None


def bertscore(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    model: str = DEFAULT_MODEL,
    layer: Optional[int] = None,
    batch_size: int = 32,
) -> Tuple[Dict[str, List[float]], Dict]:
    """Every cluster's BERTScore and the settings that produced it.

    Args:
        hypotheses: one hypothesis per cluster.
        references: per cluster, its non-empty references.
        model: a Hugging Face encoder folder, or a model id in the local cache.
        layer: the layer whose embeddings are compared (default: :func:`default_layer`).
        batch_size: texts per forward pass.

    Returns:
        ``({"p": [...], "r": [...], "f": [...]}, info)``, one value per
        cluster in input order; ``info`` names the model, its folder, the
        layer and bert-score's hash of the settings.
    """
    bert_score = import_package("bert_score", "bert-score", "--bertscore")
    import_package("transformers", "transformers", "--bertscore")
    folder = local_model_folder(model, "--bertscore-model")
    if layer is None:
        layer = default_layer(model)
        if layer is None:
            raise ModelMetricError(
                f"--bertscore-model {model}: bert-score's table of layers does not know this model; "
                "give the layer with --bertscore-layer N"
            )
    layers = model_layer_count(folder, "--bertscore-model")
    if layer > layers:
        raise ModelMetricError(f"--bertscore-layer {layer}: the model in {folder} has {layers} layers")
    (precision, recall, f1), settings_hash = bert_score.score(
        list(hypotheses),
        [list(cluster) for cluster in references],
        model_type=folder,
        num_layers=layer,
        batch_size=batch_size,
        return_hash=True,
    )
    scores = {"p": precision.tolist(), "r": recall.tolist(), "f": f1.tolist()}
    info = {
        "model": model,
        "model_folder": folder,
        "layer": layer,
        "idf": False,
        "rescaled_with_baseline": False,
        "hash": settings_hash,
    }
    return scores, info
