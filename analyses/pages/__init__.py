"""The dashboard's pages: thin views over services and read models, one module per area.

``analysis`` (the list, an analysis with its recipe editor, a round, its release, cancel, close
and drill-down), ``budget`` (burn-down, audit, policy, compare; over analyses.reads.analysis_reads),
``adaptive`` (adaptive runs: start, follow, steer, read).
"""
