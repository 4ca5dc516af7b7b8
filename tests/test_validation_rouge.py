"""Issue 33 item 6: ``--eval-rouge``: validation generates, scores and logs
ROUGE-1/2/L/Lsum, and the logged score equals ``mdsfair-rouge`` on the same
summaries, so ``--best-checkpoint-metric rouge_l`` selects as PRIMERA did."""

import copy
import json

import pytest
import torch

from tests import model_contract as contract

GENERATION = {"beam": 2, "max_len_a": 0, "max_len_b": 24, "min_len": 4}


def logged_rouge(built, model, criterion, batches):
    from fairseq.logging import metrics

    with metrics.aggregate(new_root=True) as aggregated:
        logs = [built.task.valid_step(batch, model, criterion)[2] for batch in batches]
        built.task.reduce_metrics(logs, criterion)
        values = aggregated.get_smoothed_values()
        return {
            name: values[name]
            for name in ("rouge_1", "rouge_2", "rouge_l", "rouge_lsum", "rouge_avg")
            if name in values
        }


@pytest.mark.parametrize("convention", ["mdsfair-fast", None])
def test_logged_validation_rouge_equals_mdsfair_rouge(contract_data, tmp_path, convention):
    from mdsfair.evaluation.conventions import CONVENTIONS
    from mdsfair.evaluation.file_scoring import score_files

    if convention is None:  # a paper's rouge-score preset
        convention = next(name for name, c in sorted(CONVENTIONS.items()) if c.scorer == "rouge-score")
    from fairseq.trainer import Trainer

    built = contract.ContractModel(
        "hierencdec_bart_tiny",
        contract_data,
        "--eval-rouge",
        "--eval-rouge-args",
        json.dumps(GENERATION),
        "--eval-rouge-convention",
        convention,
        "--optimizer",
        "adam",
        "--lr",
        "5e-3",
    )
    model = built.build_model()
    criterion = built.build_criterion()
    trainer = Trainer(built.cfg, built.task, model, criterion)
    train = [built.batch("train", [i, i + 1]) for i in range(0, 8, 2)]
    for step in range(100):  # a model that writes summary-like sentences: ROUGE well above 0
        trainer.train_step([train[step % len(train)]])
    model.eval()
    dataset = built.dataset("valid")
    batches = [built.batch("valid", [0, 1]), built.batch("valid", [2, 3])]
    assert all("references" in batch for batch in batches)
    logged = logged_rouge(built, model, criterion, batches)

    gen_cfg = copy.deepcopy(built.cfg.generation)
    for name, value in GENERATION.items():
        setattr(gen_cfg, name, value)
    generator = built.task.build_generator([model], gen_cfg)
    texts = {}
    for batch in batches:
        with torch.no_grad():
            hypotheses = built.task.inference_step(generator, [model], batch)
        for index, beams in zip(batch["id"].tolist(), hypotheses):
            texts[index] = built.task.eval_rouge.decode_summary(beams[0]["tokens"])
    assert len(texts) == len(dataset) == 4 and any(texts.values())
    hyp_file = tmp_path / "hyp.txt"
    hyp_file.write_text("".join(texts[i] + "\n" for i in range(len(texts))), encoding="utf-8")
    expected = score_files(
        str(hyp_file),
        data_bin=contract_data["data-bin"],
        split="valid",
        fast=convention == "mdsfair-fast",
        convention=None if convention == "mdsfair-fast" else convention,
    )
    compared = 0
    for metric, name in (
        ("rouge-1", "rouge_1"),
        ("rouge-2", "rouge_2"),
        ("rouge-l", "rouge_l"),
        ("rouge-lsum", "rouge_lsum"),
    ):
        if metric in expected:
            assert logged[name] == pytest.approx(round(100 * expected[metric]["f"], 2), abs=0.011), (metric, logged)
            compared += 1
    assert compared >= 3 and logged["rouge_1"] > 10
    # PRIMERA's checkpoint metric: the mean of the three F1 means (before rounding)
    sums = [100 * expected[m]["f"] for m in ("rouge-1", "rouge-2", "rouge-l")]
    assert logged["rouge_avg"] == pytest.approx(round(sum(sums) / 3, 2), abs=0.011)


def test_a_bootstrap_convention_is_refused_for_validation():
    from mdsfair.evaluation.conventions import CONVENTIONS
    from mdsfair.evaluation.validation_rouge import ValidationRouge

    perl = next(name for name, c in sorted(CONVENTIONS.items()) if c.scorer == "rouge155")
    with pytest.raises(ValueError, match=f"--eval-rouge-convention {perl}: scored by rouge155"):
        ValidationRouge(perl)
