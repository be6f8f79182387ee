//! The one Markdown table writer: every table of every report (the run's, the comparison's,
//! the scenarios', the lock matrix's, the README's) is written here, and every cell is escaped
//! by one rule ([`cell`]).

use std::fmt::Write as _;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    /// Figures.
    Right,
}

/// A table: a header, then rows of as many cells.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new<S: AsRef<str>>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        Table {
            columns: columns
                .into_iter()
                .map(|(title, align)| (title.as_ref().to_owned(), align))
                .collect(),
            rows: Vec::new(),
        }
    }

    /// A table whose columns all line up left.
    pub fn left<S: AsRef<str>>(titles: impl IntoIterator<Item = S>) -> Table {
        Table::new(titles.into_iter().map(|t| (t, Align::Left)))
    }

    /// More columns, lined up left.
    pub fn and_left<S: AsRef<str>>(self, titles: impl IntoIterator<Item = S>) -> Table {
        self.and(titles, Align::Left)
    }

    /// More columns, lined up right (figures).
    pub fn and_right<S: AsRef<str>>(self, titles: impl IntoIterator<Item = S>) -> Table {
        self.and(titles, Align::Right)
    }

    fn and<S: AsRef<str>>(mut self, titles: impl IntoIterator<Item = S>, align: Align) -> Table {
        self.columns
            .extend(titles.into_iter().map(|t| (t.as_ref().to_owned(), align)));
        self
    }

    /// Adds a row; missing cells are left empty, extra ones dropped.
    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        let mut row: Vec<String> = cells.into_iter().map(|c| cell(c.as_ref())).collect();
        row.resize(self.columns.len(), String::new());
        self.rows.push(row);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as GitHub-flavoured Markdown, ending in a newline.
    pub fn render(&self) -> String {
        let mut md = String::from("|");
        for (title, _) in &self.columns {
            let _ = write!(md, " {} |", cell(title));
        }
        md.push_str("\n|");
        for (_, align) in &self.columns {
            md.push_str(match align {
                Align::Left => "---|",
                Align::Right => "--:|",
            });
        }
        md.push('\n');
        for row in &self.rows {
            md.push('|');
            for c in row {
                if c.is_empty() {
                    md.push_str(" |");
                } else {
                    let _ = write!(md, " {c} |");
                }
            }
            md.push('\n');
        }
        md
    }
}

/// The one escaping rule: a `|` would end the cell, so it is escaped (`\|`, which GitHub also
/// honours inside code spans), and a line break would end the row, so it becomes a space.
pub fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_a_header_an_alignment_line_and_its_rows() {
        let mut t = Table::new([("strategy", Align::Left), ("sold", Align::Right)]);
        t.row(["`naive`", "3000"]).row(["`conditional`"]);
        assert_eq!(
            t.render(),
            "| strategy | sold |\n|---|--:|\n| `naive` | 3000 |\n| `conditional` | |\n"
        );
    }

    #[test]
    fn columns_can_be_added_left_and_right() {
        let mut t = Table::left(["a"]).and_right(["b", "c"]).and_left(["d"]);
        t.row(["1", "2", "3", "4"]);
        assert_eq!(
            t.render(),
            "| a | b | c | d |\n|---|--:|--:|---|\n| 1 | 2 | 3 | 4 |\n"
        );
    }

    #[test]
    fn a_pipe_or_a_line_break_in_a_cell_cannot_break_the_table() {
        let mut t = Table::left(["what"]);
        t.row(["a | b\nc"]);
        assert_eq!(t.render(), "| what |\n|---|\n| a \\| b c |\n");
    }
}
