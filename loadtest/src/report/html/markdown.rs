//! Markdown as HTML: the findings' prose and a table cell's line, with raw HTML in them shown
//! as text, never passed through.

use maud::{Markup, PreEscaped};

/// Markdown prose (the findings' words, a scenario's "why") as HTML; raw HTML in it is shown
/// as text, never passed through.
pub fn prose(markdown: &str) -> Markup {
    use pulldown_cmark::{Event, Parser};
    let events = Parser::new(markdown).map(|event| match event {
        Event::Html(text) | Event::InlineHtml(text) => Event::Text(text),
        other => other,
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, events);
    PreEscaped(out)
}

/// One line of Markdown (a table's cell) as HTML, without a paragraph around it; raw HTML is
/// shown as text.
pub fn inline(markdown: &str) -> Markup {
    let html = prose(markdown).0;
    let inner = html
        .trim_end()
        .strip_prefix("<p>")
        .and_then(|h| h.strip_suffix("</p>"));
    PreEscaped(inner.map_or(html.clone(), str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_in_prose_is_shown_as_text() {
        let html = prose("a `code` and <script>alert(1)</script> **bold**").into_string();
        assert!(html.contains("<code>code</code>"), "{html}");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }
}
