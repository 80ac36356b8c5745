"""Latency, error, version and consumer-lag analyses of landed tables: `kafkawire report`.

Modules: analysis (the analyses with pandas, no JVM; `report()` gathers them), spark_analysis
(the same figures in Spark SQL, for tables too big for one machine), html (one self-contained
HTML page of them). They read the tables landing/ writes, through their public schemas.
"""
