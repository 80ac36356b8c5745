# GENERATED tables of the dissector (native/tools/gen_*.py). Do not edit.
