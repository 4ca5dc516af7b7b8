"""What mdsfair's criterions log besides fairseq's own: a summed logging
output per unit of the batch's ``sample_size``, as fairseq's criterions log
their loss."""

from typing import Iterable, List

from fairseq import metrics


def log_means_per_sample(logging_outputs: List[dict], names: Iterable[str]) -> None:
    """Log each output of ``names``, summed over ``logging_outputs`` (the
    workers'), divided by their summed ``sample_size`` (at least 1),
    weighted by it, to 4 decimals."""
    sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
    for name in names:
        total = sum(log.get(name, 0) for log in logging_outputs)
        metrics.log_scalar(name, total / max(sample_size, 1), sample_size, round=4)
