from cpctl.cli.start import entry

entry()
