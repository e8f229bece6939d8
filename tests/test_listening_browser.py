"""The listening test in a real browser (issue #42): Debian's Chromium, driven by Playwright with
executable_path (never a downloaded browser build), on a real run of smoke-set rows (opus, codec2,
pcm). Two simulated listeners take the MUSHRA test from `codecarena listen`: each plays every stimulus
(the page's Web Audio state says what was heard, not a speaker), rates, reloads mid-test and resumes,
and submits; one rates the hidden reference below 90 throughout and post-screening excludes them. The
stored ratings, the leaderboard's MUSHRA column, the correlation table and the audit are checked. The
static bundle is then served by a plain static file server, a third listener takes it, downloads their
answers, and `listen --import` adds them.

The page runs under its own Content-Security-Policy (no eval), so the test waits by polling
page.evaluate rather than with wait_for_function.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import codecarena, need_mirror
from test_report import CHROMIUM

from codecarena.results.listening.definition import ListeningTest, load_test
from codecarena.results.listening.design import listener_plan
from codecarena.results.listening.store import read_lines
from codecarena.rundir import RunDir

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--autoplay-policy=no-user-gesture-required"]
CODECS = ("opus:6k", "opus:12k", "codec2:3200", "pcm:16")
# What the good listener gives each codec: ordered as the codecs' quality, so every metric has something to agree with.
GOOD = {"hidden_reference": 100, "lp7000": 65, "lp3500": 30, "pcm:16": 96, "opus:12k": 78, "opus:6k": 52,
        "codec2:3200": 22}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirror = need_mirror()
    out = tmp_path_factory.mktemp("listen") / "run"
    args: list[str | Path] = ["run", "--set", "smoke", "--data-dir", mirror, "--no-download", "--shard", "1/4",
                              "--metrics", "pesq_wb,stoi,si_sdr,mel_distance", "--out", out]
    for codec in CODECS:
        args += ["--codec", codec]
    codecarena(*args, check=True)
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(proc.communicate()[0]) from None
            time.sleep(0.2)


def _wait(page: Any, js: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not page.evaluate(js):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {js}; state {page.evaluate('JSON.stringify(window.listenState)')}")
        time.sleep(0.1)


def _score(test: ListeningTest, cid: str, planted: bool) -> int:
    condition = test.condition(cid)
    if planted and condition.role == "hidden_reference":
        return 40
    key = condition.codec if condition.role == "codec" else condition.role if condition.role == "hidden_reference" else cid
    return GOOD[str(key)]


def _play_every_stimulus(page: Any) -> None:
    """Play each stimulus until the page counts it as played (a stimulus reached its end before its
    second was heard is played again, as a listener would)."""
    for cid in page.evaluate("window.listenState.order"):
        column = f"document.querySelector('div.stimulus[data-cid=\"{cid}\"]').dataset.played === 'true'"
        for _ in range(6):
            page.click(f"button[data-cid='{cid}']")
            _wait(page, f"{column} || document.getElementById('stop').disabled")
            if page.evaluate(column):
                break
        assert page.evaluate(column), cid


def _switching_keeps_the_playhead(page: Any) -> None:
    first, second = page.evaluate("window.listenState.order")[:2]
    page.click(f"button[data-cid='{first}']")
    time.sleep(0.6)
    before = float(page.evaluate("document.querySelector('input[aria-label=playhead]').value"))
    page.click(f"button[data-cid='{second}']")
    time.sleep(0.2)
    after = float(page.evaluate("document.querySelector('input[aria-label=playhead]').value"))
    assert 0.3 < before <= after < before + 1.0, (before, after)
    page.click("#stop")


def _rate(page: Any, test: ListeningTest, planted: bool) -> None:
    for cid in page.evaluate("window.listenState.order"):
        page.evaluate(f"""() => {{ const s = document.querySelector('input.rating[data-cid="{cid}"]');
                                   s.value = {_score(test, cid, planted)}; s.dispatchEvent(new Event('input')); }}""")


def _take_test(page: Any, url: str, test: ListeningTest, who: str, planted: bool = False,
               reload_at: int = 1, choice: str = "") -> None:
    """A listener's whole test from `url`: training, every trial, a reload before trial `reload_at`."""
    page.goto(f"{url}?listener={who}")
    _wait(page, "window.listenState.screen === 'training'")
    assert page.evaluate("JSON.stringify(window.listenPlan())") == json.dumps(
        [{"id": tid, "order": order} for tid, order in listener_plan(test, who)], separators=(",", ":"))
    _play_every_stimulus(page)
    page.click("#submit")
    for position in range(len(test.trials)):
        _wait(page, f"window.listenState.screen === 'trial' && window.listenState.position === {position}")
        if position == 0:
            _switching_keeps_the_playhead(page)
        _play_every_stimulus(page)
        if position == reload_at:
            # Mid-trial: the reload starts this trial again (its plays and ratings were not submitted).
            page.reload()
            _wait(page, f"window.listenState.screen === 'trial' && window.listenState.position === {position}")
            assert page.evaluate("Object.values(window.listenState.plays).every(n => n === 0)")
            _play_every_stimulus(page)
        assert page.evaluate("Object.keys(window.listenState.heard).every(c => window.listenState.heard[c] >= 1)"), \
            page.evaluate("JSON.stringify(window.listenState)")
        assert page.locator("#submit").is_disabled()  # not rated (or chosen) yet
        if test.kind == "ab":
            page.check(f"input[name=choice][value={choice}]")
        else:
            _rate(page, test, planted)
        page.click("#submit")
    _wait(page, "window.listenState.screen === 'done'")
    assert page.evaluate("window.listenState.error") == ""


