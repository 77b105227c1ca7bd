"""The chaos soak: replicas under a seeded nemesis and a steady load, their history recorded
in one run directory, and a checker that reads it."""
