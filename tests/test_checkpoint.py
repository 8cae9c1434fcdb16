"""The trainer's checkpoint is one atomic unit: a run killed anywhere in a save resumes from the last complete
epoch and ends where the uninterrupted run ends; a damaged record, other data or another model is refused by
name, never an internal error."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.weights import read_weights
from attnzoo.train import checkpoint as ckpt
from attnzoo.train.recipe import complete_recipe
from attnzoo.train.trainer import train

from .test_train_files import _synthetic, _write_csv


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs, no handler of the library's catches it."""


def _tiny():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    return model, optimizer


def _step(model, optimizer):
    loss = model(torch.randn(4, 3)).square().sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _state(epoch):
    return {"epoch": epoch, "epochs": 3, "history": [{"epoch": e + 1} for e in range(epoch)], "best": None}


def _saved_epochs(tmp_path, monkeypatch, die_at):
    """Save epoch 1, then epoch 2 with the process 'killed' at file operation ``die_at`` of the save.
    Returns the weights of epoch 1 and of epoch 2 as they were when saved."""
    model, optimizer = _tiny()
    _step(model, optimizer)
    ckpt.save_checkpoint(tmp_path, model, optimizer, _state(1), best=model.state_dict())
    first = {k: v.clone() for k, v in model.state_dict().items()}
    _step(model, optimizer)
    second = {k: v.clone() for k, v in model.state_dict().items()}
    calls = {"n": 0}

    def dying(real):
        def wrapped(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == die_at:
                raise Killed
            return real(*args, **kwargs)

        return wrapped

    for name in ("write_weights", "atomic_write_text", "_remove_all_but", "_fsync_folder"):
        monkeypatch.setattr(ckpt, name, dying(getattr(ckpt, name)))
    with contextlib.suppress(Killed):
        ckpt.save_checkpoint(tmp_path, model, optimizer, _state(2), average=model.state_dict())
    monkeypatch.undo()
    return first, second, calls["n"]


@pytest.mark.parametrize("die_at", range(1, 7))
def test_a_save_killed_at_any_point_leaves_the_previous_epoch_or_the_new_one_whole(tmp_path, monkeypatch, die_at):
    first, second, _ = _saved_epochs(tmp_path, monkeypatch, die_at)
    model, optimizer = _tiny()
    state, saved = ckpt.load_checkpoint(tmp_path, model, optimizer)
    expected = {1: first, 2: second}[state["epoch"]]
    assert all(torch.equal(model.state_dict()[k], expected[k]) for k in expected)
    assert len(state["history"]) == state["epoch"]
    # epoch 2 was not the best: its checkpoint carries epoch 1's best weights
    assert all(torch.equal(saved["best"][k], first[k]) for k in first)
    # the pointer is committed by the fifth operation (two weights, the average, the fsync, the pointer)
    assert state["epoch"] == (2 if die_at > 5 else 1)


def test_a_complete_save_keeps_one_epoch_folder(tmp_path, monkeypatch):
    _, second, calls = _saved_epochs(tmp_path, monkeypatch, die_at=0)
    assert calls == 6  # model, optimizer, average, fsync, pointer, clean-up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0002", "trainer.json"]
    assert ckpt.checkpoint_file(tmp_path, "average") == tmp_path / "epoch-0002" / "average.safetensors"


def test_an_unreadable_pointer_falls_back_to_the_newest_epoch_folder_that_checks_out(tmp_path, monkeypatch, capsys):
    _, second, _ = _saved_epochs(tmp_path, monkeypatch, die_at=0)
    pointer = tmp_path / "trainer.json"
    pointer.write_text(pointer.read_text()[: len(pointer.read_text()) // 2])  # torn
    model, optimizer = _tiny()
    state, _ = ckpt.load_checkpoint(tmp_path, model, optimizer)
    assert state["epoch"] == 2 and all(torch.equal(model.state_dict()[k], second[k]) for k in second)
    assert "could not be read" in capsys.readouterr().out


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r.pop("optimizer"), "no 'optimizer'"),
        (lambda r: r.update(epoch="two"), "'epoch' is 'two', not an int"),
        (lambda r: r.update(epoch=True), "'epoch' is True"),
        (lambda r: r.update(history=None), "'history' is None"),
        (lambda r: r["optimizer"].pop("param_groups"), "param_groups"),
    ],
)
def test_a_damaged_record_is_refused_by_name(tmp_path, monkeypatch, damage, message):
    _saved_epochs(tmp_path, monkeypatch, die_at=0)
    for path in (tmp_path / "trainer.json", tmp_path / "epoch-0002" / "state.json"):
        record = json.loads(path.read_text())
        damage(record)
        path.write_text(json.dumps(record))
    model, optimizer = _tiny()
    with pytest.raises(ConfigError, match=f"damaged .*{message}"):
        ckpt.load_checkpoint(tmp_path, model, optimizer)


