"""The docs site (mkdocs.yml, attnzoo/tools/site.py): the generated pages say what the registry, the layers,
docs/training.md, docs/references.bib and the benchmark results say, and the built site works in a real
browser (Debian's chromium, driven by playwright): search finds a variant, every page of the navigation
loads without a console error, every picture of the variant pages loads, every internal link resolves."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest

import attnzoo

from .conftest import ROOT

pytest.importorskip("matplotlib")

from attnzoo.tools import site  # noqa: E402

ARTIFACTS = ROOT / ".ci" / "artifacts"


def test_every_citation_of_a_built_in_card_has_its_bibtex_entry():
    """A clause of a card's reference that names a year ("Shaw, Uszkoreit and Vaswani 2018") cites a paper."""
    missing = []
    for name in attnzoo.list_models(provider="attnzoo"):
        reference = attnzoo.model_info(name).reference
        for clause in reference.split(";"):
            citation = re.search(r"([A-Z][\w-]+)[^;]*?\b((?:19|20)\d\d)\b", clause)  # first author .. year
            if citation:
                keys = {e.key for e in site.cited(clause)}
                if f"{citation.group(1).lower()}{citation.group(2)}" not in keys:
                    missing.append(f"{name}: {clause.strip()!r} (found {sorted(keys)})")
    assert not missing, "\n".join(missing)
    shaw = site.cited("Shaw, Uszkoreit and Vaswani 2018")
    assert [e.key for e in shaw] == ["shaw2018"], "a co-author's other paper is not cited"


def _cost_row(page: str, size: str) -> tuple[float, float]:
    row = next(line for line in page.splitlines() if line.startswith(f"| {size}"))
    before, after = re.search(r"\| ([\d.e+-]+) → ([\d.e+-]+) \| x", row).groups()
    return float(before), float(after)


def test_a_variant_page_has_every_section_its_pictures_and_the_counted_cost():
    import matplotlib.image

    page, images = site.variant_page("mha")
    for section in ("Pictures", "Options", "Calling convention", "Formula", "Cost", "References", "Weights it loads"):
        assert f"\n## {section}\n" in page, section
    for path, data in images.items():
        assert f"]({path})" in page
        picture = matplotlib.image.imread(__import__("io").BytesIO(data), format="png")
        assert picture.shape[0] > 100 and picture.shape[1] > 100 and picture[..., :3].std() > 0.05
    assert {p.rsplit("-", 1)[-1] for p in images} == {"pattern.png", "weights.png"}
    for key in attnzoo.model_info("mha").config:
        assert f"| `{key}` |" in page, f"option {key} is missing"

    # multiply-adds of one sample's forward: 4 projections T·E·E and two attention products T·T·E, x2 FLOP
    def flops(t: int, e: int) -> float:
        return (4 * t * e * e + 2 * t * t * e) * 2 / 1e6

    t = site.COST_SEQ  # (the page shows 3 digits)
    np.testing.assert_allclose(_cost_row(page, "T (sequence)"), (flops(t, 32), flops(2 * t, 32)), rtol=5e-3)
    np.testing.assert_allclose(_cost_row(page, "d (`embed_dim`)"), (flops(t, 32), flops(t, 64)), rtol=5e-3)
    assert "| `causal` |" in page and "nothing to check (checked on causal self-attention layers)" in page


def test_a_pretrained_page_defines_its_metrics_from_training_md_and_draws_a_real_example():
    text = (ROOT / "docs" / "training.md").read_text()
    definitions = dict(re.findall(r"^\| `(precision_at_k|word_accuracy|subset_\*)`[^|]*\| (.+) \|$", text, flags=re.M))
    page, images = site.pretrained_page("bilstm_labelwise.wordnet")
    assert f"| `precision_at_5` | 0.658 | {definitions['precision_at_k']} |" in page
    assert definitions["subset_*"] in next(line for line in page.splitlines() if line.startswith("| `subset_micro_f1`"))
    assert (
        "TF-IDF word 1-2 grams + linear SVM" in page
        and "[licenses/wordnet-3.0.txt](../licenses/wordnet-3.0.txt)" in page
    )
    assert len(images) == 1 and "attnzoo.plot_attention(result, path)" in page
    g2p, _ = site.pretrained_page("g2p_seq2seq.cmudict")
    assert definitions["word_accuracy"] in next(line for line in g2p.splitlines() if "`greedy_word_accuracy`" in line)


def test_the_measured_line_quotes_the_benchmark_that_names_the_variant():
    rows = json.loads((ROOT / "benchmarks" / "results" / "breadth.json").read_text())["gqa_vs_mha"]
    gqa = next(r for r in rows if r["name"] == "gqa")
    line = site.measured_line("gqa")
    assert f"{gqa['median_ms']:.3g} ms" in line and f"{gqa['ratio_to_first']:.2f}x the time of `mha`" in line
    assert "breadth.json" in line and site.measured_line("no_such_variant") is None


