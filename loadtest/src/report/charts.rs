//! SVG charts (plotters): throughput, latency percentiles and oversell per strategy, drawn
//! once as text: written as files beside `report.md` and inlined in `report.html`.

use anyhow::{Result, anyhow};
use plotters::chart::SeriesLabelStyle;
use plotters::prelude::*;

use super::RunReport;

const WIDTH: u32 = 1000;
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// One chart: the file it is written to and its SVG text.
#[derive(Debug, Clone)]
pub struct Chart {
    pub file: String,
    pub title: String,
    pub svg: String,
}

/// The throughput, oversell and latency charts of a run.
pub fn all(r: &RunReport) -> Result<Vec<Chart>> {
    let mut bars: Vec<(String, Vec<f64>)> = r
        .sold()
        .map(|s| {
            (
                s.strategy.name.to_string(),
                vec![
                    s.throughput.closed.successes_per_sec,
                    s.throughput.closed.attempts_per_sec,
                ],
            )
        })
        .collect();
    bars.extend(r.baselines.iter().map(|b| {
        (
            format!("[{}]", b.name),
            vec![b.result.successes_per_sec, b.result.attempts_per_sec],
        )
    }));
    let throughput = grouped_bars(
        "throughput.svg",
        "Closed-loop throughput per strategy ([baselines] in brackets), log scale",
        "per second",
        &["successful deductions/s", "attempts/s"],
        &bars,
        Scale::Log,
    )?;

    let oversell: Vec<(String, Vec<f64>)> = r
        .sold()
        .map(|s| {
            let a = &s.sale.accounting;
            (
                s.strategy.name.to_string(),
                vec![
                    a.oversell as f64,
                    a.lost_updates as f64,
                    a.negative_stock as f64,
                    a.undersell as f64,
                ],
            )
        })
        .collect();
    let anomalies = grouped_bars(
        "oversell.svg",
        &format!(
            "Flash sale of {} units: anomalies per strategy",
            r.settings.stock
        ),
        "units",
        &["oversell", "lost updates", "negative stock", "undersell"],
        &oversell,
        Scale::Linear,
    )?;

    let percentiles: Vec<(String, Vec<f64>)> = r
        .sold()
        .map(|s| {
            let (c, o) = (&s.throughput.closed.latency, &s.throughput.open.latency);
            (
                s.strategy.name.to_string(),
                [c.p50_us, c.p99_us, c.p999_us, o.p50_us, o.p99_us]
                    .map(|us| us as f64)
                    .to_vec(),
            )
        })
        .collect();
    let latency = grouped_bars(
        "latency.svg",
        "Latency percentiles per strategy (µs, log scale)",
        "µs",
        &[
            "closed loop p50",
            "closed loop p99",
            "closed loop p99.9",
            "open loop p50",
            "open loop p99",
        ],
        &percentiles,
        Scale::Log,
    )?;
    Ok(vec![throughput, latency, anomalies])
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    /// Decades: bars start at 1, values below 1 are drawn as 1.
    Log,
}

impl Scale {
    fn to_axis(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log => v.max(1.0).log10(),
        }
    }

    fn label(self, x: f64) -> String {
        match self {
            Scale::Linear => format!("{x}"),
            Scale::Log => format!("{:.0}", 10f64.powf(x)),
        }
    }
}

/// Horizontal bars grouped by category (first category on top), one colour per series.
fn grouped_bars(
    file: &'static str,
    title: &str,
    x_label: &str,
    series: &[&str],
    groups: &[(String, Vec<f64>)],
    scale: Scale,
) -> Result<Chart> {
    let mut svg = String::new();
    draw_bars(&mut svg, title, x_label, series, groups, scale)?;
    Ok(Chart {
        file: file.to_string(),
        title: title.to_string(),
        svg,
    })
}

fn draw_bars(
    out: &mut String,
    title: &str,
    x_label: &str,
    series: &[&str],
    groups: &[(String, Vec<f64>)],
    scale: Scale,
) -> Result<()> {
    // Group i occupies m slots (one per series) plus a gap; group 0 is drawn at the top.
    let m = series.len() as u32;
    let n = groups.len().max(1) as u32;
    let slots = n * (m + 1);
    let height = (120 + slots * 14).max(300);
    let root = SVGBackend::with_string(out, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let top = scale.to_axis(
        groups
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(0.0_f64, f64::max)
            .max(1.0),
    ) * 1.3; // headroom on the right for the legend
    let top = if top > 0.0 { top } else { 1.0 };
    // Within a group, the first series on top, as in the legend.
    let slot_of = |group: usize, k: usize| (n - 1 - group as u32) * (m + 1) + m - k as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(190)
        .build_cartesian_2d(0.0..top, (0..slots).into_segmented())
        .map_err(err)?;
    let names: Vec<String> = groups.iter().map(|(name, _)| name.clone()).collect();
    let label_of = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(slot) if slot % (m + 1) == 1 + (m - 1) / 2 => {
            let group = n - 1 - slot / (m + 1);
            names.get(group as usize).cloned().unwrap_or_default()
        }
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(x_label)
        .x_label_formatter(&|x| scale.label(*x))
        .y_labels(slots as usize + 1)
        .y_label_style(("sans-serif", 14))
        .y_label_formatter(&label_of)
        .draw()
        .map_err(err)?;
    for (k, label) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        chart
            .draw_series(groups.iter().enumerate().map(|(i, (_, values))| {
                let v = scale.to_axis(values.get(k).copied().unwrap_or(0.0));
                let slot = slot_of(i, k);
                Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(slot)),
                        (v, SegmentValue::Exact(slot + 1)),
                    ],
                    color.filled(),
                )
            }))
            .map_err(err)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    draw_legend(&mut chart.configure_series_labels())?;
    root.present().map_err(err)?;
    Ok(())
}

/// Draws a chart's legend in its upper-right corner, on a veil of white.
pub(crate) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    labels: &mut SeriesLabelStyle<'a, '_, DB, CT>,
) -> Result<()> {
    labels
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)
}

/// A plotters error as the run's error.
pub(crate) fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a chart: {e:?}")
}
