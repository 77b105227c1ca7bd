"""Action executors: one module per action family (SPEC §4.4, §8)."""
