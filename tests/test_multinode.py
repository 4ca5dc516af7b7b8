"""Training past one machine on fairseq's own engine: two ``torchrun``
launches (``--nnodes 2``, node ranks 0 and 1, rendezvous on localhost) of
``mdsfair-train`` end with the weights of one process with ``--update-freq 2``;
the set-ups that fail inside fairseq (FSDP, c10d DDP on CPU, a CPU world size
without torchrun) are refused with what to use instead."""

import os
import socket
import subprocess
import sys

import pytest
import torch

from mdsfair.cli import with_torchrun_settings
from tests.utils import REPO_ROOT, make_tiny_data_bin

pytestmark = pytest.mark.slow  # the slow tier: docs/tests.md

MODEL = [
    "--task",
    "multidoc_summarization",
    "--arch",
    "hiertransformer_tiny",
    "--dropout",
    "0",
    "--attention-dropout",
    "0",
    "--relu-dropout",
    "0",
    "--max-source-positions",
    "128",
    "--max-target-positions",
    "64",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--batch-size",
    "2",
    "--max-update",
    "2",
    "--seed",
    "3",
    "--cpu",
    "--disable-validation",
    "--no-progress-bar",
    "--no-epoch-checkpoints",
]
TRAIN_SCRIPT = "from mdsfair.cli import train_main\ntrain_main()\n"


def environment():
    return dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("multinode")), train=8, valid=2, test=2)


def final_weights(save_dir):
    state = torch.load(os.path.join(save_dir, "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    return state["model"], state["optimizer_history"][-1]["num_updates"]


def test_torchrun_settings_fill_only_what_is_missing():
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    filled = with_torchrun_settings(["data", "--cpu", "--ddp-backend", "no_c10d"], env)
    assert filled == [
        "data",
        "--cpu",
        "--ddp-backend",
        "no_c10d",
        "--distributed-world-size",
        "4",
        "--distributed-rank",
        "3",
        "--device-id",
        "1",
        "--distributed-no-spawn",
        "--distributed-init-method",
        "env://",
        "--distributed-backend",
        "gloo",
    ]
    on_gpu = with_torchrun_settings(["data", "--distributed-rank=3"], env)
    assert "--ddp-backend" not in on_gpu and "--distributed-backend" not in on_gpu
    assert on_gpu.count("--distributed-rank") == 0 and "--distributed-rank=3" in on_gpu
    assert with_torchrun_settings(["data", "--cpu"], {}) == ["data", "--cpu"]


def test_two_torchrun_nodes_equal_one_process_with_update_freq_2(data_bin, tmp_path):
    script = tmp_path / "mdsfair_train.py"
    script.write_text(TRAIN_SCRIPT, encoding="utf-8")
    port = str(free_port())
    nodes = []
    for rank in (0, 1):
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--nproc-per-node",
            "1",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            str(script),
            data_bin,
            *MODEL,
            "--save-dir",
            str(tmp_path / "two_nodes"),
        ]
        log = open(tmp_path / f"node{rank}.log", "w")
        nodes.append((subprocess.Popen(command, env=environment(), stdout=log, stderr=subprocess.STDOUT), log))
    for process, log in nodes:
        process.wait(timeout=400)
        log.close()
    logs = [(tmp_path / f"node{rank}.log").read_text() for rank in (0, 1)]
    assert [process.returncode for process, _ in nodes] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    for rank in (0, 1):
        assert f"distributed init (rank {rank}): env://" in logs[rank] and f"as rank {rank}" in logs[rank]

    single = subprocess.run(
        [sys.executable, str(script), data_bin, *MODEL, "--update-freq", "2", "--save-dir", str(tmp_path / "one")],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    (two, two_updates), (one, one_updates) = final_weights(tmp_path / "two_nodes"), final_weights(tmp_path / "one")
    assert two_updates == one_updates == 2
    assert two.keys() == one.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)


def test_fully_sharded_is_refused_with_the_alternative(data_bin, tmp_path):
    """fairseq's FSDP path (fairscale) needs CUDA: refused by
    mdsfair-train before fairseq starts, and by the task for fairseq-train."""
    script = tmp_path / "mdsfair_train.py"
    script.write_text(TRAIN_SCRIPT, encoding="utf-8")
    wrapped = subprocess.run(
        [sys.executable, str(script), data_bin, *MODEL, "--ddp-backend", "fully_sharded"],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrapped.returncode == 2 and "Traceback" not in wrapped.stderr
    assert "--checkpoint-activations and --update-freq" in wrapped.stderr
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            data_bin,
            "--user-dir",
            os.path.join(REPO_ROOT, "mdsfair"),
            *MODEL,
            "--ddp-backend",
            "fully_sharded",
            "--save-dir",
            str(tmp_path / "fsdp"),
        ],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode != 0 and "is not supported by mdsfair" in plain.stderr
    assert not os.path.exists(tmp_path / "fsdp" / "checkpoint_last.pt")


def test_cpu_world_size_without_torchrun_is_refused(data_bin, tmp_path):
    """fairseq would spawn cuda.device_count() = 0 workers and exit having
    trained nothing."""
    script = tmp_path / "mdsfair_train.py"
    script.write_text(TRAIN_SCRIPT, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script), data_bin, *MODEL, "--distributed-world-size", "2"],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "torchrun --nproc-per-node 2" in result.stderr


def test_cpu_c10d_data_parallel_is_refused():
    from omegaconf import OmegaConf

    from mdsfair.tasks.training_setup import check_distributed_backend

    settings = {"ddp_backend": "c10d", "cpu": True, "distributed_world_size": 2}
    with pytest.raises(ValueError, match="use --ddp-backend legacy_ddp on CPU"):
        check_distributed_backend(OmegaConf.create(settings))
    check_distributed_backend(OmegaConf.create({**settings, "ddp_backend": "legacy_ddp"}))
    check_distributed_backend(OmegaConf.create({**settings, "cpu": False}))
    check_distributed_backend(OmegaConf.create({**settings, "distributed_world_size": 1}))
