"""What a stranger's files cannot do at run time (issue 44): a ``torch.py`` planted in the folder a user runs
``attnzoo check`` / ``attnzoo bench`` from is never imported by attnzoo's child processes; a card's or a
plugin's text never sends a terminal escape; the check's child says why it stopped; a million labels are
refused before anything is allocated; mixed dtypes reach no kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.io.text import printable

from .conftest import ROOT

HOSTILE = "\x1b]0;title\x07\x1b[2J"  # retitles the terminal, then clears the screen
SHOWN = "\\x1b]0;title\\x07\\x1b[2J"  # the same, as visible text


def _plant(folder, canary) -> None:
    """torch.py, numpy.py and yaml.py in ``folder``, each appending its name to ``canary`` when imported."""
    folder.mkdir(parents=True, exist_ok=True)
    for module in ("torch", "numpy", "yaml"):
        (folder / f"{module}.py").write_text(
            f"with open({str(canary)!r}, 'a') as f:\n    f.write('{module} ')\nraise SystemExit('planted {module}')\n"
        )


# -- child processes -----------------------------------------------------------------------------------------


def test_run_python_imports_nothing_from_the_callers_folder_and_keeps_the_environment(tmp_path, monkeypatch):
    from attnzoo.core.children import run_python

    hostile, canary = tmp_path / "downloaded_model", tmp_path / "canary"
    _plant(hostile, canary)
    (hostile / "mine").mkdir()
    (hostile / "mine" / "helper.py").write_text("VALUE = 42\n")
    # the control: a plain `python -c` in that folder runs the planted module
    subprocess.run([sys.executable, "-c", "import yaml"], cwd=hostile, capture_output=True, timeout=60)
    assert canary.read_text() == "yaml "
    canary.unlink()

    monkeypatch.chdir(hostile)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["mine", str(ROOT), ""]))  # a relative entry, a stray ':'
    monkeypatch.setenv("ATTNZOO_REGISTRY_DIR", "cards")
    code = "import os, sys, yaml, numpy, helper; print(helper.VALUE, os.environ['ATTNZOO_REGISTRY_DIR'], os.getcwd())"
    proc = run_python(["-c", code], timeout=120)
    assert proc.returncode == 0, proc.stderr
    value, registry, cwd = proc.stdout.split()
    assert not canary.exists()  # the real yaml and numpy, not the planted ones
    assert value == "42" and registry == str(hostile / "cards")  # relative paths meant what they meant here
    assert cwd != str(hostile) and not os.path.exists(cwd)  # a folder of its own, gone afterwards


_DRIVER = """
import sys
from attnzoo.cli.app import main
from attnzoo.cli.verbs.check import _check_in_child

codes = [
    main(["check", "attn_pool", "--property", "builds"]),
    main(["bench", "attn_pool", "--batch", "1", "--seq", "4", "--rounds", "1", "--min-run-time", "0.01"]),
]
# the child's own clear error (the parent refuses an unknown property itself; the child is asked directly)
report = _check_in_child("attn_pool", ["no_such_property"], False)
print("CODES", *codes)
print("REASON", report.results[0].reason)
"""


@pytest.mark.slow
def test_check_and_bench_in_a_folder_with_planted_modules_run_none_of_them(tmp_path):
    """``cd downloaded_model; attnzoo check attn_pool`` (and bench, whose memory probe is a child too): the
    commands work, the canary never appears; the check child's ConfigError reaches the report."""
    hostile, canary = tmp_path / "downloaded_model", tmp_path / "canary"
    _plant(hostile, canary)
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "drive.py").write_text(_DRIVER)  # a script's folder, not the cwd, is on its path
    # no empty entry: an empty PYTHONPATH entry means the current folder, the planted one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "driver" / "drive.py")],
        cwd=hostile,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not canary.exists(), canary.read_text()
    assert "CODES 0 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "attn_pool  builds" in proc.stdout and "passed" in proc.stdout
    assert "attn_pool  " in proc.stdout.split("NAME")[1]  # bench's table row, with its peak memory measured
    reason = proc.stdout.split("REASON ", 1)[1]
    assert "ConfigError: unknown properties ['no_such_property']" in reason, reason


