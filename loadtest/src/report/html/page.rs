//! The frame every HTML page of the benchmark shares: one self-contained document (inline
//! style, inline script, inline SVG; nothing fetched), a Content-Security-Policy that forbids
//! every request (`default-src 'none'`) and allows only its own inline script, by hash, and
//! the small script that sorts any table marked `sortable` when its header is clicked.

use base64::Engine;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use sha2::{Digest, Sha256};

/// The style of every page: readable tables, the verdict colours.
pub const STYLE: &str = r#"
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 1em 3em; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; } h3 { margin-top: 1.5em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
th, td { border: 1px solid #d6d6d6; padding: .25em .55em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " ▲"; }
table.sortable th[aria-sort=descending]::after { content: " ▼"; }
code { background: #f3f3f3; padding: 0 .2em; border-radius: 3px; white-space: nowrap; }
.pass { color: #1a7f37; } .fail { color: #cf222e; font-weight: 600; }
.better { background: #dafbe1; } .worse { background: #ffebe9; } .same { color: #57606a; }
.bad { background: #ffebe9; font-weight: 600; } .note { color: #57606a; }
.warning { border-left: 4px solid #d4a72c; background: #fff8c5; padding: .4em .8em; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
svg.timeline text { font: 11px system-ui, sans-serif; }
details summary { cursor: pointer; }
.counters { display: flex; flex-wrap: wrap; gap: .6em; margin: .6em 0; }
.counters > div { border: 1px solid #ddd; border-radius: 6px; padding: .3em .8em; min-width: 9em; }
.counters .label { display: block; font-size: .8em; color: #57606a; }
.big { font-size: 1.8em; font-variant-numeric: tabular-nums; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; } .charts svg { border: 1px solid #eee; }
.charts svg text { font: 11px system-ui, sans-serif; }
"#;

/// Sorts a `table.sortable` by the clicked column: numerically by each cell's `data-sort`
/// where the cells carry one, else by text; a second click reverses.
pub const SORT_SCRIPT: &str = r#"
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, column) {
    th.addEventListener('click', function () {
      var ascending = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('thead th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (row) {
        var cell = row.cells[column];
        var sort = cell && cell.getAttribute('data-sort');
        return sort !== null && sort !== '' && !isNaN(Number(sort)) ? Number(sort) : (cell ? cell.textContent.trim() : '');
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"#;

/// The CSP source of an inline script: `'sha256-<base64>'`.
pub fn script_hash(script: &str) -> String {
    let digest = Sha256::digest(script.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// A policy that lets the page make no request at all: no script but `scripts` (by hash), no
/// style but its own inline one, images only as `data:` URLs; `connect` names what the page
/// may connect to (the live page's event stream: `'self'`), nothing by default.
pub fn content_security_policy(scripts: &[&str], connect: Option<&str>) -> String {
    let hashes: Vec<String> = scripts.iter().map(|s| script_hash(s)).collect();
    format!(
        "default-src 'none'; script-src {}; style-src 'unsafe-inline'; img-src data:; \
         connect-src {}; form-action 'none'; base-uri 'none'",
        hashes.join(" "),
        connect.unwrap_or("'none'")
    )
}

/// A whole document: `title`, the page's `body`, and its inline `scripts` (each allowed by
/// hash), run after the body.
pub fn document(title: &str, body: Markup, scripts: &[&str], connect: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(content_security_policy(scripts, connect));
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                (body)
                @for script in scripts {
                    script { (PreEscaped(*script)) }
                }
            }
        }
    }
}

/// A report of its own (the isolation matrix's, the lock matrix's, the network sweep's) as a
/// page under its title.
pub fn of(title: &str, body: &crate::report::section::Section) -> String {
    with_charts(title, body, &[])
}

/// [`of`], drawing `charts` where the report places them.
pub fn with_charts(
    title: &str,
    body: &crate::report::section::Section,
    charts: &[crate::report::charts::Chart],
) -> String {
    let body = maud::html! {
        h1 { (title) }
        (super::section::print_section(body, charts))
    };
    document(title, body, &[SORT_SCRIPT], None).into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_each_script_by_its_sha256() {
        // The SHA-256 of the empty string, base64.
        assert_eq!(
            script_hash(""),
            "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
        );
        let csp = content_security_policy(&[SORT_SCRIPT], None);
        assert!(
            csp.starts_with("default-src 'none'; script-src 'sha256-"),
            "{csp}"
        );
        assert!(csp.contains("connect-src 'none'"), "{csp}");
    }
}
