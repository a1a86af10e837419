"""The chapters' experiments: each takes the chapter's parameters and returns a result object.

A chapter calls one function per experiment (e.g. ``one_step.rate(...)``) and gets a
:class:`~covbook.experiments.result.Result`: its measurements (what the claim rules in
``notebooks/rules/NN_name.yml`` judge), the numbers its prose glues, and methods that draw its
figures and tables.  The notebook then records it with :func:`covbook.claims.record` and plots it;
the replicate loops, reshaping, standard errors and bookkeeping live here, tested at tiny sizes in
``tests/experiments`` without a kernel.

Layer: the experiments import the science (attention, processes, theory, icl, transformer,
markov, stats, ...), :mod:`covbook.rules` (the book's level) and :mod:`covbook.plotting`; never the
pipeline (:mod:`covbook.book`), :mod:`covbook.claims` or :mod:`covbook.session`.  Random draws come
from the :class:`covbook.streams.Streams` the chapter passes in, under the stream names each module
declares, so a chapter's numbers do not depend on where its code lives.

One module per chapter (its ``CHAPTER`` constant names it).
"""

from covbook.experiments.result import RandomStreams, Result

__all__ = ["Result", "RandomStreams"]
