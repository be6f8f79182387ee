//! Reading the service's `/metrics` (Prometheus text) from outside: one series' values.

/// The values of `series` in `text`, one for each instance whose `/metrics` the text joins
/// ([`crate::Api::metrics`]). `series` is a metric's name with its labels exactly as the
/// service writes them (`seckill_admission_limit{strategy="batched"}`); a series whose name
/// merely begins with it (`seckill_return_locks_total` of `seckill_return_locks`) is another.
pub fn series_values<'t>(text: &'t str, series: &'t str) -> impl Iterator<Item = f64> + 't {
    text.lines()
        .filter_map(move |line| line.strip_prefix(series)?.strip_prefix(' '))
        .filter_map(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_read_from_every_instance_and_never_from_a_longer_name() {
        let text = "# TYPE seckill_return_locks_total counter\n\
                    seckill_return_locks_total 2\n\
                    seckill_return_locks_totally_unrelated 99\n\
                    seckill_admission_limit{strategy=\"conditional\"} 40\n\
                    seckill_admission_limit{strategy=\"redis-lua\"} 256\n\n\
                    seckill_return_locks_total 3.5\n\
                    seckill_admission_limit{strategy=\"conditional\"} 38\n";
        let read = |series| series_values(text, series).collect::<Vec<_>>();
        assert_eq!(read("seckill_return_locks_total"), [2.0, 3.5]);
        assert_eq!(
            read("seckill_admission_limit{strategy=\"conditional\"}"),
            [40.0, 38.0]
        );
        assert!(read("seckill_return_locks").is_empty());
        assert!(read("seckill_admission_limit").is_empty());
    }
}
