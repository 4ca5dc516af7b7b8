"""Fig. 1 of Manakul & Gales (2021): sum of attention weights retained vs r.

For every target token of teacher-forced references, every decoder layer of
a checkpoint (any ``sparse_bart`` checkpoint; run it with ``--top-r 0`` to
analyse the full-attention model), the exact sentence saliency alpha^s_m
(Eq. 4) is averaged over heads (App. A.4), sorted, and accumulated over the
top r sentences: the attention mass that top-r selection keeps. The script
prints the mean retained mass per r and writes a plot.

    python examples/sparse_decoder/attention_retention.py data-bin checkpoints/checkpoint_best.pt \\
        --subset valid --max-examples 200 --plot retention.png
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import mdsfair  # noqa: E402

mdsfair.register()  # every mdsfair model, task and criterion with fairseq
from fairseq import checkpoint_utils  # noqa: E402


def retained_attention(sentence_attention, target_mask, max_r):
    """Mean over target tokens and layers of ``sum_{i in top-r} alpha^s_{m,i}``
    for r = 1..max_r, and the number of (token, layer) pairs: ``([max_r], n)``."""
    totals = torch.zeros(max_r, dtype=torch.double)
    count = 0
    for layer in sentence_attention:
        saliency = layer.exact.mean(dim=1)  # [B, T, S], heads averaged before ranking
        if saliency.size(-1) < max_r:
            saliency = torch.nn.functional.pad(saliency, (0, max_r - saliency.size(-1)))
        ranked = saliency.sort(dim=-1, descending=True).values[..., :max_r].cumsum(-1)
        totals += ranked[target_mask].double().sum(0)
        count += int(target_mask.sum())
    return totals, count


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="data-bin directory (mdsfair-preprocess)")
    parser.add_argument("checkpoint", help="sparse_bart checkpoint")
    parser.add_argument("--subset", default="valid", help="split to analyse")
    parser.add_argument("--max-examples", type=int, default=200, help="examples to analyse")
    parser.add_argument("--batch-size", type=int, default=4, help="examples per forward pass")
    parser.add_argument("--max-r", type=int, default=50, help="largest r on the x axis")
    parser.add_argument("--plot", default="attention_retention.png", help="output figure (png/pdf)")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is present")
    options = parser.parse_args()

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [options.checkpoint], arg_overrides={"data": options.data, "top_r": 0}
    )
    model = models[0].eval()
    device = torch.device("cuda" if torch.cuda.is_available() and not options.cpu else "cpu")
    model.to(device)
    task.load_dataset(options.subset)
    dataset = task.datasets[options.subset]
    totals = torch.zeros(options.max_r, dtype=torch.double)
    count = 0
    indices = list(range(min(options.max_examples, len(dataset))))
    with torch.no_grad():
        for start in range(0, len(indices), options.batch_size):
            sample = dataset.collater([dataset[i] for i in indices[start : start + options.batch_size]])
            sample = task._sample_for(model, sample)
            net_input = {k: v.to(device) for k, v in sample["net_input"].items()}
            _, extra = model(**net_input)
            batch_totals, batch_count = retained_attention(
                extra["sentence_attention"],
                sample["target"].to(device).ne(task.target_dictionary.pad()),
                options.max_r,
            )
            totals += batch_totals.cpu()
            count += batch_count
    retained = (totals / max(count, 1)).tolist()
    print(f"{'r':>4} {'retained attention':>20}")
    for r, value in enumerate(retained, start=1):
        print(f"{r:>4} {100 * value:>19.1f}%")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(range(1, options.max_r + 1), [100 * v for v in retained], marker=".")
    axis.set_xlabel("number of retained sentences r")
    axis.set_ylabel("sum of attention weights (%)")
    axis.set_ylim(0, 100)
    axis.grid(alpha=0.3)
    axis.set_title("Encoder-decoder attention kept by the top-r sentences")
    figure.tight_layout()
    figure.savefig(options.plot, dpi=150)
    print(f"plot written to {options.plot}")


if __name__ == "__main__":
    main()
