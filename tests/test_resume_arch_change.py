"""Resuming with a changed architecture flag that keeps every tensor's shape
is refused (issue 22 item 3): fairseq would load the old weights into a
different model. Each flag is named with its old and new value;
``--allow-arch-change`` lets it through (logged); dropouts and other
non-architecture values may always change; a fine-tune (``--reset-optimizer``)
may change ``--arch`` (BART into a derived architecture) but not a flag both
configurations share."""

import argparse
import hashlib
import logging
import os
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT, TINY_BART_ARGS, USER_DIR, make_tiny_data_bin

pytestmark = pytest.mark.slow  # the slow tier: docs/tests.md

TRAIN = [
    "--task",
    "multidoc_summarization",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "4096",
    "--no-epoch-checkpoints",
    "--no-progress-bar",
    "--cpu",
    "--seed",
    "1",
    "--disable-validation",
    "--log-interval",
    "1",
    "--num-workers",
    "0",
]


def train(data_bin, save_dir, *args, module="fairseq_cli.train"):
    if module == "mdsfair-train":  # the console script's function, run on this checkout
        command = [sys.executable, "-c", "import sys; from mdsfair.cli import train_main; train_main()"]
    else:
        command = [sys.executable, "-m", module, "--user-dir", USER_DIR]
    command += [data_bin, "--save-dir", save_dir, *TRAIN, *args]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


def train_in_process(data_bin, save_dir, *args):
    """fairseq-train's ``main`` in this process (torch and fairseq imported
    once for the module); raises what it raises."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli.train import main

    parsed = options.parse_args_and_arch(
        options.get_training_parser(), [data_bin, "--user-dir", USER_DIR, "--save-dir", save_dir, *TRAIN, *args]
    )
    main(convert_namespace_to_omegaconf(parsed))


def digests(folder):
    listing = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as handle:
            listing[name] = hashlib.sha256(handle.read()).hexdigest()
    return listing


def with_flag(args, flag, value):
    """``args`` with ``flag``'s value replaced (or appended)."""
    args = list(args)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("resume"))
    data_bin = make_tiny_data_bin(work, train=12, valid=4, test=4, vocab_size=200)
    save_dir = os.path.join(work, "checkpoints")
    train_in_process(data_bin, save_dir, *TINY_BART_ARGS, "--max-update", "1")
    return {"data_bin": data_bin, "save_dir": save_dir, "work": work}


def test_resume_with_changed_heads_and_activation_is_refused_naming_each_flag(trained):
    """Plain fairseq-train (a process), checkpoint_last.pt in --save-dir;
    the dropout changes too and is not named."""
    before = digests(trained["save_dir"])
    args = with_flag(TINY_BART_ARGS, "--decoder-attention-heads", "2") + ["--activation-fn", "relu", "--dropout", "0.3"]
    result = train(trained["data_bin"], trained["save_dir"], *args, "--max-update", "2")
    assert result.returncode != 0
    last = os.path.join(trained["save_dir"], "checkpoint_last.pt")
    output = result.stdout + result.stderr
    assert "ArchitectureChangeError" in output
    assert (
        f"resuming from checkpoint {last}: this run's model differs from the one that saved it "
        "(--activation-fn 'gelu' in the checkpoint, 'relu' now; --decoder-attention-heads 4 in the checkpoint, "
        "2 now). The tensors have the same shapes"
    ) in output
    assert "pass --allow-arch-change if you mean to change the architecture" in output
    assert digests(trained["save_dir"]) == before  # nothing saved over the checkpoint


def test_mdsfair_train_refuses_the_same_with_restore_file(trained, tmp_path):
    """``mdsfair-train`` (a process) and an explicit ``--restore-file`` into another save dir."""
    last = os.path.join(trained["save_dir"], "checkpoint_last.pt")
    args = with_flag(TINY_BART_ARGS, "--encoder-attention-heads", "8")
    result = train(
        trained["data_bin"],
        str(tmp_path / "other"),
        *args,
        "--encoder-normalize-before",
        "--restore-file",
        last,
        "--max-update",
        "2",
        module="mdsfair-train",
    )
    assert result.returncode != 0
    assert (
        f"resuming from checkpoint {last}: this run's model differs from the one that saved it "
        "(--encoder-attention-heads 4 in the checkpoint, 8 now; --encoder-normalize-before False in the "
        "checkpoint, True now)"
    ) in result.stdout + result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("mdsfair-train: error: resuming from checkpoint")
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "other" / "checkpoint_last.pt")


