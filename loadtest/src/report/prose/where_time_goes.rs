//! "Where the time goes", for each strategy measured with CPU: the CPU per purchase of every
//! process, what bounds the rate (a core, a shard, a stage it waits in), the Galera cluster's
//! aborts and the replica's lag; worded from the findings, deciding nothing.

use std::fmt::Write;

use crate::schema::{DoorRefused, GROUPS, GroupCpu, Pace, Sold, TimeFinding};

/// Where `s`'s closed-loop time went.
pub fn time(s: &Sold, f: &TimeFinding) -> String {
    let mut p = format!(
        "**`{}`** ({:.0} deductions/s).",
        f.strategy, f.deductions_per_sec
    );
    if !f.cpu_per_1000.is_empty() {
        let parts: Vec<String> = f
            .cpu_per_1000
            .iter()
            .map(|g| format!("{} {:.2}", group_words(&g.group), g.per_1000))
            .collect();
        let _ = write!(
            p,
            " CPU-seconds per 1,000 deductions: {}.",
            parts.join(", ")
        );
        shards(&mut p, f);
    }
    galera_aborts(&mut p, s);
    replica_lag(&mut p, s);
    let _ = match &f.pace {
        Pace::Saturated { process, cores } => write!(
            p,
            " `{process}` was saturated ({cores:.2} cores busy on average): it sets this \
             strategy's pace."
        ),
        Pace::ReadyThroughout {
            process,
            running,
            waiting,
            per_purchase_us,
        } => write!(
            p,
            " `{process}` was saturated counting its wait for a core: its one thread was on a \
             core {running:.2} of the time and waited {waiting:.2} more for one — ready to run \
             {:.0}% of the time, and on a core {:.0}% of that. Redis runs every command on that \
             thread, so it sets this strategy's pace{}.",
            100.0 * (running + waiting).min(1.0),
            100.0 * running / (running + waiting).max(f64::EPSILON),
            per_purchase_us.filter(|us| *us > 0.0).map_or_else(String::new, |us| format!(
                ": with a core to itself, its {us:.0} µs of CPU per purchase would bound the \
                 rate at about {:.0} purchases/s (a projection, not a measurement)",
                1e6 / us
            ))
        ),
        Pace::MachineBusy {
            cpus,
            busy_percent,
            rest_of_machine_cores,
        } => write!(
            p,
            " No single process was saturated, but the machine's {cpus} cores were \
             {busy_percent:.0}% busy ({rest_of_machine_cores:.2} core(s) taken by programs \
             outside the run): the processes compete for the CPU, and more cores would raise \
             the figure."
        ),
        Pace::Waiting {
            busiest,
            cores,
            machine_busy_percent,
            waited_in,
            waited_for_a_core,
        } => write!(
            p,
            " No process was saturated (the busiest, `{busiest}`, used {cores:.2} cores{}): the \
             time goes to waiting, not to computing — {}.",
            machine_busy_percent
                .map_or_else(String::new, |m| format!("; the machine was {m:.0}% busy")),
            match waited_in {
                Some(w) => format!(
                    "by the service's own timings, {:.0}% of a purchase's time in the service \
                     ({:.0} µs) went to {}{}",
                    w.share_percent,
                    w.mean_us,
                    stage_words(&w.stage),
                    w.of_which.as_ref().map_or_else(String::new, |part| format!(
                        ", {:.0} µs of it to {}{}",
                        part.mean_us,
                        stage_words(&part.stage),
                        part.disk_flush_p50_us
                            .map_or_else(String::new, |us| format!(
                                " — one flush of the disk the servers write to took {us} µs at \
                             the median, measured at the run's start"
                            ))
                    ))
                ),
                None => "row locks, lock hand-offs, round trips".to_owned(),
            }
        )
        .and_then(|()| match waited_for_a_core.as_slice() {
            [] => Ok(()),
            waits => write!(
                p,
                " Ready to run, its processes still waited for a core: {} (seconds per second, from \
                 the kernel's run-queue time): the machine had idle time on average, but at \
                 moments all its cores were taken, and the purchases waited their turn then.",
                waits
                    .iter()
                    .map(|w| format!(
                        "{} {:.2} beside {:.2} running",
                        group_words(&w.group),
                        w.cores,
                        w.running
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
        Pace::Unknown => Ok(()),
    };
    if let Some(b) = &f.below_baseline {
        let _ = write!(
            p,
            " It reaches {:.0}% of `{}` ({:.0} vs {:.0} deductions/s at {} concurrent clients). \
             Its median latency is {} µs{} against {} µs for the bare backend work",
            b.percent,
            b.baseline,
            b.ours_per_sec,
            b.baseline_per_sec,
            b.concurrency,
            b.p50_us,
            match &b.door {
                Some(door) if door.most() => " (most of its answers the door's refusals)",
                _ => "",
            },
            b.baseline_p50_us,
        );
        if let Some((noop_p50, noop_rate)) = b.noop {
            let _ = write!(
                p,
                " and {noop_p50} µs for an HTTP round trip that does nothing ({noop_rate:.0} \
                 requests/s)"
            );
        }
        p.push('.');
        if let Some(unsold) = b.unsold_percent {
            let _ = write!(
                p,
                " {unsold:.1}% of its attempts ended without a sale ({}): ",
                s.throughput.closed.outcomes
            );
            let waited = "paid for waiting or retrying until its lock or retry budget ran out.";
            match &b.door {
                None => {
                    let _ = write!(p, "each one {waited}");
                }
                Some(door) => {
                    let rest = unsold - door.percent;
                    let _ = match rest >= 0.05 {
                        true => write!(
                            p,
                            "{:.1}% were{}; the other {rest:.1}% {waited}",
                            door.percent,
                            at_the_door(door)
                        ),
                        false => write!(p, "every one was{}.", at_the_door(door)),
                    };
                }
            }
        }
    }
    p
}

/// Who refused them, and why: the door, by its latency budget.
fn at_the_door(door: &DoorRefused) -> String {
    const WITHIN: &str = "as many of a strategy's purchases at a time as it answers within the \
                          latency budget";
    const SO: &str = "so the rate above is what it sells within that budget";
    let lets_in = match door.budget_ms {
        Some(0) => "a fixed number of a strategy's purchases at a time (`--latency-budget-ms 0`)"
            .to_owned(),
        Some(ms) => format!("{WITHIN} ({ms} ms), {SO}"),
        None => format!("{WITHIN}, {SO}"),
    };
    format!(" refused at once, `503 overloaded`, by the instances' door, which lets in {lets_in}")
}

/// On a Redis Cluster (`run --redis-cluster`): how the strategy's Redis work fell on the
/// shards, and what that lets one product sell, as a projection from the measured cost.
fn shards(p: &mut String, f: &TimeFinding) {
    let shards: Vec<&GroupCpu> = (f.cpu_per_1000.iter())
        .filter(|g| g.group.starts_with("redis-shard-"))
        .collect();
    let total: f64 = shards.iter().map(|g| g.per_1000).sum();
    let Some(busiest) = shards
        .iter()
        .max_by(|a, b| a.per_1000.total_cmp(&b.per_1000))
    else {
        return;
    };
    if total <= 0.0 || busiest.per_1000 <= 0.0 {
        return;
    }
    if f.strategy.home() == app::api::Home::RedisSplit {
        // Shards that did a tenth of the busiest one's work or more: where its parts live.
        let working = (shards.iter())
            .filter(|g| g.per_1000 >= busiest.per_1000 / 10.0)
            .count();
        let _ = write!(
            p,
            " Its product's parts spread its Redis work over {working} of the cluster's shards \
             ({} took {:.0}% of the cluster's CPU, the most): each buyer is charged on the \
             shard of her home part. *Projection, not measured:* at these costs, with every \
             shard (master and replica) on a core of its own, one product would sell at most \
             {:.0} purchases/s — the busiest shard saturates first — where one shard doing all \
             of it ({:.2} CPU-seconds per 1,000) would sell {:.0}.",
            group_words(&busiest.group),
            100.0 * busiest.per_1000 / total,
            1000.0 / busiest.per_1000,
            total,
            1000.0 / total
        );
        return;
    }
    let _ = write!(
        p,
        " Of the cluster's CPU, {} took {:.0}%: every purchase of the product goes to the \
         master of its slot, so more shards do not raise one product's rate. *Projection, not \
         measured:* at {:.2} CPU-seconds per 1,000 on that shard (its master and replica), a \
         shard with a core of its own would sell at most {:.0} purchases/s of one product, and \
         N products on N shards on N machines N times that (set it beside the `redis-lua` \
         baseline above: the script alone on one Redis).",
        group_words(&busiest.group),
        100.0 * busiest.per_1000 / total,
        busiest.per_1000,
        1000.0 / busiest.per_1000
    );
}

/// On a Galera cluster (`run --galera`): the transactions the cluster aborted while the
/// strategy's closed loops ran, per purchase the service answered over the same span.
fn galera_aborts(p: &mut String, s: &Sold) {
    let Some(aborts) = s.aborts else {
        return;
    };
    let _ = write!(
        p,
        " The Galera cluster aborted {} transaction(s) during its closed loops ({} refused \
         by certification at commit, {} thrown out by another node's write set)",
        aborts.total(),
        aborts.cert_failures,
        aborts.bf_aborts
    );
    match s.stages.as_ref().filter(|t| t.purchases > 0) {
        Some(t) => {
            let _ = write!(
                p,
                ": {:.1} per 1,000 purchases the service answered ({}). An aborted purchase is \
                 answered `busy`; an aborted autocommit statement the node runs again.",
                1000.0 * aborts.total() as f64 / t.purchases as f64,
                t.purchases
            );
        }
        None => p.push('.'),
    }
}

/// With the rows on a primary and a replica (`run --replicas`): how far the replica fell
/// behind under the strategy's closed loops, which is how stale a page read there could be.
fn replica_lag(p: &mut String, s: &Sold) {
    let Some(lag) = s.replica else {
        return;
    };
    let _ = write!(
        p,
        " While its closed loops ran, the replica was at most {} of the primary's \
         transactions behind (read every 50 ms): a page read there is that many commits old",
        lag.most_behind
    );
    if let Some(t) = s.stages.as_ref().filter(|_| lag.transactions > 0) {
        let _ = write!(
            p,
            ", and a commit of this strategy carried {:.1} purchases answered ({} over {} \
             transactions)",
            t.purchases as f64 / lag.transactions as f64,
            t.purchases,
            lag.transactions
        );
    }
    let _ = write!(
        p,
        ". Once a round's load stopped the replica took at most {} ms to apply what it still \
         had to.",
        lag.longest_catch_up_ms
    );
    if lag.rounds_asynchronous > 0 {
        let _ = write!(
            p,
            " **In {} round(s) the semi-synchronous primary had fallen back to asynchronous \
             replication**: commits it answered then would not have survived a failover.",
            lag.rounds_asynchronous
        );
    }
}

/// A CPU group in words: `the app instances`, `mariadbd`, …
fn group_words(group: &str) -> &str {
    GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .map_or(group, |(_, words)| words)
}

/// A stage of [`crate::schema::WaitedIn`] in words.
fn stage_words(stage: &str) -> &'static str {
    match stage {
        "admission" => "the door (waiting for a place among the purchases in flight)",
        "strategy" => "the strategy's own work (its transaction: round trips and row locks)",
        "lock_wait" => "waiting for the strategy's lock",
        "queued" => "waiting in line for their batch to start committing",
        "batch" => "their batch's transaction",
        "lookup" => "their batch's look-up of purchases that already have an order",
        "order_insert" => "their batch's `INSERT` of its orders",
        "stock_update" => {
            "their batch's `UPDATE` of the stock (waiting for the product's row while another \
             batch held it)"
        }
        "commit" => {
            "their batch's `COMMIT` (its round trip, in which the database flushes its log)"
        }
        "script" => "the Redis script's round trip",
        "order_write" => "writing the order after the Redis script",
        _ => "neither the door nor the strategy (the answer's way out)",
    }
}

#[cfg(test)]
mod tests {
    use app::accounting::Ledger;
    use app::api::Strategy;

    use super::*;
    use crate::schema::{BaselineName, BelowBaseline, StagePart, WaitedIn};

    fn spent(groups: &[(&str, f64)]) -> TimeFinding {
        TimeFinding {
            strategy: Strategy::RedisLua,
            deductions_per_sec: 1000.0,
            cpu_per_1000: (groups.iter())
                .map(|(group, per_1000)| GroupCpu {
                    group: group.to_string(),
                    per_1000: *per_1000,
                })
                .collect(),
            pace: Pace::Unknown,
            below_baseline: None,
        }
    }

    /// A sale of ten units, all sold and paid.
    fn ten_sold() -> Ledger {
        Ledger {
            initial_stock: 10,
            final_stock: 0,
            units_in_orders: 10,
            orders: 10,
            pending: 0,
            reserved: 0,
            paid: 10,
            returned: 0,
            returning: 0,
        }
    }

    #[test]
    fn a_batch_waiting_on_its_commit_is_set_beside_the_disks_flush() {
        let s = crate::sample::strategy(Strategy::Batched, ten_sold());
        let mut f = spent(&[("app", 0.2), ("mariadbd", 0.2)]);
        f.strategy = Strategy::Batched;
        let mut waited = WaitedIn {
            stage: "batch".into(),
            mean_us: 6_000.0,
            share_percent: 55.0,
            of_which: Some(StagePart {
                stage: "commit".into(),
                mean_us: 4_800.0,
                disk_flush_p50_us: Some(4_100),
            }),
        };
        f.pace = Pace::Waiting {
            busiest: "app".into(),
            cores: 0.2,
            machine_busy_percent: Some(25.0),
            waited_in: Some(waited.clone()),
            waited_for_a_core: Vec::new(),
        };
        let text = time(&s.sold().unwrap(), &f);
        assert!(
            text.contains(
                "55% of a purchase's time in the service (6000 µs) went to their batch's \
                 transaction, 4800 µs of it to their batch's `COMMIT` (its round trip, in which \
                 the database flushes its log) — one flush of the disk the servers write to \
                 took 4100 µs at the median"
            ),
            "{text}"
        );
        waited.of_which = None;
        if let Pace::Waiting { waited_in, .. } = &mut f.pace {
            *waited_in = Some(waited);
        }
        let text = time(&s.sold().unwrap(), &f);
        assert!(
            text.contains("(6000 µs) went to their batch's transaction."),
            "{text}"
        );
    }

    #[test]
    fn attempts_refused_at_the_door_are_not_said_to_have_waited_out_a_budget() {
        let s = crate::sample::strategy(Strategy::Memcached, ten_sold());
        let mut f = spent(&[("app", 0.5)]);
        let below = |door| BelowBaseline {
            percent: 10.0,
            baseline: BaselineName::SqlConditional,
            ours_per_sec: 179.0,
            baseline_per_sec: 1850.0,
            concurrency: 200,
            p50_us: 489,
            baseline_p50_us: 34_079,
            noop: None,
            unsold_percent: Some(89.8),
            door,
        };
        f.below_baseline = Some(below(Some(DoorRefused {
            percent: 88.0,
            budget_ms: Some(200),
        })));
        let text = time(&s.sold().unwrap(), &f);
        assert!(
            text.contains(
                "Its median latency is 489 µs (most of its answers the door's refusals) against \
                 34079 µs"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "89.8% of its attempts ended without a sale (201 ×400): 88.0% were refused at \
                 once, `503 overloaded`, by the instances' door, which lets in as many of a \
                 strategy's purchases at a time as it answers within the latency budget \
                 (200 ms), so the rate above is what it sells within that budget; the other \
                 1.8% paid for waiting or retrying until its lock or retry budget ran out."
            ),
            "{text}"
        );
        f.below_baseline = Some(below(Some(DoorRefused {
            percent: 89.8,
            budget_ms: None,
        })));
        let text = time(&s.sold().unwrap(), &f);
        assert!(
            text.contains(
                "ended without a sale (201 ×400): every one was refused at once, `503 \
                 overloaded`, by the instances' door, which lets in as many of a strategy's \
                 purchases at a time as it answers within the latency budget, so the rate above \
                 is what it sells within that budget."
            ),
            "{text}"
        );
        f.below_baseline = Some(below(None));
        let text = time(&s.sold().unwrap(), &f);
        assert!(!text.contains("door"), "{text}");
        assert!(
            text.contains(
                "89.8% of its attempts ended without a sale (201 ×400): each one paid for \
                 waiting or retrying until its lock or retry budget ran out."
            ),
            "{text}"
        );
    }

    #[test]
    fn a_run_on_a_cluster_names_the_busiest_shard_and_labels_its_one_product_ceiling_a_projection()
    {
        let s = crate::sample::strategy(Strategy::RedisLua, ten_sold());
        let f = spent(&[
            ("app", 0.5),
            ("redis-shard-1", 0.02),
            ("redis-shard-2", 0.03),
            ("redis-shard-3", 0.15),
        ]);
        let text = time(&s.sold().unwrap(), &f);
        assert!(text.contains("Redis Cluster shard 3 took 75%"), "{text}");
        assert!(text.contains("*Projection, not measured:*"), "{text}");
        assert!(text.contains("at most 6667 purchases/s"), "{text}");
        let one_redis = time(
            &s.sold().unwrap(),
            &spent(&[("app", 0.5), ("redis-server", 0.1)]),
        );
        assert!(!one_redis.contains("Projection"), "{one_redis}");
    }

    #[test]
    fn a_split_product_on_a_cluster_is_projected_from_its_busiest_shard_beside_one_shard() {
        let s = crate::sample::strategy(Strategy::RedisSplit, ten_sold());
        let mut f = spent(&[
            ("app", 0.5),
            ("redis-shard-1", 0.05),
            ("redis-shard-2", 0.04),
            ("redis-shard-3", 0.01),
        ]);
        f.strategy = Strategy::RedisSplit;
        let text = time(&s.sold().unwrap(), &f);
        assert!(text.contains("over 3 of the cluster's shards"), "{text}");
        assert!(text.contains("shard 1 took 50%"), "{text}");
        assert!(text.contains("at most 20000 purchases/s"), "{text}");
        assert!(text.contains("would sell 10000"), "{text}");
    }

    #[test]
    fn a_run_on_galera_counts_the_clusters_aborts_per_purchase_answered() {
        let mut s = crate::sample::strategy(Strategy::Pessimistic, ten_sold());
        let plain = time(&s.sold().unwrap(), &spent(&[("app", 0.5)]));
        assert!(!plain.contains("Galera"), "{plain}");
        let answered = s
            .loops
            .as_ref()
            .unwrap()
            .stages
            .as_ref()
            .expect("the sample has stages")
            .purchases;
        s.loops.as_mut().unwrap().aborts = Some(crate::schema::world::Aborts {
            cert_failures: 3,
            bf_aborts: 7,
        });
        let text = time(&s.sold().unwrap(), &spent(&[("app", 0.5)]));
        assert!(text.contains("aborted 10 transaction(s)"), "{text}");
        assert!(text.contains("3 refused by certification"), "{text}");
        let per_1000 = format!("{:.1} per 1,000 purchases", 10_000.0 / answered as f64);
        assert!(text.contains(&per_1000), "{text}");
    }

    #[test]
    fn a_run_on_a_replica_says_how_far_it_fell_behind_and_whether_it_stayed_semi_synchronous() {
        let mut s = crate::sample::strategy(Strategy::Conditional, ten_sold());
        assert!(!time(&s.sold().unwrap(), &spent(&[("app", 0.5)])).contains("replica"));
        let answered = s
            .loops
            .as_ref()
            .unwrap()
            .stages
            .as_ref()
            .expect("the sample has stages")
            .purchases;
        let mut lag = crate::schema::ReplicaLag {
            transactions: answered / 4,
            most_behind: 412,
            longest_catch_up_ms: 37,
            rounds_asynchronous: 0,
        };
        s.loops.as_mut().unwrap().replica = Some(lag);
        let text = time(&s.sold().unwrap(), &spent(&[("app", 0.5)]));
        assert!(
            text.contains("at most 412 of the primary's transactions behind"),
            "{text}"
        );
        assert!(text.contains("carried 4.0 purchases answered"), "{text}");
        assert!(text.contains("at most 37 ms"), "{text}");
        assert!(!text.contains("fallen back"), "{text}");
        lag.rounds_asynchronous = 2;
        s.loops.as_mut().unwrap().replica = Some(lag);
        let text = time(&s.sold().unwrap(), &spent(&[("app", 0.5)]));
        assert!(text.contains("In 2 round(s) the semi-synchronous primary had fallen back"));
    }
}
