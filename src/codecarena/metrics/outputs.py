"""Every metric output's scale: its label, which end is better, its range and unit.

The one place tables, rankings, plots and run.json learn a metric's direction; the order here is
the order readers expect the columns in, and which means exist at all: an error rate counts each
language's own words or characters, so it is never averaged across languages, and a word error rate
is not defined for a language written without spaces (`summarised`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from codecarena.metrics.asr_models import primary_language, written_with_spaces


@dataclass(frozen=True)
class Scale:
    name: str
    label: str
    better: str  # "higher" or "lower"
    low: float | None  # the range the output can take (None: unbounded on that side)
    high: float | None
    unit: str = ""
    # Computed from the reference alone (the ASR floor): the same for every codec, so never compared.
    codec_independent: bool = False
    # Errors per reference token (word or character): rows record both counts (details `errors`,
    # `reference_tokens`), summaries add the corpus rate, and the unit is the language's own, so a
    # mean over two languages is never formed.
    error_rate: bool = False
    # Counts words: not defined for a language written without spaces between words.
    counts_words: bool = False

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"

    def declaration(self) -> dict[str, Any]:
        return asdict(self)


SCALES: tuple[Scale, ...] = (
    Scale("pesq_wb", "PESQ-WB", "higher", 1.04, 4.64, "MOS-LQO"),
    Scale("pesq_nb", "PESQ-NB", "higher", 1.02, 4.55, "MOS-LQO"),
    Scale("visqol", "ViSQOL", "higher", 1.0, 5.0, "MOS-LQO"),
    Scale("stoi", "STOI", "higher", 0.0, 1.0),
    Scale("estoi", "ESTOI", "higher", 0.0, 1.0),
    Scale("si_sdr", "SI-SDR dB", "higher", None, None, "dB"),
    Scale("lsd", "LSD dB", "lower", 0.0, None, "dB"),
    Scale("mel_distance", "mel dist", "lower", 0.0, None, "log10 mel"),
    Scale("mcd", "MCD dB", "lower", 0.0, None, "dB"),
    Scale("warp_q", "WARP-Q", "lower", 0.0, None, "SDTW cost"),
    Scale("dnsmos_ovrl", "DNSMOS OVRL", "higher", 1.0, 5.0, "MOS"),
    Scale("dnsmos_sig", "DNSMOS SIG", "higher", 1.0, 5.0, "MOS"),
    Scale("dnsmos_bak", "DNSMOS BAK", "higher", 1.0, 5.0, "MOS"),
    Scale("dnsmos_p808", "DNSMOS P.808", "higher", 1.0, 5.0, "MOS"),
    Scale("distill_mos", "Distill-MOS", "higher", 1.0, 5.0, "MOS"),
    Scale("plcmos", "PLCMOS", "higher", 1.0, 5.0, "MOS"),
    Scale("speaker_sim", "speaker sim", "higher", -1.0, 1.0, "cosine"),
    Scale("f0_rmse_cents", "F0 RMSE cents", "lower", 0.0, None, "cents"),
    Scale("f0_corr", "F0 corr", "higher", -1.0, 1.0),
    Scale("gpe", "GPE", "lower", 0.0, 1.0, "share of frames"),
    Scale("vde", "VDE", "lower", 0.0, 1.0, "share of frames"),
    Scale("wer", "WER", "lower", 0.0, None, "errors per reference word", error_rate=True, counts_words=True),
    Scale("cer", "CER", "lower", 0.0, None, "errors per reference character", error_rate=True),
    Scale("ref_wer", "ref WER", "lower", 0.0, None, "errors per reference word", codec_independent=True,
          error_rate=True, counts_words=True),
    Scale("ref_cer", "ref CER", "lower", 0.0, None, "errors per reference character", codec_independent=True,
          error_rate=True),
    Scale("dwer", "dWER", "lower", 0.0, None, "errors per reference word", error_rate=True, counts_words=True),
    Scale("dcer", "dCER", "lower", 0.0, None, "errors per reference character", error_rate=True),
    Scale("critical_survived", "critical survived", "higher", 0.0, 1.0, "share of entities"),
)
BY_NAME = {s.name: s for s in SCALES}
ORDER = tuple(s.name for s in SCALES)
LOWER_IS_BETTER = frozenset(s.name for s in SCALES if s.lower_is_better)
LABELS = {s.name: s.label for s in SCALES}
ERROR_RATES = frozenset(s.name for s in SCALES if s.error_rate)


def summarised(name: str, languages: Iterable[str]) -> bool:
    """Whether a mean of `name` over rows of these languages means something: an error rate only over
    one language (primary subtags: "en-US" is "en"), and a word error rate only for a language written
    with spaces."""
    scale = BY_NAME.get(name)
    if scale is None or not scale.error_rate:
        return True
    distinct = {primary_language(language) for language in languages}
    if len(distinct) != 1:
        return False
    return not scale.counts_words or written_with_spaces(distinct.pop())


#: What the headline of every surface shows (the terminal leaderboard's default columns, the report's
#: Pareto plots, report.md's tables, a listening card): quality, then CONTENT, the content score in the
#: language's own unit (`content_output`), then naturalness and speaker.
CONTENT = "content"
HEADLINE = ("pesq_wb", "stoi", CONTENT, "dnsmos_ovrl", "speaker_sim")
#: The content scores a headline may show, whichever its languages.
CONTENT_OUTPUTS = ("dwer", "dcer")


def content_output(languages: Iterable[str]) -> str | None:
    """The content score of rows of these languages: dWER for one language written with spaces, dCER
    for one written without (Mandarin); None over several languages, whose error rates are never
    pooled (`summarised`)."""
    distinct = {primary_language(language) for language in languages}
    if len(distinct) != 1:
        return None
    return "dwer" if written_with_spaces(distinct.pop()) else "dcer"


def headline(languages: Iterable[str]) -> tuple[str, ...]:
    """The headline outputs of rows of these languages, the content score being the language's own."""
    content = content_output(languages)
    return tuple(content if name == CONTENT else name for name in HEADLINE if name != CONTENT or content)


def error_counts(record: dict[str, Any]) -> tuple[int, int] | None:
    """An error rate record's counts (details `errors`, `reference_tokens`), or None when it does not
    hold a usable pair (rows scored before the counts were recorded)."""
    details = record.get("details")
    counts = (details.get("errors"), details.get("reference_tokens")) if isinstance(details, dict) else (None, None)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        return None
    errors, tokens = counts
    return (errors, tokens) if errors >= 0 and tokens > 0 else None


def sort_key(name: str) -> tuple[int, str]:
    """Outputs in the order above; any other after them, alphabetically."""
    return (ORDER.index(name), name) if name in ORDER else (len(ORDER), name)
