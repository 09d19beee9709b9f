"""``envlayer bench``: figures a user can reproduce on their own setup.

One module per job: :mod:`.timing` (repeated runs, medians and spread),
:mod:`.machine` (the machine and versions), :mod:`.measure` (what is measured through
envlayer), :mod:`.baselines` (the same work without envlayer, in the same run),
:mod:`.flood` (floods in a child interpreter, for their peak memory), :mod:`.runner`
(the order of a run and its cleanup), :mod:`.report` (JSON, tables, the docs page),
:mod:`.plots` (PNG plots, matplotlib imported lazily) and :mod:`.command` (the CLI).
"""
