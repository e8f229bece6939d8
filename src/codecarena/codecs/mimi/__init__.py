"""The mimi family: `codec.toml` (what the harness knows), `adapter.py` (what runs in its workers), `registry.toml` (its pins), `lock.txt` (its runtime)."""
