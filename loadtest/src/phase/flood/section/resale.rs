//! The flood's second act in the report: the winners who paid and those who never did, the
//! units that came back and sold again, the instance killed meanwhile, and whether every unit
//! was still accounted for at the end.

use std::fmt::Write;

use super::super::schema::{FloodResult, FloodShape, Resale};
use crate::report::section::Section;
use crate::report::table::Table;
use crate::schema::Of;

/// The second act's table and what went wrong in it; nothing when the flood had none.
pub fn section(shape: &FloodShape, floods: &[Of<'_, FloodResult>]) -> Section {
    let acts: Vec<(&Of<'_, FloodResult>, &Resale)> = floods
        .iter()
        .filter_map(|f| f.resale.as_ref().map(|r| (f, r)))
        .collect();
    if acts.is_empty() {
        return Section::default();
    }
    let mut s = Section::default();
    s.heading(3, "The second act: payment, expiry, resale");
    s.prose(format!(
        "{:.0}% of the winners never pay; the \
         payment window is {} ms. The payers pay as they win; the unpaid orders expire and \
         their units go back on sale; up to S buyers who were told `sold_out` look again every \
         0.25–0.75 s and pay at once for what they get.{}",
        100.0 * shape.non_payer_share,
        shape.payment_window_ms,
        if shape.kill_mid_sale {
            " One app instance is SIGKILLed when the first unpaid order falls due (the buyers \
             go on through the other) and started again after the act."
        } else {
            ""
        }
    ));
    let mut t = Table::left(["strategy"]).and_right([
        "won",
        "never paid",
        "expired",
        "paid late",
        "bought again",
        "paid",
        "left",
        "reserved",
        "unaccounted",
        "stranded",
        "killed at ms",
        "sale ended ms",
    ]);
    for (f, r) in &acts {
        t.row([
            format!("`{}`", f.strategy.name),
            r.won.to_string(),
            r.never_paid.to_string(),
            r.returned.to_string(),
            r.payments_too_late.to_string(),
            r.bought_on_return.to_string(),
            r.paid.to_string(),
            r.left.to_string(),
            r.reserved.to_string(),
            r.unaccounted().to_string(),
            r.accounting.stranded.to_string(),
            ms(r.killed_after_ms),
            ms(r.ended_after_ms),
        ]);
    }
    s.table(t);
    s.prose(
        "Expired: orders ended by the payment deadline (or cancelled), from the product's \
         view. Paid late: payments made as soon as the order was won whose answer came after \
         the deadline (`order_expired`: the order expires like an unpaid one). Bought again: \
         units the returning buyers bought. Unaccounted: the \
         initial stock minus left, reserved, paid, on their way back and pending (0 when every \
         unit is where the books say). Sale ended: from the opening until the last unit was \
         paid (–: not every unit was paid before the watch ended).",
    );
    s.prose(went_wrong(&acts));
    s
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |ms| format!("{ms:.0}"))
}

/// Every second act that lost or made up a unit, refused a payer, or never ended, in words.
fn went_wrong(acts: &[(&Of<'_, FloodResult>, &Resale)]) -> String {
    let mut md = String::new();
    for (f, r) in acts {
        let name = f.strategy.name;
        let lost = r.unaccounted();
        if lost != 0 {
            let _ = writeln!(
                md,
                "- `{name}`: after the second act {} unit(s) {} the books: initial {} against \
                 {} left, {} reserved, {} paid, {} on their way back, {} pending.{}",
                lost.abs(),
                if lost > 0 {
                    "were missing from"
                } else {
                    "more than"
                },
                r.accounting.initial_stock,
                r.left,
                r.reserved,
                r.paid,
                r.returning,
                r.pending,
                match lost > 0 {
                    true => crate::report::prose::lost_return(name),
                    false => "",
                }
            );
        }
        if r.released_after_kill > 0 {
            let _ = writeln!(
                md,
                "- `{name}`: the kill caught {} purchase(s) between the Redis deduction and the \
                 order insert: their units were taken with no order (undersell) until \
                 `reconcile`, run once the instance was back, found the charges older than its \
                 grace, voided the purchases and put the units back (counted above after it).",
                r.released_after_kill
            );
        }
        if r.accounting.oversell > 0 {
            let _ = writeln!(
                md,
                "- `{name}`: {} unit(s) reserved or paid beyond the stock once the unpaid \
                 orders' units came back.",
                r.accounting.oversell
            );
        }
        if r.payments_refused + r.payments_failed > 0 {
            let _ = writeln!(
                md,
                "- `{name}`: {} payment(s) were refused with a code other than `order_expired` \
                 and {} got no answer.",
                r.payments_refused, r.payments_failed
            );
        }
        if r.ended_after_ms.is_none() && r.left > 0 && r.returners > 0 {
            let _ = writeln!(
                md,
                "- `{name}`: {} unit(s) were unsold when the watch ended: {} buyers came back \
                 for the {} that returned and {} of them bought one.",
                r.left, r.returners, r.returned, r.bought_on_return
            );
        }
    }
    if md.is_empty() {
        md.push_str(
            "No strategy lost or made up a unit in the second act: every unpaid order expired \
             once, its unit sold again, and the books balanced with an instance killed.\n",
        );
    }
    format!("What went wrong in the second act:\n\n{md}")
}
