"""``python -m mdsfair.checkpoints verify|stamp FILE...``: check mdsfair
checkpoints against their saved checksum and show their training data-bin,
or record a new checksum after a deliberate change of the weights.

The command of the package: it runs :func:`~mdsfair.checkpoints.stamping.verify`
and :func:`~mdsfair.checkpoints.stamping.stamp` and prints one line per file.
It sits in the foundation layer with the checks it runs (it imports nothing
above them), and Python runs this file once, as ``__main__``: no module of the
package imports it.
"""

import argparse
import sys
from typing import List, Optional

from mdsfair.checkpoints.checksums import CheckpointIntegrityError
from mdsfair.checkpoints.diagnosis import CheckpointFileError
from mdsfair.checkpoints.stamping import stamp, verify


def cli_main(argv: Optional[List[str]] = None) -> int:
    """``python -m mdsfair.checkpoints verify|stamp FILE...``"""
    parser = argparse.ArgumentParser(
        prog="python -m mdsfair.checkpoints",
        description="Verify mdsfair checkpoints against their saved checksum and show their training "
        "data-bin, or record a new checksum after a deliberate change of the weights.",
    )
    parser.add_argument("command", choices=["verify", "stamp"])
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        try:
            if args.command == "stamp":
                record = stamp(path)
                print(f"{path}: stamped {len(record['model_checksum']['tensors'])} tensors")
            else:
                record = verify(path)
                if record is None:
                    print(f"{path}: readable; no mdsfair record (not written by fairseq-train with an mdsfair task)")
                else:
                    data = record.get("data") or {}
                    verified = len((record.get("model_checksum") or {}).get("tensors", {}))
                    print(
                        f"{path}: OK ({verified} tensors verified); "
                        f"trained on {', '.join(data.get('data_bins', [])) or '?'}"
                    )
        except (CheckpointFileError, CheckpointIntegrityError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(cli_main())
