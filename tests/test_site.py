"""The docs site (mkdocs.yml, docs/hooks/site.py): the generated pages say what the registry, the layers,
docs/training.md, docs/references.bib and the benchmark results say, and the built site works in a real
browser (Debian's chromium, driven by playwright): search finds a variant, every page of the navigation
loads without a console error, every picture of the variant pages loads, every internal link resolves."""

from __future__ import annotations

import functools
import html.parser
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
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import attnzoo

from .conftest import ROOT

pytest.importorskip("matplotlib")

import importlib.util  # noqa: E402

# the site's mkdocs hook lives with the docs, outside the package (it reads docs/ and benchmarks/)
_spec = importlib.util.spec_from_file_location("attnzoo_site_hook", ROOT / "docs" / "hooks" / "site.py")
site = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = site  # dataclasses look their module up while the file runs
_spec.loader.exec_module(site)

ARTIFACTS = ROOT / ".ci" / "artifacts"


def _mkdocs_yml() -> dict:
    """mkdocs.yml as data, its one Python tag (the line that quiets the theme's notice) read as null, not run."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)  # noqa: S506 - a SafeLoader


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
        assert f"| {site._code(key)} |" in page, f"option {key} is missing"

    # multiply-adds of one sample's forward: 4 projections T·E·E and two attention products T·T·E, x2 FLOP
    def flops(t: int, e: int) -> float:
        return (4 * t * e * e + 2 * t * t * e) * 2 / 1e6

    t = site.COST_SEQ  # (the page shows 3 digits)
    np.testing.assert_allclose(_cost_row(page, "T (sequence)"), (flops(t, 32), flops(2 * t, 32)), rtol=5e-3)
    np.testing.assert_allclose(_cost_row(page, "d (`embed_dim`)"), (flops(t, 32), flops(t, 64)), rtol=5e-3)
    assert f"| {site._code('causal')} |" in page
    assert "nothing to check (checked on causal self-attention layers)" in page


def test_a_pretrained_page_defines_its_metrics_from_training_md_and_draws_a_real_example():
    text = (ROOT / "docs" / "training.md").read_text()
    definitions = dict(re.findall(r"^\| `(precision_at_k|word_accuracy|subset_\*)`[^|]*\| (.+) \|$", text, flags=re.M))
    page, images = site.pretrained_page("bilstm_labelwise.wordnet")
    shown = site._text  # card text reaches the page escaped (see the tests of hostile cards below)
    assert f"| {site._code('precision_at_5')} | {shown(0.658)} | {shown(definitions['precision_at_k'])} |" in page
    subset = next(line for line in page.splitlines() if line.startswith(f"| {site._code('subset_micro_f1')}"))
    assert shown(definitions["subset_*"]) in subset
    assert (
        shown("TF-IDF word 1-2 grams + linear SVM") in page
        and "[licenses/wordnet-3.0.txt](../licenses/wordnet-3.0.txt)" in page
    )
    assert len(images) == 1 and "attnzoo.plot_attention(result, path)" in page
    g2p, _ = site.pretrained_page("g2p_seq2seq.cmudict")
    greedy = next(line for line in g2p.splitlines() if site._code("greedy_word_accuracy") in line)
    assert shown(definitions["word_accuracy"]) in greedy


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
    assert f"provider: {site._code('local')}" in page and images
    assert "tests/test_conformance.py" not in page, "a plugin's variant is not in the project's CI"
    nav = site._nav_with_pages([{"The zoo": [{"Variants": "variants/index.md"}]}], attnzoo.list_models(), [])
    assert {"my_window": "variants/my_window.md"} in nav[0]["The zoo"][0]["Variants"]


def test_the_catalogue_links_each_name_to_its_page_on_the_site():
    text = (ROOT / "docs" / "catalogue.md").read_text()
    linked = site.on_page_markdown(text, SimpleNamespace(file=SimpleNamespace(src_uri="catalogue.md")), {}, None)
    assert "| [`labelwise`](variants/labelwise.md) |" in linked
    assert "| [`bilstm_labelwise.wordnet`](models/bilstm_labelwise.wordnet.md) |" in linked
    assert all(f"[`{name}`](variants/{name}.md)" in linked for name in attnzoo.list_models(provider="attnzoo"))


# -- card text stays text --------------------------------------------------------------------------------------
class _Elements(html.parser.HTMLParser):
    """Every element of an HTML page (tag, attributes), the text inside each kind of element, and all the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.in_article: list[str] = []  # the tags of the elements that open inside an <article>
        self.inside: list[str] = []
        self.text: dict[str, str] = {}  # tag -> the text found anywhere inside an element of it; "*": all
        self.tables: list[list[int]] = []  # the cells of each row, table by table

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        if "article" in self.inside:
            self.in_article.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append(0)
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self.tables[-1][-1] += 1
        if tag not in ("img", "br", "hr", "input", "meta", "link", "mspace", "none", "mprescripts"):
            self.inside.append(tag)

    def handle_endtag(self, tag):
        if tag in self.inside:
            del self.inside[len(self.inside) - 1 - self.inside[::-1].index(tag) :]

    def handle_data(self, data):
        for tag in {*self.inside, "*"}:
            self.text[tag] = self.text.get(tag, "") + data