def test_a_card_registered_at_run_time_gets_the_same_page_and_a_place_in_the_navigation():
    attnzoo.register(
        "my_window",
        "attnzoo.layers.attention:Attention",
        config={"embed_dim": None, "num_heads": 2, "window": 1, "causal": True},
        summary="a plugin's windowed attention",
        convention="sequence_to_sequence",
        example={"num_heads": 2, "window": 1, "causal": True},
    )
    page, images = site.variant_page("my_window")
    assert "| provider | `local` |" in page and images
    assert "tests/test_conformance.py" not in page, "a plugin's variant is not in the project's CI"
    nav = site._nav_with_pages([{"The zoo": [{"Variants": "variants/index.md"}]}], attnzoo.list_models(), [])
    assert {"my_window": "variants/my_window.md"} in nav[0]["The zoo"][0]["Variants"]


def test_the_catalogue_links_each_name_to_its_page_on_the_site():
    text = (ROOT / "docs" / "catalogue.md").read_text()
    linked = site.on_page_markdown(text, SimpleNamespace(file=SimpleNamespace(src_uri="catalogue.md")), {}, None)
    assert "| [`labelwise`](variants/labelwise.md) |" in linked
    assert "| [`bilstm_labelwise.wordnet`](models/bilstm_labelwise.wordnet.md) |" in linked
    assert all(f"[`{name}`](variants/{name}.md)" in linked for name in attnzoo.list_models(provider="attnzoo"))


# -- the built site, in a browser ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    out = tmp_path_factory.mktemp("site") / "site"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**env, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    print(f"mkdocs build --strict: {time.perf_counter() - started:.1f} s")
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports what matters
        pass


@pytest.fixture(scope="module")
def served(built_site):
    handler = functools.partial(_Quiet, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return found


def _nav_pages(page, base: str) -> list[str]:
    page.goto(base)
    links = page.eval_on_selector_all("nav.md-nav--primary a.md-nav__link[href]", "els => els.map(e => e.href)")
    return sorted({urllib.parse.urldefrag(link)[0] for link in links if link.startswith(base)})


def _check_links(pages: dict[str, list[str]], base: str) -> list[str]:
    """Every internal link target answers 200, and its #fragment is an id on the target page."""
    broken, bodies = [], {}
    for source, links in pages.items():
        for link in links:
            target, fragment = urllib.parse.urldefrag(link)
            if not target.startswith(base):
                continue
            if target not in bodies:
                try:
                    with urllib.request.urlopen(target, timeout=10) as response:
                        bodies[target] = response.read().decode("utf-8", "replace")
                except urllib.error.HTTPError as error:
                    bodies[target] = None
                    broken.append(f"{source} -> {link}: HTTP {error.code}")
            body = bodies[target]
            if body is not None and fragment and f'id="{urllib.parse.unquote(fragment)}"' not in body:
                broken.append(f"{source} -> {link}: no element with id {fragment!r}")
    return broken


@pytest.mark.slow
def test_the_site_works_in_a_real_browser(served):
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
            _search_finds(page, served, "gqa_rope_window")
            nav = _nav_pages(page, served)
            assert f"{served}variants/gqa_rope_window/" in nav and f"{served}models/g2p_seq2seq.cmudict/" in nav
            links, pictures = {}, 0
            for url in nav:
                page.goto(url, wait_until="load")
                links[url] = page.eval_on_selector_all("article a[href]", "els => els.map(e => e.href)")
                if "/variants/" in url or "/models/" in url:
                    pictures += _pictures_load(page, url)
            assert not errors, "console errors:\n" + "\n".join(errors[:20])
            assert pictures >= 2 * len(attnzoo.list_models()), f"only {pictures} pictures on the variant pages"
            broken = _check_links(links, served)
            assert not broken, "broken internal links:\n" + "\n".join(broken[:30])
            for path, name in (
                ("", "home"),
                ("variants/gqa_rope_window/", "variant"),
                ("models/bilstm_labelwise.wordnet/", "model"),
            ):
                page.goto(served + path, wait_until="load")
                page.screenshot(path=str(ARTIFACTS / f"site-{name}.png"), full_page=True)
        finally:
            browser.close()


def _search_finds(page, base: str, name: str) -> None:
    page.goto(base, wait_until="load")
    page.locator("input.md-search__input").fill(name)  # as a reader types into the header's search box
    page.wait_for_selector(".md-search-result__item", timeout=20000)
    hits = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(e => e.href)")
    assert any(f"variants/{name}/" in hit for hit in hits), f"search for {name!r} found {hits[:5]}"


def _pictures_load(page, url: str) -> int:
    """Every <img> of the article loaded with a non-zero natural size; returns how many there are."""
    page.wait_for_load_state("load")
    sizes = page.eval_on_selector_all(
        "article img", "els => els.map(e => [e.getAttribute('src'), e.complete, e.naturalWidth, e.naturalHeight])"
    )
    bad = [s for s in sizes if not (s[1] and s[2] > 0 and s[3] > 0)]
    assert not bad, f"{url}: pictures that did not load: {bad}"
    return len(sizes)
