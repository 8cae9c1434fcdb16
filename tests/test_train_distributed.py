"""Training past one process: the setup torchrun's environment gives (device, backend, the errors), the
share of a step each rank takes, gradient accumulation, mixed precision, and (slow tier) torchrun on the CPU
with gloo ending where one process ends."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.errors import ConfigError
from attnzoo.train import distributed, sources

from .conftest import ROOT, TORCHRUN, require_data


def need_wordnet():
    require_data(sources.available("wordnet_noun"), "WordNet (Debian wordnet-base)")


@pytest.fixture
def torchrun_env(monkeypatch):
    """Set torchrun's variables; nothing of a real process group is made."""
    made = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, **kw: made.append(backend))

    def place(rank, world, local_rank=None):
        for name, value in (
            ("RANK", rank),
            ("WORLD_SIZE", world),
            ("LOCAL_RANK", rank if local_rank is None else local_rank),
        ):
            monkeypatch.setenv(name, str(value))
        return made

    return place


@pytest.fixture
def four_gpus(monkeypatch):
    """torch.cuda says there are 4 GPUs; set_device records what it is given."""
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: current.append(torch.device(device)))
    return current


@pytest.mark.parametrize("rank", range(4))
def test_each_rank_on_cuda_takes_the_gpu_of_its_local_rank_and_nccl(torchrun_env, four_gpus, rank):
    made = torchrun_env(rank, 4)
    where = distributed.setup("auto")
    assert (where.rank, where.world_size, where.local_rank) == (rank, 4, rank)
    assert where.device == torch.device(f"cuda:{rank}") and where.backend == "nccl"
    assert four_gpus == [torch.device(f"cuda:{rank}")] and made == ["nccl"]
    # two machines of 4 GPUs: rank 5 is the second machine's GPU 1
    four_gpus.clear()
    torchrun_env(5, 8, local_rank=1)
    assert distributed.setup("cuda").device == torch.device("cuda:1") and four_gpus == [torch.device("cuda:1")]


