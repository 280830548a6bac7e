"""Click commands that are imported lazily by cpctl.cli (see LAZY_COMMANDS)."""
