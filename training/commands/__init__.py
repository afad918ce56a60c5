"""The console commands: thin argument parsers over importable functions."""
