"""benchmarks/measure.py: the median, min and max of a step's timed repeats and
the ``MEDIAN (MIN-MAX)`` format every benchmark prints (issue 23.5), checked
on a step whose durations a fake clock controls; and that every benchmark
script still imports (no heavy benchmark runs here)."""

import glob
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks import measure

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeClock:
    """``time.perf_counter`` that advances only when the step says so: the
    ``k``-th call of :meth:`step` takes ``durations[k]`` seconds."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 0.0, list(durations), 0

    def perf_counter(self):
        return self.now

    def step(self):
        self.now += self.durations[self.calls]
        self.calls += 1


def timed_with(monkeypatch, durations, repeats, warm_up=True):
    clock = FakeClock(durations)
    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    result = measure.peak_memory_and_median_time(clock.step, "cpu", repeats, warm_up=warm_up)
    assert clock.calls == len(durations)
    return result


def test_median_min_max_of_an_odd_number_of_repeats(monkeypatch):
    # warm-up and memory steps (100 s each) are not timed
    result = timed_with(monkeypatch, [100.0, 100.0, 0.3, 0.1, 0.5], repeats=3)
    assert result["seconds"] == pytest.approx(0.3)  # the middle one, as before
    assert result["seconds_min"] == pytest.approx(0.1)
    assert result["seconds_max"] == pytest.approx(0.5)
    assert result["seconds_each"] == pytest.approx([0.3, 0.1, 0.5])  # in the order run


def test_median_of_an_even_number_of_repeats_is_the_mean_of_the_middle_two(monkeypatch):
    result = timed_with(monkeypatch, [100.0, 0.4, 0.1, 0.2, 0.9], repeats=4, warm_up=False)
    assert result["seconds"] == pytest.approx(0.3)
    assert (result["seconds_min"], result["seconds_max"]) == pytest.approx((0.1, 0.9))


def test_no_repeats_times_nothing(monkeypatch):
    result = timed_with(monkeypatch, [1.0, 1.0], repeats=0)
    assert (result["seconds"], result["seconds_min"], result["seconds_max"]) == (None, None, None)
    assert result["seconds_each"] == []


def test_format_median_min_max():
    assert measure.format_median_min_max(0.1234, 0.1, 0.15) == "0.123 (0.100-0.150)"
    assert measure.format_median_min_max(1.24, 1.2, 1.414, ".2f", "x") == "1.24x (1.20-1.41)"
    assert measure.format_median_min_max(21345.6, 20000, 23456.7, ",.0f") == "21,346 (20,000-23,457)"
    assert measure.spread([3.0, 1.0, 2.0]).scaled(1e3).format(".0f", " ms") == "2000 ms (1000-3000)"


def test_spread_needs_a_repeat():
    with pytest.raises(ValueError, match="at least one repeat"):
        measure.spread([])


def test_interleaved_ratio_is_the_spread_of_per_repeat_ratios():
    # repeat i timed A and B back to back: the load of repeat 2 doubles both
    ratio = measure.interleaved_ratio([2.0, 4.0, 2.2], [1.0, 2.0, 1.0])
    assert tuple(ratio) == pytest.approx((2.0, 2.0, 2.2))


def test_separate_ratio_is_median_over_median_with_per_pair_min_max():
    ratio = measure.separate_ratio([3.0, 1.0, 2.0], [1.0, 2.0, 4.0])
    assert ratio.median == pytest.approx(2.0 / 2.0)
    # pairs in order: 3/1, 1/2, 2/4
    assert (ratio.minimum, ratio.maximum) == pytest.approx((0.5, 3.0))
    with pytest.raises(ValueError, match="as many repeats"):
        measure.separate_ratio([1.0, 2.0], [1.0])


def test_every_benchmark_script_imports():
    """A syntax or import error in any benchmark script fails here (one
    process imports them all, runs none)."""
    names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO_ROOT, "benchmarks", "*.py")))
    assert {"measure", "sparse_decoder", "preprocess", "led"} <= set(names)
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module('benchmarks.' + name)\n"
    result = subprocess.run(
        [sys.executable, "-c", code, *names],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_checkpoint_checksum_benchmark_times_each_step_and_verifies_what_it_read_back(capsys, monkeypatch):
    """The checksum benchmark on a tiny bart_base: four timed steps of the
    same repeats, per-repeat ratios, and verification against the weights
    read back (a checksum that did not match would raise)."""
    from benchmarks import checkpoint_checksum
    from mdsfair.checkpoints import checksums

    verified = []
    real_verify = checksums.verify_model_checksum
    monkeypatch.setattr(
        checksums,
        "verify_model_checksum",
        lambda state, checksum, path: verified.append(len(checksum["tensors"])) or real_verify(state, checksum, path),
    )
    checkpoint_checksum.main(
        [
            "--vocab-size",
            "64",
            "--repeats",
            "2",
            "--model-args",
            "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
            "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 "
            "--encoder-attention-heads 2 --decoder-attention-heads 2",
        ]
    )
    out = capsys.readouterr().out
    assert "bart_base, vocabulary 64" in out and "2 repeats" in out
    for name in ("save", "checksum", "load", "verify"):
        assert re.search(rf"^  {name} +[0-9.]+ s \([0-9.]+-[0-9.]+\)$", out, re.M), out
    assert re.search(r"checksum / save +[0-9.]+x \([0-9.]+-[0-9.]+\)", out), out
    assert re.search(r"verify / load +[0-9.]+x \([0-9.]+-[0-9.]+\)", out), out
    assert len(verified) == 3 and verified[0] > 10  # warm-up + 2 repeats, every tensor of the model


def test_memory_fit_is_quadratic_when_it_curves_up_and_linear_otherwise():
    from benchmarks import memory

    lengths = [512, 1024, 2048, 4096]
    a, b, c = memory.fit_activations(lengths, [10 + 0.5 * n + 1e-4 * n * n for n in lengths])
    assert (a, b, c) == pytest.approx((10, 0.5, 1e-4), rel=1e-6)
    a, b, c = memory.fit_activations(lengths, [100 + 0.2 * n - 1e-5 * n * n for n in lengths])
    assert c == 0 and b > 0  # bends down: a line instead, never a projection that turns negative
    assert memory.fit_activations([2048], [300.0]) == (0.0, 300.0 / 2048, 0.0)


def test_memory_fit_gib_measures_only_cells_that_fit_and_shortest_lengths_first(tmp_path, monkeypatch, capsys):
    """--fit-gib: a configuration whose cell, projected from the lengths
    measured before it, exceeds the limit is not run; lengths go shortest
    first for every system, so the 2,048 point is measured before 4,096 is
    judged."""
    import json

    from benchmarks import memory

    counted = {"parameters": 10**6, "trainable": 10**6, "max_source": None}  # 16 MB static in fp32
    # activations: "small" grows 0.1 MiB per token, "big" 4 MiB per token
    slope = {"small": 0.1, "big": 4.0}
    measured_order = []

    def fake_in_fresh_process(function, config):
        if function is memory.count_parameters:
            return counted
        measured_order.append((config["arch"], config["source_tokens"], bool(config["flags"])))
        return {"peak_mib": slope[config["arch"]] * config["source_tokens"]}

    monkeypatch.setattr(memory, "in_fresh_process", fake_in_fresh_process)
    monkeypatch.setattr(memory, "TABLE_LENGTHS", (1024, 4096))
    measurements = tmp_path / "m.json"
    measurements.write_text(
        json.dumps(
            {
                f"{arch}/fp32/{variant}": {"512": [slope[arch] * 512], "1024": [slope[arch] * 1024]}
                for arch in slope
                for variant in ("plain", "checkpointed")
            }
        )
    )
    memory.main(
        [
            "--archs",
            "small",
            "big",
            "--lengths",
            "2048",
            "4096",
            "--repeats",
            "1",
            "--bf16-archs",
            "--bf16-ratio",
            "0.7",
            "--fit-gib",
            "10",
            "--data",
            str(tmp_path),
            "--measurements",
            str(measurements),
        ]
    )
    out = capsys.readouterr().out
    # big: 2048 x 4 MiB = 8 GiB fits, 4096 x 4 MiB = 16 GiB does not; small fits everywhere
    assert measured_order == [
        ("small", 2048, False),
        ("small", 2048, True),
        ("big", 2048, False),
        ("big", 2048, True),
        ("small", 4096, False),
        ("small", 4096, True),
    ]
    assert "big fp32 plain n=4096: not measured, projected 16.0 GiB > --fit-gib 10" in out
    saved = memory.read_measurements(str(measurements))  # now a results file (benchmarks/results.py)
    assert 4096 in saved[("small", "fp32", False)] and 4096 not in saved[("big", "fp32", False)]
    record = json.loads(measurements.read_text())
    command = re.sub(r"^(\w+=\S+ )*", "", record["command"])  # after the thread variables the tests set
    assert command.startswith("python benchmarks/memory.py --archs small big") and record["device"]
    assert {
        "arch": "small",
        "dtype": "fp32",
        "variant": "plain",
        "source_tokens": 4096,
        "activation_mib": {"median": 409.6, "minimum": 409.6, "maximum": 409.6},
        "runs": [409.6],
    } in record["rows"]
    assert re.search(r"^\| big \| 1 M \| 4,096 \| 16\.0 p \|", out, re.M)
    assert re.search(r"^\| small \| 1 M \| 4,096 \| 0\.4 m \|", out, re.M)


TRAIN_LOG = """\
2026-11-25 23:04:31 | INFO | mdsfair.tasks.multidoc_summarization | split train of data-bin /d/data-bin: 32 clusters, source tokens kept 100.0% (122,464 of 122,464); nothing truncated
2026-11-25 23:04:40 | INFO | train_inner | {"epoch": 1, "update": 0.6, "loss": "8.5", "ups": "1.5", "bsz": "2", "loss_scale": "128"}
2026-11-25 23:04:41 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0
2026-11-25 23:04:50 | INFO | train_inner | {"epoch": 2, "update": 1.2, "loss": "5.0", "ups": "4.0", "bsz": "2", "loss_scale": "64"}
2026-11-25 23:05:00 | INFO | train_inner | {"epoch": 3, "update": 1.9, "loss": "3.0", "ups": "5.0", "bsz": "2", "loss_scale": "64"}
"""


def test_train_systems_reads_fairseqs_log_and_takes_ratios_to_the_stock_counterpart(tmp_path, monkeypatch):
    """Source tokens/s = median ups after the first interval x bsz x the
    train split's mean source length; overflows counted; the loss falls
    within every stage; ratios are to the system's stock model."""
    from benchmarks import train_systems

    log = tmp_path / "run.log"
    log.write_text(TRAIN_LOG, encoding="utf-8")
    read = train_systems.read_training_log(str(log))
    assert read["split"] == (32, 122464) and read["overflows"] == 1 and len(read["intervals"]) == 3

    def fake_run(entry, argv, log_path, peak_path=None, timeout=3600):
        assert entry == "train" and {"--bf16", "--memory-efficient-bf16"} & set(argv) and "--save-dir" in argv
        os.makedirs(argv[argv.index("--save-dir") + 1])  # as fairseq-train makes it
        with open(log_path, "w", encoding="utf-8") as handle:
            handle.write(TRAIN_LOG)
        with open(peak_path, "w", encoding="utf-8") as handle:
            handle.write('{"peak_mib": 1024}')

    monkeypatch.setattr(train_systems, "run_command", fake_run)
    args = SimpleNamespace(
        data="/d/data-bin",
        lr=3e-4,
        warmup=50,
        batch_size=2,
        updates=200,
        source_tokens=4096,
        log_interval=20,
        device="cuda",
    )
    run = train_systems.train_system("hierencdec_bart_base", "bf16", args, str(tmp_path))
    assert run["source_tokens_per_s"] == pytest.approx(4.5 * 2 * 122464 / 32)
    assert run["falling"] and run["finite"] and run["overflows"] == 1 and run["losses"] == [8.5, 5.0, 3.0]
    sparse = train_systems.train_system("sparse_bart_base", "bf16", args, str(tmp_path))
    assert len(sparse["stage_losses"]) == 2 and sparse["overflows"] == 2
    with pytest.raises(FileExistsError):  # fairseq would resume an earlier run's checkpoint_last.pt
        train_systems.train_system("hierencdec_bart_base", "bf16", args, str(tmp_path))
    stock = dict(run, source_tokens_per_s=run["source_tokens_per_s"] * 2, peak_mib=512)
    results = {
        "train": {"hierencdec_bart_base": {"bf16": run}, "bart_base": {"bf16": stock}},
        "generate": {"hierencdec_bart_base": {"summaries_per_s": 3.0}, "bart_base": {"summaries_per_s": 6.0}},
    }
    table = train_systems.table(results, ["bf16"])
    assert "| hierencdec_bart_base | bf16 | 8.50 -> 3.00 | 1 | 34,443 | 0.50 | 1.0 | 2.00 |" in table
    assert "| hierencdec_bart_base | 3.00 | 0.50 |" in table
    rows = train_systems.results_rows(results, ["bf16"])  # the results file's rows (benchmarks/results.py)
    assert rows[0]["tokens_per_s_vs_stock"] == pytest.approx(0.5) and rows[0]["peak_vs_stock"] == pytest.approx(2.0)
    assert rows[-2:] == [
        {
            "part": "generation",
            "system": "hierencdec_bart_base",
            "summaries_per_s": 3.0,
            "summaries_per_s_vs_stock": 0.5,
        },
        {"part": "generation", "system": "bart_base", "summaries_per_s": 6.0, "summaries_per_s_vs_stock": None},
    ]  # a stock model has no counterpart


