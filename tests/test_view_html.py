"""`loom view RUN`: one self-contained HTML page of a stored run.

Runs are stored by real searches on the scripted fake (a grounded task whose refuted thought is
hostile markup, and a controlled search that runs out of tokens), then written by `loom view` and
read back: structurally (the page's JSON, its tags, its CSP) and in a real headless Chromium,
opened from the file with no network, where a click on a node must show its grounding evidence.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from machine import scaled
from test_controller_scenarios import ScriptTask, by_depth, padded_child, scripted
from test_search_grounding import CONFIG, Guesses, WordGrounder, model

from thoughtloom.api import asolve
from thoughtloom.cli.main import main
from thoughtloom.graph import NodeKind, NodeStatus, ThoughtGraph
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.search.config import SearchConfig
from thoughtloom.store.runs import load_calls, open_run
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.views.html import RunPicture, to_html

HOSTILE = "</script><img src=x onerror=alert(1)>"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def grounded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stored run whose refuted thought (and its grounding evidence) is hostile markup."""
    path = tmp_path_factory.mktemp("view") / "store.db"
    store = SQLiteStore(str(path))
    try:
        asyncio.run(asolve("p", task=Guesses(), model=model({"guess after": [HOSTILE, "right"]}), config=CONFIG,
                           grounders=[WordGrounder({"right"})], store=store, run_id="grounded1"))
    finally:
        store.close()
    return path


def view(store: Path, run: str, out: Path) -> dict[str, Any]:
    """`loom view` in process; the page's embedded run data."""
    assert main(["view", run, "--store", str(store), "--out", str(out)]) == 0
    return page_data(out.read_text(encoding="utf-8"))


def page_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.DOTALL)
    assert match is not None
    return json.loads(match.group(1))


