"""The page at / and /ui (server/http_ui.py, server/ui/): served with its files by the server itself, nothing from
another host, a client of the public routes only, named in the access log; and, in headless Chromium against a
running server, what it draws is what the API answers: one coloured span per token with the server's replaced
probabilities, scores best first, the reranked order of /v1/rerank with each total split into its parts, the label
probabilities of /v1/classify, the server's own words for a 401 and a 422, and a message for what the page refuses
itself or a server that went away. Each view's screenshot is written to the test's temporary folder.

The browser tests need Debian's `chromium` and `chromium-driver` (selenium drives them; nothing is downloaded at
run time): without them they are skipped, unless ELECTRIC_REQUIRE_BROWSER is set (CI, .ci/run), which makes their
absence a failure."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

import httpx
import pytest
from conftest import save_random_electra
from starlette.testclient import TestClient

from server.app import BackgroundServer, create_app
from server.http_ui import UI_ASSETS, UI_DIR
from server.settings import Settings
from tests.server.helpers import KEY, assert_routes_logged

REPO = Path(__file__).resolve().parents[2]
PUBLIC_ROUTES = {"info", "v1/detect", "v1/score", "v1/rerank", "v1/classify"}  # what the page may call
# CI sets this (.ci/run): a missing browser fails the browser tests instead of skipping them
REQUIRE_BROWSER = os.environ.get("ELECTRIC_REQUIRE_BROWSER", "") not in ("", "0")
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MAX_TOKENS = 32  # the served length, short: a sentence of 50 words is over it


# ---- without a browser: the page and its files -------------------------------------------------------------------

@pytest.fixture
def client(tmp_path):
    return TestClient(create_app(Settings(model=tmp_path, grpc_port=-1, access_log=True)))


LOADED = re.compile(r"""\b(?:src|href)=["']([^"']+)["']""")


def test_the_page_is_served_at_root_and_ui_with_everything_from_this_server(client):
    root, ui = client.get("/"), client.get("/ui")
    assert root.status_code == ui.status_code == 200 and root.text == ui.text
    assert root.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in root.headers["content-security-policy"]  # the browser loads nothing from elsewhere
    assert '<base href="/">' in root.text
    urls = LOADED.findall(root.text)
    files = {u.removeprefix(UI_ASSETS.lstrip("/") + "/") for u in urls if u.startswith(UI_ASSETS.lstrip("/"))}
    assert files == {"ui.js", "ui.css", "icon.svg"}
    assert set(urls) - {f"ui-assets/{f}" for f in files} == {"/", "docs"}  # the <base>, the link to /docs
    kinds = {".js": "javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    texts = [root.text]
    for name in files:
        got = client.get(f"{UI_ASSETS}/{name}")
        assert got.status_code == 200 and kinds[Path(name).suffix] in got.headers["content-type"], name
        texts.append(got.text.replace('xmlns="http://www.w3.org/2000/svg"', ""))  # a namespace, not a fetch
    assert [t for t in texts if re.search(r"https?:|//[a-z0-9]|@import|url\(", t)] == []  # no host, no CDN


def test_the_page_calls_only_the_public_routes():
    script = (UI_DIR / "ui.js").read_text(encoding="utf-8")
    assert script.count("fetch(") == 1  # in call(), the page's one way to the server
    assert set(re.findall(r"""\bcall\(["']([^"']+)["']""", script)) == PUBLIC_ROUTES


def test_behind_a_proxy_the_page_and_its_calls_are_under_its_root_path(tmp_path):
    client = TestClient(create_app(Settings(model=tmp_path, grpc_port=-1, access_log=False)), root_path="/electric")
    page = client.get("/electric/ui").text
    assert '<base href="/electric/">' in page  # every URL of the page and of its calls is relative to it
    assert client.get(f"/electric{UI_ASSETS}/ui.js").status_code == 200


def test_the_access_log_and_the_metrics_name_the_page_routes(client, caplog):
    caplog.set_level(logging.INFO, logger="electric.access")
    paths = {"/": "/", "/ui": "/ui", f"{UI_ASSETS}/ui.js": UI_ASSETS, f"{UI_ASSETS}/ui.css": UI_ASSETS,
             f"{UI_ASSETS}/nope.js": UI_ASSETS, "/ui/nope": "unmatched"}
    assert_routes_logged(client, caplog, paths)
    metrics = client.get("/metrics").text
    assert f'electric_requests_total{{route="{UI_ASSETS}",transport="http"}} 3.0' in metrics
    assert "ui.js" not in metrics  # a mount is one route, not a label per file


def test_the_page_files_are_installed_with_the_package():
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]["server"]
    installed = {p for pattern in patterns for p in (REPO / "server").glob(pattern)}
    assert {p for p in UI_DIR.iterdir() if p.is_file()} <= installed


# ---- in a browser: the servers ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def onnx_dir(disc_dir, tmp_path_factory) -> Path:
    from electric.export.exporter import export_model

    out = tmp_path_factory.mktemp("ui-disc") / "onnx"
    export_model(disc_dir, out, log=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def classifier_dir(tokenizer_dir, tmp_path_factory) -> Path:
    return save_random_electra("ElectraForSequenceClassification", tokenizer_dir, tmp_path_factory.mktemp("ui") / "cls")


@pytest.fixture(scope="module")
def tagger_dir(tokenizer_dir, tmp_path_factory) -> Path:
    return save_random_electra("ElectraForTokenClassification", tokenizer_dir, tmp_path_factory.mktemp("ui") / "tag")


@pytest.fixture(scope="module")
def server(onnx_dir, classifier_dir, tagger_dir):
    """An exported discriminator, a classifier and a tagger, no API key, a short served length."""
    s = Settings(model=onnx_dir, classifiers={"sst2": classifier_dir, "chunk": tagger_dir}, http_port=0,
                 grpc_port=-1, threads=1, max_tokens_per_input=MAX_TOKENS, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through its chromedriver, with no way to reach another host (every name but the
    loopback resolves to nothing): the page must work without a network."""
    if not (CHROMIUM and CHROMEDRIVER):
        message = "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        if REQUIRE_BROWSER:
            pytest.fail(f"{message} and ELECTRIC_REQUIRE_BROWSER is set", pytrace=False)
        pytest.skip(message)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,850", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # a driver path: no Selenium Manager
    try:
        yield driver
    finally:
        driver.quit()


# ---- in a browser: helpers ----------------------------------------------------------------------------------------

def until(driver, condition, timeout: float = 30):
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def by_css(driver, css: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def shown(driver, element_id: str) -> bool:
    return driver.execute_script(f"return !document.getElementById({element_id!r}).hidden")


def open_page(driver, url: str, view: str | None = None) -> None:
    driver.get(f"{url}/" + (f"#{view}" if view else ""))
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    until(driver, lambda d: by_css(d, "#tabs button[aria-selected=true]") or shown(d, "banner"))


def fill(driver, element_id: str, text: str) -> None:
    """Type `text` into a field, as a person would (a tab or a newline is its key)."""
    (box,) = by_css(driver, f"#{element_id}")
    box.clear()
    box.send_keys(text)


def run_view(driver, view: str) -> None:
    """Click the view's button and wait for its answer: something drawn or an error."""
    driver.execute_script(f"document.getElementById('{view}-out').replaceChildren()")
    by_css(driver, f"#{view}-run")[0].click()
    until(driver, lambda d: by_css(d, f"#{view}-out > *") or shown(d, f"{view}-error"))


def error(driver, view: str) -> str:
    return by_css(driver, f"#{view}-error")[0].text if shown(driver, f"{view}-error") else ""


def visible_tabs(driver) -> list[str]:
    return [b.get_attribute("data-view") for b in by_css(driver, "#tabs button") if b.is_displayed()]


def check_loaded_only_from(driver, url: str) -> None:
    """Everything the page fetched came from `url`, and the browser logged no policy violation or script error."""
    fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert fetched and all(u.startswith(url + "/") for u in fetched), fetched
    logged = [e["message"] for e in driver.get_log("browser")]
    assert [m for m in logged if "Content Security Policy" in m or "Uncaught" in m] == [], logged


# ---- in a browser: the views --------------------------------------------------------------------------------------

# an accent and a character outside the BMP: the server's offsets count code points, JavaScript's strings do not
TEXT = "the chef cooked the meal in a café 🍝 and the guests ate it"


def test_detect_draws_one_coloured_span_per_token_with_the_servers_probabilities(browser, server, api, tmp_path):
    open_page(browser, server.url)
    assert visible_tabs(browser) == ["detect", "score", "rerank", "classify"]
    assert shown(browser, "view-detect")  # the first view the models allow
    fill(browser, "detect-text", TEXT)
    run_view(browser, "detect")
    assert error(browser, "detect") == ""
    browser.save_screenshot(str(tmp_path / "detect.png"))

    want = api.post("/v1/detect", json={"texts": [TEXT]}).json()["results"][0]["tokens"]
    spans = by_css(browser, "#heatmap .tok")
    assert len(spans) == len(want) > 10
    for span, token in zip(spans, want, strict=True):
        assert span.text == TEXT[token["start"]:token["end"]]
        assert float(span.get_attribute("data-prob")) == token["prob"]
        assert f"{token['prob']:.3f}" in span.get_attribute("title")  # the probability on hover
        alpha = re.fullmatch(r"rgba\(214, 39, 40, ([\d.]+)\)", span.value_of_css_property("background-color"))
        assert alpha and float(alpha[1]) == pytest.approx(token["prob"], abs=1 / 255)  # the browser keeps 8 bits
    heat = by_css(browser, "#heatmap")[0].text
    assert heat == TEXT  # the whole text, in order, nothing dropped between the tokens
    score = api.post("/v1/score", json={"texts": [TEXT]}).json()["results"][0]
    summary = by_css(browser, "#detect-out .summary")[0].text
    assert f"{score['score']:.2f}".replace("-", "\u2212") in summary and score["method"] in summary
    check_loaded_only_from(browser, server.url)


def test_scores_are_listed_best_first_with_the_servers_scores(browser, server, api, tmp_path):
    texts = ["the cats annoy tim", "the cats annoys tim", "tim annoy the cats"]
    open_page(browser, server.url, "score")
    fill(browser, "score-text", "\n".join(texts))
    run_view(browser, "score")
    browser.save_screenshot(str(tmp_path / "score.png"))
    scores = [r["score"] for r in api.post("/v1/score", json={"texts": texts}).json()["results"]]
    rows = by_css(browser, "#scores tr[data-index]")
    assert [int(r.get_attribute("data-index")) for r in rows] == sorted(range(3), key=lambda i: -scores[i])
    for row in rows:
        want = scores[int(row.get_attribute("data-index"))]
        assert f"{want:.2f}".replace("-", "\u2212") in row.text
    # the words that differ from the best are marked in the others, none in the best
    assert by_css(browser, "#scores tr.best .tok.diff") == [] and by_css(browser, "#scores tr:not(.best) .tok.diff")


def test_rerank_shows_the_order_of_v1_rerank_with_each_total_split_into_its_parts(browser, server, api, tmp_path):
    hyps = ["show me flights from boston to denver", "show me fights from boston to denver",
            "show me the flights from boston to denver", "show me flight from boston"]
    scores = [-1.0, -1.2, -1.4, -3.0]  # best first; a word more is worth more than 0.4 here (length 1)
    open_page(browser, server.url, "rerank")
    defaults = api.get("/info").json()["rerank_defaults"]
    shown_weights = browser.execute_script("return ['lm', 'length', 'prior'].map(n => document.getElementById("
                                           "'w-' + n).value)")
    assert [float(shown_weights[0]), float(shown_weights[1]), shown_weights[2]] == [
        defaults["lm"], defaults["length"], defaults["prior"]]
    fill(browser, "rerank-text", "\n".join(f"{h}\t{s}" for h, s in zip(hyps, scores, strict=True)))  # Tab types it
    fill(browser, "w-length", "1")
    run_view(browser, "rerank")
    assert error(browser, "rerank") == ""
    browser.save_screenshot(str(tmp_path / "rerank.png"))

    weights = {**defaults, "length": 1.0}
    body = api.post("/v1/rerank", json={"hypotheses": hyps, "scores": scores, "weights": weights}).json()
    want = body["results"][0]["hyps"]
    rows = by_css(browser, "#reranked tr[data-rank]")
    assert [int(r.get_attribute("data-rank")) for r in rows] == [h["rank"] for h in want] != list(range(4))
    for place, (row, h) in enumerate(zip(rows, want, strict=True)):
        assert h["text"] in row.text and f"{h['total']:.2f}".replace("-", "\u2212") in row.text
        parts = {p.get_attribute("class").split()[1]: p.get_attribute("title") for p in
                 row.find_elements("css selector", ".bar .part")}
        expected = {"prior": h["prior"], "lm": weights["lm"] * h["lm"], "length": h["words"],
                    "piece": weights["piece"] * h["pieces"]}
        assert parts.keys() == {k for k, v in expected.items() if v}
        for k, title in parts.items():
            assert float(title.split()[-1].replace("\u2212", "-")) == pytest.approx(expected[k], abs=1e-3)
        assert ("moved" in row.get_attribute("class")) == (h["rank"] != place)
    summary = by_css(browser, "#rerank-out .summary")[0].text
    assert f"chose line {want[0]['rank'] + 1} over the first pass's choice, line 1" in summary


def test_the_rerank_legend_says_what_the_prior_selector_does(browser, server, tmp_path):
    """Issue 51, item 5: with first-pass scores they are the prior, and the prior and beta fields (which make the
    prior of a list without scores) are greyed out; without scores the legend names the selector's value."""
    open_page(browser, server.url, "rerank")
    fill(browser, "rerank-text", "show me flights\t-1.5\nshow me fights\t-2")
    assert browser.execute_script("return [document.getElementById('w-prior').disabled, "
                                  "document.getElementById('w-beta').disabled]") == [True, True]
    run_view(browser, "rerank")
    prior = browser.execute_script("return document.getElementById('w-prior').value")
    legend = by_css(browser, "#rerank-out p.legend")[0].text
    assert f"prior: the first-pass score (prior {prior} is for a list without scores)" in legend
    from selenium.webdriver.support.select import Select

    fill(browser, "rerank-text", "show me flights\nshow me fights")
    assert not by_css(browser, "#w-prior")[0].get_attribute("disabled")
    for choice, said in (("none", "prior: 0 (prior none: the lines' order is not used)"),
                         ("rank", "(prior rank: the lines' order is the first pass's)")):
        Select(by_css(browser, "#w-prior")[0]).select_by_visible_text(choice)
        run_view(browser, "rerank")
        assert said in by_css(browser, "#rerank-out p.legend")[0].text
    help_text = by_css(browser, "#view-rerank .help")[0].text
    assert "with prior rank, which takes the lines' order as the first pass's" in help_text
    browser.save_screenshot(str(tmp_path / "rerank-prior.png"))


def test_the_word_diff_of_long_texts_does_not_freeze_the_page(browser, server):
    """Issue 51, item 5: eight lines of 50,000 characters, truncated, used to freeze the tab for seconds (a word
    diff quadratic in all their words). Now only what the model read is compared, by a capped algorithm: no task
    of the page's takes a second, and the word that differs is still marked."""
    long = "the chef cooked the meal and the guests ate it " * 1100  # 51,700 characters
    first = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    lines = [f"{w} {long}" for w in first]
    open_page(browser, server.url, "score")
    browser.execute_script("document.getElementById('score-text').value = arguments[0]; window.longest = 0; "
                           "new PerformanceObserver((l) => { for (const e of l.getEntries()) "
                           "window.longest = Math.max(window.longest, e.duration); }).observe({type: 'longtask'});",
                           "\n".join(lines))
    by_css(browser, "#score-truncate")[0].click()
    run_view(browser, "score")
    assert error(browser, "score") == ""
    assert len(by_css(browser, "#scores tr[data-index]")) == 8
    for row in by_css(browser, "#scores tr[data-index]:not(.best)"):  # its first word, and nothing else, differs from the best's
        marked = "".join(t.text for t in row.find_elements("css selector", ".tok.diff"))
        assert marked == first[int(row.get_attribute("data-index"))]
    assert browser.execute_script("return window.longest") < 1000  # ms


REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"  # ReDoc's "API docs by Redocly" image: the CSP blocks it


@pytest.mark.parametrize("page, drawn, blocked", [("docs", ".opblock", set()), ("redoc", "h1", {REDOC_LOGO})])
def test_the_api_pages_work_under_their_content_security_policy(browser, server, page, drawn, blocked):
    """Issue 51, item 5: /docs and /redoc have a CSP (their own inline code allowed by its hash, nothing from
    another host) and draw the API under it; the one thing it refuses is ReDoc's logo from its CDN."""
    r = httpx.get(f"{server.url}/{page}")
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    browser.get(f"{server.url}/{page}")
    until(browser, lambda d: by_css(d, drawn))
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert {u for u in fetched if not u.startswith(server.url + "/")} <= blocked, fetched
    logged = [e["message"] for e in browser.get_log("browser")]
    refused = [m for m in logged if "Content Security Policy" in m or "Uncaught" in m]
    assert all(any(u in m for u in blocked) and "blocked" in m for m in refused), refused


def test_classify_shows_the_label_probabilities_or_a_label_per_word(browser, server, api, tmp_path):
    from selenium.webdriver.support.select import Select

    open_page(browser, server.url, "classify")
    fill(browser, "classify-text", "a tedious mess")
    run_view(browser, "classify")
    browser.save_screenshot(str(tmp_path / "classify.png"))
    want = api.post("/v1/classify", json={"model": "sst2", "texts": ["a tedious mess"]}).json()["results"][0]
    got = by_css(browser, "#probabilities")[0].text.split("\n")
    assert got == [x for label, p in want["probabilities"].items() for x in (label, f"{p:.3f}")]

    Select(by_css(browser, "#classify-model")[0]).select_by_visible_text("chunk")
    run_view(browser, "classify")
    want = api.post("/v1/classify", json={"model": "chunk", "texts": ["a tedious mess"]}).json()["results"][0]
    tags = [t.text.split("\n") for t in by_css(browser, "#classify-out .tag")]
    assert tags == [[w["token"], f"{w['label']} {w['probability']:.2f}"] for w in want["words"]] and len(tags) == 3


def test_bad_input_is_answered_with_a_message(browser, server, api, tmp_path):
    open_page(browser, server.url, "detect")
    fill(browser, "detect-text", "   ")
    run_view(browser, "detect")
    assert error(browser, "detect") == "Type a text first: there is nothing to look at."

    long = " ".join(["the chef cooked the meal"] * 10)  # 50 words: over the served length of MAX_TOKENS
    fill(browser, "detect-text", long)
    run_view(browser, "detect")
    refusal = api.post("/v1/detect", json={"texts": [long]})
    assert refusal.status_code == 422
    shown_error = error(browser, "detect")
    assert shown_error.startswith(refusal.json()["error"] + " (422 validation_error)") and "truncate" in shown_error
    browser.save_screenshot(str(tmp_path / "too-long.png"))
    by_css(browser, "#detect-truncate")[0].click()
    run_view(browser, "detect")
    assert error(browser, "detect") == "" and len(by_css(browser, "#heatmap .tok")) == MAX_TOKENS - 2
    assert by_css(browser, "#heatmap .rest")  # what was cut is drawn struck through
    assert "truncated" in by_css(browser, "#detect-out .summary")[0].text

    open_page(browser, server.url, "rerank")
    for typed, said in [
        ("show me flights to denver", "An n-best list needs two or more hypotheses, one a line: with 1 there is "
                                      "nothing to rerank."),
        ("show me flights\t-1.5\nshow me fights\tabc", 'line 2: the first-pass score "abc" is not a number'),
        ("show me flights\t-1.5\n\nshow me fights", "line 3: no first-pass score after a tab, but line 1 has one: "
                                                    "give a score on every line or on none")]:
        fill(browser, "rerank-text", typed)
        run_view(browser, "rerank")
        assert error(browser, "rerank") == said
    fill(browser, "rerank-text", "a\nb")
    fill(browser, "w-lm", "much")
    run_view(browser, "rerank")
    assert error(browser, "rerank") == 'weight lm: "much" is not a number'
    browser.save_screenshot(str(tmp_path / "bad-nbest.png"))


@pytest.mark.integration
def test_with_an_api_key_a_401_shows_the_servers_message_and_a_server_gone_is_said(browser, classifier_dir,
                                                                                      tmp_path):
    """A classifier-only server with a key: no key and a wrong key show the server's 401 message; the right key
    shows only the Classify view; a server that went away is a message, not a blank page."""
    s = Settings(classifiers={"sst2": classifier_dir}, http_port=0, grpc_port=-1, api_key=KEY, threads=1,
                 access_log=False)
    with BackgroundServer(s) as srv:
        url = srv.url
        said = httpx.get(f"{url}/info").json()["error"]
        open_page(browser, url)
        assert shown(browser, "banner") and shown(browser, "key-form") and visible_tabs(browser) == []
        assert by_css(browser, "#banner-text")[0].text == f"{said} (401 unauthorized)"
        browser.save_screenshot(str(tmp_path / "no-key.png"))
        for key in ("wrong-key", KEY):
            fill(browser, "api-key", key)
            by_css(browser, "#key-form button")[0].click()
            until(browser, lambda d, k=key: shown(d, "banner") if k != KEY else visible_tabs(d))
            if key != KEY:
                assert by_css(browser, "#banner-text")[0].text == f"{said} (401 unauthorized)"
        assert visible_tabs(browser) == ["classify"] and shown(browser, "view-classify")
        run_view(browser, "classify")
        assert error(browser, "classify") == "" and by_css(browser, "#probabilities")
        browser.save_screenshot(str(tmp_path / "with-key.png"))
    run_view(browser, "classify")  # the server has stopped
    assert error(browser, "classify").startswith(f"The server at {url}/ does not answer")
    browser.save_screenshot(str(tmp_path / "server-gone.png"))


@pytest.fixture(scope="module")
def cloze_export(cloze_run, tmp_path_factory) -> Path:
    from electric.export.exporter import export_model

    out = tmp_path_factory.mktemp("ui-cloze") / "onnx"
    export_model(cloze_run / "generator", out, log=lambda *_: None)
    return out


def test_a_cloze_model_gets_scores_and_reranking_but_no_detection(browser, cloze_export, tmp_path):
    s = Settings(model=cloze_export, http_port=0, grpc_port=-1, threads=1, access_log=False)
    with BackgroundServer(s) as srv:
        open_page(browser, srv.url, "detect")  # asked for, not offered: the first view it allows instead
        assert visible_tabs(browser) == ["score", "rerank"] and shown(browser, "view-score")
        assert "no detection" in by_css(browser, "#models")[0].text
        run_view(browser, "score")
        assert error(browser, "score") == "" and "cloze scores" in by_css(browser, "#score-out .summary")[0].text
        browser.save_screenshot(str(tmp_path / "cloze-score.png"))