def _parsed(text: str) -> _Elements:
    parser = _Elements()
    parser.feed(text)
    parser.close()
    return parser


def _injected(page: _Elements, marker: str) -> list[str]:
    """What a hostile text made in ``page``: an attribute holding ``marker``, any event-handler attribute, any
    ``javascript:`` URL, a frame, object or svg in the article (the theme draws its icons as svg), a script or
    style whose text holds the marker."""
    found = []
    for tag, attrs in page.elements:
        for key, value in attrs.items():
            url = re.sub(r"[\s\x00-\x1f]", "", value).lower()
            if key.startswith("on") or url.startswith(("javascript:", "vbscript:", "data:text")) or marker in value:
                found.append(f"<{tag} {key}={value!r}>")
    found += [f"<{tag}>" for tag in page.in_article if tag in ("iframe", "object", "embed", "svg", "frame", "script")]
    found += [f"<{tag}> {page.text[tag]!r}" for tag in ("script", "style") if marker in page.text.get(tag, "")]
    return found


HOSTILE = [
    '<script>alert("PWN")</script>',
    '<img src=x onerror=alert("PWN")>',
    '<iframe src=javascript:alert("PWN")></iframe>',
    '[x](javascript:alert("PWN"))',
    '<a href="javascript:alert(PWN)">a</a>',
    '{: onclick="alert(PWN)" }',
    "<q, k>",
    "|i - j| <= w",
]


def test_card_text_renders_as_exactly_that_text_in_markdown():
    """Through the site's own Markdown extensions (tables, attr_list, snippets...), each hostile text of a card
    is the page's text and makes no element, attribute or link; a `|` keeps the row's cells."""
    markdown = pytest.importorskip("markdown")
    extensions = _mkdocs_yml()["markdown_extensions"]
    names = [e if isinstance(e, str) else next(iter(e)) for e in extensions]
    configs = {next(iter(e)): next(iter(e.values())) for e in extensions if isinstance(e, dict)}
    configs["pymdownx.snippets"] = {**configs["pymdownx.snippets"], "base_path": [str(ROOT / "docs")]}
    for text in HOSTILE:
        row = f"| a | b |\n|---|---|\n| {site._text(text)} | {site._code(text)} |\n"
        rendered = markdown.markdown(row, extensions=names, extension_configs=configs)
        page = _parsed(rendered)
        assert not _injected(page, "PWN"), (text, rendered)
        tags = [tag for tag, _ in page.elements]
        assert tags == ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td", "code"], (text, rendered)
        assert page.text["td"] == text + text and page.text["code"] == text, (text, rendered)


def test_a_formula_is_mathml_that_can_link_style_or_run_nothing():
    """latex2mathml alone passes \\href, \\style and \\text{<script>} through; the site refuses them, and a `<`
    in a formula stays text in the drawn math."""
    pytest.importorskip("latex2mathml")
    from attnzoo.errors import ConfigError

    drawn = _parsed(site.mathml(r"|i - j| < w, \quad a_{ij} = \mathrm{softmax}_j(s_{ij})"))
    assert drawn.elements[0][0] == "math" and "<" in drawn.text["mo"]
    assert not _injected(drawn, "PWN")
    hostiles = (r"\href{javascript:alert(PWN)}{x}", r"\style{background:url(PWN)}{x}", r"\text{<script>x</script>}")
    for hostile in hostiles:
        with pytest.raises(ConfigError, match="draws math only"):
            site.mathml(hostile)
    with pytest.raises(ConfigError, match="draws math only"):
        site.mathml(r"\unknowncommand{a}")  # latex2mathml would show it as raw text
    with pytest.raises(ConfigError, match="not LaTeX"):
        site.mathml(r"\left( a")


