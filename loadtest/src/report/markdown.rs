//! `report.md`: a report's parts ([`crate::document`]) as Markdown, under its title.

use super::section::Part;

/// The whole report.
pub fn render(title: &str, parts: &[Part]) -> String {
    let mut md = format!("# {title}\n\n");
    for part in parts {
        md.push_str(&part.section.markdown());
    }
    md
}
