"""Weights from anywhere, against a real HTTP server on 127.0.0.1 started and stopped by the tests.

The server supports Range requests and injects faults on demand: a connection dropped after some
bytes, corrupted bytes, 404, a slow body. It records every request, so the tests can say how many
downloads happened and which ranges were asked for. Nothing leaves this machine.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError, WeightsError

from .conftest import ROOT


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.faults: dict[str, object] = {}
        self.headers_seen: list[dict[str, str]] = []
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 - the http.server name
        server: Server = self.server
        with server.lock:
            server.requests.append((self.path, self.headers.get("Range")))
            server.headers_seen.append(dict(self.headers))
            if len(server.requests) > 200:  # bounded: a runaway client cannot keep a test alive
                self.send_error(429)
                return
        redirect = server.faults.get("redirect")
        if redirect:
            self.send_response(302)
            self.send_header("Location", str(redirect))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if server.faults.get("endless") or server.faults.get("bad_chunks") or server.faults.get("drip"):
            self._hostile_body(server)
            return
        data = server.files.get(self.path)
        if data is None or server.faults.get("404"):
            self.send_error(404)
            return
        if server.faults.get("corrupt"):
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        start = 0
        ranged = self.headers.get("Range")
        if ranged and not server.faults.get("no_range"):
            start = int(ranged.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        drop = server.faults.pop("drop_after", None)
        if drop is not None:
            self.wfile.write(body[:drop])
            self.wfile.flush()
            self.connection.shutdown(2)  # the connection dies mid-body
            return
        delay = server.faults.get("slow")
        for i in range(0, len(body), 1 << 16):
            if delay:
                time.sleep(delay)
            self.wfile.write(body[i : i + (1 << 16)])

    def _hostile_body(self, server):
        """Bodies a hostile server sends, each bounded so that a broken client cannot hang the test."""
        if server.faults.get("bad_chunks"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"10\r\nonly five\r\nzz\r\n")  # a chunk shorter than it says, then garbage
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        self.send_response(200)
        if server.faults.get("endless"):
            self.send_header("Content-Length", str(50 << 30))  # claims 50 GiB
        self.end_headers()
        deadline = time.monotonic() + 20
        block = b"x" * (1 << 16) if server.faults.get("endless") else b"x"
        try:
            while time.monotonic() < deadline:
                self.wfile.write(block)
                self.wfile.flush()
                if server.faults.get("drip"):
                    time.sleep(0.5)
        except OSError:  # the client gave up, as it should
            return


@pytest.fixture
def server():
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_HOME", str(tmp_path / "home"))
    for name in ("ATTNZOO_OFFLINE", "HF_HUB_OFFLINE", "ATTNZOO_DOWNLOAD_TIMEOUT", "ATTNZOO_DOWNLOAD_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def _weights(tmp_path, seed=0, labels=500, hidden=300):
    """A labelwise_batched weights file with attnzoo metadata (large enough to stream in several blocks)."""
    torch.manual_seed(seed)
    model = attnzoo.create("labelwise_batched", num_labels=labels, hidden_size=hidden)
    folder = attnzoo.save(model, tmp_path / f"src{seed}")
    data = (folder / "model.safetensors").read_bytes()
    return model, data, hashlib.sha256(data).hexdigest()


def _register(name, url, digest, labels=500, hidden=300):
    attnzoo.register(
        name,
        factory="attnzoo.layers.labelwise:LabelwiseAttentionBatched",
        convention="sequence_to_labels",
        config={"num_labels": "???", "hidden_size": None},
        weights={"remote": {"url": url, "sha256": digest, "config": {"num_labels": labels, "hidden_size": hidden}}},
    )


def _gets(server, path):
    return [r for r in server.requests if r[0] == path]


def test_a_url_tag_downloads_once_into_the_cache_and_then_needs_no_network(server, tmp_path, home):
    model, data, digest = _weights(tmp_path)
    server.files["/w.safetensors"] = data
    _register("remote_lw", f"{server.base}/w.safetensors", digest)
    loaded = attnzoo.create("remote_lw", pretrained=True)
    assert torch.equal(loaded.Wa, model.Wa)
    cached = home / "weights" / digest / "w.safetensors"
    assert cached.is_file() and json.loads((cached.parent / "source.json").read_text())["name"] == "remote_lw.remote"
    server.files.clear()  # gone from the server: the cache answers, online, without a request
    before = len(server.requests)
    attnzoo.create("remote_lw", pretrained=True)
    assert len(server.requests) == before


def test_offline_with_an_empty_cache_names_the_source_the_cache_and_the_command(server, tmp_path, monkeypatch):
    _, data, digest = _weights(tmp_path)
    _register("remote_lw", f"{server.base}/w.safetensors", digest)
    for variable in ("ATTNZOO_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(variable, "1")
        with pytest.raises(
            WeightsError,
            match=r"offline.*source is http://127\.0\.0\.1.*cache path .*w\.safetensors"
            r".*attnzoo download remote_lw\.remote",
        ):
            attnzoo.create("remote_lw", pretrained=True)
        monkeypatch.delenv(variable)
    assert server.requests == []


def test_corrupted_bytes_never_enter_the_cache(server, tmp_path, home):
    _, data, digest = _weights(tmp_path)
    server.files["/w.safetensors"] = data
    server.faults["corrupt"] = True
    _register("remote_lw", f"{server.base}/w.safetensors", digest)
    with pytest.raises(WeightsError, match=rf"sha256 [0-9a-f]{{64}}, but the card says {digest}; nothing was cached"):
        attnzoo.create("remote_lw", pretrained=True)
    assert not any(
        p.is_file() and not p.name.startswith(".") for p in (home / "weights").rglob("*") if p.name != "source.json"
    )


def test_an_interrupted_download_resumes_with_a_range_request(server, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "2")
    model, data, digest = _weights(tmp_path)
    server.files["/w.safetensors"] = data
    server.faults["drop_after"] = 200_000
    _register("remote_lw", f"{server.base}/w.safetensors", digest)
    loaded = attnzoo.create("remote_lw", pretrained=True)
    assert torch.equal(loaded.Wo, model.Wo)
    ranges = [r for _, r in _gets(server, "/w.safetensors")]
    assert ranges[0] is None and ranges[1] == "bytes=200000-", ranges


def test_a_server_without_range_support_restarts_from_zero(server, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "2")
    _, data, digest = _weights(tmp_path)
    server.files["/w.safetensors"] = data
    server.faults.update(drop_after=150_000, no_range=True)
    _register("remote_lw", f"{server.base}/w.safetensors", digest)
    attnzoo.create("remote_lw", pretrained=True)  # 200 instead of 206: the partial file is discarded


def test_404_and_a_slow_server_fail_clearly_and_keep_what_arrived(server, tmp_path, monkeypatch, home):
    _, data, digest = _weights(tmp_path)
    _register("remote_lw", f"{server.base}/missing.safetensors", digest)
    with pytest.raises(WeightsError, match="HTTP 404"):
        attnzoo.create("remote_lw", pretrained=True)
    assert len(server.requests) == 1  # no retries for a missing file

    monkeypatch.setenv("ATTNZOO_DOWNLOAD_TIMEOUT", "0.2")
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "1")
    server.files["/slow.safetensors"] = data
    server.faults["slow"] = 0.5
    _register("slow_lw", f"{server.base}/slow.safetensors", digest)
    start = time.monotonic()
    with pytest.raises(WeightsError, match="after 2 attempts.*next attempt resumes"):
        attnzoo.create("slow_lw", pretrained=True)
    assert time.monotonic() - start < 20
    server.faults.clear()
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_TIMEOUT", "30")
    attnzoo.create("slow_lw", pretrained=True)  # resumes from the bytes kept


def test_file_urls_work(tmp_path):
    model, data, digest = _weights(tmp_path)
    source = tmp_path / "served.safetensors"
    source.write_bytes(data)
    _register("file_lw", source.as_uri(), digest)
    assert torch.equal(attnzoo.create("file_lw", pretrained=True).Wa, model.Wa)


FETCHER = """
import sys, attnzoo
attnzoo.register("remote_lw", factory="attnzoo.layers.labelwise:LabelwiseAttentionBatched",
                 config={"num_labels": "???", "hidden_size": None},
                 weights={"remote": {"url": sys.argv[1], "sha256": sys.argv[2],
                                     "config": {"num_labels": 500, "hidden_size": 300}}})