def test_every_built_in_card_states_a_formula_the_site_draws():
    """Each card's formula is drawn as MathML (no raw LaTeX left), one line per top-level `\\quad` part;
    sparsemax's states sparsemax and its exact zeros."""
    pytest.importorskip("latex2mathml")
    for name in attnzoo.list_models(provider="attnzoo"):
        formula = attnzoo.model_info(name).formula
        assert formula, f"{name}'s card states no formula"
        for part in site._parts(formula):
            drawn = _parsed(site.mathml(part))
            assert drawn.elements[0][0] == "math" and "\\" not in drawn.text["*"], (name, part)
    spec = attnzoo.model_info("sparsemax")
    math = _parsed("\n".join(site._formula(spec, site._factory(spec)))).text["math"]
    assert "sparsemax" in math and "=0 when" in math.replace("\xa0", " ")  # MathML text: no spaces


def test_a_layer_that_outputs_nan_gets_a_warning_instead_of_pictures(caplog):
    import torch

    class Broken(torch.nn.Module):
        def __init__(self, embed_dim: int = 4):
            super().__init__()
            self.proj = torch.nn.Linear(embed_dim, embed_dim)

        def forward(self, x, mask=None, return_attention=False):
            out = self.proj(x) * float("nan")
            return (out, torch.ones(x.shape[0], x.shape[1], x.shape[1])) if return_attention else out

    attnzoo.register("nan_out", Broken, config={"embed_dim": 16}, convention="sequence_to_sequence")
    with caplog.at_level("WARNING", logger="mkdocs.plugins.attnzoo"):
        page, images = site.variant_page("nan_out")
    assert images == {} and "No pictures: this layer outputs NaN or an infinity" in page
    assert any("nan_out" in r.getMessage() and "NaN" in r.getMessage() for r in caplog.records)


