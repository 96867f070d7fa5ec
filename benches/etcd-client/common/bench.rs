//! Shared by both benchmark programs: percentiles and the report line.

use std::time::Duration;

/// Sorted latencies in microseconds.
pub fn summary(name: &str, mut samples: Vec<Duration>, wall: Duration) -> String {
    if samples.is_empty() {
        return format!("{name}: n=0");
    }
    samples.sort();
    let pct = |p: f64| {
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[i].as_secs_f64() * 1e3
    };
    format!(
        "{name}: n={} rate={:.0}/s p50={:.3}ms p99={:.3}ms max={:.3}ms",
        samples.len(),
        samples.len() as f64 / wall.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(1.0)
    )
}

/// `--endpoint HOST:PORT` (default 127.0.0.1:23790), `--secs N`, `--events N`, `--fence`, `--tasks N`.
pub struct Args {
    pub endpoint: String,
    pub secs: u64,
    pub events: usize,
    pub fence: bool,
    pub tasks: usize,
}

impl Args {
    pub fn parse() -> Args {
        let mut args = Args { endpoint: "127.0.0.1:23790".into(), secs: 5, events: 200, fence: false, tasks: 0 };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--endpoint" => args.endpoint = it.next().expect("value"),
                "--secs" => args.secs = it.next().expect("value").parse().expect("number"),
                "--events" => args.events = it.next().expect("value").parse().expect("number"),
                "--fence" => args.fence = true,
                "--tasks" => args.tasks = it.next().expect("value").parse().expect("number"),
                other => panic!("unknown argument {other}"),
            }
        }
        args
    }
}
