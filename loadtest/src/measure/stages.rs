//! Where a strategy's purchases spent their time, as the service timed them: every instance's
//! `seckill_purchase_stage_seconds` (and `seckill_purchase_duration_seconds`, the whole time in
//! the service) read before and after each closed-loop round, the differences added up over
//! the rounds.

use app::api::Strategy;
use app::metrics::Stage;
use testkit::metrics::series_values;

use crate::schema::{StageTime, StageTimes};

/// Seconds and purchases, summed over every instance.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Total {
    seconds: f64,
    purchases: f64,
}

impl Total {
    fn read(text: &str, name: &str, labels: &str) -> Total {
        Total {
            seconds: series_values(text, &format!("{name}_sum{{{labels}}}")).sum(),
            purchases: series_values(text, &format!("{name}_count{{{labels}}}")).sum(),
        }
    }

    /// Adds what grew from `before` to `after` (nothing where a count shrank: an instance
    /// restarted in between and began again).
    fn add_since(&mut self, after: Total, before: Total) {
        if after.purchases >= before.purchases {
            self.seconds += (after.seconds - before.seconds).max(0.0);
            self.purchases += after.purchases - before.purchases;
        }
    }

    /// The mean in µs, with its purchases; `None` when none.
    fn mean(self) -> Option<(u64, f64)> {
        (self.purchases >= 1.0).then(|| {
            let n = self.purchases.round();
            (n as u64, 1e6 * self.seconds / n)
        })
    }
}

/// One strategy's counters, as every instance's `/metrics` text showed them at one moment, or
/// what they grew by over the rounds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StageCounters {
    service: Total,
    stages: [Total; Stage::COUNT],
}

impl StageCounters {
    /// `strategy`'s counters in `text` (every instance's `/metrics`, one after the other).
    pub fn of(text: &str, strategy: Strategy) -> StageCounters {
        let name = strategy.name();
        let mut counters = StageCounters {
            service: Total::read(
                text,
                "seckill_purchase_duration_seconds",
                &format!("strategy=\"{name}\""),
            ),
            ..StageCounters::default()
        };
        for (stage, total) in Stage::ALL.iter().zip(&mut counters.stages) {
            let labels = format!("strategy=\"{name}\",stage=\"{}\"", stage.name());
            *total = Total::read(text, "seckill_purchase_stage_seconds", &labels);
        }
        counters
    }

    /// Adds what the counters grew by from `before` to `after`.
    pub fn add_since(&mut self, after: &StageCounters, before: &StageCounters) {
        self.service.add_since(after.service, before.service);
        for ((mine, a), b) in self.stages.iter_mut().zip(after.stages).zip(before.stages) {
            mine.add_since(a, b);
        }
    }

    /// The means, if the service answered any purchase.
    pub fn times(&self) -> Option<StageTimes> {
        let (purchases, mean_us) = self.service.mean()?;
        let stages = (Stage::ALL.iter().zip(self.stages))
            .filter_map(|(stage, total)| {
                let (purchases, mean_us) = total.mean()?;
                Some(StageTime {
                    stage: stage.name().to_owned(),
                    purchases,
                    mean_us,
                })
            })
            .collect();
        Some(StageTimes {
            purchases,
            mean_us,
            stages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(instances: &[(f64, u64, f64, u64)]) -> String {
        let mut text = String::new();
        for (service, n, script, m) in instances {
            text.push_str(&format!(
                "seckill_purchase_duration_seconds_sum{{strategy=\"redis-lua\"}} {service}\n\
                 seckill_purchase_duration_seconds_count{{strategy=\"redis-lua\"}} {n}\n\
                 seckill_purchase_stage_seconds_sum{{strategy=\"redis-lua\",stage=\"script\"}} {script}\n\
                 seckill_purchase_stage_seconds_count{{strategy=\"redis-lua\",stage=\"script\"}} {m}\n\
                 seckill_purchase_stage_seconds_sum{{strategy=\"conditional\",stage=\"script\"}} 9\n\
                 seckill_purchase_stage_seconds_count{{strategy=\"conditional\",stage=\"script\"}} 9\n"
            ));
        }
        text
    }

    #[test]
    fn a_stages_mean_is_what_every_instance_added_over_the_rounds_over_its_purchases() {
        let mut sum = StageCounters::default();
        let of = |t: &str| StageCounters::of(t, Strategy::RedisLua);
        // Two instances, two rounds; the second instance restarted before the second round.
        let round_1 = (
            of(&text(&[(0.0, 0, 0.0, 0), (1.0, 10, 0.0, 0)])),
            of(&text(&[(0.2, 100, 0.1, 100), (1.2, 110, 0.1, 100)])),
        );
        sum.add_since(&round_1.1, &round_1.0);
        let round_2 = (
            of(&text(&[(0.2, 100, 0.1, 100), (0.0, 0, 0.0, 0)])),
            of(&text(&[(0.4, 200, 0.2, 200), (0.2, 100, 0.1, 100)])),
        );
        sum.add_since(&round_2.1, &round_2.0);
        let times = sum.times().expect("purchases answered");
        assert_eq!(times.purchases, 400);
        assert!((times.mean_us - 2_000.0).abs() < 1e-6, "{times:?}");
        assert_eq!(times.stages.len(), 1, "only the stage it went through");
        assert_eq!(times.stages[0].stage, "script");
        assert_eq!(times.stages[0].purchases, 400);
        assert!((times.mean_of("script").unwrap() - 1_000.0).abs() < 1e-6);
        assert_eq!(StageCounters::default().times(), None);
    }
}
