"""Build-time generator: Kafka's JSON message specs -> the project's registry data.

Run as ``python -m protocol.codegen SPEC_DIR [SPEC_DIR ...]`` (newest folder first
or last: the folders are ordered by the version each spec file defines). The
runtime never imports this package; it reads only ``protocol/_generated``.
"""
