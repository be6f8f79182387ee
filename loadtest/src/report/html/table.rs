//! The table model ([`crate::report::table::Table`]) printed as HTML: a table with a header
//! is sortable, each figure carries its value (`data-sort`) and the field it shows
//! (`data-field`), a strategy's row its name (`data-strategy`), a row that broke an invariant
//! is marked (`bad`). It prints what the model holds and decides nothing.

use maud::{Markup, html};

use super::markdown::inline;
use crate::report::table::{Align, Cell, Judged, Row, RowsName, Table};

/// The table as HTML.
pub fn print(t: &Table) -> Markup {
    let headed = t.columns.iter().any(|(title, _)| !title.is_empty());
    let sortable = (headed && !t.headed_rows).then_some("sortable");
    html! {
        table class=[sortable] id=[t.id] {
            @if headed {
                thead { tr { @for (title, _) in &t.columns { th { (title) } } } }
            }
            tbody { @for row in &t.rows { (print_row(t, row)) } }
        }
    }
}

fn print_row(t: &Table, row: &Row) -> Markup {
    let class = row.broken.then_some("bad");
    let cells = html! {
        @for (i, (c, (_, align))) in row.cells.iter().zip(&t.columns).enumerate() {
            @if i == 0 && t.headed_rows {
                th { (content(c)) }
            } @else {
                (print_cell(c, *align))
            }
        }
    };
    match t.rows_name {
        RowsName::Strategy => {
            html! { tr class=[class] data-strategy=[row.name.as_deref()] { (cells) } }
        }
        RowsName::Name => html! { tr class=[class] data-name=[row.name.as_deref()] { (cells) } },
    }
}

/// A cell: a figure lined up right and sorted by its value, marked as the comparison judged it.
fn print_cell(c: &Cell, align: Align) -> Markup {
    let judged = c.judged.map(|j| match j {
        Judged::Better => "better",
        Judged::Worse => "worse",
        Judged::Same => "same",
    });
    let class = match (align, judged) {
        (Align::Right, Some(j)) => Some(format!("num {j}")),
        (Align::Right, None) => Some("num".to_string()),
        (Align::Left, j) => j.map(str::to_string),
    };
    let sort = (align == Align::Right || c.sort.is_some()).then(|| sort_key(c));
    let verdict = judged.filter(|j| *j != "same");
    html! {
        td class=[class] data-field=[c.field] data-sort=[sort] data-judged=[verdict] { (content(c)) }
    }
}

/// A figure's value, or an empty key for a figure column's `–`.
fn sort_key(c: &Cell) -> String {
    c.sort.map_or_else(String::new, |v| v.to_string())
}

/// What a cell says: code when it is code; its text's Markdown (code spans, strong words)
/// where it has any.
fn content(c: &Cell) -> Markup {
    match (c.code, c.text.contains(['`', '*'])) {
        (true, _) => html! { code { (c.text) } },
        (false, true) => inline(&c.text),
        (false, false) => html! { (c.text) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_carries_its_strategy_its_mark_and_each_figure_with_its_value_and_field() {
        let mut t = Table::left(["strategy", "note"])
            .and_right(["oversell"])
            .named("sales");
        t.strategy_row(
            "naive",
            true,
            [
                Cell::code("naive"),
                Cell::text("42% of `redis`"),
                Cell::int(7).field("oversell"),
            ],
        );
        let html = print(&t).into_string();
        assert!(
            html.starts_with("<table class=\"sortable\" id=\"sales\"><thead>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<tr class=\"bad\" data-strategy=\"naive\"><td><code>naive</code></td>\
                 <td>42% of <code>redis</code></td>\
                 <td class=\"num\" data-field=\"oversell\" data-sort=\"7\">7</td></tr>"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_table_of_settings_heads_each_row_and_has_no_header() {
        let mut t = Table::left(["", ""]).named("settings").with_headed_rows();
        t.row([Cell::text("CPUs"), Cell::text("2").field("cpus")]);
        assert_eq!(
            print(&t).into_string(),
            "<table id=\"settings\"><tbody><tr><th>CPUs</th><td data-field=\"cpus\">2</td></tr></tbody></table>"
        );
    }

    #[test]
    fn markup_in_a_cell_is_shown_as_text() {
        let mut t = Table::left(["what"]);
        t.row(["<script>x</script>"]);
        assert!(print(&t).into_string().contains("&lt;script&gt;"));
    }
}
