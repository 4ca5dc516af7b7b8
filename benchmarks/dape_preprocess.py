"""Throughput of the dependency-arc side data (``--side-data dep_head dep_rel``).

Parses real clusters with spaCy's parser (tok2vec + parser only) and aligns the
arcs to SentencePiece subwords, exactly as ``mdsfair-preprocess`` does, and
reports source subword tokens per second and spaCy words per second, next to
the cost of the rest of the pipeline (cleaning, sentence splitting, subword
encoding) measured in the same run. CPU only (spaCy's parser runs on CPU here).

    python benchmarks/dape_preprocess.py --input ../shared/data/fewsum/amazon/jsonl/train.jsonl \\
        --spm-model DATA_BIN/spm.model
"""
import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq.data import Dictionary  # noqa: E402

from mdsfair.preprocess.binarize import encode_cluster  # noqa: E402
from mdsfair.preprocess.producers.dependency_arcs import DependencyArcAligner  # noqa: E402
from mdsfair.preprocess.structure import SentenceSplitter, iter_raw_lines, parse_cluster  # noqa: E402
from mdsfair.preprocess.subword import SentencePieceEncoder, dictionary_from_sentencepiece  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, nargs="+", help="raw JSONL split(s)")
    parser.add_argument("--spm-model", required=True, help="SentencePiece model (e.g. a data-bin's spm.model)")
    parser.add_argument("--dep-subword-arcs", default="first-subword", choices=["first-subword", "all-subwords"])
    parser.add_argument("--max-clusters", type=int, default=None, help="stop after this many clusters per file")
    args = parser.parse_args(argv)

    encoder = SentencePieceEncoder(args.spm_model)
    dictionary: Dictionary = dictionary_from_sentencepiece(encoder)
    splitter = SentenceSplitter("rule")
    aligner = DependencyArcAligner(
        argparse.Namespace(dep_subword_arcs=args.dep_subword_arcs, side_data=["dep_head", "dep_rel", "dep_word"])
    )
    print(f"device: CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), one process")
    for path in args.input:
        start = time.perf_counter()
        encoded_clusters = []
        for number, (line, raw) in enumerate(iter_raw_lines(path)):
            if args.max_clusters is not None and number >= args.max_clusters:
                break
            cluster, _ = parse_cluster(raw, path, line, splitter, require_summary=False, drop_empty_documents=True)
            encoded_clusters.append((cluster, encode_cluster(cluster, encoder, dictionary)))
        encode_seconds = time.perf_counter() - start
        tokens = sum(len(e.tokens) for _, e in encoded_clusters)
        start = time.perf_counter()
        words = arcs = 0
        for cluster, encoded in encoded_clusters:
            result = aligner.arcs(cluster, encoded)
            arcs += int((result["dep_head"] >= 0).sum())
        parse_seconds = time.perf_counter() - start
        words = sum(len(aligner.nlp.tokenizer(s)) for c, _ in encoded_clusters
                    for d in c.documents for p in d for s in p)
        print(
            f"{path}: {len(encoded_clusters)} clusters, {tokens:,} subword tokens, {words:,} spaCy words, "
            f"{arcs:,} arcs stored\n"
            f"  parse + align: {parse_seconds:.1f} s = {tokens / parse_seconds:,.0f} tokens/s "
            f"({words / parse_seconds:,.0f} words/s)\n"
            f"  clean + split + encode (baseline): {encode_seconds:.1f} s = {tokens / encode_seconds:,.0f} tokens/s; "
            f"parsing costs {parse_seconds / encode_seconds:.1f}x the rest of the pipeline"
        )


if __name__ == "__main__":
    main()
