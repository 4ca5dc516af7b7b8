"""``mdsfair-convert --report-json`` is written atomically (issue 22 item 4):
a failure while writing it (a full disk) keeps the earlier report whole and
leaves no temporary file."""

import builtins
import io
import json
import os
from pathlib import Path

from mdsfair.preprocess.converters import cli_main

FIXTURES = Path(__file__).parent / "fixtures" / "converters"


class HalfThenDiskFull:
    """A text handle that writes the first half of what it is given, then
    fails as a full disk does."""

    def __init__(self, handle):
        self.handle = handle

    def write(self, text):
        self.handle.write(text[: max(1, len(text) // 2)])
        self.handle.flush()
        raise OSError(28, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_a_failed_report_json_write_keeps_the_old_report(tmp_path, capsys, monkeypatch):
    output = tmp_path / "val.jsonl"
    report_json = tmp_path / "report.json"
    arguments = [
        "wcep",
        str(FIXTURES / "wcep" / "val.jsonl"),
        "-o",
        str(output),
        "--split",
        "val",
        "--report-json",
        str(report_json),
    ]
    assert cli_main(arguments + ["--max-articles", "2"]) == 0
    before = report_json.read_text(encoding="utf-8")
    assert json.loads(before)["truncated"] == {"articles_beyond_max_articles": 2}
    capsys.readouterr()

    real_open = io.open

    def failing_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if "w" in mode and os.path.basename(str(file)).startswith((".report.json", "report.json")):
            return HalfThenDiskFull(handle)
        return handle

    monkeypatch.setattr(io, "open", failing_open)
    monkeypatch.setattr(builtins, "open", failing_open)
    status = cli_main(arguments)  # a new report (no --max-articles): its write fails half-way
    monkeypatch.undo()
    assert status == 1
    assert (
        f"mdsfair-convert: error: cannot write --report-json {report_json}: [Errno 28] No space left on device"
        in capsys.readouterr().err
    )
    assert report_json.read_text(encoding="utf-8") == before  # the earlier report, whole
    assert sorted(os.listdir(tmp_path)) == ["report.json", "val.jsonl"]  # no temporary file left
