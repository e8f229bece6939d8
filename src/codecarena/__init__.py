"""codecarena: honest, re-derivable speech codec benchmarks."""

__version__ = "0.1.0"
