"""Shared fixtures of the sparse encoder-decoder attention tests
(tests/test_sparse_bart.py, tests/test_sparse_fidelity.py): a tiny
``sparse_bart`` with its task and ``sparse_kl`` criterion built from the
command line, a collated training batch, random sentence ids, and the
source of each decoder row after a beam reorder, and the model-free
approximator's normalized sentence scores."""

import torch

from mdsfair.modules.sentence_approximator import model_free_log_probabilities, model_free_sentence_scores
from tests.utils import USER_DIR

#: --max-source-positions of the tiny models
MAX_SOURCE = "128"
#: two hypotheses per source, interleaved as after a beam reorder
ROW_SOURCES = torch.tensor([1, 0, 0, 1])


def build(data_bin, *extra, stage="interleaved"):
    """What ``fairseq-train`` sets up for a tiny ``sparse_bart`` on ``data_bin``
    (training stage ``stage``, further flags ``extra``), the train split
    loaded: ``(cfg, task, model, criterion)``."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [
        data_bin,
        "--user-dir",
        USER_DIR,
        "--task",
        "multidoc_summarization_sparse",
        "--arch",
        "sparse_bart_tiny",
        "--criterion",
        "sparse_kl",
        "--optimizer",
        "adam",
        "--lr",
        "3e-3",
        "--max-source-positions",
        MAX_SOURCE,
        "--dropout",
        "0",
        "--attention-dropout",
        "0",
        "--cpu",
        "--seed",
        "1",
        "--top-r",
        "3",
        "--sparse-training-stage",
        stage,
        "--max-tokens",
        "4096",
        *extra,
    ]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    model = task.build_model(cfg.model)
    return cfg, task, model, task.build_criterion(cfg.criterion)


def batch(task, model, indices=(0, 1, 2)):
    """The training clusters ``indices`` collated, as the task hands them to ``model``."""
    dataset = task.datasets["train"]
    return task._sample_for(model, dataset.collater([dataset[i] for i in indices]))


def random_sentence_ids(bsz=3, src_len=23, seed=0):
    """Non-decreasing sentence ids with right padding (-1), as the task makes them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((bsz, src_len), -1, dtype=torch.long)
    for b in range(bsz):
        length = src_len - 4 * b
        starts = torch.rand(length, generator=generator) < 0.25
        starts[0] = False
        ids[b, :length] = starts.long().cumsum(0)
    return ids


def model_free_sentence_log_scores(queries, sentence_key_sums, sentence_mask):
    """App. D, Eq. 19 normalized over sentences per head: ``[B, H, T, S]``
    log alpha~ (ranking uses the unnormalized scores, not these)."""
    return model_free_log_probabilities(
        model_free_sentence_scores(queries, sentence_key_sums, sentence_mask), sentence_mask
    )
