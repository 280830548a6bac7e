"""Click commands that are imported lazily by cpctl.cli.main (see LAZY_COMMANDS)."""
