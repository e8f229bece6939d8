"""The report's figures are drawn once per state of what they show (results/report/plot_cache.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codecarena.results.report import plot_cache


@pytest.fixture
def draws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return []


def test_the_same_figure_is_drawn_once_and_a_changed_entry_draws_again(draws: list[tuple]) -> None:
    def pareto_plot(entries: list[dict], metric: str) -> tuple[bytes | None, str, int, int]:
        draws.append((metric,))
        return b"\x89PNG" + metric.encode(), "", len(entries), 0

    entries = [{"codec": "opus:6k", "metrics": {"stoi": {"mean": 0.9}}}]
    first = plot_cache.cached(pareto_plot, entries, "stoi")
    assert plot_cache.cached(pareto_plot, entries, "stoi") == first == (b"\x89PNGstoi", "", 1, 0)
    assert len(draws) == 1
    changed = [{"codec": "opus:6k", "metrics": {"stoi": {"mean": 0.8}}}]
    plot_cache.cached(pareto_plot, changed, "stoi")
    assert plot_cache.cached(pareto_plot, entries, "pesq") == (b"\x89PNGpesq", "", 1, 0)
    assert len(draws) == 3


def test_a_figure_that_was_not_drawn_and_a_broken_cache_file(draws: list[tuple]) -> None:
    def cost_plot(entries: list[dict]) -> bytes | None:
        draws.append(())
        return None

    assert plot_cache.cached(cost_plot, []) is None and plot_cache.cached(cost_plot, []) is None
    assert len(draws) == 1
    for path in (plot_cache._folder()).glob("*.json"):
        path.write_text("{broken")
    assert plot_cache.cached(cost_plot, []) is None and len(draws) == 2