def test_the_check_childs_clear_error_reaches_the_report(monkeypatch):
    """What the parent makes of a child that stopped with an attnzoo error (its ``error`` line), or with
    nothing but a traceback (the last line of its stderr)."""
    from attnzoo.cli.verbs import check
    from attnzoo.core import children

    said = json.dumps("WeightsError: runs/model/model.safetensors is truncated")
    replies = [
        subprocess.CompletedProcess([], 1, stdout=f"start builds\nerror {said}\n", stderr=""),
        subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback ...\n  ...\nKeyError: 'hidden'\n"),
    ]
    monkeypatch.setattr(children, "run_python", lambda arguments, timeout: replies.pop(0))
    first = check._check_in_child("attn_pool", None, False).results[0]
    assert first.failed and first.property == "builds"
    assert first.reason.endswith("it said: WeightsError: runs/model/model.safetensors is truncated"), first.reason
    second = check._check_in_child("attn_pool", None, False).results[0]
    assert second.reason.endswith("it said: KeyError: 'hidden'"), second.reason


def test_an_unknown_property_is_a_usage_error_before_any_child_starts(capsys, monkeypatch):
    from attnzoo.cli.app import main
    from attnzoo.core import children

    monkeypatch.setattr(children, "run_python", lambda *a, **k: pytest.fail("a child was started"))
    assert main(["check", "attn_pool", "--property", "no_such_property"]) == 2
    err = capsys.readouterr().err
    assert "unknown property 'no_such_property'" in err and "masked_values" in err


# -- terminal output ------------------------------------------------------------------------------------------


def test_printable_shows_every_control_character_and_bidi_override_as_text():
    cases = {
        HOSTILE: SHOWN,
        "a\nb\rc\td": "a\\x0ab\\x0dc\\x09d",
        "\x00\x7f\x85\x9b": "\\x00\\x7f\\x85\\x9b",  # NUL, DEL, C1's NEL and CSI
        "abc\u202edef\u2066x\u2069": "abc\\u202edef\\u2066x\\u2069",  # right-to-left override, isolates
        "é 漢字 ﬁ \\ ok": "é 漢字 ﬁ \\ ok",  # text that is no control stays as it is
    }
    for text, shown in cases.items():
        assert printable(text) == shown
    bidi = {chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}
    for code in [*range(0x00, 0xA0), *(ord(c) for c in bidi)]:  # every control: out as text, never itself
        out = printable(chr(code))
        assert not any(unicodedata.category(c) == "Cc" or c in bidi for c in out), hex(code)


def test_cli_tables_errors_and_warnings_show_escapes_from_cards_and_plugins(tmp_path, monkeypatch, capsys):
    """A card's summary and exemption reason, a factory's error message and a card file's name, each holding
    an escape that would retitle the terminal and clear it: list, info, check and the error and warning
    lines print it as text, and no ESC byte reaches the terminal."""
    from attnzoo.cli.app import main

    def broken(**kwargs):
        raise ConfigError(f"cannot build: {HOSTILE}")

    cards = tmp_path / "cards"
    cards.mkdir()
    escape = "\\e]0;title\\a\\e[2J"  # YAML's double-quoted escapes for HOSTILE
    (cards / "hostile_pool.yaml").write_text(
        f'name: hostile_pool\nfactory: attnzoo.layers.pooling:AttentionPooling\nsummary: "pooling {escape}"\n'
        f"convention: sequence_to_vector\nexample: {{attention_size: 5}}\n"
        f'exempt: {{repr: "because {escape}"}}\nconfig: {{hidden_size: null, attention_size: null}}\n'
    )
    (cards / f"bad{HOSTILE}.yaml").write_text("name: other\nfactory: collections:OrderedDict\n")
    monkeypatch.setenv("ATTNZOO_REGISTRY_DIR", str(cards))
    codes = [main(["list", "hostile*"])]  # reads the cards: the warning about the misnamed one
    attnzoo.register("hostile_broken", broken, summary="builds never")
    codes += [
        main(["info", "hostile_pool"]),
        main(["check", "hostile_pool", "--in-process", "--property", "repr"]),
        main(["create", "hostile_broken"]),
    ]
    out, err = capsys.readouterr()
    assert codes == [0, 0, 0, 1], (codes, out, err)
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert f"pooling {SHOWN}" in out and f"because {SHOWN}" in " ".join(out.split())  # list/info, check's reason
    assert "cannot build: \\x1b]0;title\\x07" in err  # the error line (its CSI part is dropped as a colour code)
    assert "bad\\x1b]0;title\\x07" in err  # the warning naming the card file


