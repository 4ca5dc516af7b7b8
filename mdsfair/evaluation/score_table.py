"""The ROUGE table ``mdsfair-rouge`` and ``mdsfair-baseline --score`` print,
and the names of the measures every evaluation table uses.

Pure Python (no torch / fairseq import).
"""

from typing import Dict, Sequence

from mdsfair.evaluation.conventions import ALL_METRICS, TITLES

#: Measure keys of a score (``r``, ``p``, ``f``) and how the tables name them.
MEASURE_NAMES = {"f": "F1", "r": "recall", "p": "precision"}


def format_table(result: Dict[str, Dict], measures: Sequence[str] = ("f",)) -> str:
    """The scores as a text table: one row per measure, values x100, 2 decimals."""
    metrics = [metric for metric in ALL_METRICS if metric in result]
    header = "{:<10}".format("") + "".join(f"{TITLES[metric]:>9}" for metric in metrics)
    rows = [header]
    for measure in measures:
        cells = "".join(f"{100 * result[metric][measure]:>9.2f}" for metric in metrics)
        rows.append(f"{MEASURE_NAMES[measure]:<10}{cells}")
    info = result.get("info", {})
    count = info.get("num_hypotheses", 0)
    note = f"{info.get('scorer', '?')}, {count} {'hypothesis' if count == 1 else 'hypotheses'}"
    if info.get("convention") not in (None, "mdsfair", "mdsfair-fast"):
        note = f"convention {info['convention']}: {note}"
    if info.get("num_empty_hypotheses"):
        note += f" ({info['num_empty_hypotheses']} empty)"
    nfc = info.get("nfc_normalized") or {}
    if nfc.get("hypotheses") or nfc.get("references"):
        note += (
            f"; scored in Unicode NFC: {nfc.get('hypotheses', 0)} hypotheses and {nfc.get('references', 0)} "
            "references were not"
        )
    if isinstance(info.get("references"), str):
        note += f"; references: {info['references']}"
    return "\n".join(rows) + f"\n[{note}; R-L = LCS over the whole summary, R-Lsum = summary-level LCS over sentences]"
