from cpctl.cli.main import entry

entry()
