"""`kafkawire top`: histogram (log-bucketed latency quantiles), model (what is counted, sans I/O),
view (the 80x24 screen), command (sources, the player, keys, the CLI face)."""
