"""What mdsfair's criterions log besides fairseq's own: a summed logging
output per unit of the batch's ``sample_size``, as fairseq's criterions log
their loss."""

from typing import Dict, Iterable, List, Tuple

from fairseq import metrics


def log_means_per_sample(logging_outputs: List[dict], names: Iterable[str]) -> None:
    """Log each output of ``names``, summed over ``logging_outputs`` (the
    workers'), divided by their summed ``sample_size`` (at least 1),
    weighted by it, to 4 decimals."""
    sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
    for name in names:
        total = sum(log.get(name, 0) for log in logging_outputs)
        metrics.log_scalar(name, total / max(sample_size, 1), sample_size, round=4)


def label_smoothed_logging_output(criterion, model, net_output, sample, loss, nll_loss, **summed) -> Tuple[int, Dict]:
    """The sample size and logging output of fairseq's label-smoothed
    cross-entropy for ``criterion`` (a subclass of it) with the total ``loss``
    it returns: the loss, the NLL, the token and sentence counts, the sample
    size (sentences with ``--sentence-avg``, else tokens), the accuracy counts
    with ``--report-accuracy``, and each tensor of ``summed`` (the criterion's
    own terms, logged by :func:`log_means_per_sample`)."""
    sample_size = sample["target"].size(0) if criterion.sentence_avg else sample["ntokens"]
    logging_output = {
        "loss": loss.data,
        "nll_loss": nll_loss.data,
        **{name: value.data for name, value in summed.items()},
        "ntokens": sample["ntokens"],
        "nsentences": sample["target"].size(0),
        "sample_size": sample_size,
    }
    if criterion.report_accuracy:
        n_correct, total = criterion.compute_accuracy(model, net_output, sample)
        logging_output["n_correct"] = n_correct.data
        logging_output["total"] = total.data
    return sample_size, logging_output