def test_on_the_cpu_the_backend_is_gloo_and_one_process_makes_no_group(torchrun_env, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    made = torchrun_env(0, 1)
    where = distributed.setup("auto")
    assert (where.device, where.backend, made) == (torch.device("cpu"), "gloo", [])
    torchrun_env(1, 2)
    where = distributed.setup("cpu")
    assert (where.rank, where.device, where.backend, made) == (1, torch.device("cpu"), "gloo", ["gloo"])


def test_train_device_overrides_the_local_rank(torchrun_env, four_gpus):
    torchrun_env(3, 4)
    assert distributed.setup("cuda:2").device == torch.device("cuda:2")
    assert distributed.setup("cpu").backend == "gloo"


@pytest.mark.parametrize(
    "variables, device, message",
    [
        ({"RANK": "abc"}, "auto", r"RANK='abc' is not a whole number"),
        ({"WORLD_SIZE": "0"}, "auto", r"WORLD_SIZE='0' is not a whole number >= 1"),
        ({"LOCAL_RANK": "-1"}, "auto", r"LOCAL_RANK='-1'"),
        ({"LOCAL_RANK": "4"}, "auto", r"LOCAL_RANK=4 names GPU 4, but this machine shows 4"),
        ({}, "cuda:7", r"train.device='cuda:7' names GPU 7, but this machine shows 4"),
        ({}, "tpu", r"train.device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "auto", r"RANK=2 is not below WORLD_SIZE=2"),
    ],
)  # fmt: skip
def test_what_torchrun_or_the_recipe_gets_wrong_is_said_naming_it(monkeypatch, four_gpus, variables, device, message):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        distributed.setup(device)


def test_a_gpu_that_is_not_there_and_a_batch_the_world_does_not_divide_are_refused(torchrun_env, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    torchrun_env(0, 1)
    with pytest.raises(ConfigError, match=r"train.device is 'cuda', but torch sees no CUDA device"):
        distributed.setup("cuda")
    made = torchrun_env(0, 3)
    with pytest.raises(ConfigError, match=r"batch_size 32 must divide by the number of processes 3"):
        distributed.setup("cpu", batch_size=32)
    assert made == []  # refused before any process group


# -- the share of a step each rank takes ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "world, accumulate, size", [(1, 1, 32), (1, 4, 32), (2, 1, 32), (2, 3, 7), (4, 2, 3), (3, 4, 13)]
)
def test_the_weighted_passes_of_every_rank_add_up_to_the_mean_over_the_step(world, accumulate, size):
    """Each pass's loss is a mean over its rows; the passes' weighted sum over every rank is the plain mean
    over the step's rows, written out here, and every row is taken once."""
    from attnzoo.train.shares import passes

    generator = torch.Generator().manual_seed(size)
    step = torch.randperm(100, generator=generator)[:size].tolist()
    values = torch.rand(100, generator=generator, dtype=torch.float64)
    total, seen = 0.0, []
    for rank in range(world):
        parts = passes(step, rank, world, accumulate)
        assert len(parts) == accumulate  # every rank runs as many passes (DDP reduces with all of them)
        for rows, weight in parts:
            seen += rows
            assert all(p % world == rank for p in rows)  # only rows it holds
            total += weight * (values[rows].mean().item() if rows else 0.0)
            assert weight == (len(rows) / size)
    assert sorted(seen) == sorted(step)
    assert total == pytest.approx(sum(values[p].item() for p in step) / size, rel=1e-12)


def test_a_rank_keeps_its_share_of_every_split_of_a_file(tmp_path):
    """Rank r of 2 holds the rows at positions r, r+2, ... of each split, as one process splits them."""
    from attnzoo.train.tasks import build_task

    lines = ["text,labels"] + [f"row number {i} of the file,{'a|b' if i % 3 else 'b'}" for i in range(60)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    config = {"name": "files", "train": str(tmp_path / "train.csv"), "vocab": {"min_freq": 1}}
    whole = build_task(dict(config))
    for rank in (0, 1):
        share = build_task(dict(config), rank=rank, world=2)
        for split, rows in whole.splits.items():
            assert [share.texts[i] for i in share.splits[split]] == [whole.texts[i] for i in rows[rank::2]]
        assert len(share.texts) == sum(len(rows[rank::2]) for rows in whole.splits.values())  # nothing else


# -- precision and accumulation -------------------------------------------------------------------------------
def test_a_precision_the_device_cannot_train_in_is_refused(monkeypatch):
    from attnzoo.train.steps import check_precision

    with pytest.raises(ConfigError, match=r"train.precision must be one of fp32, bf16, fp16, got 'int8'"):
        check_precision("int8", torch.device("cpu"))
    assert check_precision("bf16", torch.device("cpu")) == "bf16"
    with pytest.raises(ConfigError, match=r"train.precision=fp16 is for CUDA.*use bf16 there"):
        check_precision("fp16", torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100")
    with pytest.raises(ConfigError, match=r"Tesla V100 does not compute in bfloat16.*use fp16"):
        check_precision("bf16", torch.device("cuda:0"))


def test_the_fp16_step_unscales_the_gradients_before_clipping_and_stepping():
    """fp16 with the gradient scaler (run here on the CPU's autocast, on a linear model): the step is plain
    SGD's w - lr * clip(g) with g computed by hand, not 65536 (the scaler's first scale) times it."""
    from attnzoo.train.steps import Stepper

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1, bias=False)
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    class Task:
        def loss(self, model, batch, label_smoothing=0.0):
            return ((model(batch["x"]).float() - batch["y"]) ** 2).mean()

    before = model.weight.detach().clone()
    grad = (2 * (x @ before.T - y) * x).mean(0, keepdim=True)  # d/dw mean((xw - y)^2)
    clipped = grad * min(1.0, 0.5 / grad.norm().item())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepper = Stepper(Task(), model, optimizer, device=torch.device("cpu"), precision="fp16", clip=0.5)
    stepper.step([({"x": x[:10], "y": y[:10]}, 10 / 16), ({"x": x[10:], "y": y[10:]}, 6 / 16)])
    assert model.weight.dtype == torch.float32
    torch.testing.assert_close(model.weight.detach(), before - 0.1 * clipped, rtol=0, atol=2e-3)
    assert stepper.scaler.get_scale() == 65536.0  # no overflow: the scale is kept


@pytest.mark.parametrize("has_bfloat16", [True, False])
def test_a_bf16_step_with_an_lstm_runs_whether_or_not_the_cpus_onednn_has_bfloat16(monkeypatch, has_bfloat16):
    """On an x86 CPU without AVX-512 torch's autocast sends the LSTM to oneDNN, which cannot build it in
    bfloat16 (CI's AMD EPYC); the step turns oneDNN off there. Either way the step is SGD's w - lr * g, with
    g the float32 gradient up to bfloat16's rounding."""
    from attnzoo.train import steps

    if has_bfloat16 and not steps._onednn_computes_bfloat16():
        pytest.skip("this CPU's oneDNN has no bfloat16: the step oneDNN would run fails inside torch")
    monkeypatch.setattr(steps, "_onednn_computes_bfloat16", lambda: has_bfloat16)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 8, batch_first=True)
    x = torch.randn(3, 5, 4)
    seen = {}

    class Task:
        def loss(self, model, batch, label_smoothing=0.0):
            seen["onednn"] = torch.backends.mkldnn.enabled
            seen["autocast"] = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
            out = model(batch["x"])[0]
            seen["lstm"] = out.dtype
            return out.float().pow(2).mean()

    reference = copy.deepcopy(lstm)
    reference(x)[0].pow(2).mean().backward()
    expected = [p.detach() - 0.1 * p.grad for p in reference.parameters()]
    stepper = steps.Stepper(
        Task(), lstm, torch.optim.SGD(lstm.parameters(), lr=0.1), device=torch.device("cpu"), precision="bf16"
    )
    stepper.step([({"x": x}, 1.0)])
    assert (seen["onednn"], seen["autocast"]) == (has_bfloat16 and torch.backends.mkldnn.enabled, torch.bfloat16)
    if not has_bfloat16:
        assert seen["lstm"] == torch.float32  # torch's own LSTM, which autocast leaves in float32
    for got, want in zip(lstm.parameters(), expected, strict=True):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.detach(), want, rtol=0, atol=1e-3)
    assert torch.backends.mkldnn.enabled  # switched back on after the step


@pytest.mark.parametrize("value", [0, -1, 1.5, "two"])
def test_train_accumulate_must_be_a_whole_number_from_one(value):
    from attnzoo.train.recipe import checked_numbers

    with pytest.raises(ConfigError, match=r"train\.accumulate must be a whole number >= 1"):
        checked_numbers({"epochs": 1, "batch_size": 8, "lr": 0.01, "accumulate": value})


def _tiny(tmp_path: Path, name: str, *overrides: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The tiny WordNet preset trained here (no dropout); its report and last checkpoint's float32 weights."""
    from attnzoo.train.recipe import load_recipe
    from attnzoo.train.trainer import train

    recipe = load_recipe("tiny_wordnet", ["task.limit=1500", *overrides])
    report = train(recipe, output=tmp_path / name, baseline=False, quiet=True)
    return report, checkpoint_weights(tmp_path / name)


def checkpoint_weights(run: Path) -> dict[str, torch.Tensor]:
    from attnzoo.io.weights import read_weights

    record = json.loads((run / "checkpoint" / "trainer.json").read_text())
    path = run / "checkpoint" / record["folder"] / "model.safetensors"
    return read_weights(path, sha256=record["files"]["model"])[0]


def _largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and all(v.dtype == torch.float32 for v in [*a.values(), *b.values()])
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.slow
def test_two_passes_of_16_take_the_steps_of_one_of_32(tmp_path):
    need_wordnet()
    _, doubled = _tiny(tmp_path, "batch32", "train.batch_size=32")
    _, accumulated = _tiny(tmp_path, "accumulate2", "train.batch_size=16", "train.accumulate=2")
    _, halved = _tiny(tmp_path, "batch16", "train.batch_size=16")
    assert _largest_difference(doubled, accumulated) < 1e-5
    assert _largest_difference(doubled, halved) > 1e-3  # what the tolerance tells apart


@pytest.mark.slow
def test_bf16_on_the_cpu_trains_as_well_as_fp32_and_keeps_float32_weights(tmp_path):
    need_wordnet()
    full, full_weights = _tiny(tmp_path, "fp32")
    half, half_weights = _tiny(tmp_path, "bf16", "train.precision=bf16")
    assert abs(half["test"]["micro_f1"] - full["test"]["micro_f1"]) <= 0.02
    # float32 weights (checked above), trained otherwise than fp32's: autocast did run
    assert _largest_difference(full_weights, half_weights) > 1e-4


# -- torchrun on the CPU ---------------------------------------------------------------------------------------
def _cli(args: list[str], runner: list[str] | None = None) -> dict:
    cmd = (runner or [sys.executable, "-m", "attnzoo"]) + ["train", "--no-baseline", "--quiet", "--json", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{") :]) if "{" in proc.stdout else {}


@pytest.mark.slow
def test_torchrun_with_two_processes_ends_where_one_process_ends_and_resumes_on_one(tmp_path):
    """Two processes (gloo) on files with an odd number of rows, each reading its share, end with the float32
    weights of one process within 1e-5 and the same test scores (every rank's counts added); a run of two
    processes stopped after an epoch resumes on one and ends there too."""
    from attnzoo.train.files import read_table

    def rows(first: int, count: int) -> str:
        out = ["text,labels"]
        for i in range(first, first + count):
            words = " ".join(f"w{(i * j) % 37}" for j in range(3 + i % 11))
            out.append(f"{words},{'|'.join(f'l{(i + k) % 7}' for k in range(1 + i % 3))}")
        return "\n".join(out) + "\n"

    (tmp_path / "train.csv").write_text(rows(0, 801))
    (tmp_path / "test.csv").write_text(rows(5000, 61))
    assert len(read_table(tmp_path / "train.csv", ["text", "labels"])) == 801
    data = ["--model", "bilstm_labelwise", "--train", str(tmp_path / "train.csv"), "--test", str(tmp_path / "test.csv")]
    data += ["--epochs", "2", "--batch-size", "32", "config.embed_dim=8", "config.hidden=8", "config.dropout=0.0"]
    data += ["train.threads=1", "data.vocab.min_freq=1"]
    one = _cli([*data, "--output", str(tmp_path / "one")])
    two = _cli([*data, "--output", str(tmp_path / "two")], runner=TORCHRUN)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert two["split_sizes"] == one["split_sizes"]
    assert one["test"] and two["test"] == pytest.approx(one["test"], abs=1e-6)
    assert two["history"][-1]["micro_f1"] == pytest.approx(one["history"][-1]["micro_f1"], abs=1e-6)
    assert _largest_difference(checkpoint_weights(tmp_path / "one"), checkpoint_weights(tmp_path / "two")) < 1e-5
    # two processes for an epoch, then one
    _cli([*data, "--output", str(tmp_path / "mixed"), "--stop-after", "1"], runner=TORCHRUN)
    _cli([*data, "--output", str(tmp_path / "mixed"), "--resume"])
    assert _largest_difference(checkpoint_weights(tmp_path / "one"), checkpoint_weights(tmp_path / "mixed")) < 1e-5


# -- the process group's lifetime --------------------------------------------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_process_group_a_run_makes_is_destroyed_when_it_ends_and_on_error_and_a_callers_stays(
    tmp_path, monkeypatch
):
    """In this process, a real gloo group of world size 1 (setup told that one process needs one): gone after
    a run, gone after a run refused once the group was made (its folder holds a run), and a group the caller
    made before a run is left to the caller."""
    from attnzoo.train.recipe import complete_recipe
    from attnzoo.train.trainer import train

    from .test_train_files import _synthetic, _write_csv

    for name, value in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    monkeypatch.setattr(distributed, "_needs_group", lambda world: True)
    made, init = [], torch.distributed.init_process_group
    monkeypatch.setattr(  # ATTNZOO_DIST_TIMEOUT reaches torch as timeout=
        torch.distributed, "init_process_group", lambda backend, **kw: made.append(backend) or init(backend, **kw)
    )
    recipe = complete_recipe(
        {
            "model": "bilstm_labelwise",
            "data": {
                "train": str(_write_csv(tmp_path / "train.csv", _synthetic(64, 0))),
                "text": "body",
                "labels": "tags",
                "threshold": 0.5,
            },
            "config": {"embed_dim": 8, "hidden": 8},
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.01, "device": "cpu"},
        }
    )
    assert not torch.distributed.is_initialized()
    assert train(recipe, output=tmp_path / "run", baseline=False, quiet=True)["epochs"] == 1
    assert made == ["gloo"] and not torch.distributed.is_initialized()
    with pytest.raises(ConfigError, match="already holds a run"):
        train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    assert made == ["gloo", "gloo"] and not torch.distributed.is_initialized()
    init("gloo")  # the caller's own group
    try:
        with pytest.raises(ConfigError, match="already holds a run"):
            train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
        assert made == ["gloo", "gloo"] and torch.distributed.is_initialized()  # setup made none
    finally:
        torch.distributed.destroy_process_group()


# -- scoring's passes ----------------------------------------------------------------------------------------------
def test_a_run_scores_in_passes_of_a_training_batch_and_gets_the_scores_of_passes_of_512(tmp_path):
    """Validation and test are scored in passes of at most ``batch_size / processes`` rows (so a rank's peak
    holds no scoring batch larger than a training pass), with the test scores ``attnzoo evaluate`` gives
    on the same file in passes of 512 rows."""
    from attnzoo.train.evaluate import evaluate_file
    from attnzoo.train.recipe import complete_recipe
    from attnzoo.train.trainer import train

    from .test_train_files import _synthetic, _write_csv

    for name, n, seed in (("train", 120, 0), ("val", 40, 1), ("test", 50, 2)):
        _write_csv(tmp_path / f"{name}.csv", _synthetic(n, seed))
    data = {k: str(tmp_path / f"{k if k != 'validation' else 'val'}.csv") for k in ("train", "validation", "test")}
    recipe = complete_recipe(
        {
            "model": "bilstm_labelwise",
            "data": {**data, "text": "body", "labels": "tags", "vocab": {"min_freq": 1}},
            "config": {"embed_dim": 8, "hidden": 8, "dropout": 0.0},
            "train": {"epochs": 1, "batch_size": 8, "lr": 0.01, "threads": 1, "device": "cpu"},
        }
    )
    scored: list[int] = []  # rows of each top-level forward pass in eval mode

    def record(module, args):
        if not module.training and type(module).__name__ == "BiLSTMLabelwise" and torch.is_tensor(args[0]):
            scored.append(args[0].shape[0])

    hook = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        report = train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    finally:
        hook.remove()
    assert scored and max(scored) == 8 and sum(scored) > 40  # validation's 40 rows and test's 50, in passes of 8
    whole = evaluate_file(tmp_path / "run", tmp_path / "test.csv")
    assert whole["rows"] == 50
    assert {k: report["test"][k] for k in whole if k in report["test"]} == pytest.approx(
        {k: whole[k] for k in report["test"] if k in whole}, abs=1e-6
    )
