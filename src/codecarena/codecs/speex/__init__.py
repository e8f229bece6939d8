"""The speex family: a command-line codec. `codec.toml` declares its commands and binaries (codecarena.codecs.command runs them), `registry.toml` pins the Debian packages they come from."""