print(float(attnzoo.create("remote_lw", pretrained=True).Wa.sum()))
"""


@pytest.mark.slow
def test_four_processes_fetching_at_once_download_once(server, tmp_path, home):
    _, data, digest = _weights(tmp_path)
    server.files["/w.safetensors"] = data
    server.faults["slow"] = 0.02  # long enough for the four to meet
    env = {**os.environ, "ATTNZOO_HOME": str(home), "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FETCHER, f"{server.base}/w.safetensors", digest],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [o[1][-500:] for o in outs]
    assert len({o[0] for o in outs}) == 1
    assert len(_gets(server, "/w.safetensors")) == 1
    assert [p.name for p in (home / "weights" / digest).iterdir() if not p.name.startswith(".")] in (
        ["source.json", "w.safetensors"],
        ["w.safetensors", "source.json"],
    )


def _cli(*args, env=None):
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "attnzoo", *args], capture_output=True, text=True, env=full, cwd=ROOT, timeout=300
    )


@pytest.mark.slow
def test_download_then_offline_and_the_cache_commands(server, tmp_path, home):
    """A card in a plugin-like folder with a url tag: pre-fetch, go offline, list, clear."""
    model, data, digest = _weights(tmp_path)
    server.files["/w.safetensors"] = data
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "remote_card.yaml").write_text(
        "name: remote_card\nfactory: attnzoo.layers.labelwise:LabelwiseAttentionBatched\n"
        "convention: sequence_to_labels\n"
        "config:\n  num_labels: ???\n  hidden_size: null\n"
        f"weights:\n  v1:\n    url: {server.base}/w.safetensors\n    sha256: {digest}\n"
        "    config: {num_labels: 500, hidden_size: 300}\n"
    )
    env = {"ATTNZOO_HOME": str(home), "ATTNZOO_REGISTRY_DIR": str(cards)}
    assert _cli("verify", env=env).stdout.count("not cached") == 1
    proc = _cli("download", "remote_card.v1", env=env)
    assert proc.returncode == 0 and "cached" in proc.stdout, proc.stderr
    offline = {**env, "ATTNZOO_OFFLINE": "1"}
    proc = _cli("create", "remote_card.v1", "--pretrained", env=offline)
    assert proc.returncode == 0, proc.stderr
    assert "ok (cached)" in _cli("verify", env=offline).stdout
    assert _cli("cache", "path", env=env).stdout.strip() == str(home)
    listed = json.loads(_cli("cache", "list", "--json", env=env).stdout)
    assert [(e["name"], e["sha256"], e["bytes"]) for e in listed] == [("remote_card.v1", digest, len(data))]
    assert "removed 1" in _cli("cache", "clear", "remote_card*", env=env).stdout
    proc = _cli("create", "remote_card.v1", "--pretrained", env=offline)
    assert proc.returncode == 1 and "attnzoo download remote_card.v1" in proc.stderr


def test_a_saved_folder_on_the_hub_and_an_hf_hub_tag(server, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", server.base)
    model = attnzoo.create("laat", num_labels=4, hidden_size=6, attention_size=3)
    folder = attnzoo.save(model, tmp_path / "pushed", model_card=True)
    readme = (folder / "README.md").read_text()
    assert "library_name: attnzoo" in readme and 'attnzoo.create("hf-hub:ORG/REPO")' in readme
    for name in ("config.yaml", "model.safetensors"):
        server.files[f"/org/repo/resolve/main/{name}"] = (folder / name).read_bytes()
    again = attnzoo.create("hf-hub:org/repo")
    x = torch.randn(2, 5, 6)
    assert torch.equal(again(x), model(x))
    # a tag whose bytes live on the Hub
    data = (folder / "model.safetensors").read_bytes()
    server.files["/org/repo/resolve/v2/weights.safetensors"] = data
    attnzoo.register(
        "hub_laat",
        factory="attnzoo.layers.label_attention:LAATHead",
        config={"num_labels": "???"},
        weights={
            "v2": {
                "hf_hub": "org/repo@v2",
                "filename": "weights.safetensors",
                "sha256": hashlib.sha256(data).hexdigest(),
                "config": {"num_labels": 4, "hidden_size": 6, "attention_size": 3},
            }
        },
    )
    assert torch.equal(attnzoo.create("hub_laat", pretrained=True)(x), model(x))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # both come from the cache now
    assert torch.equal(attnzoo.create("hf-hub:org/repo")(x), model(x))


def test_without_huggingface_hub_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ConfigError, match=r"pip install 'attnzoo\[hub\]'"):
        attnzoo.create("hf-hub:org/repo")


def test_a_tag_needs_exactly_one_source_and_a_digest():
    for weights in (
        {"sha256": "0" * 64},
        {"file": "a.safetensors", "url": "https://x/a.safetensors", "sha256": "0" * 64},
        {"url": "ftp://x/a", "sha256": "0" * 64},
        {"url": "https://x/a.safetensors"},
    ):
        with pytest.raises(ConfigError):
            attnzoo.register("bad_source", factory="collections:OrderedDict", weights={"t": weights})


# -- a hostile server, a hostile cache ----------------------------------------------------------------------
def _serving():
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return srv, thread


def test_credentials_go_only_to_the_host_they_were_meant_for(server, tmp_path, monkeypatch):
    """A redirect to another host (here another port of 127.0.0.1) arrives without the Authorization header."""
    from attnzoo.io.sources import _download

    other, thread = _serving()
    try:
        other.files["/w.safetensors"] = b"abc" * 100
        server.faults["redirect"] = f"{other.base}/w.safetensors"
        monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "0")
        _download(f"{server.base}/w.safetensors", {"Authorization": "Bearer hf_secret"}, tmp_path / "w.part", "w")
        assert (tmp_path / "w.part").read_bytes() == b"abc" * 100
        assert server.headers_seen[0].get("Authorization") == "Bearer hf_secret"  # its own host: sent
        assert all("hf_secret" not in json.dumps(h) for h in other.headers_seen)  # another host: never
    finally:
        other.shutdown()
        other.server_close()
        thread.join(timeout=10)


def test_a_redirect_to_ftp_is_refused(server, tmp_path, monkeypatch):
    from attnzoo.io.sources import _download

    server.faults["redirect"] = "ftp://127.0.0.1/w.safetensors"
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "0")
    with pytest.raises(WeightsError, match="redirects to ftp://"):
        _download(f"{server.base}/w.safetensors", {}, tmp_path / "w.part", "w")


def test_a_body_larger_than_the_card_says_stops_and_is_not_kept(server, tmp_path, monkeypatch):
    from attnzoo.io.sources import _download

    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "0")
    server.faults["endless"] = True
    started = time.monotonic()
    with pytest.raises(WeightsError, match="the card says the file has 1,000"):
        _download(f"{server.base}/w", {}, tmp_path / "w.part", "w", size=1000)  # declared 50 GiB: refused at once
    assert not (tmp_path / "w.part").exists() and time.monotonic() - started < 10


def test_a_dripping_server_is_a_stalled_download_not_a_hang(server, tmp_path, monkeypatch):
    from attnzoo.io.sources import _download

    monkeypatch.setenv("ATTNZOO_DOWNLOAD_TIMEOUT", "1")
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "0")
    server.faults["drip"] = True  # one byte every 0.5 s: each read is within the timeout
    started = time.monotonic()
    with pytest.raises(WeightsError, match="stalled"):
        _download(f"{server.base}/w", {}, tmp_path / "w.part", "w")
    assert time.monotonic() - started < 10


def test_a_malformed_chunked_body_is_a_weights_error(server, tmp_path, monkeypatch):
    from attnzoo.io.sources import _download

    monkeypatch.setenv("ATTNZOO_DOWNLOAD_RETRIES", "0")
    server.faults["bad_chunks"] = True
    with pytest.raises(WeightsError, match="cannot download"):
        _download(f"{server.base}/w", {}, tmp_path / "w.part", "w")


def test_links_planted_in_the_cache_are_never_written_through(server, tmp_path, home):
    _, data, digest = _weights(tmp_path)
    server.files["/m.safetensors"] = data
    _register("planted", f"{server.base}/m.safetensors", digest)
    folder = home / "weights" / digest
    folder.mkdir(parents=True)
    victim = tmp_path / "precious.txt"
    victim.write_text("the user's own file")
    (folder / "m.safetensors.part").symlink_to(victim)
    with pytest.raises(WeightsError, match="symbolic link"):
        attnzoo.create("planted", pretrained=True)
    assert victim.read_text() == "the user's own file"
    (folder / "source.json").symlink_to(victim)  # planted where the marker goes
    attnzoo.create("planted", pretrained=True)  # the .part link was removed; this download succeeds
    assert victim.read_text() == "the user's own file" and not (folder / "source.json").is_symlink()


def test_cache_clear_removes_only_what_the_cache_made(server, tmp_path, home, monkeypatch):
    from attnzoo.io.sources import clear_cache

    _, data, digest = _weights(tmp_path)
    server.files["/m.safetensors"] = data
    _register("cached", f"{server.base}/m.safetensors", digest)
    attnzoo.create("cached", pretrained=True)
    mine = home / "weights" / "paper"  # a user's own folder that happens to sit there
    mine.mkdir()
    (mine / "draft.tex").write_text("\\section{}")
    sha_like = home / "weights" / ("a" * 64)  # named like an entry, but not one the cache made
    sha_like.mkdir()
    (sha_like / "notes.txt").write_text("mine too")
    removed = clear_cache()
    assert len(removed) == 1 and digest in removed[0]
    assert (mine / "draft.tex").exists() and (sha_like / "notes.txt").exists()
    # the weights root as a link to the user's folder: only cache entries inside it would go
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    monkeypatch.setenv("ATTNZOO_HOME", str(tmp_path / "home2"))
    (tmp_path / "home2").mkdir()
    (tmp_path / "home2" / "weights").symlink_to(elsewhere)
    assert clear_cache() == [] and (elsewhere / "keep.txt").read_text() == "keep"


def test_a_captive_portal_page_does_not_replace_the_cached_hub_config(server, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", server.base)
    model = attnzoo.create("laat", num_labels=4, hidden_size=6, attention_size=3)
    folder = attnzoo.save(model, tmp_path / "pushed")
    for name in ("config.yaml", "model.safetensors"):
        server.files[f"/org/repo/resolve/main/{name}"] = (folder / name).read_bytes()
    attnzoo.create("hf-hub:org/repo")  # cached now
    server.files["/org/repo/resolve/main/config.yaml"] = b"<html><body>Log in to the hotel wifi</body></html>"
    with pytest.warns(UserWarning, match="using the copy cached"):
        again = attnzoo.create("hf-hub:org/repo")
    x = torch.randn(2, 5, 6)
    assert torch.equal(again(x), model(x))


@pytest.mark.parametrize(
    "weights",
    [
        {"hf_hub": "org/repo", "filename": ".."},
        {"hf_hub": "org/repo", "filename": "."},
        {"hf_hub": "org/repo", "filename": "a/../../b.safetensors"},
        {"url": "https://127.0.0.1/w%00.safetensors"},
    ],
)
def test_hostile_sources_in_a_card_are_refused_when_registered(weights):
    with pytest.raises(ConfigError):
        attnzoo.register(
            "bad_source",
            factory="attnzoo.layers.labelwise:LabelwiseAttention",
            config={"num_labels": 2},
            weights={"t": {**weights, "sha256": "0" * 64}},
        )


# -- issue 40: the probes' remote sources ---------------------------------------------------------------------
def test_a_hub_config_trickled_a_byte_at_a_time_ends_at_the_download_timeout(server, monkeypatch):
    """The config read had a fixed 30 s per read, which a trickle never trips; ATTNZOO_DOWNLOAD_TIMEOUT now
    bounds the whole read."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", server.base)
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_TIMEOUT", "2")
    server.faults["drip"] = True  # a byte every 0.5 s, for up to 20 s
    started = time.monotonic()
    with pytest.raises(WeightsError, match=r"cannot fetch config.yaml .*TimeoutError|in 2 s"):
        attnzoo.create("hf-hub:org/repo")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("value", ["-1", "nan", "0", "inf", "1e400", "soon"])
