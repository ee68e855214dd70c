"""Everything that renders: the console during and after a run (console.py, terminal.py), the metric
rows and their dashboard plot (dashboard.py), the plots and tables of evaluations and sweeps (plots.py,
tables.py, ablation_report.py), the run's summary and HTML pages (report_run.py, viewer.py), the
W&B and TensorBoard loggers, and `--help`'s key listing (help.py). The numbers come from evaluate/.
"""
