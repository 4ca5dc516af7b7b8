"""Rewrite a fairseq wheel so that torchaudio is its optional extra ``audio``.

fairseq (ve-fairseq 0.12.3, and fairseq-fixed) lists ``torchaudio`` among its
requirements, yet only its speech tasks import it, lazily, and mdsfair uses
none of them. No torchaudio on the package registry matches the pinned CPU
torch (each is a CUDA build, or pins an older torch), and one that cannot load
breaks ``transformers`` (it imports torchaudio whenever it is installed). So
``install.sh`` installs fairseq from a copy of its wheel whose metadata says::

    Requires-Dist: torchaudio>=0.8.0; extra == "audio"
    Provides-Extra: audio

and nothing else changes: same files, same version, the wheel's RECORD updated
with the new METADATA hash and size, so ``pip check`` is clean and
``pip install "ve-fairseq[audio]"`` still brings torchaudio where one exists.

Usage: ``python tools/fairseq_wheel_audio_extra.py WHEEL OUT_DIR`` prints the
path of the rewritten wheel (same file name, in OUT_DIR).
"""

import base64
import hashlib
import os
import re
import sys
import zipfile

REQUIREMENT = re.compile(r"^Requires-Dist: (torchaudio[^;\n]*)$", re.MULTILINE)


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def audio_extra_metadata(metadata: str, wheel: str) -> str:
    """The METADATA text with its one unconditional torchaudio requirement
    made conditional on the extra ``audio``; an error naming the wheel when
    the requirement is not there exactly once (a new fairseq release)."""
    found = REQUIREMENT.findall(metadata)
    if len(found) != 1:
        raise SystemExit(
            f"{wheel}: METADATA has {len(found)} unconditional torchaudio requirements, expected 1; "
            "this script knows ve-fairseq 0.12.3 and fairseq-fixed 0.12.3.1"
        )
    requirement = found[0].strip()
    metadata = REQUIREMENT.sub(f'Requires-Dist: {requirement}; extra == "audio"', metadata, count=1)
    if "Provides-Extra: audio\n" not in metadata:
        head, separator, body = metadata.partition("\n\n")  # headers end at the first blank line
        metadata = head + "\nProvides-Extra: audio" + separator + body
    return metadata


def rewrite(wheel: str, out_dir: str) -> str:
    target = os.path.join(out_dir, os.path.basename(wheel))
    if os.path.abspath(target) == os.path.abspath(wheel):
        raise SystemExit(f"{wheel}: OUT_DIR must differ from the wheel's folder")
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        metadata_name = next((n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        record_name = next((n for n in names if n.endswith(".dist-info/RECORD") and n.count("/") == 1), None)
        if metadata_name is None or record_name is None:
            raise SystemExit(f"{wheel}: not a wheel (no .dist-info/METADATA and RECORD at its top)")
        metadata = audio_extra_metadata(source.read(metadata_name).decode("utf-8"), wheel).encode("utf-8")
        record_lines = []
        for line in source.read(record_name).decode("utf-8").splitlines():
            if line.split(",", 1)[0] == metadata_name:
                line = f"{metadata_name},{record_hash(metadata)},{len(metadata)}"
            record_lines.append(line)
        record = ("\n".join(record_lines) + "\n").encode("utf-8")
        partial = target + ".partial"
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as output:
            for info in source.infolist():
                data = (
                    metadata
                    if info.filename == metadata_name
                    else record
                    if info.filename == record_name
                    else source.read(info.filename)
                )
                output.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    os.replace(partial, target)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python tools/fairseq_wheel_audio_extra.py WHEEL OUT_DIR")
    print(rewrite(sys.argv[1], sys.argv[2]))
