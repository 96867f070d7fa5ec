//! Benchmark of candidate B (gateway over hyper): see ../../common/run.rs.
pub(crate) use spike_http as cand;
#[path = "../../common/bench.rs"]
mod bench;
#[path = "../../common/run.rs"]
mod run;
fn main() {
    run::main()
}
