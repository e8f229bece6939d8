"""Every metric output's scale: its label, which end is better, its range and unit.

The one place tables, rankings, plots and run.json learn a metric's direction; the order here is
the order readers expect the columns in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
    Scale("dnsmos_ovrl", "DNSMOS OVRL", "higher", 1.0, 5.0, "MOS"),
    Scale("dnsmos_sig", "DNSMOS SIG", "higher", 1.0, 5.0, "MOS"),
    Scale("dnsmos_bak", "DNSMOS BAK", "higher", 1.0, 5.0, "MOS"),
    Scale("dnsmos_p808", "DNSMOS P.808", "higher", 1.0, 5.0, "MOS"),
    Scale("distill_mos", "Distill-MOS", "higher", 1.0, 5.0, "MOS"),
    Scale("speaker_sim", "speaker sim", "higher", -1.0, 1.0, "cosine"),
    Scale("f0_rmse_cents", "F0 RMSE cents", "lower", 0.0, None, "cents"),
    Scale("f0_corr", "F0 corr", "higher", -1.0, 1.0),
    Scale("gpe", "GPE", "lower", 0.0, 1.0, "share of frames"),
    Scale("vde", "VDE", "lower", 0.0, 1.0, "share of frames"),
    Scale("wer", "WER", "lower", 0.0, None, "errors per reference word"),
    Scale("cer", "CER", "lower", 0.0, None, "errors per reference character"),
    Scale("ref_wer", "ref WER", "lower", 0.0, None, "errors per reference word", codec_independent=True),
    Scale("ref_cer", "ref CER", "lower", 0.0, None, "errors per reference character", codec_independent=True),
    Scale("dwer", "dWER", "lower", 0.0, None, "errors per reference word"),
    Scale("dcer", "dCER", "lower", 0.0, None, "errors per reference character"),
    Scale("critical_survived", "critical survived", "higher", 0.0, 1.0, "share of entities"),
)
BY_NAME = {s.name: s for s in SCALES}
ORDER = tuple(s.name for s in SCALES)
LOWER_IS_BETTER = frozenset(s.name for s in SCALES if s.lower_is_better)
LABELS = {s.name: s.label for s in SCALES}


def sort_key(name: str) -> tuple[int, str]:
    """Outputs in the order above; any other after them, alphabetically."""
    return (ORDER.index(name), name) if name in ORDER else (len(ORDER), name)
