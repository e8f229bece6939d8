"""Where each part of a run computes: the torch codec families on `--device`, the learned metrics on
the metric device (`metrics/engines.py`), every other family and metric on the CPU whatever either
says.

A run says so in one line before its first row (`line`), and a device asked for that nothing of the
run can use is refused before any work (`unused`): its rows would otherwise say `applied: false` and
the console nothing, as if the device had been used. The refusal names the flag the user typed:
`--device` also chooses the metric device when `--metric-device` is not given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from codecarena.metrics.engines import ENGINE_OF
from codecarena.plural import verb
from codecarena.registry.catalog import FAMILIES

CPU = "cpu"


@dataclass(frozen=True)
class Placement:
    device: str  # --device: where the torch families run
    metric_device: str  # where the learned metrics run
    metric_option: str  # the flag that chose the metric device: --metric-device, or --device when that was not given
    families: tuple[str, ...]  # the run's codec families, in order
    metrics: tuple[str, ...]  # the run's metrics, in order

    @classmethod
    def of(cls, families: Iterable[str], metrics: Iterable[str], device: str, metric_device: str,
           metric_option: str = "--metric-device") -> Placement:
        return cls(device, metric_device, metric_option, tuple(dict.fromkeys(families)), tuple(dict.fromkeys(metrics)))

    def family_device(self, family: str) -> str:
        return self.device if FAMILIES[family].torch else CPU

    def metric_device_of(self, metric: str) -> str:
        return self.metric_device if metric in ENGINE_OF else CPU

    def line(self) -> str:
        """Which families and metrics run where, in one line: "" when everything runs on the CPU, as
        asked."""
        if self.device == CPU and self.metric_device == CPU:
            return ""
        parts = []
        for where in dict.fromkeys([d for d in (self.device, self.metric_device) if d != CPU] + [CPU]):
            families = [f for f in self.families if self.family_device(f) == where]
            metrics = [m for m in self.metrics if self.metric_device_of(m) == where]
            said = []
            if families:
                said.append(f"codecs {', '.join(families)}"
                            + (" (not torch families)" if where == CPU and self.device != CPU else ""))
            if metrics:
                said.append(f"metrics {', '.join(metrics)}"
                            + (" (computed on the CPU on any device)" if where == CPU and self.metric_device != CPU
                               else ""))
            if said:
                parts.append(f"on {'the CPU' if where == CPU else where}: {'; '.join(said)}")
        return "devices: " + "; ".join(parts)

    def unused(self) -> str:
        """The refusal of a device asked for that no family and no metric of the run can use, naming the
        flag that asked for it; "" when every device asked for is used."""
        asked = [("--device", self.device)]
        if self.metric_option == "--metric-device":
            asked.append(("--metric-device", self.metric_device))
        for option, device in asked:
            if device == CPU:
                continue
            if any(self.family_device(f) == device for f in self.families) or \
                    any(self.metric_device_of(m) == device for m in self.metrics):
                continue
            reasons = []
            if self.device == device:
                n = len(self.families)
                reasons.append(f"{_names(self.families)} {verb(n, 'is not a torch family', 'are not torch families')}")
            if self.metric_device == device:
                reasons.append(f"{_names(self.metrics)} {verb(len(self.metrics), 'is', 'are')} computed on the CPU on "
                               "any device" if self.metrics else "it computes no metrics")
            learned = ", ".join(sorted(ENGINE_OF))
            return (f"{option} {device}: nothing in this run can use it ({'; '.join(reasons)}); leave {option} out "
                    f"to run on the CPU (a device serves the torch codec families and the metrics {learned})")
        return ""


def _names(items: Iterable[str]) -> str:
    listed = list(items)
    return listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}"
