"""The pipeline: everything the ``covbook`` command does besides the science (ARCHITECTURE.md maps its modules).

None of its modules imports torch or numpy at import time, and nothing here changes a number the book
reports, so editing this package does not invalidate cached notebooks.
"""