_EVIL_MODULE = """'<script>alert("PWN")</script> --8<-- "secret.txt"'

from attnzoo.layers.attention import Attention


def evil(embed_dim: '<img src=x onerror=alert("PWN")> | None' = None, num_heads: int = 2,
         note: str = '<script>alert("PWN")</script> |i - j|'):
    '''<script>alert("PWN")</script> [x](javascript:alert("PWN"))
--8<-- "secret.txt"
'''
    return Attention(embed_dim=embed_dim, num_heads=num_heads)
"""


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory):
    """The site built (mkdocs --strict, the project's hooks and Markdown extensions) from a registry of two
    hostile cards only, whose texts, factory docstrings, annotations and defaults are attacks; a canary file
    sits next to the docs folder, outside it."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("latex2mathml")
    import yaml

    top = tmp_path_factory.mktemp("hostile")
    (top / "docs").mkdir()
    for page, text in {"index": "# Home", "catalogue": "# Catalogue", "model-cards": "# Cards"}.items():
        (top / "docs" / f"{page}.md").write_text(f"{text}\n")  # the pages a generated page links to
    (top / "docs" / "layers.md").write_text("# Layers\n\n## Calling conventions\n")
    (top / "secret.txt").write_text("CANARY-SECRET\n")
    (top / "evil_layers.py").write_text(_EVIL_MODULE)
    (top / "registry").mkdir()
    card = {
        "factory": "evil_layers:evil",
        "reference": " ".join(HOSTILE[2:6]),
        "formula": r"0 < a_{ij} \le 1",
        "convention": "sequence_to_sequence",
        "example": {"num_heads": 2},
        "config": {"embed_dim": None, "num_heads": 2, "note": '<svg onload=alert("PWN")> |i - j|'},
        "exempt": {"causal": f'--8<-- "{top / "secret.txt"}" {HOSTILE[1]} |i - j|'},
    }
    summaries = {"evil": " ".join(HOSTILE[:2] + HOSTILE[6:]), "evil_include": '--8<-- "secret.txt"'}
    for name, summary in summaries.items():
        (top / "registry" / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "summary": summary, **card}))
    real = _mkdocs_yml()
    config = {key: real[key] for key in ("site_name", "theme", "markdown_extensions", "use_directory_urls")}
    config |= {"strict": True, "hooks": [str(ROOT / "docs" / "hooks" / "site.py")], "plugins": ["search"]}
    config["nav"] = [{"Home": "index.md"}, {"Variants": "variants/index.md"}]
    (top / "mkdocs.yml").write_text(yaml.safe_dump(config))
    paths = os.pathsep.join(p for p in (str(ROOT), str(top), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": paths, "ATTNZOO_REGISTRY_DIR": str(top / "registry"), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(top / "site")],
        cwd=top,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return top / "site"


@pytest.mark.slow
def test_a_site_built_from_hostile_cards_holds_their_text_and_nothing_they_ask_for(hostile_site):
    pages = {p.relative_to(hostile_site).as_posix(): p.read_text() for p in hostile_site.rglob("*.html")}
    assert {"variants/evil.html", "variants/evil_include.html", "variants/index.html"} <= set(pages)
    for path, text in pages.items():
        assert "CANARY-SECRET" not in text, f"{path} includes a file from outside docs/"
        page = _parsed(text)
        assert not _injected(page, "PWN"), f"{path}: {_injected(page, 'PWN')}"
    evil = _parsed(pages["variants/evil.html"])
    for text in HOSTILE:  # shown as text, not dropped
        assert text in evil.text["*"], text
    assert '--8<-- "secret.txt"' in _parsed(pages["variants/evil_include.html"]).text["*"]
    assert "<" in evil.text["math"], "the < of the card's formula is text in the drawn math"
    tables = evil.tables + _parsed(pages["variants/index.html"]).tables
    assert len(tables) >= 3 and all(len(set(rows)) == 1 for rows in tables), tables  # a | keeps the row's cells


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
        env={k: v for k, v in env.items() if k != "NO_MKDOCS_2_WARNING"},  # mkdocs.yml quiets the theme itself
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    print(f"mkdocs build --strict: {time.perf_counter() - started:.1f} s")
    (out.parent / "build.log").write_text(proc.stdout + proc.stderr)
    return out


@pytest.mark.slow
def test_the_strict_build_prints_no_notice_and_no_warning(built_site):
    """Built as .ci/run and docs/index.md build it, with no NO_MKDOCS_2_WARNING in the environment: no
    end-of-life notice of the theme, no warning, and the API's signatures formatted (ruff, of the docs extra,
    is there). Every line is one of the build's own (mkdocs's levels, or the variant pages' timing)."""
    log = (built_site.parent / "build.log").read_text()
    for unwanted in ("end of life", "Zensical", "NO_MKDOCS_2_WARNING", "Formatting signatures requires", "WARNING"):
        assert unwanted not in log, log[-3000:]
    strays = [line for line in log.splitlines() if line.strip() and not line.startswith(("INFO", "DEBUG"))]
    assert not strays, strays[:10]


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


def _nav_pages(page, start: str, base: str | None = None) -> list[str]:
    """The pages the primary navigation links to, from the page ``start``, under ``base`` (default: start)."""
    base = base or start
    page.goto(start)
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
            assert f"{served}variants/gqa_rope_window.html" in nav and f"{served}models/g2p_seq2seq.cmudict.html" in nav
            links, pictures, unreadable = {}, 0, []
            for url in nav:
                page.goto(url, wait_until="load")
                links[url] = page.eval_on_selector_all("article a[href]", "els => els.map(e => e.href)")
                if "/variants/" in url or "/models/" in url:
                    pictures += _pictures_load(page, url)
                unreadable += _readable(page, url)
            assert not errors, "console errors:\n" + "\n".join(errors[:20])
            assert not unreadable, "\n".join(unreadable[:30])
            assert pictures >= 2 * len(attnzoo.list_models()), f"only {pictures} pictures on the variant pages"
            broken = _check_links(links, served)
            assert not broken, "broken internal links:\n" + "\n".join(broken[:30])
            for path, name in (
                ("", "home"),
                ("variants/gqa_rope_window.html", "variant"),
                ("models/bilstm_labelwise.wordnet.html", "model"),
            ):
                page.goto(served + path, wait_until="load")
                page.screenshot(path=str(ARTIFACTS / f"site-{name}.png"), full_page=True)
        finally:
            browser.close()