# -- the attention core and its integrations --------------------------------------------------------------


def test_attend_heads_refuses_a_float16_query_over_float32_keys():
    core = attnzoo.create("attention", embed_dim=8, num_heads=2)
    q = torch.randn(1, 2, 3, 4, dtype=torch.float16)
    k = v = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"one dtype on one device, got q float16 on cpu, k float32"):
        core.attend_heads(q, k, v)
    with pytest.raises(ValueError, match="v float16"):
        core.attend_heads(k, k, q)
    out, _ = core.attend_heads(q.float(), k, v)  # the same call in one dtype runs
    assert out.shape == (1, 2, 3, 4)


# -- training ---------------------------------------------------------------------------------------------


def test_a_million_labels_are_refused_with_their_size_before_the_model_exists(tmp_path, monkeypatch):
    """A batch of 32 texts of up to 64 tokens over 1,000,000 labels: the label-wise attention holds 32 x
    1,000,000 x 64 float32 scores and as many weights = 16,384,000,000 bytes = 15.3 GiB (scoring, in passes of
    at most a batch, holds less); with 8 GiB available the trainer refuses, before building anything (a run
    of 100,000 labels is refused the same way with 1 GiB, end to end)."""
    from attnzoo.core import memory
    from attnzoo.train import trainer
    from attnzoo.train.file_tasks import FileMultiLabel
    from attnzoo.train.recipe import complete_recipe

    task = object.__new__(FileMultiLabel)  # the sizes alone: no data read, nothing allocated
    task.label_names, task.max_len = [""] * 1_000_000, 64
    [(step, step_bytes, _)] = task.label_tensors(32)
    assert step_bytes == 32 * 1_000_000 * 64 * 8
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 2**30)
    with pytest.raises(ConfigError, match=r"need 15\.3 GiB, and 8\.0 GiB is available; lower train\.batch_size"):
        trainer.check_label_memory(task, 32)
    task.label_names = [""] * 1_000
    trainer.check_label_memory(task, 32)  # a thousand labels fit the same machine

    (tmp_path / "labels.txt").write_text("\n".join(f"l{i}" for i in range(100_000)) + "\n")
    (tmp_path / "train.csv").write_text("text,labels\na cat,l1\na dog,l2\n")
    (tmp_path / "val.csv").write_text("text,labels\na cow,l3\n")
    recipe = complete_recipe(
        {
            "model": "bilstm_labelwise",
            "data": {
                "train": str(tmp_path / "train.csv"),
                "validation": str(tmp_path / "val.csv"),
                "labels_file": str(tmp_path / "labels.txt"),
                "task": "multi_label",
                "max_len": 64,
                "vocab": {"min_freq": 1},
            },
            "train": {"epochs": 1, "batch_size": 32},
        }
    )
    monkeypatch.setattr(memory, "available_bytes", lambda: 2**30)
    monkeypatch.setattr(attnzoo, "create", lambda *a, **k: pytest.fail("the model was built"))
    with pytest.raises(ConfigError) as caught:
        trainer.train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    message = str(caught.value)  # 32 x 100,000 x 64 x 8 bytes = 1.5 GiB
    assert "100,000 labels do not fit" in message and "[32, 100,000, 64]" in message, message
    assert "need 1.5 GiB, and 1.0 GiB is available" in message and "data.labels_file" in message, message


def test_a_child_of_attnzoo_run_from_its_own_checkout_imports_that_attnzoo(monkeypatch):
    """``python -m attnzoo check`` in a source checkout imports attnzoo from the current folder; its child,
    which no longer sees that folder, is given it: the two run the same code."""
    from attnzoo.core.children import run_python

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    proc = run_python(["-c", "import attnzoo; print(attnzoo.__file__)"], timeout=120)
    assert proc.stdout.strip() == attnzoo.__file__, proc.stderr
