"""Semantic coherence of a summary by BERT's next-sentence prediction, as
PageSum (Liu et al. 2022, Sec. 5.3, Table 4) measures it after Bommasani &
Cardie (2020).

BERT's next-sentence prediction head (Devlin et al. 2019) reads the pair
``[CLS] A [SEP] B [SEP]`` (segment 0 for ``A``, 1 for ``B``) and gives two
logits, class 0 "B follows A" (IsNext) and class 1 "B is a random
sentence"; ``p_BERT(B | A)`` is the softmax probability of class 0. The
semantic coherence of a summary ``S`` of ``N_S`` sentences is the mean of
that probability over its pairs of consecutive sentences (PageSum Eq. 12):

    SC(S) = sum_{i=2}^{N_S} p_BERT(S^(i) | S^(i-1)) / (N_S - 1)

and a system's coherence is the mean of ``SC`` over its summaries (the
average Table 4 reports). Eq. 12 is undefined for a summary of fewer than
two sentences; such a summary scores 1, as in Bommasani & Cardie's code
(``rishibommasani/SummarizationEvaluation``, ``process_eval.py``,
``add_sc``: ``if len(sentences) <= 1: ex["coherence"] = 1``), and
:func:`semantic_coherence` counts them. (That code counts the pairs whose
probability is above 0.5; PageSum's Eq. 12, followed here, averages the
probabilities.)

The model: PageSum used ``bert-large-uncased`` (its footnote 10;
:data:`DEFAULT_MODEL`), read here from a local folder or the Hugging Face
cache. Sentences are split as the ROUGE columns split them (mdsfair's rules,
or ``--sentence-separator``); a pair longer than the model's positions is
cut to fit, the longer sentence first.
"""

import logging
from typing import Dict, List, Sequence, Tuple

from mdsfair.evaluation.local_models import import_package, local_model_folder

logger = logging.getLogger("mdsfair.evaluation.rouge")

#: The NSP model of PageSum's Table 4 (its footnote 10).
DEFAULT_MODEL = "bert-large-uncased"

#: The class of BERT's next-sentence head meaning "the second sentence follows the first".
IS_NEXT = 0


def sentence_pairs(sentences: Sequence[str]) -> List[Tuple[str, str]]:
    """The pairs ``(S^(i-1), S^(i))`` of consecutive non-empty sentences."""
    kept = [sentence for sentence in sentences if sentence.strip()]
    return list(zip(kept[:-1], kept[1:]))


def next_sentence_probabilities(model, tokenizer, pairs: Sequence[Tuple[str, str]], batch_size: int) -> List[float]:
    """``p_BERT(B | A)`` of every pair ``(A, B)``: the softmax probability of
    the IsNext class of ``model`` (a ``BertForNextSentencePrediction``)."""
    import torch

    device = next(model.parameters()).device
    max_length = min(tokenizer.model_max_length, model.config.max_position_embeddings)
    probabilities: List[float] = []
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            encoded = tokenizer(
                [first for first, _ in batch],
                [second for _, second in batch],
                padding=True,
                truncation="longest_first",
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
            logits = model(**encoded).logits.float()
            probabilities += torch.softmax(logits, dim=-1)[:, IS_NEXT].tolist()
    return probabilities


def semantic_coherence(
    summaries: Sequence[Sequence[str]], model: str = DEFAULT_MODEL, batch_size: int = 32
) -> Tuple[List[float], Dict]:
    """``SC`` (PageSum Eq. 12) of every summary, given as its sentences, and
    the settings (``info``: the model, its folder, and how many summaries
    had fewer than two sentences and scored 1)."""
    import_package("torch", "torch", "--nsp-coherence")
    transformers = import_package("transformers", "transformers", "--nsp-coherence")
    import torch

    folder = local_model_folder(model, "--nsp-model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    network = transformers.BertForNextSentencePrediction.from_pretrained(folder, local_files_only=True)
    network.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    pairs = [sentence_pairs(sentences) for sentences in summaries]
    probabilities = next_sentence_probabilities(network, tokenizer, [pair for own in pairs for pair in own], batch_size)
    coherence: List[float] = []
    start = 0
    for own in pairs:
        if own:
            coherence.append(sum(probabilities[start : start + len(own)]) / len(own))
        else:
            coherence.append(1.0)
        start += len(own)
    short = sum(not own for own in pairs)
    if short:
        logger.warning(
            "--nsp-coherence: %d of %d summaries have fewer than two sentences (first: cluster %d); each scores 1",
            short,
            len(pairs),
            next(index for index, own in enumerate(pairs) if not own),
        )
    info = {"model": model, "model_folder": folder, "fewer_than_two_sentences": short}
    return coherence, info
