"""Listening tests on a run's own decoded audio (`codecarena listen`, docs/listening.md).

A test is built once from one or more runs of one evaluation set (`build.py`) into the first run's
`listening/<test>/` folder: `test.json` (`definition.py`: conditions, trials, every stimulus by
sha256, the anchors' recipe, the screening rule), the low-pass anchors it made (`anchors.py`) and
one append-only rating file per listener (`store.py`), each answer checked before it is written
(`answers.py`). Orders are drawn per listener from the test's seed (`design.py`), identically in
Python and in the page's script. A local server (`server.py`) or a static bundle (`export.py`)
runs the test in a browser (`static/`). Results: post-screening (`screening.py`), MUSHRA means and
intervals and A/B preferences (`stats.py`), the correlation of every objective metric with the
listeners (`correlation.py`), assembled in `results.py`; the leaderboard's MUSHRA column comes from
`board.py`, and `audit.py` re-derives all of it from the files.
"""
