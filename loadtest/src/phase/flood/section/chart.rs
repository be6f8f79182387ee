//! One SVG per strategy's flood: answers per second by kind over time, and the units the
//! answers left on sale (right axis), from the flood's timeline.

use anyhow::Result;
use plotters::prelude::*;

use super::super::schema::{FloodResult, FloodSlice};
use crate::report::charts::{Chart, draw_legend, err};
use crate::schema::Of;

/// The file a strategy's flood chart is written to, in the run's directory.
pub fn file_name(flood: &Of<'_, FloodResult>) -> String {
    format!("flood-{}.svg", flood.strategy.name)
}

/// Every flood's chart (none for a flood without a timeline).
pub fn all(floods: &[Of<'_, FloodResult>]) -> Result<Vec<Chart>> {
    let mut charts = Vec::new();
    for flood in floods {
        let mut svg = String::new();
        if draw(&mut svg, flood)? {
            charts.push(Chart {
                file: file_name(flood),
                title: format!("The flood through `{}`", flood.strategy.name),
                svg,
            });
        }
    }
    Ok(charts)
}

type Column = fn(&FloodSlice) -> u64;

const SERIES: [(&str, Column, RGBColor); 5] = [
    ("bought", |s| s.bought, RGBColor(44, 160, 44)),
    ("sold out", |s| s.sold_out, RGBColor(31, 119, 180)),
    (
        "rules (limit, window)",
        |s| s.rules,
        RGBColor(148, 103, 189),
    ),
    ("shed (503, 429)", |s| s.shed, RGBColor(255, 127, 14)),
    ("no answer / other", |s| s.failed, RGBColor(214, 39, 40)),
];

/// Draws the chart into `out`; false when the flood has no timeline to draw.
fn draw(out: &mut String, flood: &Of<'_, FloodResult>) -> Result<bool> {
    let t = &flood.timeline;
    let (Some(first), Some(last)) = (t.first(), t.last()) else {
        return Ok(false);
    };
    // Counts per 100 ms slice, drawn per second.
    let per_second = 10.0;
    let peak = (t.iter())
        .flat_map(|s| SERIES.iter().map(move |(_, column, _)| column(s)))
        .max()
        .unwrap_or(0) as f64
        * per_second;
    let units = flood.crowd.accounting.initial_stock.max(1) as f64;
    let x = (first.from_ms as f64 / 1000.0)..((last.from_ms + 100) as f64 / 1000.0);
    let root = SVGBackend::with_string(out, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("The flood through `{}`", flood.strategy.name),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x.clone(), 0.0..(peak.max(1.0) * 1.15))
        .map_err(err)?
        .set_secondary_coord(x, 0.0..units * 1.15);
    chart
        .configure_mesh()
        .x_desc("seconds from the opening")
        .y_desc("answers per second")
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("units left")
        .draw()
        .map_err(err)?;
    for (label, column, color) in SERIES {
        let points = t
            .iter()
            .map(|s| (s.from_ms as f64 / 1000.0, column(s) as f64 * per_second));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    let left = t
        .iter()
        .map(|s| (s.from_ms as f64 / 1000.0, s.units_left as f64));
    chart
        .draw_secondary_series(LineSeries::new(left, BLACK.stroke_width(1)))
        .map_err(err)?
        .label("units left (right axis)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK));
    draw_legend(&mut chart.configure_series_labels())?;
    root.present().map_err(err)?;
    Ok(true)
}
