"""index.html: the run's metadata, then every figure with how to read it and what it shows, then
the errors. Self-contained apart from the PNGs beside it; no scripts."""

import html
from pathlib import Path

from .meta import gather

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1280px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table.meta td { padding: 2px 12px 2px 0; vertical-align: top; } table.meta td:first-child { color: #555; white-space: nowrap; }
figure { margin: 1em 0 2.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; max-width: 60em; } ul.findings { margin-top: 0.4em; }
.warn { background: #fff3cd; border: 1px solid #e0c060; padding: 0.6em 1em; }
table.errors { border-collapse: collapse; font-size: 90%; } table.errors td, table.errors th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
nav a { margin-right: 1em; } code { background: #f4f4f4; padding: 0 3px; }
"""


def _e(x):
    return html.escape(str(x))


def _row(name, value):
    return f"<tr><td>{_e(name)}</td><td>{_e(value)}</td></tr>"


def write_index(records, figures, out_dir, skipped):
    m = gather(records)
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>flashcheck report</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>flashcheck report</h1>",
             f"<p>{len(figures)} figures from {records.count()} records in {len(records.files)} files. "
             'The numbers behind each figure are in <a href="summary.md">summary.md</a>.</p>']
    if not m.shards_complete:
        parts.append(f'<p class="warn">Incomplete sharded run: {_e(m.shards)}. Figures show only the shards present.</p>')
    if records.errors:
        parts.append(f'<p class="warn">{len(records.errors)} work items ended in an error; they are listed '
                     '<a href="#errors">at the end</a> and are missing from the figures.</p>')
    parts.append('<table class="meta">')
    parts += [
        _row("commit", ", ".join(m.commits) or "unknown"),
        _row("device", "; ".join(m.devices) or "unknown"),
        _row("date (UTC)", f"{m.first} .. {m.last}" if m.first != m.last else m.first),
        _row("scale", ", ".join(m.scales) or "unknown"),
        _row("seed", ", ".join(m.seeds) or "unknown"),
        _row("oracle precision", "; ".join(m.oracles) or "unknown"),
        _row("verdict: rho (subject error / baseline error limit)", ", ".join(m.rho) or "n/a"),
        _row("verdict: error floor (units of u)", ", ".join(m.floor_u) or "n/a"),
        _row("shards", m.shards),
        _row("run time", f"{m.seconds:.0f} s" if m.seconds else "n/a"),
        _row("flashcheck version", ", ".join(m.versions) or "unknown"),
        _row("records per experiment", ", ".join(f"{k}: {v}" for k, v in m.records_by_experiment.items())),
    ]
    parts.append("</table>")
    parts.append("<nav>" + "".join(f'<a href="#{_e(f.name)}">{_e(f.name)}</a>' for f in figures) + "</nav>")
    for f in figures:
        parts.append(f'<h2 id="{_e(f.name)}">{_e(f.title)}</h2><figure>')
        parts.append(f'<img src="{_e(f.path)}" alt="{_e(f.title)}">')
        parts.append(f"<figcaption>{_e(f.caption)}")
        if f.findings:
            parts.append('<ul class="findings">' + "".join(f"<li>{_e(x)}</li>" for x in f.findings) + "</ul>")
        parts.append("</figcaption></figure>")
    if skipped:
        parts.append("<h2>Records without a figure</h2><p>Experiments this version of the report cannot draw: "
                     + _e(", ".join(skipped)) + ". Their records are counted above.</p>")
    if records.checks:
        parts.append(f"<h2>Checks</h2><p>{len(records.checks)} <code>flashcheck check</code> records: "
                     + _e(", ".join(f"{r['subject']} {r['op']} {r['policy']}: {r['verdict']}" for r in records.checks[:50]))
                     + ("..." if len(records.checks) > 50 else "") + "</p>")
    if records.errors:
        parts.append('<h2 id="errors">Errors</h2><table class="errors"><tr><th>experiment</th><th>item</th><th>error</th></tr>')
        parts += [f"<tr><td>{_e(r['experiment'])}</td><td>{_e(r.get('item', ''))}</td><td>{_e(r.get('error', ''))}</td></tr>"
                  for r in records.errors]
        parts.append("</table>")
    parts.append("<h2>Record files</h2><ul>" + "".join(f"<li><code>{_e(p)}</code></li>" for p in records.files) + "</ul>")
    parts.append("</body></html>\n")
    path = Path(out_dir) / "index.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
