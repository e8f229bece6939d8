"""What codec specs the harness accepts, declared as data.

The harness must never import a codec's own dependencies, so everything it needs to know before a
worker runs (configs, options, defaults, sample rates, length tolerance) lives here, and the adapter
module named by `module` is imported only inside a worker process.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Option:
    name: str
    kind: type  # int, float or str
    default: int | float | str
    help: str
    choices: tuple[int | float | str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    # Per-config overrides (config, value): where one knob's default and upper bound depend on the
    # configuration (DAC's codebook count is 12, 32 or 9).
    config_defaults: tuple[tuple[str, int | float | str], ...] = ()
    config_maximum: tuple[tuple[str, float], ...] = ()

    def default_for(self, config: str) -> int | float | str:
        return dict(self.config_defaults).get(config, self.default)

    def maximum_for(self, config: str) -> float | None:
        return dict(self.config_maximum).get(config, self.maximum)


@dataclass(frozen=True)
class Family:
    name: str
    module: str
    description: str
    configs: tuple[str, ...]
    default_config: str
    options: tuple[Option, ...] = field(default=())
    # True when the config is an open-ended bitrate such as "6k" or "7500" rather than a fixed list.
    config_is_bitrate: bool = False
    # "none" (DSP: no weights), "real" (real weights only), "real_or_synthetic" (seeded random
    # weights can stand in, loaded through the same code path, and every output says so).
    supported_weights: str = "none"
    # Named numerical variants (codecarena.variants) that apply to this family's model.
    variants: tuple[str, ...] = ()
    # The decoder carries hidden process-wide state (libcodec2's own PRNG), so a decode equals a
    # fresh decoder's only in a fresh process: warm mode still decodes such a family cold.
    fresh_process_decode: bool = False

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


OPUS = Family(
    name="opus",
    module="codecarena.codecs.opus",
    description="libopus through PyAV's bundled FFmpeg; 16 kHz input, packets are the bitstream",
    configs=("6k", "8k", "12k", "16k", "24k", "32k"),
    default_config="12k",
    config_is_bitrate=True,
    options=(
        Option("vbr", str, "on", "rate control: on (VBR), constrained (CVBR), off (CBR)",
               choices=("on", "constrained", "off")),
        Option("complexity", int, 10, "encoder complexity", minimum=0, maximum=10),
        Option("frame_ms", float, 20.0, "frame duration in ms",
               choices=(2.5, 5.0, 10.0, 20.0, 40.0, 60.0)),
        Option("application", str, "voip", "libopus application", choices=("voip", "audio", "lowdelay")),
        Option("bandwidth", str, "auto", "maximum coded bandwidth (auto lets libopus choose)",
               choices=("auto", "nb", "mb", "wb", "swb", "fb")),
    ),
)

CODEC2 = Family(
    name="codec2",
    module="codecarena.codecs.codec2",
    description="Codec 2 1.2 through pycodec2; 8 kHz, one frame per library call",
    configs=("3200", "2400", "1600", "1400", "1300", "1200", "700C"),
    default_config="3200",
    fresh_process_decode=True,
)

PCM = Family(
    name="pcm",
    module="codecarena.codecs.pcm",
    description="16-bit PCM at 16 kHz: the control that proves accounting and metrics",
    configs=("16",),
    default_config="16",
)

LYRA = Family(
    name="lyra",
    module="codecarena.codecs.lyra",
    description="Lyra v2 (SoundStream) with its real TFLite weights through ai-edge-litert; 16 kHz, 20 ms packets",
    configs=("3200", "6000", "9200"),
    default_config="3200",
    supported_weights="real",
    options=(
        Option("xnnpack", str, "on", "XNNPACK delegate for the encoder and LyraGAN (upstream: on; the "
               "quantizer always runs the plain kernels, as upstream)", choices=("on", "off")),
        Option("threads", int, 1, "interpreter threads", minimum=1, maximum=64),
    ),
)

ENCODEC = Family(
    name="encodec",
    module="codecarena.codecs.encodec",
    description="EnCodec 24 kHz (encodec 0.1.1, own runtime): 75 Hz frames, 10-bit codebooks",
    configs=("1.5k", "3k", "6k", "12k", "24k"),
    default_config="6k",
    supported_weights="real_or_synthetic",
    options=(Option("threads", int, 1, "torch threads (fixed and recorded: thread count can change bits)",
                    minimum=1, maximum=64),),
)

DAC = Family(
    name="dac",
    module="codecarena.codecs.dac",
    description="Descript Audio Codec (descript-audio-codec 1.0.0, own runtime): 16 kHz 50 Hz x 12, 24 kHz 75 Hz x 32, "
                "44.1 kHz 86.1 Hz x 9 codebooks of 10 bits",
    configs=("16khz", "24khz", "44khz"),
    default_config="16khz",
    supported_weights="real_or_synthetic",
    variants=("eager_snake_v1",),
    options=(Option("n_quantizers", int, 12, "codebooks sent, the rate knob (default all: 12, 32 or 9; each adds "
                    "500, 750 or 861 bps)", minimum=1, maximum=32,
                    config_defaults=(("24khz", 32), ("44khz", 9)),
                    config_maximum=(("16khz", 12), ("24khz", 32), ("44khz", 9))),
             Option("threads", int, 1, "torch threads (fixed and recorded: thread count changes DAC's decoded bits)",
                    minimum=1, maximum=64)),
)

SNAC = Family(
    name="snac",
    module="codecarena.codecs.snac",
    description="SNAC 24 kHz speech model (snac 1.2.1, own runtime): 3 scales of 12-bit codes, ~984 bps",
    configs=("24khz",),
    default_config="24khz",
    supported_weights="real_or_synthetic",
    variants=("eager_snake_v1",),
    options=(
        Option("noise_seed", int, 0, "seed of the decoder's NoiseBlock (torch.randn), set before every decode",
               minimum=0, maximum=2**31 - 1),
        Option("threads", int, 1, "torch threads (fixed and recorded)", minimum=1, maximum=64),
    ),
)

MIMI = Family(
    name="mimi",
    module="codecarena.codecs.mimi",
    description="Mimi (transformers 5.24 MimiModel, own runtime): 24 kHz, 12.5 Hz frames, 11-bit codes; "
                "config = quantizers (8 = 1100 bps, 32 = 4400 bps)",
    configs=("8", "16", "32"),
    default_config="8",
    supported_weights="real_or_synthetic",
    options=(Option("threads", int, 1, "torch threads (fixed and recorded)", minimum=1, maximum=64),),
)

BIGCODEC = Family(
    name="bigcodec",
    module="codecarena.codecs.bigcodec",
    description="BigCodec (bigcodec 0.0.3, own runtime): 16 kHz, 80 Hz frames, one 13-bit codebook = 1040 bps",
    configs=("16khz",),
    default_config="16khz",
    supported_weights="real_or_synthetic",
    options=(Option("threads", int, 1, "torch threads (fixed and recorded)", minimum=1, maximum=64),),
)

FISH_DAC = Family(
    name="fish_dac",
    module="codecarena.codecs.fish_dac",
    description="Fish Audio codec (fish-speech 0.1.0 modded_dac, own runtime): 44.1 kHz, 21.5 Hz, a 12-bit "
                "semantic code + 9 x 10-bit residual codes = 2196.4 bps",
    configs=("44khz",),
    default_config="44khz",
    supported_weights="real_or_synthetic",
    variants=("eager_snake_v1",),
    options=(Option("n_quantizers", int, 9, "residual codebooks sent, the rate knob (each adds 215.3 bps; the "
                    "semantic code is always sent)", minimum=1, maximum=9),
             Option("threads", int, 1, "torch threads (fixed and recorded)", minimum=1, maximum=64)),
)

XCODEC2 = Family(
    name="xcodec2",
    module="codecarena.codecs.xcodec2",
    description="X-Codec 2.0 (transformers 5.24 Xcodec2Model, own runtime): 16 kHz, 50 Hz frames, one 16-bit "
                "FSQ code = 800 bps",
    configs=("16khz",),
    default_config="16khz",
    supported_weights="real_or_synthetic",
    options=(Option("threads", int, 1, "torch threads (fixed and recorded)", minimum=1, maximum=64),),
)

WAVTOKENIZER = Family(
    name="wavtokenizer",
    module="codecarena.codecs.wavtokenizer",
    description="WavTokenizer large speech 75 tokens/s (transformers 5.24 WavTokenizerModel, own runtime): 24 kHz, "
                "75 Hz frames, one 12-bit codebook = 900 bps",
    configs=("24khz",),
    default_config="24khz",
    supported_weights="real_or_synthetic",
    options=(Option("threads", int, 1, "torch threads (fixed and recorded)", minimum=1, maximum=64),),
)

FAMILIES: dict[str, Family] = {f.name: f for f in (OPUS, CODEC2, PCM, LYRA, ENCODEC, DAC, SNAC, MIMI, BIGCODEC,
                                                   FISH_DAC, XCODEC2, WAVTOKENIZER)}
