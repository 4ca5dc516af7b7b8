"""The word limits of generation (``--min-len-words``, ``--max-len-words``,
:mod:`mdsfair.generation.word_limits`) for a task's data-bin: which
dictionary symbols are text and which begin a word, read from the subword
model the data-bin's manifest names (the model ``mdsfair-preprocess``
encoded it with, whose ``starts_word`` also aligns words for side data).

A generation config's ``min_len_words`` / ``max_len_words`` (the hub's
``generate()`` / ``summarize()``, ``--eval-rouge-args``) take precedence over
the task's flags.
"""

from typing import Optional, Tuple

import torch

from mdsfair.generation.word_limits import (
    WORD_LIMIT_OPTIONS,
    WordLimitError,
    attach_word_limits,
    check_word_limits,
)
from mdsfair.preprocess.subword import SubwordEncoder, control_indices


def word_tables(encoder: SubwordEncoder, dictionary) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(word_start, text)``, ``[len(dictionary)]`` bool each: whether symbol
    ``i`` begins a word (``encoder.starts_word``) and whether it is text (not
    one of :func:`mdsfair.preprocess.subword.control_indices`)."""
    text = torch.ones(len(dictionary), dtype=torch.bool)
    text[torch.as_tensor(control_indices(dictionary))] = False
    word_start = torch.tensor(
        [bool(text[index]) and encoder.starts_word(dictionary[index]) for index in range(len(dictionary))],
        dtype=torch.bool,
    )
    return word_start, text


def requested_word_limits(generation_cfg, task_cfg) -> Tuple[Optional[int], Optional[int]]:
    """``(min_words, max_words)``: the generation config's, else the task's flags."""
    limits = []
    for name in WORD_LIMIT_OPTIONS:
        value = getattr(generation_cfg, name, None)
        limits.append(value if value is not None else getattr(task_cfg, name, None))
    check_word_limits(*limits)
    return limits[0], limits[1]


def add_word_limits(task, generator, generation_cfg):
    """``generator`` with the requested word limits attached; refused with the
    reason when the data-bin's manifest names no subword model (words could
    not be told from tokens)."""
    min_words, max_words = requested_word_limits(generation_cfg, task.cfg)
    if min_words is None and max_words is None:
        return generator
    encoder = task.subword_encoder()
    if encoder is None:
        raise WordLimitError(
            f"--min-len-words / --max-len-words need the subword model of the data-bin to tell words from "
            f"tokens, but {task.data_dir}'s manifest names none; limit the length in tokens (--min-len, "
            "--max-len-b) instead"
        )
    word_start, text = word_tables(encoder, task.target_dictionary)
    return attach_word_limits(generator, word_start, text, min_words, max_words)
