"""Keeping a program's files safe: writes that are whole or absent, output paths checked
before the work, one writer per output, storage faults named, and the record of a run.

A program opens each output it writes through `outputs` (prepare, lock, write atomically,
report); the modules beside it are the parts that does it with."""