def test_memory_compare_puts_two_measurement_files_side_by_side(tmp_path, capsys):
    """``memory.py --compare CPU.json GPU.json``: the cells both files hold,
    medians of their runs, and second / first; nothing else is measured."""
    from benchmarks import memory

    first, second = tmp_path / "cpu.json", tmp_path / "gpu.json"
    first.write_text(
        json.dumps(
            {
                "led_base/fp32/plain": {"2048": [100.0, 120.0, 110.0], "4096": [200.0]},
                "led_base/fp32/checkpointed": {"2048": [50.0]},
            }
        )
    )
    second.write_text(json.dumps({"led_base/fp32/plain": {"2048": [55.0], "8192": [400.0]}}))
    memory.main(["--compare", str(first), str(second)])
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[2:] == ["| led_base | fp32 | plain | 2,048 | 110 | 55 | 0.50 |"]
    second.write_text(json.dumps({"pagesum_bart_base/fp32/plain": {"2048": [1.0]}}))
    with pytest.raises(ValueError, match="no cell in common"):
        memory.main(["--compare", str(first), str(second)])


def test_led_sparse_benchmark_times_both_models_on_shared_weights_and_records_its_run(tmp_path, capsys):
    """benchmarks/led_sparse.py at toy size: a row per model and length, led's
    ratios to itself exactly 1, and a results file naming its command and device."""
    from benchmarks import led_sparse

    out = tmp_path / "led_sparse.json"
    led_sparse.main(
        [
            "--source-lengths",
            "256",
            "--batch-size",
            "2",
            "--beam",
            "2",
            "--target-length",
            "4",
            "--layers",
            "1",
            "--dim",
            "32",
            "--heads",
            "4",
            "--window",
            "32",
            "--vocab-size",
            "300",
            "--repeats",
            "2",
            "--top-r",
            "2",
            "--json",
            str(out),
        ]
    )
    record = json.loads(out.read_text())
    assert re.sub(r"^(\w+=\S+ )*", "", record["command"]).startswith(
        "python benchmarks/led_sparse.py --source-lengths 256"
    )
    assert record["device"] and record["repeats"] == 2 and record["commit"]
    from benchmarks import results

    assert results.problems(record) == [] and record["provenance"] == "measured"
    assert [(row["source_tokens"], row["model"]) for row in record["rows"]] == [(256, "led"), (256, "led_sparse")]
    led_row = record["rows"][0]
    assert led_row["total_speedup_vs_led"] == {"median": 1.0, "minimum": 1.0, "maximum": 1.0}
    assert "led_sparse" in capsys.readouterr().out