def test_view_writes_every_node_of_the_run_with_its_best_path(grounded_store: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = view(grounded_store, "grounded", tmp_path / "run.html")
    with SQLiteStore(str(grounded_store)) as store:
        run = open_run(store, "grounded1")
    assert [n["id"] for n in data["nodes"]] == list(range(run.head["nodes"]))
    assert [n["id"] for n in data["nodes"] if n["best"]] == run.result["best_path"]
    assert data["run"]["answer"] == "right" and data["run"]["stopped"] == "goal_reached"
    assert "wrote run grounded1 (4 nodes)" in capsys.readouterr().out


def test_without_out_the_page_is_named_after_the_run_in_the_current_folder(
        grounded_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["view", "grounded", "--store", str(grounded_store)]) == 0
    assert (tmp_path / "grounded1.html").is_file()


def test_the_refuted_thought_carries_its_grounding_evidence(grounded_store: Path, tmp_path: Path) -> None:
    data = view(grounded_store, "grounded1", tmp_path / "run.html")
    refuted = next(n for n in data["nodes"] if n["content"] == HOSTILE)
    assert refuted["sections"]["grounding"]["verified"] is False
    assert refuted["sections"]["grounding"]["evidence"] == f"{HOSTILE} is bad"


def test_a_hostile_thought_is_data_never_markup(grounded_store: Path, tmp_path: Path) -> None:
    view(grounded_store, "grounded1", tmp_path / "run.html")
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    assert "<img" not in page and "</script><img" not in page
    assert page.count("</script>") == 2  # the data block's and the script's own: nothing closes them early


def test_the_page_loads_nothing_from_outside(grounded_store: Path, tmp_path: Path) -> None:
    view(grounded_store, "grounded1", tmp_path / "run.html")
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    tags = re.findall(r"<([a-zA-Z][\w-]*)([^>]*)>", page)
    assert {name for name, _ in tags} <= {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2",
                                          "dl", "main", "section", "div", "svg", "aside", "p", "ol", "pre", "script",
                                          "input", "button", "span"}
    assert not [attrs for _, attrs in tags if re.search(r"\b(src|href|action)=", attrs)]
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None and "default-src 'none'" in csp.group(1) and "connect-src 'none'" in csp.group(1)


def test_the_policy_allows_exactly_the_inline_script(grounded_store: Path, tmp_path: Path) -> None:
    view(grounded_store, "grounded1", tmp_path / "run.html")
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    script = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    assert len(script) == 1
    digest = base64.b64encode(hashlib.sha256(script[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in page


def test_the_timeline_adds_up_the_tokens_of_every_recorded_call(grounded_store: Path, tmp_path: Path) -> None:
    data = view(grounded_store, "grounded1", tmp_path / "run.html")
    with SQLiteStore(str(grounded_store)) as store:
        calls = load_calls(store, open_run(store, "grounded1").calls_cid)
    spent = 0
    for point, call in zip(data["tokens"], calls, strict=True):
        spent += call.usage.input_tokens + call.usage.output_tokens
        assert point == {"tokens": spent, "purpose": call.purpose, "error": None}
    assert data["scores"][-1]["best"] == max(n["score"] for n in data["nodes"] if n["score"] is not None)


@pytest.fixture(scope="module")
def budget_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stored run under the controller that runs out of its 60 tokens (the controller decides to stop)."""
    path = tmp_path_factory.mktemp("view") / "store.db"
    store = SQLiteStore(str(path))
    try:
        asyncio.run(asolve("p", task=ScriptTask(), model=scripted(padded_child, by_depth({1: 0.6, 2: 0.6, 3: 0.6})),
                           config=SearchConfig(strategy="bfs", generation="sample", breadth=2, beam=2, max_depth=3),
                           budget=BudgetLimits(tokens=60), store=store, run_id="budget1"))
    finally:
        store.close()
    return path


def test_the_controller_decisions_reach_the_page(budget_store: Path, tmp_path: Path) -> None:
    data = view(budget_store, "budget1", tmp_path / "run.html")
    assert ("budget", "terminate") in [(d["kind"], d["decision"]) for d in data["decisions"]]
    assert data["run"]["stopped"] == "budget_tokens"
    assert data["control"]["thresholds"]["acceptable"] == 0.7


def test_a_run_stored_before_the_report_had_the_search_depths_shows_its_report_as_stored(tmp_path: Path) -> None:
    store = tmp_path / "legacy.db"  # a game24 run stored when depth_limits had only soft and hard
    store.write_bytes((Path(__file__).parent / "fixtures" / "legacy_run.db").read_bytes())
    control = view(store, "2v1md2n810", tmp_path / "run.html")["control"]
    assert control["depth_limits"] == {"hard": 3, "soft": 3}
    assert control["thresholds"] == {"acceptable": 0.7, "compromise": 0.5, "goal": 0.95}


def test_the_token_budget_the_run_started_with_is_on_the_timeline(budget_store: Path, tmp_path: Path) -> None:
    assert view(budget_store, "budget1", tmp_path / "run.html")["limits"] == {"tokens": 60}


def test_each_depth_is_one_row_and_children_follow_their_parents() -> None:
    graph = ThoughtGraph()
    root = graph.add_node("root", NodeKind.INPUT)
    a, b = graph.add_node("a", parents=[root.id]).id, graph.add_node("b", parents=[root.id]).id
    b1, a1 = graph.add_node("b1", parents=[b]).id, graph.add_node("a1", parents=[a]).id
    data = page_data(to_html(RunPicture("r", "finished", "t", "m", "p", graph)))
    place = {n["id"]: (n["col"], n["depth"]) for n in data["nodes"]}
    assert len({place[n][1] for n in (root.id, a, b, a1)}) == 3 and place[a][1] == place[b][1]
    assert place[a1][0] < place[b1][0]  # a's child left of b's, though b's was made first
    assert {n["id"]: n["parent"] for n in data["nodes"]} == {root.id: None, a: root.id, b: root.id, b1: b, a1: a}


def big_run() -> tuple[ThoughtGraph, list[int], int, list[int]]:
    """A generated run of 1,211 nodes: 10 thoughts per kept node, 3 kept and 7 pruned, five levels deep,
    plus a pruned first-level thought that had been explored (4 children) before it was pruned.

    Returns the graph, its best path, the explored-then-pruned node and its children."""
    graph = ThoughtGraph()
    root = graph.add_node("1 2 3 4 5", NodeKind.INPUT)
    graph.succeed(root.id)
    frontier, best = [root.id], [root.id]
    for depth in range(1, 6):
        kept = []
        for parent in frontier:
            for i in range(10):
                node = graph.add_node(f"step {depth}.{parent}.{i}", parents=[parent], score=round(0.95 - i / 10, 2),
                                      cost_tokens=20)
                graph.succeed(node.id)
                if i < 3:
                    kept.append(node.id)
                else:
                    graph.set_status(node.id, NodeStatus.PRUNED)
        frontier = kept
        best.append(kept[0])
    explored = graph.children(root.id)[9]
    salvaged = []
    for i in range(4):
        child = graph.add_node(f"salvage {i} {HOSTILE}", parents=[explored], score=0.3)
        graph.succeed(child.id)
        salvaged.append(child.id)
    return graph, best, explored, salvaged


def test_a_big_run_opens_folded_and_a_small_one_whole(tmp_path: Path) -> None:
    graph, best, _, _ = big_run()
    assert len(graph) == 1215
    assert page_data(to_html(RunPicture("r", "finished", "t", "m", "p", graph), best))["fold"] is True
    small = ThoughtGraph()
    small.add_node("root", NodeKind.INPUT)
    assert page_data(to_html(RunPicture("r", "finished", "t", "m", "p", small)))["fold"] is False


def test_every_score_reaches_the_timeline_with_its_status() -> None:
    graph, best, _, _ = big_run()
    scores = page_data(to_html(RunPicture("r", "finished", "t", "m", "p", graph), best))["scores"]
    assert len(scores) == 1214  # every scored node (the root has no score)
    assert {p["status"] for p in scores} == {"succeeded", "pruned"}
    assert scores[-1]["best"] == 0.95


def test_control_and_bidi_characters_show_as_escapes() -> None:
    graph = ThoughtGraph()
    graph.add_node("clear\x1b[2J flip\u202eed", NodeKind.INPUT)
    data = page_data(to_html(RunPicture("r", "finished", "t", "m", "p", graph)))
    assert data["nodes"][0]["content"] == "clear\\x1b[2J flip\\u202eed"


def test_an_unknown_run_is_one_line_and_exit_2(grounded_store: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "nosuchrun", "--store", str(grounded_store), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loom: error: ") and err.count("\n") == 1
    assert not (tmp_path / "x.html").exists()


def test_an_unwritable_out_is_one_line_and_exit_2(grounded_store: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no" / "such" / "dir" / "x.html"
    assert main(["view", "grounded1", "--store", str(grounded_store), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loom: error: cannot write") and err.count("\n") == 1


# --- in a real headless Chromium ------------------------------------------------------------------


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's package) driven by Selenium through Debian's chromedriver."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no chromium and chromedriver on PATH (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # The driver named explicitly: Selenium Manager would otherwise try to download one.
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_and_click(driver: Any, page: Path, node_id: int) -> str:
    """Open the page from its file, click a node, return the panel's text."""
    from selenium.webdriver.common.by import By

    driver.get(page.as_uri())
    assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"  # the script ran
    driver.find_element(By.ID, f"node-{node_id}").click()
    return str(driver.find_element(By.ID, "details").text)


def test_in_chromium_clicking_a_node_shows_its_grounding_evidence(grounded_store: Path, tmp_path: Path,
                                                                   browser: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    data = view(grounded_store, "grounded1", tmp_path / "run.html")
    refuted = next(n["id"] for n in data["nodes"] if n["content"] == HOSTILE)
    panel = open_and_click(browser, tmp_path / "run.html", refuted)
    assert "grounding evidence" in panel and f"{HOSTILE} is bad" in panel and '"verified": false' in panel
    assert browser.find_elements(By.TAG_NAME, "img") == []  # shown as text, never parsed
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is the check that no alert opened
    assert len(browser.find_elements(By.CSS_SELECTOR, "#nodes .node")) == len(data["nodes"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#decisions li")) == 1  # "no controller decision" line
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []  # no CSP refusal
    requested = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = {m["params"]["request"]["url"] for m in requested if m["method"] == "Network.requestWillBeSent"}
    assert urls == {(tmp_path / "run.html").as_uri()}  # the page itself, and nothing else
    shot = tmp_path / "run.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_in_chromium_the_timeline_shows_the_budget_and_the_decisions(budget_store: Path, tmp_path: Path,
                                                                     browser: Any) -> None:
    from selenium.webdriver.common.by import By

    view(budget_store, "budget1", tmp_path / "run.html")
    open_and_click(browser, tmp_path / "run.html", 1)
    decisions = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#decisions li")]
    assert any(d.startswith("[budget] terminate: best") for d in decisions)
    assert len(browser.find_elements(By.ID, "budget-line")) == 1
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline .threshold")) == 2  # acceptable and goal
    assert '"profile": "default"' in browser.find_element(By.ID, "control").text


def test_in_chromium_a_node_shows_its_contract_and_tool_calls(tmp_path: Path, browser: Any) -> None:
    graph = ThoughtGraph()
    root = graph.add_node("root", NodeKind.INPUT)
    contract = {"child_specs": ["parse the input", "sum it"], "failure_policy": {"retry": 1, "replan": 1, "backtrack": 0}}
    step = graph.add_node("split the job", NodeKind.DECOMPOSITION, parents=[root.id], extra={
        "recursion": {"mode": "decompose", "contract": contract},
        "tool_calls": [{"tool": "calc", "status": "ok", "arguments": {"expression": "2+2"}, "output": "4"}]})
    (tmp_path / "run.html").write_text(to_html(RunPicture("r", "finished", "t", "m", "p", graph)), encoding="utf-8")
    panel = open_and_click(browser, tmp_path / "run.html", step.id)
    assert "contract" in panel and '"parse the input"' in panel and '"replan": 1' in panel
    assert "tool calls" in panel and '"tool": "calc"' in panel and '"output": "4"' in panel


@pytest.mark.local_model
def test_in_chromium_a_run_of_the_embedded_model_opens_and_shows_a_thought(tmp_path: Path, browser: Any) -> None:
    loom = [sys.executable, "-m", "thoughtloom"]
    proc = subprocess.run([*loom, "solve", "--task", "game24", "--quiet", "--seed", "1", "--budget-tokens", "1500",
                           "4 5 6 10"], check=False, capture_output=True, text=True, timeout=scaled(900))
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(subprocess.run([*loom, "runs", "--json"], capture_output=True, text=True,
                                       check=True).stdout.splitlines()[-1])["id"]
    out = tmp_path / "local.html"
    assert subprocess.run([*loom, "view", run_id, "--out", str(out)], check=False, capture_output=True,
                          text=True).returncode == 0
    data = page_data(out.read_text(encoding="utf-8"))
    assert data["tokens"] and data["run"]["model"].startswith("local")
    deepest = max(data["nodes"], key=lambda n: n["depth"])
    panel = open_and_click(browser, out, deepest["id"])
    assert f"depth {deepest['depth']}" in panel and "thought" in panel


def open_big_run(driver: Any, tmp_path: Path) -> tuple[list[int], int, list[int]]:
    """Write the generated 1,215-node run as a page and open it; its best path, explored node and its children."""
    graph, best, explored, salvaged = big_run()
    page = tmp_path / "big.html"
    page.write_text(to_html(RunPicture("big", "finished", "game24", "m", "1 2 3 4 5", graph), best, [best[-1]]),
                    encoding="utf-8")
    driver.get(page.as_uri())
    from selenium.webdriver.common.by import By

    assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
    return best, explored, salvaged


def drawn(driver: Any) -> set[int]:
    from selenium.webdriver.common.by import By

    return {int(g.get_attribute("data-id")) for g in driver.find_elements(By.CSS_SELECTOR, "#nodes .node")}


def test_in_chromium_a_1215_node_run_opens_with_pruned_branches_folded_and_the_best_path_shown(
        tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    best, explored, salvaged = open_big_run(browser, tmp_path)
    shown = drawn(browser)
    assert len(shown) == 1 + 3 + 9 + 27 + 81 + 243  # the kept thoughts; 847 pruned ones and 4 below one folded
    assert set(best) <= shown and explored not in shown and not set(salvaged) & shown
    for nid in best[1:]:
        shape = browser.find_element(By.CSS_SELECTOR, f"#node-{nid} .shape")
        assert "best" in shape.get_attribute("class").split()
    assert browser.find_element(By.ID, "shown").text.startswith("showing 364 of 1215 nodes")
    root = browser.find_element(By.ID, f"node-{best[0]}")
    assert root.is_displayed() and browser.execute_script(  # the page opens scrolled to the root
        "var r=arguments[0].getBoundingClientRect(),p=document.getElementById('graph-scroll').getBoundingClientRect();"
        "return r.left>=p.left&&r.right<=p.right;", root)
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    shot = tmp_path / "big.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_in_chromium_clicking_a_fold_badge_unfolds_that_branch_and_folds_it_again(
        tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    best, explored, salvaged = open_big_run(browser, tmp_path)
    before = drawn(browser)
    badge = browser.find_element(By.ID, f"fold-{best[0]}")
    assert badge.text == "+11"  # the root's 7 pruned thoughts, and the 4 below the explored one
    badge.click()
    after = drawn(browser)
    assert len(after - before) == 11 and explored in after and set(salvaged) <= after
    browser.find_element(By.ID, f"node-{salvaged[0]}").click()
    assert "salvage 0 " + HOSTILE in browser.find_element(By.ID, "details").text  # text, never markup
    assert browser.find_elements(By.TAG_NAME, "img") == []
    again = browser.find_element(By.ID, f"fold-{best[0]}")
    assert again.text == "−"
    again.click()
    assert drawn(browser) == before


def test_in_chromium_finding_a_folded_thought_unfolds_its_branch_and_selects_it(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _, explored, salvaged = open_big_run(browser, tmp_path)
    box = browser.find_element(By.ID, "filter")
    box.send_keys("salvage 2")
    assert browser.find_element(By.ID, "matches").text.startswith("1 match (1 folded)")
    box.send_keys(Keys.ENTER)
    assert salvaged[2] in drawn(browser) and explored in drawn(browser)
    assert "selected" in browser.find_element(By.ID, f"node-{salvaged[2]}").get_attribute("class").split()
    assert browser.find_element(By.ID, "panel-hint").text == f"Node #{salvaged[2]}"


def test_in_chromium_the_zoom_buttons_scale_the_graph(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    open_big_run(browser, tmp_path)
    svg = browser.find_element(By.ID, "graph")
    full = int(svg.get_attribute("width"))
    assert full == int(svg.get_attribute("data-width"))
    browser.find_element(By.ID, "zoom-out").click()
    assert int(svg.get_attribute("width")) == round(full / 1.25)
    browser.find_element(By.ID, "zoom-fit").click()
    pane = browser.find_element(By.ID, "graph-scroll")
    assert int(svg.get_attribute("width")) <= int(pane.get_attribute("clientWidth"))
    browser.find_element(By.ID, "zoom-reset").click()
    assert int(svg.get_attribute("width")) == full


def test_in_chromium_the_timeline_plots_every_score_and_a_dot_opens_its_node(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _, explored, _ = open_big_run(browser, tmp_path)
    dots = browser.find_elements(By.CSS_SELECTOR, "#score-dots .score-dot")
    assert len(dots) == 1214
    assert len(browser.find_elements(By.CSS_SELECTOR, "#score-dots .score-dot.pruned")) == 7 + 21 + 63 + 189 + 567
    dot = browser.find_element(By.CSS_SELECTOR, f'#score-dots [data-node="{explored}"]')
    dot.click()
    assert explored in drawn(browser)
    assert browser.find_element(By.ID, "panel-hint").text == f"Node #{explored}"
