from cpctl.cli import entry

entry()
