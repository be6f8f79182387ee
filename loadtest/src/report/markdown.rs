//! `report.md`: the report's parts ([`super::document`]) as Markdown, under its title.

use super::document;
use crate::schema::RunReport;

/// The whole report.
pub fn render(r: &RunReport) -> String {
    let mut md = format!("# {}\n\n", document::title(r));
    for part in document::parts(r) {
        md.push_str(&part.section.markdown());
    }
    md
}
