"""HAT-BART's memory and time against input length, against full attention
on the same model: ``hat`` (BART with HAT's hierarchical layers over the
sentence starts and the decoder's sentence cross-attention, Rohde et al.
2021) and ``full`` (the same BART without them: full encoder attention and
BART's cross-attention only), same dimensions, one run. Both encoders attend
over every token (HAT-BART keeps full attention); the figure is what the
hierarchy adds.

Each cell is measured as in every benchmark against full attention
(:mod:`benchmarks.against_full`): one training step (``--no-grad``: a
forward), its peak memory and its time, printed as ratios of ``full``'s.
The source is cut into sentences of ``--sentence-tokens`` tokens.

    python benchmarks/hat_bart.py                                     # CPU, BART-base sizes, 512..3072 tokens
    python benchmarks/hat_bart.py --device cuda --size large --lengths 1024,2048,3072,4096
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import against_full, harness

#: system -> cross-attention component
SYSTEMS = {"hat": "hat", "full": "full"}


def build_model(config: dict):
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import mdsfair
    from mdsfair.models.hat_bart import HATBARTModel, hat_bart_architecture

    mdsfair.register()
    args = harness.model_flags(HATBARTModel)
    args.cross_attention = SYSTEMS[config["system"]]
    args.max_source_positions = args.max_encoder_positions = config["length"]
    args.max_target_positions = max(1024, config["target_tokens"])
    if config["size"] == "tiny":
        ARCH_CONFIG_REGISTRY["hat_bart_tiny"](args)
    else:
        hat_bart_architecture(args, config["size"])
    args.dropout = args.attention_dropout = args.activation_dropout = 0.0
    return against_full.built_on_a_synthetic_dictionary(HATBARTModel, args, config)


def sentence_ids(model, config: dict) -> dict:
    """``src_sent_ids`` of sentences of ``config["sentence_tokens"]`` tokens, where the model reads them."""
    if "src_sent_ids" not in model.side_inputs():
        return {}
    return {"src_sent_ids": (torch.arange(config["length"]) // config["sentence_tokens"]).unsqueeze(0)}


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    against_full.add_length_arguments(parser, "512,1024,2048,3072", 128)
    parser.add_argument(
        "--sentence-tokens", type=int, default=25, help="tokens per source sentence (default 25; one start each)"
    )
    parser.add_argument(
        "--size",
        choices=("tiny", "base", "large"),
        default="base",
        help="BART's dimensions (default base; large is the paper's HAT-BART)",
    )
    against_full.add_step_arguments(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps"])
    against_full.run_against_full(
        "hat_bart",
        ["hat"],
        opts,
        argv,
        build_model,
        f"BART-{opts.size}, 2 hierarchical layers; sentences of {opts.sentence_tokens} tokens",
        {"size": opts.size, "sentence_tokens": opts.sentence_tokens},
        side_inputs=sentence_ids,
    )


if __name__ == "__main__":
    main()
