"""The HTTP codec service (`codecarena serve`) and its client-side provenance check."""