def test_sparse_benchmarks_build_their_registered_architectures():
    """benchmarks/sparse_decoder.py builds sparse_bart_base with BART-base's
    settings as fairseq registers bart_base (every field of bart_base's
    arguments equal: embedding layer norm, learned positions, shared
    embeddings), and stock BART from the same arguments; led_sparse.py builds
    led_base and led_sparse with theirs."""
    from argparse import Namespace

    from benchmarks import harness, led_sparse, sparse_decoder

    options = Namespace(layers=1, dim=16, heads=2, share_selection_across_beams=False)
    dictionary = harness.synthetic_dictionary(50)
    model, args = sparse_decoder.build_model(options, dictionary, 64)
    bart = harness.architecture_args(
        "bart_base", **harness.dimensions(1, 16, 64, 2), max_source_positions=64, max_target_positions=1024
    )
    assert {name: getattr(args, name, None) for name in vars(bart) if name != "arch"} == {
        name: value for name, value in vars(bart).items() if name != "arch"
    }
    assert args.layernorm_embedding and args.share_all_embeddings and args.encoder_learned_pos
    stock = sparse_decoder.stock_bart_like(model, args, dictionary)
    for built in (model, stock):
        assert built.encoder.layernorm_embedding is not None and built.decoder.layernorm_embedding is not None
        assert built.encoder.embed_tokens.weight is built.decoder.embed_tokens.weight
    led_options = Namespace(layers=1, dim=32, heads=4, window=32)
    for arch in ("led_base", "led_sparse"):
        built = led_sparse.build(arch, led_options, harness.synthetic_dictionary(300), 256)
        assert built.encoder.layernorm_embedding is not None and built.args.share_all_embeddings, arch