def test_a_download_timeout_that_is_no_number_of_seconds_is_a_config_error(server, tmp_path, monkeypatch, value):
    _, data, digest = _weights(tmp_path, labels=4, hidden=3)
    server.files["/w.safetensors"] = data
    _register("remote_lw", f"{server.base}/w.safetensors", digest, labels=4, hidden=3)
    monkeypatch.setenv("ATTNZOO_DOWNLOAD_TIMEOUT", value)
    with pytest.raises(ConfigError, match=rf"ATTNZOO_DOWNLOAD_TIMEOUT must be a number of seconds above 0 .*{value}"):
        attnzoo.create("remote_lw", pretrained=True)
    assert server.requests == []


def test_a_folder_where_the_partial_download_goes_is_named_not_a_raw_errno(server, tmp_path, home):
    _, data, digest = _weights(tmp_path, labels=4, hidden=3)
    server.files["/m.safetensors"] = data
    _register("blocked", f"{server.base}/m.safetensors", digest, labels=4, hidden=3)
    (home / "weights" / digest / "m.safetensors.part").mkdir(parents=True)
    with pytest.raises(WeightsError, match=r"m.safetensors.part is a folder, not a file attnzoo's cache wrote"):
        attnzoo.create("blocked", pretrained=True)


def test_a_cached_file_replaced_by_a_link_is_fetched_again_and_by_another_model_says_cache_clear(
    server, tmp_path, home
):
    model, data, digest = _weights(tmp_path, labels=4, hidden=3)
    server.files["/m.safetensors"] = data
    _register("cached", f"{server.base}/m.safetensors", digest, labels=4, hidden=3)
    attnzoo.create("cached", pretrained=True)
    cached = home / "weights" / digest / "m.safetensors"
    _, other, _ = _weights(tmp_path, seed=1, labels=4, hidden=3)  # another valid model of the same shape
    elsewhere = tmp_path / "other.safetensors"
    elsewhere.write_bytes(other)
    cached.unlink()
    cached.symlink_to(elsewhere)  # a planted link: the cache makes none, so it is dropped and fetched again
    assert torch.equal(attnzoo.create("cached", pretrained=True).Wa, model.Wa) and not cached.is_symlink()
    cached.write_bytes(other)  # the file itself replaced
    with pytest.raises(WeightsError, match=rf"attnzoo's cached copy .*`attnzoo cache clear {digest}`"):
        attnzoo.create("cached", pretrained=True)
    proc = _cli("cache", "clear", digest, env={"ATTNZOO_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    assert torch.equal(attnzoo.create("cached", pretrained=True).Wa, model.Wa)


@pytest.mark.parametrize("repo", ["../..", "org/..", "org/re--po", ".hidden/x", "org/repo-"])
def test_a_hub_name_the_hub_cannot_have_is_a_config_error(repo):
    with pytest.raises(ConfigError, match=r"expected hf-hub:org/repo"):
        attnzoo.create(f"hf-hub:{repo}")
