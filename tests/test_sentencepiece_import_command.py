"""What ``mdsfair-import hf-t5`` / ``hf-longt5`` / ``hf-pegasus`` (the SentencePiece
families' command, :func:`mdsfair.importers.hf_t5.run_sentencepiece_import_cli`) print
after an import: what was found and written, the notes, and the fairseq-generate
command with the import's generation flags. The imports themselves are tested with
their families (``tests/test_t5.py``, ``tests/test_longt5.py``, ``tests/test_pegasus.py``)."""

from mdsfair.importers.hf_t5 import run_sentencepiece_import_cli

#: What an import returns, less the notes and generation flags only PEGASUS's has.
SUMMARY = {
    "found": ["google/t5-v1_1-base: found in the Hugging Face cache"],
    "arch": "t5_v1_1_base",
    "dictionary_size": 32101,
    "source": "hf/model.safetensors",
}


def recording_import(summary, calls):
    """An import function that records its call and returns ``summary``."""

    def import_model(hf_dir, out_dir, overwrite=False):
        calls.append((hf_dir, out_dir, overwrite))
        return {**summary, "out_dir": out_dir}

    return import_model


def test_the_command_prints_what_the_import_found_and_wrote_and_the_generate_command(capsys):
    calls = []
    argv = ["hf", "out", "--overwrite"]
    assert (
        run_sentencepiece_import_cli("hf-t5", "Convert.", "google/t5-v1_1-base", recording_import(SUMMARY, calls), argv)
        == 0
    )
    assert calls == [("hf", "out", True)]
    assert capsys.readouterr().out.splitlines() == [
        "google/t5-v1_1-base: found in the Hugging Face cache",
        "wrote out/model.pt (--arch t5_v1_1_base), dict.txt (32101 entries), spm.model and mdsfair.json from "
        "hf/model.safetensors",
        "  fairseq-generate DATA_BIN --user-dir mdsfair --path out/model.pt",
    ]


def test_the_command_prints_the_imports_notes_and_its_generation_flags(capsys):
    summary = {**SUMMARY, "notes": ["generation_config.json: num_beams 8"], "generate_flags": ["--beam", "8"]}
    assert (
        run_sentencepiece_import_cli(
            "hf-pegasus", "Convert.", "google/pegasus-multi_news", recording_import(summary, []), ["hf", "out"]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[2:] == [
        "  note: generation_config.json: num_beams 8",
        "  fairseq-generate DATA_BIN --user-dir mdsfair --path out/model.pt --beam 8",
    ]
