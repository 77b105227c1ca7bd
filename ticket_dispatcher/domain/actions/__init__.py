"""Action executors: one module per action family (docs/policies.md, "Actions"), each with its
typed, versioned state (``state.py``)."""
