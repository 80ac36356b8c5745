"""The commands of `kafkawire`, one module each (top is kafkawire.top, replay is replay.command):
each gives add_parser(sub) and run(args)."""
