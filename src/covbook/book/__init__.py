"""The pipeline: everything the ``covbook`` command does besides the science.

Modules (none imports torch or numpy at import time):

- :mod:`covbook.book.config`: paths, the profiles file, a notebook's parameters;
- :mod:`covbook.book.cache`: the cache key (notebook, parameters, science code,
  versions, device) and the verification of stored outputs;
- :mod:`covbook.book.runner`: a notebook's job (its process, time limit, stop and commit) and the run
  that submits the jobs to an executor, a local process pool by default;
- :mod:`covbook.book.distributed`: the same jobs on a Dask cluster (``--cluster``);
- :mod:`covbook.book.plan`: ``covbook run --plan`` (work and time estimates);
- :mod:`covbook.book.lock`: one writer per tree;
- :mod:`covbook.book.repository`: the book's GitHub repository, from one place, and the
  notebooks' setup cell that installs covbook where it is missing (Colab);
- :mod:`covbook.book.sphinx_pages`: Sphinx hook
  (repository and launch buttons only when the repository is known; pages without console errors);
- :mod:`covbook.book.results`, :mod:`covbook.book.theorems`: the "Results at a glance" page
  (``book/results.yml`` and the run) and the theorem boxes of the built chapters;
- :mod:`covbook.book.checks`: ``covbook check`` (failed claims, bases, the claim-id manifest,
  citations);
- :mod:`covbook.book.report`: the reproduction report;
- :mod:`covbook.book.sweep`: ``covbook sweep`` and the calibration page;
- :mod:`covbook.book.sphinx_claims`: the ``{claim}`` role and the run each chapter shows;
- :mod:`covbook.book.cli`: the ``covbook`` command.

Atomic JSON writes and verifying reads are :mod:`covbook._jsonio`, shared with
:mod:`covbook.claims` (the notebooks write claims through it).

Nothing here changes a number the book reports, so editing this package does
not invalidate cached notebooks.
"""