def copy_of_checkpoint(trained, save_dir):
    os.makedirs(save_dir)
    with open(os.path.join(trained["save_dir"], "checkpoint_last.pt"), "rb") as source:
        data = source.read()
    with open(os.path.join(save_dir, "checkpoint_last.pt"), "wb") as target:
        target.write(data)
    return os.path.join(save_dir, "checkpoint_last.pt")


def test_allow_arch_change_resumes_and_logs_each_difference(trained, tmp_path, caplog):
    import torch

    last = copy_of_checkpoint(trained, str(tmp_path / "copy"))
    args = with_flag(TINY_BART_ARGS, "--decoder-attention-heads", "2") + ["--dropout", "0.3"]
    caplog.set_level(logging.INFO, logger="mdsfair.checkpoints.architecture_change")
    train_in_process(trained["data_bin"], str(tmp_path / "copy"), *args, "--max-update", "2", "--allow-arch-change")
    messages = [
        record.getMessage() for record in caplog.records if record.name == "mdsfair.checkpoints.architecture_change"
    ]
    assert f"--allow-arch-change: resuming from {last} with --decoder-attention-heads changed from 4 to 2" in messages
    assert f"resuming from {last}: --dropout was 0.1 in the checkpoint, 0.3 now (not an architecture flag)" in messages
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert state["cfg"]["model"].decoder_attention_heads == 2


def test_dropout_alone_may_change_on_resume(trained, tmp_path, caplog):
    last = copy_of_checkpoint(trained, str(tmp_path / "copy"))
    caplog.set_level(logging.INFO, logger="mdsfair.checkpoints.architecture_change")
    train_in_process(
        trained["data_bin"],
        str(tmp_path / "copy"),
        *TINY_BART_ARGS,
        "--dropout",
        "0.2",
        "--attention-dropout",
        "0.1",
        "--max-update",
        "2",
    )
    messages = [
        record.getMessage() for record in caplog.records if record.name == "mdsfair.checkpoints.architecture_change"
    ]
    assert (
        f"resuming from {last}: --attention-dropout was 0.0 in the checkpoint, 0.1 now (not an architecture flag)"
        in messages
    )


def test_fine_tuning_into_a_derived_architecture_works_but_not_with_a_changed_shared_flag(trained, tmp_path):
    from mdsfair.checkpoints.architecture_change import ArchitectureChangeError

    last = os.path.join(trained["save_dir"], "checkpoint_last.pt")
    fine_tune = [
        "--arch",
        "hierencdec_bart_tiny",
        "--restore-file",
        last,
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
        "--max-update",
        "1",
        "--dropout",
        "0.2",
    ]
    train_in_process(trained["data_bin"], str(tmp_path / "ft"), *fine_tune)
    assert os.path.exists(tmp_path / "ft" / "checkpoint_last.pt")
    with pytest.raises(ArchitectureChangeError) as error:
        train_in_process(trained["data_bin"], str(tmp_path / "ft-relu"), *fine_tune, "--activation-fn", "relu")
    assert str(error.value).startswith(
        f"fine-tuning from checkpoint {last}: this run's model differs from the one that saved it "
        "(--activation-fn 'gelu' in the checkpoint, 'relu' now)"
    )
    assert not os.path.exists(tmp_path / "ft-relu" / "checkpoint_last.pt")


def test_architecture_differences_names_locality_and_skips_non_architecture_keys():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import mdsfair

    mdsfair.register()

    from mdsfair.checkpoints.architecture_change import architecture_differences, is_architecture_key

    model_class = ARCH_MODEL_REGISTRY["pagesum_bart_tiny"]
    parser = argparse.ArgumentParser()
    model_class.add_args(parser)
    old = parser.parse_args([])
    old.arch = "pagesum_bart_tiny"
    new = argparse.Namespace(**vars(old))
    new.locality = "document" if old.locality != "document" else "spatial"
    new.dropout = 0.5
    differences = architecture_differences(old, new, fine_tune=False)
    assert differences["locality"] == [old.locality, new.locality]
    assert differences["dropout"] == [old.dropout, 0.5]
    assert is_architecture_key("locality") and not is_architecture_key("dropout")
    assert not is_architecture_key("attention_dropout") and not is_architecture_key("encoder_layerdrop")
    new.arch = "pagesum_bart_base"
    assert architecture_differences(old, new, fine_tune=False)["arch"] == ["pagesum_bart_tiny", "pagesum_bart_base"]
    assert "arch" not in architecture_differences(old, new, fine_tune=True)
