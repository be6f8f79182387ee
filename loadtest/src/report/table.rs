//! The one table model of every report: a header, then rows of typed cells (text or code, a
//! figure's value to sort by, the field it shows, a row's strategy and whether it broke an
//! invariant), built once from the schema. Two printers read it and decide nothing: Markdown
//! here ([`Table::render`], every cell escaped by one rule, [`cell`]) and HTML
//! (`report::html::table`).

use std::fmt::Write as _;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    /// Figures.
    Right,
}

/// One cell: what it says, and what an HTML page needs besides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    /// What the cell says: Markdown inline (a `` `span` `` is code, `**words**` strong).
    pub text: String,
    /// The whole cell is a name of code (a strategy, a tool, a setting).
    pub code: bool,
    /// The figure the cell shows, which a sortable table sorts by.
    pub sort: Option<f64>,
    /// The report field the cell shows, for a reader that looks one up.
    pub field: Option<&'static str>,
    /// How a comparison judged the change the cell shows, if it judged it.
    pub judged: Option<Judged>,
}

/// A comparison's verdict on a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    Better,
    Worse,
    /// Within the runs' noise.
    Same,
}

impl Cell {
    /// Words.
    pub fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            ..Cell::default()
        }
    }

    /// A name of code: `` `conditional` ``.
    pub fn code(name: impl std::fmt::Display) -> Cell {
        Cell {
            text: name.to_string(),
            code: true,
            ..Cell::default()
        }
    }

    /// A figure written as `text`, sorted by `value`.
    pub fn num(value: f64, text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            sort: Some(value),
            ..Cell::default()
        }
    }

    /// A whole number.
    pub fn int(value: impl Into<i64>) -> Cell {
        let value = value.into();
        Cell::num(value as f64, value.to_string())
    }

    /// No figure: `–`, sorted as nothing.
    pub fn none() -> Cell {
        Cell::text("–")
    }

    /// The same cell, naming the report field it shows.
    pub fn field(self, field: &'static str) -> Cell {
        Cell {
            field: Some(field),
            ..self
        }
    }

    /// The same cell, judged.
    pub fn judged(self, judged: Option<Judged>) -> Cell {
        Cell { judged, ..self }
    }

    /// The cell as Markdown: its text, in backticks when it is code, in bold when judged
    /// better or worse, escaped.
    fn markdown(&self) -> String {
        let text = match self.code {
            true => format!("`{}`", self.text),
            false => self.text.clone(),
        };
        match self.judged {
            Some(Judged::Better | Judged::Worse) => cell(&format!("**{text}**")),
            _ => cell(&text),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell::text(text)
    }
}

impl From<&String> for Cell {
    fn from(text: &String) -> Cell {
        Cell::text(text.as_str())
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::text(text)
    }
}

/// One row: its cells, the strategy (or the baseline) it is about, if any, and whether it
/// broke an invariant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub cells: Vec<Cell>,
    pub name: Option<String>,
    pub broken: bool,
}

/// What a table's rows are named after, when they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowsName {
    /// A strategy of the run.
    #[default]
    Strategy,
    /// A strategy or a baseline, as two runs know it.
    Name,
}

/// A table: a header, then rows of as many cells.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table's name on a page (its HTML id).
    pub id: Option<&'static str>,
    /// Each row's first cell names it (a table of settings): a page prints it as a heading.
    pub headed_rows: bool,
    /// What the rows' names are.
    pub rows_name: RowsName,
    pub columns: Vec<(String, Align)>,
    pub rows: Vec<Row>,
}

impl Table {
    /// A table with these columns.
    pub fn new<S: AsRef<str>>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        Table {
            id: None,
            headed_rows: false,
            rows_name: RowsName::Strategy,
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

    /// The same table, named `id` on a page and sortable there.
    pub fn named(self, id: &'static str) -> Table {
        Table {
            id: Some(id),
            ..self
        }
    }

    /// The same table, each row's first cell its heading (a table of settings, not sorted).
    pub fn with_headed_rows(self) -> Table {
        Table {
            headed_rows: true,
            ..self
        }
    }

    /// Adds a row; missing cells are left empty, extra ones dropped.
    pub fn row<C: Into<Cell>>(&mut self, cells: impl IntoIterator<Item = C>) -> &mut Table {
        self.push(Row {
            cells: cells.into_iter().map(Into::into).collect(),
            ..Row::default()
        })
    }

    /// The same table, its rows named after a strategy or a baseline of two runs.
    pub fn rows_named_by_name(self) -> Table {
        Table {
            rows_name: RowsName::Name,
            ..self
        }
    }

    /// Adds a row about `strategy`, marked when it broke an invariant.
    pub fn strategy_row<C: Into<Cell>>(
        &mut self,
        strategy: &str,
        broken: bool,
        cells: impl IntoIterator<Item = C>,
    ) -> &mut Table {
        self.push(Row {
            cells: cells.into_iter().map(Into::into).collect(),
            name: Some(strategy.to_owned()),
            broken,
        })
    }

    fn push(&mut self, mut row: Row) -> &mut Table {
        row.cells.resize(self.columns.len(), Cell::default());
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
            for c in &row.cells {
                if c.text.is_empty() {
                    md.push_str(" |");
                } else {
                    let _ = write!(md, " {} |", c.markdown());
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

    #[test]
    fn a_code_cell_is_written_in_backticks_and_its_figure_kept_apart() {
        let mut t = Table::left(["strategy"]).and_right(["sold"]);
        t.strategy_row(
            "naive",
            true,
            [Cell::code("naive"), Cell::int(7).field("sold")],
        );
        assert_eq!(
            t.render(),
            "| strategy | sold |\n|---|--:|\n| `naive` | 7 |\n"
        );
        let row = &t.rows[0];
        assert_eq!((row.name.as_deref(), row.broken), (Some("naive"), true));
        assert_eq!(
            (row.cells[1].sort, row.cells[1].field),
            (Some(7.0), Some("sold"))
        );
    }
}
