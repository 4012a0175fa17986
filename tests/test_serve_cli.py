"""`loom serve` as a user meets it: a real subprocess serving the real embedded model on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from machine import scaled

from thoughtloom.llm.models import QWEN_CODER_05B, parts_installed

LOOM = [sys.executable, "-m", "thoughtloom"]
ROOT = Path(__file__).parents[1]
SMALL = ["--ctx", "512", "--threads", "1"]


def needs_model(test: Any) -> Any:
    """Mark a test that runs the default embedded model."""
    skip = pytest.mark.skipif(not parts_installed(QWEN_CODER_05B), reason="the qwen extra is not installed")
    return pytest.mark.local_model(skip(test))


def serve(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start `loom serve --port 0` and read the base URL from its one line."""
    proc = subprocess.Popen([*LOOM, "serve", "--port", "0", *SMALL, *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    line = proc.stdout.readline() if proc.stdout else ""
    # No line means it exited: then its stderr says why.
    assert line.startswith("serving local:qwen2.5-coder-0.5b at http://127.0.0.1:"), line or proc.communicate()[1]
    return proc, line.split()[-1]


def post(url: str, body: dict[str, Any], timeout: float = 120, headers: dict[str, str] | None = None) -> dict[str, Any]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url, json.dumps(body).encode(), sent)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C, then the exit code and what it printed on stderr."""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


@needs_model
def test_serve_prints_its_url_answers_and_exits_cleanly_on_ctrl_c() -> None:
    proc, url = serve()
    try:
        reply = post(f"{url}/completions", {"prompt": "Country: Japan\nCapital:", "max_tokens": 3, "temperature": 0})
    finally:
        code, err = stop(proc)
    assert reply["choices"][0]["text"].strip().startswith("Tokyo")
    assert (code, err) == (0, "")


@needs_model
def test_ctrl_c_while_generating_exits_cleanly_and_promptly() -> None:
    proc, url = serve()
    failures: list[BaseException] = []

    def ask() -> None:
        try:
            post(f"{url}/completions", {"prompt": "Write a long story.", "n": 4, "max_tokens": 400})
        except (urllib.error.URLError, ConnectionError) as exc:  # the server went away: expected
            failures.append(exc)

    client = threading.Thread(target=ask)
    client.start()
    time.sleep(1.0)  # generating now
    start = time.monotonic()
    code, err = stop(proc)
    client.join(30)
    assert (code, err) == (0, "")
    assert time.monotonic() - start < 10  # the generation stopped at its next token, not after 4 x 400
    assert failures  # the client got no answer rather than a partial one


def test_serving_a_busy_port_is_a_one_line_error_before_the_model_loads() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*LOOM, "serve", "--port", str(port), *SMALL], cwd=ROOT, capture_output=True,
                              text=True, timeout=scaled(120), check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"loom: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_serving_a_remote_model_is_a_one_line_error() -> None:
    proc = subprocess.run([*LOOM, "serve", "--model", "openai:gpt-4o-mini"], cwd=ROOT, capture_output=True, text=True,
                          timeout=scaled(60), check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "serves an embedded model" in proc.stderr


@needs_model
def test_with_an_api_key_from_the_environment_every_request_needs_it() -> None:
    key = "k-7f3a9c-never-printed"
    proc, url = serve(env={**os.environ, "THOUGHTLOOM_SERVE_KEY": key})
    ask = {"prompt": "Country: Japan\nCapital:", "max_tokens": 3, "temperature": 0}
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(f"{url}/completions", ask)
        refusal = refused.value.read()
        reply = post(f"{url}/completions", ask, headers={"Authorization": f"Bearer {key}"})
    finally:
        code, err = stop(proc)
    assert refused.value.code == 401 and json.loads(refusal)["error"]["code"] == "invalid_api_key"
    assert reply["choices"][0]["text"].strip().startswith("Tokyo")
    assert code == 0 and err == "loom: requests need the API key (Authorization: Bearer KEY)\n"
    assert key.encode() not in refusal


def test_an_origin_that_is_not_one_is_a_one_line_error_before_the_model_loads() -> None:
    proc = subprocess.run([*LOOM, "serve", "--allow-origin", "http://localhost:3000/app", *SMALL], cwd=ROOT,
                          capture_output=True, text=True, timeout=scaled(60), check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--allow-origin" in proc.stderr and "scheme://host" in proc.stderr


def test_an_unusable_api_key_is_a_one_line_error_that_does_not_show_it() -> None:
    env = {**os.environ, "THOUGHTLOOM_SERVE_KEY": "my secret key\n"}
    proc = subprocess.run([*LOOM, "serve", *SMALL], cwd=ROOT, capture_output=True, text=True, timeout=scaled(60),
                          check=False, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "THOUGHTLOOM_SERVE_KEY" in proc.stderr and "secret" not in proc.stderr
