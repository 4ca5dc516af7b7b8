"""benchmarks/harness.py: the command line, results file and fresh-process
measurement every benchmark script shares, and one benchmark run end to end
at toy size through it (its results file has the fields of the committed
one that the documentation is rendered from)."""

import json
import re

import pytest

from benchmarks import harness, results


def parser_with(*flags):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    harness.add_threads(parser)
    harness.add_repeats(parser, "timed runs")
    harness.add_repeats(parser, "timed steps", flag="--steps")
    results.add_argument(parser)
    for flag in flags:
        parser.add_argument(flag, type=int, default=None)
    return parser


def test_parse_refuses_a_count_below_one_by_its_flag(capsys):
    parser = parser_with()
    assert harness.parse(parser, ["--repeats", "2", "--steps", "0"]).steps == 0  # not asked to check --steps
    with pytest.raises(SystemExit):
        harness.parse(parser, ["--steps", "0"], at_least_one=["repeats", "steps"])
    assert "--steps must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        harness.parse(parser, ["--repeats", "-1"])
    assert "--repeats must be at least 1, got -1" in capsys.readouterr().err


def test_device_defaults_fill_only_what_was_not_given():
    options = harness.parse(parser_with("--layers", "--heads"), ["--heads", "3"])
    harness.fill_device_defaults(options, layers=(12, 2), heads=(16, 4))
    assert (options.layers, options.heads) == (2, 3)


def test_forwarded_arguments_parse_back_to_the_same_settings():
    parser = parser_with("--layers")
    options = harness.parse(parser, ["--dtype", "bf16", "--repeats", "5", "--layers", "7"])
    forwarded = harness.forwarded_arguments(options, ["dtype", "repeats", "layers", "device"])
    assert forwarded == ["--dtype", "bf16", "--repeats", "5", "--layers", "7", "--device", "cpu"]
    again = harness.parse(parser, forwarded)
    assert (again.dtype, again.repeats, again.layers, again.device) == ("bf16", 5, 7, "cpu")


def test_result_rows_write_the_file_after_every_row_and_only_with_json(tmp_path):
    parser = parser_with()
    without = harness.result_rows(harness.parse(parser, []), "hierencdec", [], 3)
    without.add({"documents": 4})
    assert without == [{"documents": 4}] and not list(tmp_path.iterdir())

    path = tmp_path / "out.json"
    argv = ["--repeats", "3", "--json", str(path)]
    rows = harness.result_rows(harness.parse(parser, argv), "hierencdec", argv, 3, dtype="fp32")
    rows.add({"documents": 4, "blocked_s": results.repeats_cell([0.3, 0.1, 0.2])})
    record = json.loads(path.read_text())
    assert (
        re.sub(r"^(\w+=\S+ )*", "", record["command"]) == f"python benchmarks/hierencdec.py --repeats 3 --json {path}"
    )
    assert record["rows"] == [{"documents": 4, "blocked_s": {"median": 0.2, "minimum": 0.1, "maximum": 0.3}}]
    assert record["dtype"] == "fp32" and record["repeats"] == 3 and results.problems(record) == []
    rows.add({"documents": 8}, parameters=1234)  # a header field known only at the end
    record = json.loads(path.read_text())
    assert [row["documents"] for row in record["rows"]] == [4, 8] and record["parameters"] == 1234


def test_synthetic_model_arguments_leave_unset_flags_to_the_architecture():
    from fairseq.models.transformer import TransformerModel

    dictionary = harness.synthetic_dictionary(50)
    assert len(dictionary) == 50 and dictionary.symbols[4] == "w0"
    args = harness.model_args(TransformerModel, "small", dropout=0.0)
    assert (
        args.encoder_layers,
        args.decoder_embed_dim,
        args.encoder_ffn_embed_dim,
        args.decoder_attention_heads,
    ) == harness.DIMS["small"]
    assert args.dropout == 0.0 and not hasattr(args, "attention_dropout")  # absent: base_architecture fills it
    task = harness.SyntheticTask(dictionary)
    assert task.source_dictionary is task.target_dictionary is dictionary and task.document_separator() is None


def test_a_measurement_in_a_fresh_interpreter_returns_its_json_or_its_error(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, sys\n"
        "name, tokens = sys.argv[sys.argv.index('--measure-one') + 1].split(':')\n"
        "if name == 'broken':\n"
        "    raise MemoryError('does not fit')\n"
        "print('warming up')\n"
        "print(json.dumps({'name': name, 'tokens': int(tokens), 'args': sys.argv[3:]}))\n"
    )
    options = harness.parse(parser_with("--layers"), ["--layers", "2"])
    measure = harness.in_fresh_interpreter_on_cpu(options, str(script), None, ["layers"])
    assert measure(options, "pagesum", 512) == {"name": "pagesum", "tokens": 512, "args": ["--layers", "2"]}
    assert measure(options, "broken", 512) == {"error": "MemoryError: does not fit"}


def test_hierencdec_at_toy_size_writes_the_fields_the_documentation_reads(tmp_path, capsys):
    """The whole skeleton (parse, device line, a fresh process per cell, the
    results file) on a 64-token source: the rows have the committed file's
    fields, so benchmarks/render_docs.py renders a re-measured file."""
    from benchmarks import hierencdec

    path = tmp_path / "hierencdec.json"
    hierencdec.main(["--length", "64", "--documents", "2", "--steps", "1", "--vocab-size", "40", "--json", str(path)])
    record = json.loads(path.read_text())
    committed = results.load("hierencdec_cpu")
    assert results.problems(record) == [] and record["repeats"] == 1 and record["threads"] == 1
    assert set(record) == set(committed)
    assert [set(row) for row in record["rows"]] == [set(committed["rows"][0])]
    assert record["rows"][0]["documents"] == 2
    out = capsys.readouterr().out
    assert out.startswith("device: CPU (") and "64 source tokens" in out


def test_device_line_names_the_cpu_and_its_threads():
    assert re.fullmatch(r"device: CPU \(.+, 3 thread\(s\)\)", harness.device_line("cpu", 3))
