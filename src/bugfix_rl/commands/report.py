"""`bugfix-rl report dir=<sweep dir>`: the ablation table of a sweep, report.md, forest plot, sweep page."""

from __future__ import annotations

from bugfix_rl.present.terminal import output_console


def report_command(cfg):
    """`bugfix-rl report dir=<sweep dir> [reference=<arm>]`: ablation table, report.md, forest plot, power."""
    from bugfix_rl.errors import UserError
    from bugfix_rl.evaluate.ablation import ReportError, build_report
    from bugfix_rl.present.ablation_report import write_report
    from bugfix_rl.present.tables import print_report

    try:
        report = build_report(cfg.dir, cfg.reference)
    except ReportError as err:
        raise UserError(str(err)) from None
    print_report(report, output_console())
    from bugfix_rl.present.viewer import write_sweep_page  # the same table as a page linking each run's viewer.html

    print("wrote " + ", ".join(str(p) for p in [*write_report(report), write_sweep_page(report)]))
    return report