def _browser(pw: Any, profile: Path, messages: list[str], outside: list[str]) -> tuple[Any, Any]:
    context = pw.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
                                                    viewport={"width": 1200, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("http://127.0.0.1:", "blob:")) else None)
    return context, page


@pytest.mark.slow
def test_two_listeners_take_the_mushra_test_and_one_is_screened_out(smoke_run: Path, tmp_path: Path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM} missing; Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    codecarena("listen", smoke_run, "--build-only", "--seed", "11", check=True)
    test = load_test(RunDir(smoke_run), "mushra")
    assert len(test.trials) >= 2 and [c.codec for c in test.conditions if c.codec] == list(CODECS)
    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "codecarena", "listen", str(smoke_run), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    messages: list[str] = []
    outside: list[str] = []
    try:
        _wait_http(url + "manifest.json", server)
        with sync_playwright() as pw:
            for who, planted in (("ann", False), ("bob", True)):
                context, page = _browser(pw, tmp_path / f"profile-{who}", messages, outside)
                try:
                    _take_test(page, url, test, who, planted)
                    if who == "ann":
                        page.screenshot(path=str(tmp_path / "done.png"))
                finally:
                    context.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    assert messages == [] and outside == []

    # The stored ratings: training then every trial, each line tied to the trial's stimuli and chained.
    home = RunDir(smoke_run)
    for who, planted in (("ann", False), ("bob", True)):
        lines, torn = read_lines(home.listener_ratings("mushra", who))
        assert not torn and [line.kind for line in lines] == ["training"] + ["mushra"] * len(test.trials)
        assert [line.trial for line in lines[1:]] == [tid for tid, _ in listener_plan(test, who)]
        for line in lines[1:]:
            assert line.stimuli == test.trial(line.trial).stimuli  # type: ignore[union-attr]
            assert line.ratings == {cid: _score(test, cid, planted) for cid in test.condition_ids}
            assert all(line.plays[c] >= 1 and line.heard_s[c] >= 0.9 for c in test.condition_ids)

    results = json.loads((smoke_run / "listening" / "mushra" / "results.json").read_text())
    assert {s["listener"]: s["status"] for s in results["listeners"]} == {"ann": "included", "bob": "excluded"}

    board = codecarena("leaderboard", smoke_run, "--columns", "codec,listening", check=True).stdout
    for codec in CODECS:
        assert f"{GOOD[codec]:.1f}" in board.split(codec, 1)[1].split("\n", 1)[0], board
    assert "excluded by BS.1534-3 post-screening: bob (rated the hidden reference below 90 in" in board

    summary = codecarena("listen", smoke_run, "--results", check=True).stdout
    assert "which metric predicts your listeners" in summary
    codecarena("report", smoke_run, "--out", tmp_path / "report.html", "--audio", "none", check=True)
    md = (tmp_path / "report.md").read_text()
    table = md.split("### Which metric predicts your listeners", 1)[1]
    ranked = [line.split(" | ")[1] for line in table.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(ranked) == 2
    # Every metric agrees with a listener who ranks the codecs by quality: PESQ-WB at stimulus level positively.
    pesq = next(line for line in table.splitlines() if "| PESQ-WB |" in line)
    assert float(pesq.split(" | ")[3].split(" ")[0]) > 0.5
    audit = codecarena("audit", smoke_run)
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.slow
def test_the_static_bundle_runs_from_a_plain_file_server_and_its_ratings_import(smoke_run: Path,
                                                                                tmp_path: Path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM} missing; Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    codecarena("listen", smoke_run, "--name", "crowd", "--build-only", "--seed", "5", "--codec", "opus:6k",
               "--codec", "pcm:16", check=True)
    test = load_test(RunDir(smoke_run), "crowd")
    bundle = tmp_path / "bundle"
    codecarena("listen", smoke_run, "--name", "crowd", "--export", bundle, check=True)
    port = _port()
    static = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(bundle)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    messages: list[str] = []
    outside: list[str] = []
    try:
        _wait_http(url + "manifest.json", static)
        with sync_playwright() as pw:
            context, page = _browser(pw, tmp_path / "profile-crowd", messages, outside)
            try:
                _take_test(page, url, test, "worker-7", reload_at=0)
                with page.expect_download() as download:
                    page.click("#download")
                ratings = tmp_path / "ratings.jsonl"
                download.value.save_as(ratings)
            finally:
                context.close()
    finally:
        static.terminate()
        static.wait(30)
    assert messages == [] and outside == []
    answers = [json.loads(line) for line in ratings.read_text().splitlines()]
    assert [a["kind"] for a in answers] == ["training"] + ["mushra"] * len(test.trials)
    imported = codecarena("listen", smoke_run, "--import", ratings)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    again = codecarena("listen", smoke_run, "--import", ratings)
    assert again.returncode == 2 and "has already done the training" in again.stderr
    lines, _ = read_lines(RunDir(smoke_run).listener_ratings("crowd", "worker-7"))
    assert [line.ratings for line in lines[1:]] == [a["ratings"] for a in answers[1:]]
    results = json.loads((smoke_run / "listening" / "crowd" / "results.json").read_text())
    assert results["listeners"] == [{"listener": "worker-7", "status": "included", "reasons": [],
                                     "trials_done": len(test.trials), "trials": len(test.trials)}]
    audit = codecarena("audit", smoke_run)
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.slow
def test_an_ab_preference_test_in_the_browser(smoke_run: Path, tmp_path: Path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed ({CHROMIUM} missing; Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    codecarena("listen", smoke_run, "--ab", "opus:6k,pcm:16", "--no-preference", "--build-only", "--seed", "3",
               check=True)
    test = load_test(RunDir(smoke_run), "ab")
    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "codecarena", "listen", str(smoke_run), "--name", "ab",
                               "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    messages: list[str] = []
    outside: list[str] = []
    try:
        _wait_http(url + "manifest.json", server)
        with sync_playwright() as pw:
            context, page = _browser(pw, tmp_path / "profile-ab", messages, outside)
            try:
                _take_test(page, url, test, "cy", choice="c2")
            finally:
                context.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    assert messages == [] and outside == []
    ab = json.loads((smoke_run / "listening" / "ab" / "results.json").read_text())["ab"]
    assert (ab["a_label"], ab["b_label"], ab["a"], ab["b"], ab["no_preference"]) == (
        "opus:6k", "pcm:16", 0, len(test.trials), 0)
