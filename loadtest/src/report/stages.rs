//! Where each strategy's purchases spent their time in the closed loop, as the service timed
//! them: one row per strategy, a column per stage some strategy of the run went through (a run
//! by a service that did not yet time a stage has no column for it), so the bottleneck shows
//! without a profiler.

use app::metrics::Stage;

use super::section::Section;
use super::table::Table;
use crate::schema::RunReport;

/// The section; nothing when no strategy's stages were read.
pub fn section(r: &RunReport) -> Section {
    let timed: Vec<_> = r
        .sold()
        .filter_map(|x| x.loops.stages.as_ref().map(|s| (x, s)))
        .collect();
    if timed.is_empty() {
        return Section::default();
    }
    let mut s = Section::titled("Where a purchase's time goes (closed loop)");
    s.prose(
        "As the service timed it, over the closed-loop runs of each strategy (every instance's \
         `seckill_purchase_stage_seconds`, read before and after each run): the mean µs per \
         purchase in each stage, over the purchases that went through it. *In the service*: from \
         the request's headers to its answer. *Admission*: to a place among the purchases in \
         flight (the body, the buyer's token, the product's memory, the limiter). *Strategy*: \
         all of the strategy's time, of which *lock wait* (its lock), *queued* (`batched`: \
         waiting for its batch to commit), *batch* (`batched`: the batch's transaction) with \
         its *lookup* (of its purchases that already have an order), *stock update* (the \
         conditional `UPDATE`, which waits for the product's row while another batch holds it), \
         *order insert* (the orders' multi-row `INSERT`) and *commit* (the `COMMIT` alone: its \
         round trip, in which the database flushes its log, shared by the batch), \
         *script* (the Redis script's round trip) and *order write* (`redis-lua`: the order's \
         insert after the script). What is left of the time in the service beyond admission and \
         strategy is the answer's way back to the handler and out. A purchase refused from \
         memory has no stages.",
    );
    let columns: Vec<Stage> = (Stage::ALL.into_iter())
        .filter(|stage| timed.iter().any(|(_, s)| s.mean_of(stage.name()).is_some()))
        .collect();
    let mut t = Table::left(["strategy"]).and_right(
        std::iter::once("in the service µs".to_owned())
            .chain(columns.iter().map(|s| s.name().replace('_', " ")))
            .chain(["answered".to_owned()]),
    );
    for (x, s) in &timed {
        let mut row = vec![
            format!("`{}`", x.strategy.name),
            format!("{:.0}", s.mean_us),
        ];
        for stage in &columns {
            row.push(
                s.mean_of(stage.name())
                    .map_or_else(|| "–".into(), |us| format!("{us:.0}")),
            );
        }
        row.push(s.purchases.to_string());
        t.row(row);
    }
    s.table(t);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_timed_strategy_a_column_per_stage_one_went_through_a_dash_where_skipped() {
        let mut r = crate::sample::report();
        let name = r.strategies[0].strategy.name;
        let queued = crate::schema::StageTime {
            stage: "queued".into(),
            purchases: 400,
            mean_us: 700.0,
        };
        let other = r.strategies[1].loops.as_mut().unwrap();
        other.stages.as_mut().unwrap().stages.push(queued);
        let md = section(&r).markdown();
        let header = "| strategy | in the service µs | admission | strategy | lock wait | queued | answered |";
        assert!(md.contains(header), "{md}");
        let row = format!("| `{name}` | 2500 | 300 | 2000 | 1500 | – | 400 |");
        assert!(md.contains(&row), "{md}");
        for x in &mut r.strategies {
            x.loops.as_mut().unwrap().stages = None;
        }
        assert!(section(&r).is_empty());
    }
}