def test_a_changed_weights_file_other_data_and_another_model_are_refused(tmp_path, monkeypatch):
    _saved_epochs(tmp_path, monkeypatch, die_at=0)
    record = json.loads((tmp_path / "trainer.json").read_text())
    record["data"] = "train a.csv sha256 aaaa"
    (tmp_path / "trainer.json").write_text(json.dumps(record))
    model, optimizer = _tiny()
    with pytest.raises(ConfigError, match="trained on train a.csv sha256 aaaa; this run reads train a.csv sha256 b"):
        ckpt.load_checkpoint(tmp_path, model, optimizer, data="train a.csv sha256 bbbb")
    wide = torch.nn.Linear(5, 2)
    with pytest.raises(ConfigError, match="do not fit the model"):
        ckpt.load_checkpoint(tmp_path, wide, torch.optim.AdamW(wide.parameters()))
    weights = tmp_path / "epoch-0002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(WeightsError, match="sha256"):
        ckpt.load_checkpoint(tmp_path, model, optimizer)


# -- through the trainer -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    _write_csv(folder / "train.csv", _synthetic(300, 0))  # 300 rows in batches of 7: the last batch is short
    _write_csv(folder / "test.csv", _synthetic(60, 2))
    return folder


def _recipe(data, train_file="train.csv"):
    return complete_recipe(
        {
            "model": "bilstm_labelwise",
            "seed": 0,
            "data": {
                "train": str(data / train_file),
                "test": str(data / "test.csv"),
                "text": "body",
                "labels": "tags",
                "task": "multi_label",
                "vocab": {"min_freq": 1},
            },
            "config": {"embed_dim": 8, "hidden": 8, "dropout": 0.0},
            "train": {"epochs": 3, "batch_size": 7, "lr": 0.01, "warmup_steps": 5, "threads": 1},
        }
    )


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("straight") / "run"
    return train(_recipe(data), output=out, baseline=False, quiet=True)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["atomic_write_text", "_remove_all_but"])
def test_a_run_killed_in_a_save_resumes_to_the_uninterrupted_result(data, straight, tmp_path, monkeypatch, where):
    """Killed in epoch 2's save, before its pointer is written or just after: --resume trains on from the last
    complete epoch, with the scheduler at its true step (an epoch is ceil(300 / 7) = 43 steps, not 42), and
    ends with the uninterrupted run's losses and weights."""
    real = getattr(ckpt, where)

    def dying(folder, *args):
        if (folder.parent if where == "atomic_write_text" else folder).joinpath("epoch-0002").exists():
            raise Killed
        return real(folder, *args)

    monkeypatch.setattr(ckpt, where, dying)
    out = tmp_path / "run"
    with pytest.raises(Killed):
        train(_recipe(data), output=out, baseline=False, quiet=True)
    monkeypatch.undo()
    record = json.loads((out / "checkpoint" / "trainer.json").read_text())
    assert record["epoch"] == (1 if where == "atomic_write_text" else 2)
    resumed = train(_recipe(data), output=out, resume=True, baseline=False, quiet=True)
    assert [h["train_loss"] for h in resumed["history"]] == pytest.approx(
        [h["train_loss"] for h in straight["history"]], rel=1e-6
    )
    a = read_weights(straight["weights"], sha256=straight["sha256"])[0]
    b = read_weights(resumed["weights"], sha256=resumed["sha256"])[0]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resuming_on_another_training_file_is_refused_before_training(data, tmp_path):
    out = tmp_path / "run"
    train(_recipe(data), output=out, baseline=False, quiet=True, stop_after=1)
    _write_csv(data / "other.csv", _synthetic(300, 9))  # the same size, other rows
    (data / "other.csv").replace(data / "train2.csv")
    with pytest.raises(ConfigError, match=r"was trained on train train\.csv sha256 .*this run reads train train2\.csv"):
        train(_recipe(data, "train2.csv"), output=out, resume=True, baseline=False, quiet=True)
    assert json.loads((out / "checkpoint" / "trainer.json").read_text())["epoch"] == 1
