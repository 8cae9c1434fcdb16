"""``attnzoo bench`` and ``attnzoo check`` take settings for every variant (``key=value``), for one
(``NAME:key=value``) and from a YAML file of variants; ``check`` with no pattern says what it is about to
run, and ``--jobs N`` checks N variants at once with the same reports, in the same order."""

from __future__ import annotations

import json
import shutil

import pytest

from attnzoo.cli.common import UsageError, parse_variants

from .conftest import ROOT, run_cli

TINY = ["--batch", "1", "--seq", "4", "--rounds", "1", "--min-run-time", "0.001", "--no-memory", "--json"]


def test_settings_for_every_variant_for_one_and_from_a_file(tmp_path):
    (tmp_path / "v.yaml").write_text("gqa: {num_heads: 4, num_kv_heads: 2}\nlinear_self:\n")
    variants = parse_variants(
        ["mha", str(tmp_path / "v.yaml"), "embed_dim=16", "num_heads=2", "mha:num_heads=8", "gqa:num_kv_heads=1"]
    )
    assert variants.names == ["mha", "gqa", "linear_self"]
    assert variants.config("mha") == {"embed_dim": 16, "num_heads": 8}
    assert variants.config("gqa") == {"embed_dim": 16, "num_heads": 4, "num_kv_heads": 1}  # the command line wins
    assert variants.config("linear_self") == {"embed_dim": 16, "num_heads": 2}
    provider = parse_variants(["my_plugin:layer", "my_plugin:layer:size=3"])
    assert provider.names == ["my_plugin:layer"] and provider.config("my_plugin:layer") == {"size": 3}
    with pytest.raises(UsageError, match="'gqa', which is not among the variants named \\(mha\\)"):
        parse_variants(["mha", "gqa:num_kv_heads=2"])
    (tmp_path / "bad.yaml").write_text("gqa: 2\n")
    with pytest.raises(UsageError, match="'gqa' should map to its settings"):
        parse_variants([str(tmp_path / "bad.yaml")])


@pytest.mark.slow
def test_bench_gives_each_variant_its_own_settings(tmp_path):
    proc = run_cli("bench", "mha", "gqa", "embed_dim=16", "num_heads=4", "gqa:num_kv_heads=2", *TINY)
    assert proc.returncode == 0, proc.stderr
    configs = {m["name"]: m["config"] for m in json.loads(proc.stdout)}
    assert configs == {
        "mha": {"embed_dim": 16, "num_heads": 4},
        "gqa": {"embed_dim": 16, "num_heads": 4, "num_kv_heads": 2},
    }
    (tmp_path / "heads.yaml").write_text("mha: {num_heads: 2}\ngqa: {num_heads: 4, num_kv_heads: 1}\n")
    proc = run_cli("bench", str(tmp_path / "heads.yaml"), "embed_dim=16", *TINY)
    assert proc.returncode == 0, proc.stderr
    configs = {m["name"]: m["config"] for m in json.loads(proc.stdout)}
    assert configs == {
        "mha": {"embed_dim": 16, "num_heads": 2},
        "gqa": {"embed_dim": 16, "num_heads": 4, "num_kv_heads": 1},
    }


@pytest.mark.slow
def test_a_shared_key_one_variant_lacks_says_how_to_set_it_for_one():
    proc = run_cli("bench", "mha", "gqa", "embed_dim=16", "num_heads=4", "num_kv_heads=2", *TINY)
    assert proc.returncode == 1
    assert "mha: unknown config key 'num_kv_heads'" in proc.stderr
    assert "NAME:num_kv_heads=2 sets it for one" in proc.stderr
    proc = run_cli("bench", "mha", "gqa:num_kv_heads=2", *TINY)
    assert proc.returncode == 2 and "not among the variants named" in proc.stderr
    proc = run_cli("check", "nosuch:size=2")  # no pattern: every variant, and none is called that
    assert proc.returncode == 2 and "'nosuch', which is no registered variant" in proc.stderr


@pytest.mark.slow  # a CLI subprocess of 10-13 s: the README's test command stays within its 10 minutes
def test_check_builds_a_variant_with_its_own_settings():
    # 4 query heads cannot share 3 key/value heads: the setting must reach the build to fail it
    refused = run_cli("check", "gqa", "mha", "gqa:num_kv_heads=3", "--property", "shapes", "--json", "--in-process")
    reports = {r["variant"]: r for r in json.loads(refused.stdout)}
    assert refused.returncode == 1 and not reports["gqa"]["ok"] and reports["mha"]["ok"]
    assert "num_kv_heads" in reports["gqa"]["results"][0]["reason"]
    assert "checking all" not in refused.stderr  # said only when no pattern is given
    fine = run_cli("check", "gqa", "gqa:num_kv_heads=1", "--property", "shapes", "--json", "--in-process")
    assert fine.returncode == 0, fine.stdout


@pytest.fixture
def three_cards(tmp_path):
    cards = tmp_path / "registry"
    cards.mkdir()
    for name in ("dot", "general", "additive"):
        shutil.copy(ROOT / "registry" / f"{name}.yaml", cards / f"{name}.yaml")
    return {"ATTNZOO_REGISTRY_DIR": str(cards)}


@pytest.mark.slow
def test_check_without_a_pattern_says_how_many_and_jobs_keep_the_order(three_cards):
    # general's own setting must reach its check process (an unknown normaliser fails its build there)
    args = ["check", "general:normalizer=nosuch", "--property", "shapes", "--json"]
    one = run_cli(*args, "--in-process", env=three_cards)
    assert one.returncode == 1, one.stderr
    assert "checking all 3 variants (about 2 minutes with --jobs 1 on 2 cores)" in one.stderr
    two = run_cli(*args, "--jobs", "2", env=three_cards)
    assert two.returncode == 1, two.stderr
    assert "(about 1 minute with --jobs 2" in two.stderr

    def statuses(proc):
        return [(r["variant"], [(x["property"], x["status"]) for x in r["results"]]) for r in json.loads(proc.stdout)]

    assert statuses(two) == statuses(one)
    assert [v for v, _ in statuses(one)] == ["additive", "dot", "general"]
    assert [ok for _, ok in ((r["variant"], r["ok"]) for r in json.loads(two.stdout))] == [True, True, False]
