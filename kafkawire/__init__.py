"""kafkawire's command line (`kafkawire ...` or `python -m kafkawire ...`): see kafkawire.cli."""
