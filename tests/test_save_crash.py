"""save() killed at every instant: the folder always loads the old model or the new one, and a retry works.

A forked child saves with every filesystem call it makes counted; right before its k-th call it dies
with ``os._exit`` (no cleanup, no ``finally``: as a SIGKILL would), for k = 1, 2, ... until a save
completes. Each step of save() is one system call, and renames are atomic, so the states between calls
are all the states a killed save can leave. A slower test kills real processes at random times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError

from .conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

CALLS = ("replace", "rename", "fsync", "unlink", "mkdir", "chmod", "open", "rmdir")


def _model(seed: int):
    torch.manual_seed(seed)
    return attnzoo.create("labelwise_batched", num_labels=5, hidden_size=4)


def _killed_save(model, target: Path, *, overwrite: bool, k: int) -> bool:
    """Save in a child that dies before its k-th filesystem call; True if the save completed first."""
    pid = os.fork()
    if pid == 0:  # the child
        count = [0]
        import safetensors.torch as st

        def counted(owner, name):
            real = getattr(owner, name)

            def call(*args, **kwargs):
                count[0] += 1
                if count[0] == k:
                    os._exit(9)
                return real(*args, **kwargs)

            setattr(owner, name, call)

        for name in CALLS:
            counted(os, name)
        counted(st, "save_file")
        try:
            attnzoo.save(model, target, overwrite=overwrite)
        except BaseException:  # noqa: BLE001
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 9), f"the child failed with {code} at call {k}"
    return code == 0


def _state(folder: Path):
    return {k: v.clone() for k, v in attnzoo.load(folder).state_dict().items()}


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _debris(folder: Path) -> list[str]:
    inside = [p.name for p in folder.iterdir() if p.name.startswith(".attnzoo-tmp-")] if folder.is_dir() else []
    beside = [p.name for p in folder.parent.glob(f".{folder.name}.attnzoo-tmp-*")]
    return inside + beside


@pytest.mark.slow
def test_overwrite_killed_at_every_step_leaves_the_old_or_the_new_model(tmp_path):
    old, new = _model(0), _model(1)
    want_old, want_new = old.state_dict(), new.state_dict()
    seen = set()
    for k in range(1, 200):
        folder = tmp_path / f"k{k}"
        attnzoo.save(old, folder)
        done = _killed_save(new, folder, overwrite=True, k=k)
        loaded = _state(folder)
        assert _same(loaded, want_old) or _same(loaded, want_new), f"killed before call {k}: neither model loads"
        seen.add("new" if _same(loaded, want_new) else "old")
        attnzoo.save(new, folder, overwrite=True)  # a retry never trips over what the kill left
        assert _same(_state(folder), want_new) and not _debris(folder)
        if done:
            break
    else:
        pytest.fail("the save never completed")
    assert seen == {"old", "new"} and k > 5  # the kills landed before and after the switch


@pytest.mark.slow
def test_a_new_folder_killed_at_every_step_is_whole_or_absent_and_a_plain_retry_works(tmp_path):
    model = _model(2)
    want = model.state_dict()
    for k in range(1, 200):
        folder = tmp_path / "runs" / f"k{k}"
        done = _killed_save(model, folder, overwrite=False, k=k)
        if folder.exists() and any(not p.name.startswith(".") for p in folder.iterdir()):
            assert _same(_state(folder), want), f"killed before call {k}: a partial folder"
            with pytest.raises(WeightsError, match="already holds a saved model"):
                attnzoo.save(model, folder)
        else:
            attnzoo.save(model, folder)  # no overwrite needed: nothing was saved
            assert _same(_state(folder), want)
        attnzoo.save(model, tmp_path / "runs" / f"k{k}-again")  # a neighbour's debris never blocks either
        assert not _debris(folder)
        if done:
            break
    else:
        pytest.fail("the save never completed")


def test_an_unrelated_file_is_never_removed(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(WeightsError, match="is not empty"):
        attnzoo.save(_model(0), folder)
    attnzoo.save(_model(0), folder, overwrite=True)
    attnzoo.save(_model(1), folder, overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine"
    assert _same(_state(folder), _model(1).state_dict())


def test_a_hand_edited_config_yaml_is_an_error_naming_both(tmp_path):
    folder = attnzoo.save(_model(0), tmp_path / "m")
    text = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text(text.replace("num_labels: 5", "num_labels: 7"))
    with pytest.raises(
        WeightsError,
        match=r"disagree about the config: config.yaml says .*num_labels.*7.*saved with"
        r".*num_labels.*5",
    ):
        attnzoo.load(folder)
    (folder / "config.yaml").write_text("name: [unclosed\n")
    with pytest.raises(WeightsError, match="not valid YAML") as err:
        attnzoo.load(folder)
    assert "\n" not in str(err.value)


SAVER = """
import sys, torch, attnzoo
torch.manual_seed(int(sys.argv[2]))
model = attnzoo.create("labelwise_batched", num_labels=4000, hidden_size=2000)
print("ready", flush=True)
sys.stdin.readline()
attnzoo.save(model, sys.argv[1], overwrite=True)
"""


@pytest.mark.slow
def test_real_processes_killed_at_random_times_and_four_concurrent_savers(tmp_path):
    """64 MB models: SIGKILL at a random moment of the save, then four savers at once."""
    folder = tmp_path / "big"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def saver(seed: int) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(folder), str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout.readline().strip() == "ready"
        return proc

    def expected(seed: int):
        torch.manual_seed(seed)
        return attnzoo.create("labelwise_batched", num_labels=4000, hidden_size=2000).state_dict()

    first = saver(0)
    first.stdin.write("\n")
    first.stdin.flush()
    assert first.wait(timeout=300) == 0
    candidates = [expected(0), expected(1)]
    for delay in (0.05, 0.2, 0.4, 0.7, 1.0):
        proc = saver(1)
        proc.stdin.write("\n")
        proc.stdin.flush()
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        loaded = _state(folder)
        assert any(_same(loaded, c) for c in candidates), f"killed after {delay} s: neither model loads"
    procs = [saver(seed) for seed in (2, 3, 4, 5)]
    for proc in procs:
        proc.stdin.write("\n")
        proc.stdin.flush()
    assert [p.wait(timeout=600) for p in procs] == [0, 0, 0, 0]
    loaded = _state(folder)
    assert any(_same(loaded, expected(seed)) for seed in (2, 3, 4, 5)) and not _debris(folder)


def test_a_folder_named_dot_or_dot_dot_saves_and_loads(tmp_path, monkeypatch):
    """``save(model, ".")`` in an empty working folder, and ``"x/.."``: paths with no name of their own (the
    temporary folder is written beside the absolute path). Before, "." was refused as 'another process saved
    a model there meanwhile'."""
    model = attnzoo.create("labelwise", num_labels=3, hidden_size=8).eval()
    x = torch.randn(2, 5, 8)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    attnzoo.save(model, ".")
    (tmp_path / "inner").mkdir()
    attnzoo.save(model, tmp_path / "inner" / "..", overwrite=True)
    for folder in (tmp_path / "here", tmp_path):
        assert sorted(p.name for p in folder.iterdir() if p.suffix in (".yaml", ".safetensors")) == [
            "config.yaml",
            "model.safetensors",
        ]
        with torch.no_grad():
            torch.testing.assert_close(attnzoo.load(folder).eval()(x), model(x))
