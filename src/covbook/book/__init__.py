"""The pipeline: everything the ``covbook`` command does besides the science.

Modules (none imports torch or numpy at import time):

- :mod:`covbook.book.config`: paths, the profiles file, a notebook's parameters;
- :mod:`covbook.book.cache`: the cache key (notebook, parameters, science code,
  versions, device) and the verification of stored outputs;
- :mod:`covbook.book.runner`: executes notebooks in worker processes;
- :mod:`covbook.book.plan`: ``covbook run --plan`` (work and time estimates);
- :mod:`covbook.book.lock`: one writer per tree;
- :mod:`covbook.book.jsonio`: atomic JSON writes, verifying reads;
- :mod:`covbook.book.cli`: the ``covbook`` command.

Nothing here changes a number the book reports, so editing this package does
not invalidate cached notebooks.
"""
