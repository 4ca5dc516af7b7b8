"""The closing report ``mdsfair-preprocess`` prints: one row of counts per
split (:func:`format_report`) with notes on references, skipped lines and
repeated ids (:func:`split_notes`), the vocabulary SentencePiece reached
(:func:`format_vocabulary`) and, with ``--shards``, where the clusters went
and the DATA path to train on (:func:`format_shard_summary`)."""

from typing import Dict, List

from mdsfair.preprocess.config import PreprocessConfig
from mdsfair.preprocess.sharding import SHARD_NAME


def format_report(reports: Dict[str, Dict]) -> str:
    """The closing report as a table, one row per split."""
    columns = [
        ("clusters", "clusters"),
        ("documents", "docs"),
        ("paragraphs", "paras"),
        ("sentences", "sents"),
        ("source_tokens", "src tok"),
        ("target_tokens", "tgt tok"),
        ("source_tokens_max", "src max"),
        ("unknown_tokens", "unk"),
    ]
    width = max([10] + [len(split) + 1 for split in reports if "/" in split])  # shard{k}/{split}: --shards
    header = f"{'split':<{width}}" + "".join(f"{title:>11}" for _, title in columns) + "  skipped / dropped"
    lines = [header, "-" * len(header)]
    for split, report in reports.items():
        row = f"{split:<{width}}" + "".join(f"{report[key]:>11,}" for key, _ in columns)
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(report["skipped"].items())) or "none"
        row += f"  skipped: {skipped}; empty documents dropped: {report['empty_documents_dropped']}"
        row += f"; empty summaries: {report['empty_summaries']}"
        lines.append(row)
    lines.append("truncated: 0 (preprocessing keeps everything; the task truncates and counts)")
    lines.extend(split_notes(reports))
    return "\n".join(lines)


def split_notes(reports: Dict[str, Dict]) -> List[str]:
    """Closing-report lines on rows per reference, kept references, skip
    reports and repeated ids."""
    notes = []
    for split, report in reports.items():
        if report.get("examples", report["clusters"]) != report["clusters"]:
            notes.append(
                f"{split}: {report['examples']:,} examples from {report['clusters']:,} clusters "
                "(--multi-reference each: one per reference)"
            )
        if report.get("reference_files"):
            notes.append(
                f"{split}: {report['multi_reference_clusters']:,} clusters with several references, "
                f"kept in {', '.join(report['reference_files'])}"
            )
        if report.get("skip_report"):
            notes.append(f"{split}: skipped lines and dropped documents listed in {report['skip_report']}")
        if report.get("bidi_controls_removed"):
            notes.append(
                f"{split}: {report['bidi_controls_removed']:,} bidirectional-text controls removed "
                "(U+200E/U+200F/U+061C, U+202A-U+202E, U+2066-U+2069: they carry no content)"
            )
        if report.get("duplicate_ids"):
            notes.append(
                f"{split}: {len(report['duplicate_ids']):,} cluster ids occur more than once (listed in mdsfair.json)"
            )
    return notes


def format_vocabulary(vocabulary: Dict[str, int]) -> str:
    """The line on a trained SentencePiece model's real size (the manifest's
    ``vocabulary``)."""
    return (
        f"vocabulary: {vocabulary['pieces']:,} SentencePiece pieces (asked for "
        f"{vocabulary['requested_pieces']:,}); dict.txt {vocabulary['dictionary_size']:,} entries"
    )


def format_shard_summary(args: PreprocessConfig, reports: Dict[str, Dict]) -> str:
    """The closing lines of a ``--shards`` run: clusters per shard of each
    training split, where the other splits went, the DATA path to train on."""
    count, first = args.shards, SHARD_NAME.format(0)
    lines = [f"{count} shard(s) in {args.destdir}, one dict.txt and subword model in each:"]
    for split in args.sharded_splits:
        parts = [reports[f"{SHARD_NAME.format(index)}/{split}"]["clusters"] for index in range(count)]
        lines.append(
            f"  {split}: {sum(parts):,} clusters = "
            + " + ".join(f"{part:,} ({SHARD_NAME.format(index)})" for index, part in enumerate(parts))
        )
    others = [
        key.split("/", 1)[1]
        for key in reports
        if key.startswith(first + "/") and key.split("/", 1)[1] not in args.sharded_splits
    ]
    if others:
        lines.append(f"  {', '.join(others)}: in {first} only (fairseq reads them from the first shard)")
    lines.append(f"DATA for fairseq-train / mdsfair-train (epoch e reads shard (e-1) % {count}): {args.shard_data}")
    return "\n".join(lines)