def test_sparse_decoder_sweeps_the_sentence_count_at_a_fixed_source_length(tmp_path, capsys):
    """benchmarks/sparse_decoder.py --sentences-per-source at toy size: each
    source split into S near-equal sentences for every S given, every row of
    every S set against the stock BART timed at that S (its own ratio exactly
    1), and the sweep refused where a sentence would have under 2 tokens."""
    import torch

    from benchmarks import results, sparse_decoder

    out = tmp_path / "sparse_decoder.json"
    sparse_decoder.main(
        [
            "--source-lengths",
            "64",
            "--sentences-per-source",
            "4,8",
            "--batch-sizes",
            "2",
            "--top-r",
            "2",
            "--model-free-top-r",
            "--pooling-top-r",
            "--layers",
            "1",
            "--dim",
            "16",
            "--heads",
            "2",
            "--vocab-size",
            "50",
            "--target-length",
            "3",
            "--beam",
            "2",
            "--repeats",
            "1",
            "--static-decoding",
            "--json",
            str(out),
        ]
    )
    record = json.loads(out.read_text())
    assert results.problems(record) == []
    assert [(row["sentences"], row["attention"]) for row in record["rows"]] == [
        (4, "stock BART"),
        (4, "full"),
        (4, "r=2"),
        (8, "stock BART"),
        (8, "full"),
        (8, "r=2"),
    ]
    for row in record["rows"]:
        assert row["source_tokens"] == 64
        if row["attention"] == "stock BART":
            assert row["decoding_vs_stock"] == row["total_vs_stock"] == {"median": 1.0, "minimum": 1.0, "maximum": 1.0}
    assert "4, 8 sentences per source" in capsys.readouterr().out

    batch = sparse_decoder.synthetic_batch(
        sparse_decoder.harness.synthetic_dictionary(50),
        1,
        4096,
        30,
        torch.Generator().manual_seed(0),
        num_sentences=200,
    )
    lengths = torch.bincount(batch["net_input"]["src_sent_ids"][0])
    assert lengths.numel() == 200 and set(lengths.tolist()) == {20, 21} and int(lengths.sum()) == 4096
    # lengths as unequal as real sentences: log-normal, at least 2 tokens, summing to the source
    spread = sparse_decoder.synthetic_batch(
        sparse_decoder.harness.synthetic_dictionary(50),
        2,
        4096,
        30,
        torch.Generator().manual_seed(0),
        num_sentences=200,
        length_spread=sparse_decoder.SENTENCE_LENGTH_SPREAD,
    )
    for source in spread["net_input"]["src_sent_ids"]:
        lengths = torch.bincount(source).double()
        assert lengths.numel() == 200 and int(lengths.sum()) == 4096 and lengths.min() >= 2
        assert 0.45 < float(lengths.std() / lengths.mean()) < 0.85
    first, second = spread["net_input"]["src_sent_ids"]
    assert not torch.equal(first, second)  # every source its own draw
    with pytest.raises(SystemExit):
        sparse_decoder.main(["--source-lengths", "64", "--sentences-per-source", "40"])
    with pytest.raises(SystemExit):
        sparse_decoder.main(["--sentences-per-source", "100", "--sentence-tokens", "20"])
    assert "needs at least 80 source tokens" in capsys.readouterr().err
