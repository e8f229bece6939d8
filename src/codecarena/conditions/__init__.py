"""Input conditions: noise, reverberation, level, tandem coding and generations of re-encoding, applied to
the input a codec's encoder gets (docs/conditions.md).

`spec` parses a condition, `draws` is its seeded counter-mode stream, `p56` the active speech level,
`noise` and `reverb` the models, `make` the conditioned input and its trace (and their re-derivation),
`sets` the pinned folders a condition draws from, `agreement` what a re-encode keeps of a payload,
`record` what a row records of its condition. What a run's conditions need before any row (they name
codec specs, so it lives above `specs`) is `pipeline/condition_plan.py`.
"""