_READABLE = """() => {
    const article = document.querySelector("article");
    const width = article.getBoundingClientRect().width;
    const tables = [...article.querySelectorAll("table")].map(t => {
        const header = t.querySelectorAll("thead th").length;
        const widest = Math.max(0, ...[...t.querySelectorAll("tbody tr")].map(r => r.children.length));
        return [header, widest, Math.round(t.getBoundingClientRect().width - width)];
    });
    const formulas = [...article.querySelectorAll(".formula math")].map(m => {
        const box = m.getBoundingClientRect();
        return [box.width, box.height, m.textContent.includes("\\\\") || m.textContent.includes("$")];
    });
    return {tables, formulas, slashBar: article.innerText.includes("\\\\|"), text: article.innerText};
}"""


def _readable(page, url: str) -> list[str]:
    """What a reader cannot read on ``url``: a table row with more cells than its header, a table wider than
    the article, a literal ``\\|``, a variant page's formula not drawn (no MathML, an empty box, raw LaTeX)."""
    found = page.evaluate(_READABLE)
    problems = [f"{url}: a row of {w} cells under {h} headers" for h, w, _ in found["tables"] if w > h > 0]
    problems += [f"{url}: a table {over} px wider than the article" for _, _, over in found["tables"] if over > 1]
    problems += [f"{url}: a literal \\| in the text"] * found["slashBar"]
    if "/variants/" in url and not url.endswith("index.html"):
        drawn = [f for f in found["formulas"] if f[0] > 20 and f[1] > 5 and not f[2]]
        if not drawn:
            problems.append(f"{url}: no formula drawn ({found['formulas']})")
    return problems


@pytest.mark.slow
def test_the_site_opens_from_disk(built_site):
    """Opened as files (file://, no server), every link of the navigation reaches its page, not a folder, and
    every page reads as it does served: its pictures load, its formula is drawn, its tables keep their cells."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    home = (built_site / "index.html").as_uri()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            base = home.rsplit("/", 1)[0] + "/"
            nav = _nav_pages(page, home, base)
            assert len(nav) >= len(attnzoo.list_models()) + 10, nav[:5]
            lost, folders = [], set()
            for url in nav:
                page.goto(url, wait_until="load")
                if not url.endswith(".html") or not page.query_selector("article h1"):
                    lost.append(f"{url}: {page.title()!r}")
                else:  # and read as when served: pictures, formulas, tables
                    lost += _pictures_problems(page, url) + _readable(page, url)
                # every link of the page (the theme's logo and home link included) lands on a file
                for link in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
                    target = urllib.parse.urldefrag(link)[0]
                    if target.startswith("file://") and not Path(urllib.request.url2pathname(target[7:])).is_file():
                        folders.add(f"{url} -> {link}")
            assert not lost, "from disk:\n" + "\n".join(lost[:20])
            assert not folders, "links that land on no file from disk:\n" + "\n".join(sorted(folders)[:20])
        finally:
            browser.close()


def _search_finds(page, base: str, name: str) -> None:
    page.goto(base, wait_until="load")
    page.locator("input.md-search__input").fill(name)  # as a reader types into the header's search box
    page.wait_for_selector(".md-search-result__item", timeout=20000)
    hits = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(e => e.href)")
    assert any(f"variants/{name}.html" in hit for hit in hits), f"search for {name!r} found {hits[:5]}"


def _pictures_load(page, url: str) -> int:
    """Every <img> of the article loaded with a non-zero natural size; returns how many there are."""
    page.wait_for_load_state("load")
    sizes = page.eval_on_selector_all(
        "article img", "els => els.map(e => [e.getAttribute('src'), e.complete, e.naturalWidth, e.naturalHeight])"
    )
    bad = [s for s in sizes if not (s[1] and s[2] > 0 and s[3] > 0)]
    assert not bad, f"{url}: pictures that did not load: {bad}"
    return len(sizes)


def _pictures_problems(page, url: str) -> list[str]:
    try:
        _pictures_load(page, url)
    except AssertionError as error:
        return [str(error)]
    return []
