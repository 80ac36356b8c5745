"""Sans-I/O Kafka protocol: the versioned schema registry, headers, record data.

Nothing in this package opens a file or a socket: every function takes bytes
(or a memoryview) and returns plain Python objects, or the reverse.
"""
