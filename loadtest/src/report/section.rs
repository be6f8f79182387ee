//! The one model of a report's sections: headings, prose (Markdown paragraphs), tables
//! ([`Table`]) and charts, in order, built once from the schema and the findings. Two printers
//! read it and decide nothing: [`Section::markdown`] here, and `report::html::section`.

use std::fmt::Write as _;

use super::table::Table;
use crate::schema::ScenarioReport;

/// One part of the report.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its name on a page (the HTML id), linked from the page's list of sections.
    pub id: String,
    /// What the list of sections calls it.
    pub label: String,
    pub section: Section,
}

impl Part {
    pub fn new(id: &str, label: &str, section: Section) -> Part {
        Part {
            id: id.to_owned(),
            label: label.to_owned(),
            section,
        }
    }
}

/// One piece of a section.
#[derive(Debug, Clone)]
pub enum Block {
    /// A heading: 2 for a section's, 3 for a part of one.
    Heading {
        level: u8,
        text: String,
    },
    /// Paragraphs of Markdown (code spans, emphasis, lists).
    Prose(String),
    Table(Table),
    /// A chart written beside the report (an SVG file), drawn where the page can.
    Chart {
        file: String,
        alt: String,
    },
    /// Markdown the reader must not miss (what fell by more than half).
    Warning(String),
    /// A fault scenario's record: what was injected, and each row's expectation and outcome.
    Scenario(Box<ScenarioReport>),
}

/// A section: its blocks, in the order they are read.
#[derive(Debug, Clone, Default)]
pub struct Section {
    pub blocks: Vec<Block>,
}

impl Section {
    /// A section under a heading of its own.
    pub fn titled(title: impl Into<String>) -> Section {
        let mut s = Section::default();
        s.heading(2, title);
        s
    }

    pub fn heading(&mut self, level: u8, text: impl Into<String>) -> &mut Section {
        let text = text.into();
        self.blocks.push(Block::Heading { level, text });
        self
    }

    /// Paragraphs of Markdown; nothing when they are empty.
    pub fn prose(&mut self, markdown: impl Into<String>) -> &mut Section {
        self.words(markdown.into(), Block::Prose)
    }

    pub fn table(&mut self, table: Table) -> &mut Section {
        self.blocks.push(Block::Table(table));
        self
    }

    pub fn chart(&mut self, file: impl Into<String>, alt: impl Into<String>) -> &mut Section {
        let (file, alt) = (file.into(), alt.into());
        self.blocks.push(Block::Chart { file, alt });
        self
    }

    /// Markdown the reader must not miss; nothing when it is empty.
    pub fn warning(&mut self, markdown: impl Into<String>) -> &mut Section {
        self.words(markdown.into(), Block::Warning)
    }

    /// `markdown` as the block `kind` makes of it, unless it says nothing.
    fn words(&mut self, markdown: String, kind: fn(String) -> Block) -> &mut Section {
        if !markdown.trim().is_empty() {
            self.blocks.push(kind(markdown.trim_end().to_owned()));
        }
        self
    }

    pub fn scenario(&mut self, report: ScenarioReport) -> &mut Section {
        self.blocks.push(Block::Scenario(Box::new(report)));
        self
    }

    /// Another section's blocks after this one's.
    pub fn append(&mut self, other: Section) -> &mut Section {
        self.blocks.extend(other.blocks);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The section as Markdown: a blank line between blocks, a chart as an image link.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let next_is_chart = matches!(self.blocks.get(i + 1), Some(Block::Chart { .. }));
            match block {
                Block::Heading { level, text } => {
                    let _ = write!(md, "\n{} {text}\n\n", "#".repeat(usize::from(*level)));
                }
                Block::Prose(text) | Block::Warning(text) => {
                    let _ = write!(md, "{text}\n\n");
                }
                Block::Scenario(s) => {
                    let _ = writeln!(md, "{}", super::scenarios::markdown(s));
                }
                Block::Table(t) => {
                    md.push_str(&t.render());
                    md.push('\n');
                }
                Block::Chart { file, alt } => {
                    let _ = writeln!(md, "![{alt}]({file})");
                    if !next_is_chart {
                        md.push('\n');
                    }
                }
            }
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_prints_its_blocks_in_order_with_a_blank_line_between() {
        let mut t = Table::left(["a"]);
        t.row(["1"]);
        let mut s = Section::titled("The flood");
        s.prose("Words.")
            .prose("  ")
            .table(t)
            .chart("f.svg", "the flood")
            .chart("g.svg", "g");
        s.prose("More.");
        assert_eq!(
            s.markdown(),
            "\n## The flood\n\nWords.\n\n| a |\n|---|\n| 1 |\n\n![the flood](f.svg)\n![g](g.svg)\n\nMore.\n\n"
        );
    }
}
